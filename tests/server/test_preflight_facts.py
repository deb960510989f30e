"""The checks made of a running server's answers are pure functions of the lane's config and those
answers (server.facts.PreflightFacts, a probe's readings): each is tested here over hand-made facts,
no server. The reads themselves (once each, bounded) are tested against servers in
test_probe_running_server, tests/faults/test_bounded_reads and tests/run/test_preflight."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from types import MappingProxyType

import pytest

from satbench.errors import RuntimeStartError, UserError
from satbench.http.access import Answer
from satbench.http.errors import BadAnswer, TimedOut, TlsRefused, TooLarge, Unreachable
from satbench.run.preflight import check_prefix_remote, prefix_texts
from satbench.run.server_preflight import some_url_answers
from satbench.server.checks import (
    check_probe_reading,
    check_reachable,
    check_served_model,
    endpoint_warnings,
    server_shape,
)
from satbench.server.facts import PreflightFacts, answered
from satbench.server.probe import probed_facts
from tests.conftest import url_lane_config

URL = "http://h:8080"
LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


def ok(body: object = None, status: int = 200) -> Answer:
    return Answer(status, json.dumps({} if body is None else body).encode())


def facts(**kw) -> PreflightFacts:
    return PreflightFacts(URL, kw.pop("health", ok({"status": "ok"})), **kw)


def lane(served_model: str | None = None, prompt: int = 32, output: int = 16, levels=(1,)):
    cfg = url_lane_config(URL, list(levels), prompt=prompt, output=output)
    cfg.lanes[0].runtime.served_model = served_model
    return cfg, cfg.lanes[0]


PROPS = {"total_slots": 4, "default_generation_settings": {"n_ctx": 1024}}


def test_the_facts_are_frozen():
    f = facts()
    with pytest.raises(FrozenInstanceError):
        f.props = ok(PROPS)  # type: ignore[misc]


@pytest.mark.parametrize("health, answers", [
    (ok(), True), (ok(status=404), True), (ok(status=500), True),
    (TooLarge(URL + "/health", "answer larger than 64 KiB"), True),
    (TimedOut(URL + "/health", "no answer within 10 s"), False),
    (Unreachable(URL + "/health", "Connection refused"), False),
    (BadAnswer(URL + "/health", "bad status line"), False),
])
def test_a_server_answers_when_any_http_answer_came(health, answers):
    assert answered(health) is answers and facts(health=health).answers is answers


def test_reachable_takes_any_http_answer_and_names_why_none_came():
    for health in (ok(status=503), TooLarge(URL + "/health", "x"), BadAnswer(URL + "/health", "x")):
        check_reachable(facts(health=health))
    with pytest.raises(RuntimeStartError, match=r"^http://h:8080/health: no answer within 10 s$"):
        check_reachable(facts(health=TimedOut(URL + "/health", "no answer within 10 s")))
    with pytest.raises(RuntimeStartError, match=r"^cannot reach http://h:8080: Connection refused$"):
        check_reachable(facts(health=Unreachable(URL + "/health", "Connection refused")))
    with pytest.raises(RuntimeStartError, match=r"^http://h:8080: certificate verify failed: self-signed"):
        check_reachable(facts(health=TlsRefused(URL + "/health", "certificate verify failed: self-signed")))


def test_one_answering_lane_of_several_is_enough():
    down = facts(health=Unreachable(URL + "/health", "Connection refused"))
    cfg = url_lane_config(URL, [1])
    cfg.lanes = [cfg.lanes[0].model_copy(update={"name": n}) for n in ("a", "b")]
    some_url_answers(cfg, [down, facts()])
    with pytest.raises(RuntimeStartError, match=r"^no lane's server answers \(lane a: cannot reach "
                                                r"http://h:8080: Connection refused; lane b: cannot reach"):
        some_url_answers(cfg, [down, down])


def test_served_model_is_checked_only_against_a_readable_list():
    _, plain = lane()
    _, named = lane("m2")
    check_served_model(plain, facts())  # none named: nothing to check
    check_served_model(named, facts(models=ok({"data": [{"id": "m1"}, {"id": "m2"}]})))
    check_served_model(named, facts(models=Unreachable(URL + "/v1/models", "x")))  # the probe says why
    check_served_model(named, facts(models=ok({"data": []})))
    with pytest.raises(UserError, match=r"does not serve model 'm2' .*offers: m1$"):
        check_served_model(named, facts(models=ok({"data": [{"id": "m1"}]})))


def test_the_shape_is_llamacpps_props_or_none():
    assert server_shape(facts(props=ok(PROPS))) == (4, 1024)
    assert server_shape(facts(props=ok({"total_slots": "four"}))) == (None, None)
    assert server_shape(facts(props=ok({"model": "x"}))) is None  # not llama.cpp
    assert server_shape(facts(props=ok(PROPS, status=404))) is None
    assert server_shape(facts(props=TooLarge(URL + "/props", "x"))) is None
    assert server_shape(facts()) is None  # not read


def test_a_disabled_endpoint_is_one_warning_naming_its_flag():
    _, ln = lane()
    assert endpoint_warnings(ln, facts(metrics=ok(), slots=ok())) == []
    assert endpoint_warnings(ln, facts(metrics=TimedOut(URL + "/metrics", "x"), slots=ok(status=404))) == []
    lines = endpoint_warnings(ln, facts(metrics=ok(status=501), slots=ok(status=501)))
    assert [line.split(" has ")[1][:30] for line in lines] == ["/metrics disabled (HTTP 501): ",
                                                               "/slots disabled (HTTP 501): st"]
    assert lines[1] == (f"satbench: warning: lane default: the server at {URL} has /slots disabled "
                        "(HTTP 501): start it with --slots (drop --no-slots) to measure busy slots sampled "
                        "from /slots (time-weighted occupancy then comes from /metrics requests_processing, "
                        "if that is on); without it those figures are null")


def test_the_prefix_check_takes_the_best_sample_nonce_and_skips_a_partial_count():
    cfg, ln = lane(prompt=32)
    groups = prefix_texts(cfg, ln)
    assert len(groups) == 3 and all(groups)

    def counted(per_group: list[int]) -> PreflightFacts:
        return facts(token_counts=MappingProxyType({t: n for g, n in zip(groups, per_group) for t in g}))

    check_prefix_remote(cfg, ln, counted([40, 31, 50]), False)  # one nonce leaves room: it fits
    with pytest.raises(UserError, match=r"^--prompt-tokens 32 .*up to 32 tokens"):
        check_prefix_remote(cfg, ln, counted([40, 32, 50]), False)
    partial = {t: 99 for t in groups[0]}
    check_prefix_remote(cfg, ln, facts(token_counts=MappingProxyType(partial)), False)
    check_prefix_remote(cfg, ln, facts(), False)  # not tokenized: the lane's start checks


# -- the probe at a lane's start ---------------------------------------------------------------

@pytest.mark.parametrize("reading, line", [
    (TooLarge(URL + "/props", "answer larger than 1 MiB; not a llama.cpp server answer"),
     "http://h:8080/props: answer larger than 1 MiB; not a llama.cpp server answer"),
    (TimedOut(URL + "/props", "no answer within 1 s"), "http://h:8080/props: no answer within 1 s"),
    (TlsRefused(URL + "/props", "TLS handshake failed: x (is it an https server?)"),
     "http://h:8080: TLS handshake failed: x (is it an https server?)"),
    (Unreachable(URL + "/props", "Connection refused", "ClientConnectorError: no"),
     "cannot reach http://h:8080: ClientConnectorError: no"),
    (ok(LOADING, status=503), "the server at http://h:8080 is still loading its model (HTTP 503 Loading "
                              "model): wait until /health answers 200, then run again"),
    (ok(status=401), "http://h:8080 needs an API key (HTTP 401 on /props): pass --api-key-env VAR or "
                     "--api-key-file FILE"),
])
def test_a_probe_reading_that_is_no_usable_answer_is_one_line(reading, line):
    with pytest.raises(RuntimeStartError) as exc:
        check_probe_reading(URL, False, reading, "/props")
    assert str(exc.value) == line
    check_probe_reading(URL, False, ok(status=404), "/props")  # not llama.cpp: probed_facts decides


def test_what_the_probe_concludes_from_props_and_models():
    f = probed_facts(URL, ok({**PROPS, "model_path": "/m.gguf"}), ok({"data": [{"id": "m"}]}), None)
    assert (f.llamacpp, f.total_slots, f.per_slot_ctx, f.model_path) == (True, 4, 1024, "/m.gguf")
    assert f.openai_model == "m"
    f = probed_facts(URL, ok(status=404), ok({"data": [{"id": "a"}, {"id": "b"}]}), "b")
    assert (f.llamacpp, f.openai_model) == (False, "b")
    with pytest.raises(RuntimeStartError, match="answers neither /props nor /v1/models: not an inference"):
        probed_facts(URL, ok(status=404), ok(status=404), None)
    with pytest.raises(UserError, match="does not serve model 'c'"):
        probed_facts(URL, ok(PROPS), ok({"data": [{"id": "a"}]}), "c")


def test_the_preflight_reads_each_endpoint_of_a_running_server_once(fake_server, monkeypatch):
    import collections

    import satbench.http.access as access
    from satbench.run.server_preflight import server_preflight

    asked: collections.Counter[str] = collections.Counter()
    real = access.read

    async def counting(endpoint, path, **kw):
        asked[path] += 1
        return await real(endpoint, path, **kw)

    monkeypatch.setattr(access, "read", counting)
    fake = fake_server(n_slots=2)
    cfg = url_lane_config(fake.base_url, [1])
    cfg.lanes[0].runtime.served_model = "fake-model"
    server_preflight(cfg, False)
    tokenized = sum(len(group) for group in prefix_texts(cfg, cfg.lanes[0]))
    assert asked == {"/health": 1, "/v1/models": 1, "/props": 1, "/metrics": 1, "/slots": 1,
                     "/tokenize": tokenized}
