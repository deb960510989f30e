"""A running server given by --url: one still loading its model is named as such (and waited for, a
bounded time) before the run directory exists; --strict refuses its levels before it too (see
test_server_checks); a remote one is not classified with this machine's GPU; EVIDENCE.md words a
url lane by its network path and hands off a capability command that names the URL; a server
without /metrics or /slots is warned about once, naming the flag."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

import satbench.run.lane_session as lane_session
from satbench.cli.main import main
from satbench.errors import RuntimeStartError
from satbench.http.access import EndpointSession
from satbench.http.endpoint import Endpoint
from satbench.records.manifest import ModelInfo, NetworkInfo, RuntimeInfo
from satbench.report.document import render_markdown
from satbench.report.evidence import evidence_blocks
from satbench.run.server_preflight import server_preflight
from satbench.server.probe import probe_server
from satbench.server.remote import UrlRuntime
from tests.builders import replaced
from tests.conftest import url_lane_config
from tests.report.test_compare import lane as make_lane
from tests.report.test_compare import results as make_results

LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


class _Loading(BaseHTTPRequestHandler):
    """llama-server before its model is loaded: every endpoint answers 503 "Loading model"; after
    `loading_for` answers, /health answers 200 (a model that finished loading)."""

    loading_for = 10**9
    answered = 0

    def do_GET(self) -> None:
        cls = type(self)
        cls.answered += 1
        status, body = (503, LOADING) if cls.answered <= cls.loading_for else (200, {"status": "ok"})
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args) -> None:
        pass


def _serve(handler: type[BaseHTTPRequestHandler]):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    return srv, thread, f"http://127.0.0.1:{srv.server_address[1]}"


@pytest.fixture
def loading_server():
    handler = type("LoadingHandler", (_Loading,), {"answered": 0, "loading_for": 10**9})
    srv, thread, url = _serve(handler)
    yield url, handler
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


# -- 1: a server still loading its model ----------------------------------------------------------


def test_the_probe_says_a_loading_server_is_loading_not_that_it_is_no_inference_server(loading_server):
    url, _ = loading_server

    async def go():
        async with EndpointSession(Endpoint.of(url)) as session:
            return await probe_server(session)

    with pytest.raises(RuntimeStartError, match=r"still loading its model \(HTTP 503 Loading model\): "
                                                r"wait until /health answers 200") as info:
        asyncio.run(go())
    assert "not an inference server" not in str(info.value)


def test_the_sweep_refuses_a_loading_server_in_one_line_before_the_run_directory(loading_server, tmp_path,
                                                                                  capsys, monkeypatch):
    url, _ = loading_server
    monkeypatch.setattr("satbench.server.facts.LOADING_WAIT_S", 0.0)
    run = tmp_path / "r"
    code = main(["sweep", "--url", url, "--concurrency", "1", "--requests-per-level", "3",
                 "--repetitions", "1", "-o", str(run)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and "Traceback" not in "\n".join(err)
    assert err[-1] == (f"satbench: error: the server at {url} is still loading its model "
                       "(HTTP 503 Loading model): wait until /health answers 200, then run again")
    assert not run.exists()


def test_the_preflight_waits_for_a_model_that_finishes_loading(loading_server, capsys):
    from satbench.http.access import remote_endpoint
    from satbench.server.facts import answered, wait_while_loading

    url, handler = loading_server
    handler.loading_for = 2  # two 503s on /health, then 200
    lane = url_lane_config(url, [1]).lanes[0]
    assert answered(wait_while_loading(lane, remote_endpoint(lane), wait_s=600.0, poll_s=0.0))
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"satbench: lane default: the server at {url} is still loading its model (HTTP 503); "
                   "waiting up to 600 s for /health to answer 200"]
    assert handler.answered == 3


# -- 3: a remote url lane is not sampled with this machine's GPUs ---------------------------------


class _RecordingSampler:
    made: ClassVar[list[dict]] = []

    def __init__(self, *args, **kwargs) -> None:
        type(self).made.append(kwargs)

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


def _open_url_lane(fake, monkeypatch, loopback: bool, here: bool):
    """Open a url lane on the fake as if its URL were (not) loopback and (not) this machine's: the
    network info it records and the GPUs its sampler was given (this machine's, or None)."""
    lane = url_lane_config(fake.base_url, [1]).lanes[0]
    monkeypatch.setattr(lane_session, "ServerSampler", _RecordingSampler)
    # the fake can only be on 127.0.0.1
    monkeypatch.setattr(lane_session, "is_loopback", lambda url: loopback)
    monkeypatch.setattr(lane_session, "served_here", lambda url: here)
    _RecordingSampler.made = []
    this_machines_gpus = object()

    async def go():
        session = lane_session.LaneSession(lane, "solo", UrlRuntime(fake.base_url), ModelInfo(), None, "n")
        try:
            await session.open(object(), this_machines_gpus)  # type: ignore[arg-type]
            return session.network_info()
        finally:
            await session.close()

    net = asyncio.run(go())
    given = _RecordingSampler.made[0]["gpus"]
    return net, (given if given is None else given is this_machines_gpus)


@pytest.mark.parametrize("loopback", [True, False])
def test_a_remote_url_lanes_levels_get_no_nvml_readings_of_this_machine(fake_server, monkeypatch, loopback):
    net, gpus = _open_url_lane(fake_server(n_slots=2), monkeypatch, loopback, here=loopback)
    assert net.path == ("loopback" if loopback else "remote") and net.server_on_this_machine is loopback
    assert gpus is (True if loopback else None)


def test_a_url_lane_that_served_here_places_on_this_machine_keeps_its_gpu(fake_server, monkeypatch):
    """Not loopback, but an address this machine holds (served_here, tested on a real address in
    test_capability_url_lanes): the server is here, its GPU is this one's, and the run records so."""
    net, gpus = _open_url_lane(fake_server(n_slots=2), monkeypatch, loopback=False, here=True)
    assert net.path == "remote" and net.server_on_this_machine is True and net.on_this_machine
    assert gpus is True


# -- 4: EVIDENCE.md words a url lane by its network path ----------------------------------------


def _url_results(path: str):
    url = "http://127.0.0.1:8080" if path == "loopback" else "http://10.1.2.3:8080"
    lane = make_lane().model_copy(update={
        "runtime": RuntimeInfo(kind="url", name="running server (given by --url)", llamacpp=True,
                               build_number=11434, base_url=url),
        "network": NetworkInfo(path=path, rtt_ms_median=0.4, rtt_ms_p95=0.9, rtt_samples=20)})
    return make_results(lane).model_copy(
        update={"command_line": ["satbench", "sweep", "--url", url, "--api-key-env", "KEY", "-o", "/r"]})


def _evidence(path: str) -> str:
    return render_markdown(evidence_blocks(_url_results(path), None, None, [], []))


def test_a_loopback_url_lane_is_not_called_remote():
    text = _evidence("loopback")
    assert "remote" not in text.lower()
    assert "on this machine (loopback)" in text
    assert "loopback RTT" in text and "the capability report refuses to apply it elsewhere" in text


def test_a_remote_url_lane_says_its_figures_hold_for_hardware_satbench_did_not_see():
    text = _evidence("remote")
    assert "loopback RTT" not in text and "network RTT" in text
    assert "which satbench did not see" in text and "describe the measuring machine" in text
    assert "refuses to apply it elsewhere" not in text
    assert "the capability report refuses to advertise them" in text
    assert "the server's GPU, memory and CPU (it runs on another machine)" in text


def test_a_url_lane_through_this_machines_own_address_is_described_as_here():
    """Reached through a LAN address this machine holds: the network path is remote (a real network
    round trip), but the server, its hardware and its GPU are this machine's."""
    res = _url_results("remote")
    res = replaced(res, {"lanes.0.network.server_on_this_machine": True})
    text = render_markdown(evidence_blocks(res, None, "abc", [], []))
    assert "network RTT" in text and "on this machine (its own address)" in text
    assert "on another machine" not in text and "refuses to advertise them" not in text
    assert "refuses to apply it elsewhere" in text


def test_the_handoff_names_the_url_in_the_capability_command():
    from satbench.saturation.recommendations_file import RecommendationsFile

    recs = RecommendationsFile.model_construct(schema_version="x", lanes=[])
    text = render_markdown(evidence_blocks(_url_results("remote"), recs, "abc", [], []))
    assert ("`satbench capability --recommendations recommendations.json --url http://10.1.2.3:8080 "
            "--api-key-env KEY`") in text


def test_the_handoff_names_a_started_servers_model_file():
    from satbench.report.evidence import capability_command

    res = make_results(make_lane())
    assert capability_command(res) == ("satbench capability --recommendations recommendations.json "
                                       "--model /m/dense.gguf")
    res = res.model_copy(update={"command_line": ["satbench", "sweep", "--lanes", "lanes.toml", "-o", "r"]})
    assert capability_command(res).endswith("--lanes lanes.toml")


# -- 5: a server without /metrics or /slots -----------------------------------------------------


def test_a_server_without_metrics_or_slots_is_warned_about_naming_the_flag(fake_server, capsys):
    fake = fake_server(n_slots=2, endpoint_metrics=False, endpoint_slots=False)
    server_preflight(url_lane_config(fake.base_url, [1]), False)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2
    assert err[0].startswith(f"satbench: warning: lane default: the server at {fake.base_url} has /metrics "
                             "disabled (HTTP 501): start it with --metrics")
    assert "requests_deferred" in err[0]
    assert "/slots disabled (HTTP 501): start it with --slots" in err[1]


def test_a_server_with_both_endpoints_gets_no_warning(fake_server, capsys):
    fake = fake_server(n_slots=2)
    server_preflight(url_lane_config(fake.base_url, [1]), False)
    assert capsys.readouterr().err == ""
