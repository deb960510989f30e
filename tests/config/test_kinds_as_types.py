"""Runtime kinds and load profiles as classes (config/runtime, config/profiles): the kind chooses the
class in one place, every class keeps the one field order (run.json's bytes), and each answers what
the if-chains on kind strings, `adaptive` and `rates` used to decide."""

from __future__ import annotations

import pickle

import pytest
from pydantic import ValidationError

from satbench.config.profiles import AdaptiveSweep, FixedLevels
from satbench.config.runtime import RUNTIME_CLASSES, runtime_class
from satbench.config.schema import (
    AdaptiveConfig,
    EmbeddedRuntime,
    LaneConfig,
    NativeRuntime,
    RunConfig,
    RuntimeConfig,
    UrlRuntime,
)

GIVEN = {"embedded": {}, "native": {"server_bin": "/opt/llama-server"}, "url": {"url": "http://h:1"}}


@pytest.mark.parametrize("kind, cls", [("embedded", EmbeddedRuntime), ("native", NativeRuntime),
                                       ("url", UrlRuntime)])
def test_the_kind_chooses_the_class_however_the_runtime_is_made(kind, cls):
    data = {"kind": kind, **GIVEN[kind]}
    assert type(RuntimeConfig(**data)) is cls
    assert type(RuntimeConfig.model_validate(data)) is cls
    assert type(LaneConfig.model_validate({"runtime": data}).runtime) is cls
    text = LaneConfig(runtime=cls(**GIVEN[kind])).model_dump_json()
    assert type(LaneConfig.model_validate_json(text).runtime) is cls
    made = RuntimeConfig(**data)
    assert type(made.model_copy(update={"model_dir": "/m"})) is cls
    assert type(pickle.loads(pickle.dumps(made))) is cls
    assert runtime_class(kind) is cls


def test_no_kind_is_embedded():
    assert type(RuntimeConfig()) is EmbeddedRuntime
    assert type(LaneConfig().runtime) is EmbeddedRuntime
    assert type(LaneConfig.model_validate({"runtime": {"model": "m.gguf"}}).runtime) is EmbeddedRuntime


@pytest.mark.parametrize("kind", sorted(GIVEN))
def test_every_kind_keeps_the_one_field_order_and_its_dump_of_set_fields(kind):
    cls = RUNTIME_CLASSES[kind]
    assert list(cls.model_fields) == list(RuntimeConfig.model_fields)
    assert all(cls.model_fields[f].default == RuntimeConfig.model_fields[f].default
               for f in RuntimeConfig.model_fields if f != "kind")
    made = cls(**GIVEN[kind])  # the kind left to its class's default is still recorded as set
    again = RuntimeConfig.model_validate(made.model_dump(exclude_unset=True))
    assert type(again) is cls and again == made
    assert list(made.model_dump()) == list(RuntimeConfig.model_fields)


def test_the_published_schema_keeps_one_runtime_with_three_kinds():
    runtime = LaneConfig.model_json_schema()["$defs"]["RuntimeConfig"]
    assert runtime["properties"]["kind"]["enum"] == ["embedded", "native", "url"]
    assert runtime["description"] == "Which server satbench measures and how it gets one."


@pytest.mark.parametrize("runtime, loc, message", [
    ({"kind": "url"}, ("runtime",), "runtime kind 'url' needs a url"),
    ({"kind": "native"}, ("runtime",), "runtime kind 'native' needs server_bin"),
    ({"kind": "embedded", "served_model": "m"}, ("runtime",), "served_model: only for a remote server"),
    ({"kind": "native", "server_bin": "b", "api_key_env": "K"}, ("runtime",), "api_key_env: only for a"),
    ({"kind": "url", "url": "http://h", "insecure": True}, ("runtime",), "apply to an https:// url only"),
    ({"kind": "bogus"}, ("runtime", "kind"), "Input should be 'embedded', 'native' or 'url'"),
    ({"kind": "url", "url": "http://h", "zz": 1}, ("runtime", "zz"), "Extra inputs are not permitted"),
])
def test_a_refusal_names_the_runtime_not_the_class(runtime, loc, message):
    with pytest.raises(ValidationError) as exc:
        LaneConfig.model_validate({"runtime": runtime})
    first = exc.value.errors()[0]
    assert first["loc"] == loc and message in first["msg"]


def test_each_kind_says_what_it_starts_and_runs():
    emb, nat, url = EmbeddedRuntime(), NativeRuntime(server_bin="/b"), UrlRuntime(url="http://h:1")
    assert (emb.starts_server, nat.starts_server, url.starts_server) == (True, True, False)
    assert (emb.binary, nat.binary, url.binary) == (None, "/b", None)
    assert (emb.engine_package, nat.engine_package, url.engine_package) == ("xllamacpp", None, None)
    assert (emb.remote_url, nat.remote_url, url.remote_url) == (None, None, "http://h:1")


def test_the_closed_loop_profile_reads_levels_as_the_lane_means_them():
    fixed = LaneConfig(levels=[1, 2, 4], repetitions=2)
    adaptive = LaneConfig(levels=[1, 8], adaptive=AdaptiveConfig(min_repetitions=2, max_repetitions=4))
    assert isinstance(fixed.profile, FixedLevels) and isinstance(adaptive.profile, AdaptiveSweep)
    assert fixed.profile.given_levels and not adaptive.profile.given_levels
    assert [fixed.measured_requests(n) for n in (1, 8)] == [32, 64]  # max(8N, 32)
    assert [adaptive.measured_requests(n) for n in (1, 8)] == [4, 32]  # N × requests_per_stream
    assert (fixed.most_repetitions(), adaptive.most_repetitions()) == (2, 4 + 2)
    assert fixed.profile.solo_steps([3]) == [(1, 1), (2, 1), (4, 1), (3, 1), (1, 2), (2, 2), (4, 2), (3, 2)]
    assert adaptive.profile.solo_steps([3]) == [(n, r) for n in (1, 2, 4, 8) for r in (1, 2)]


def test_the_ceiling_passes_a_running_servers_slots_only():
    adaptive = {"levels": [1, 4], "adaptive": AdaptiveConfig()}
    started = LaneConfig(**adaptive)
    running = LaneConfig(**adaptive, runtime=UrlRuntime(url="http://h:1"))
    assert (started.ceiling(8), running.ceiling(8), running.ceiling(None)) == (4, 16, 4)
    assert LaneConfig(levels=[1, 4], runtime=UrlRuntime(url="http://h:1")).ceiling(8) == 4  # fixed


def test_the_open_loop_profile_holds_the_rate_rules():
    lane = LaneConfig(rates=[2.0, 0.5], max_concurrency=3)
    rates = lane.open_loop
    assert rates is not None and LaneConfig().open_loop is None
    assert rates.rates == [0.5, 2.0] and rates.cap(8) == 3 and LaneConfig(rates=[1.0]).open_cap(8) == 16
    assert [rates.arrivals(r) for r in (0.5, 2.0, 100.0)] == [100, 100, 2000]
    assert lane.arrivals_per_rate(100.0) == 2000
    with pytest.raises(ValidationError, match=r"rate 0.0001/s: its 100 arrivals would take about 11.6 days"):
        LaneConfig(rates=[0.0001])


def test_refine_and_repetitions_act_on_fixed_levels_only():
    adaptive = LaneConfig(name="a", adaptive=AdaptiveConfig())
    with pytest.raises(ValidationError, match="refine: it measures extra levels between fixed levels"):
        RunConfig(lanes=[adaptive], refine=True)
    assert RunConfig(lanes=[adaptive, LaneConfig(name="f")], refine=True).refine
