"""The Python API raises only SatbenchError subclasses for anything a caller can pass: a wrong type
or value of any argument is a UserError of one line naming it (no AttributeError, TypeError,
OverflowError or pydantic ValidationError)."""

from __future__ import annotations

import functools

import pytest

from satbench import api
from satbench.config.schema import LaneConfig, RunConfig, RuntimeConfig
from satbench.errors import SatbenchError, UserError

CFG = RunConfig(lanes=[LaneConfig(name="a", runtime=RuntimeConfig(kind="url", url="http://127.0.0.1:9"))])
WRONG = [42, None, b"run", 1.5, [], {}, "", "a\0b", float("nan"), object()]


def _one_line(call) -> str:
    with pytest.raises(SatbenchError) as info:
        call()
    assert "\n" not in str(info.value), str(info.value)
    return str(info.value)


@pytest.mark.parametrize("value", WRONG)
def test_a_wrong_run_dir_is_one_line(value):
    for fn in (api.load_results, api.analyze, api.recommend):
        msg = _one_line(functools.partial(fn, value))
        if not isinstance(value, str) or value in ("", "a\0b"):
            assert "run_dir" in msg, msg


@pytest.mark.parametrize("value", [v for v in WRONG if not isinstance(v, dict)] + ["cfg"])
def test_a_wrong_config_is_one_line(value, tmp_path):
    for call in (lambda: api.sweep(value, tmp_path / "r"), lambda: api.prepare_sweep(value, tmp_path / "r"),
                 lambda: api.capability(value, tmp_path / "recs.json")):
        assert "config: expected a RunConfig" in _one_line(call)


def test_a_config_given_as_a_dict_is_validated_as_a_lane_file_is(tmp_path):
    msg = _one_line(lambda: api.prepare_sweep({"lanes": [{"name": "a", "levels": [0]}]}, tmp_path / "r"))
    assert msg.startswith("satbench.api.prepare_sweep: config.lanes.0") and "levels" in msg


@pytest.mark.parametrize("kwargs, needle", [
    ({"max_age_days": float("inf")}, "max_age_days"),
    ({"max_age_days": 1e300}, "max_age_days"),
    ({"max_age_days": -1}, "max_age_days"),
    ({"max_age_days": "30"}, "max_age_days"),
    ({"accept_contended": "yes"}, "accept_contended"),
    ({"node_id": 7}, "node_id"),
    ({"api_base": "http://h:1"}, "api_base"),
    ({"api_base": [1]}, "api_base"),
])
def test_capabilitys_other_arguments(kwargs, needle, tmp_path):
    with pytest.raises(UserError, match=needle):
        api.capability(CFG, tmp_path / "recs.json", **kwargs)


def _lane(**update) -> RunConfig:
    return CFG.model_copy(update={"lanes": [CFG.lanes[0].model_copy(update=update)]})


CRAFTED = {
    "construct-lanes-str": lambda: RunConfig.model_construct(lanes="x"),
    "construct-lanes-None": lambda: RunConfig.model_construct(lanes=None),
    "construct-lanes-[1]": lambda: RunConfig.model_construct(lanes=[1]),
    "construct-no-fields": lambda: RunConfig.model_construct(),
    "lane-name-None": lambda: CFG.model_copy(update={"lanes": [LaneConfig.model_construct(name=None)]}),
    "levels-negative": lambda: _lane(levels=[-1]),
    "levels-str": lambda: _lane(levels="1,2"),
    "rates-nan": lambda: _lane(rates=[float("nan")]),
    "timeout-nan": lambda: _lane(request_timeout_s=float("nan")),
    "runtime-None": lambda: _lane(runtime=None),
    "runtime-dict": lambda: _lane(runtime={"kind": "url"}),
    "url-int": lambda: _lane(runtime=RuntimeConfig.model_construct(kind="url", url=5)),
    "workload-str": lambda: _lane(workload="x"),
    "lanes-repeat": lambda: CFG.model_copy(update={"lanes": [CFG.lanes[0], CFG.lanes[0]]}),
    "name-newline": lambda: _lane(name="a\nb"),
}


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_a_crafted_config_instance_is_validated_again(name, tmp_path):
    """A RunConfig made by model_construct or changed by model_copy(update=) skipped pydantic: the API
    validates it again, and refuses it as one UserError line naming `config`."""
    cfg = CRAFTED[name]()
    for call in (lambda: api.sweep(cfg, tmp_path / "r"), lambda: api.prepare_sweep(cfg, tmp_path / "r"),
                 lambda: api.capability(cfg, tmp_path / "recs.json")):
        with pytest.raises(UserError) as info:
            call()
        assert "\n" not in str(info.value) and ": config" in str(info.value), str(info.value)
    assert not (tmp_path / "r").exists()


def test_a_valid_instance_keeps_what_its_maker_left_unset(tmp_path):
    """Validated again from the fields its maker set: an adaptive lane with the default repetitions is
    no lane that sets repetitions (which would be refused: they change nothing there)."""
    from satbench.api import _config
    from satbench.config.schema import AdaptiveConfig

    lane = LaneConfig(name="a", adaptive=AdaptiveConfig(),
                      runtime=RuntimeConfig(kind="url", url="http://h:1"))
    assert _config(RunConfig(lanes=[lane]), "sweep").lanes[0].repetitions == lane.repetitions
    twice = lane.model_copy(update={"repetitions": 2})
    crafted = RunConfig(lanes=[lane]).model_copy(update={"lanes": [twice]})
    with pytest.raises(UserError, match=r"config\.lanes\.0\.repetitions: it repeats fixed levels"):
        _config(crafted, "sweep")


@pytest.mark.parametrize("base", [" http://h/v1", "http://h/v1 ", "a=http://h/v1\n", ""])
def test_an_api_base_with_surrounding_whitespace_is_refused(base, tmp_path):
    with pytest.raises(UserError, match="api_base: an empty entry or one with surrounding whitespace"):
        api.capability(CFG, tmp_path / "recs.json", api_base=[base])


def test_missing_unknown_or_repeated_arguments_are_user_errors():
    """Python's own TypeError at the call would leave the API: its edge says it in one line instead."""
    with pytest.raises(UserError, match=r"satbench.api.analyze: missing a required argument: 'run_dir'"):
        api.analyze()  # type: ignore[call-arg]
    with pytest.raises(UserError, match=r"satbench.api.load_results: got an unexpected keyword argument"):
        api.load_results("x", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(UserError, match=r"satbench.api.sweep: multiple values for argument 'run_dir'"):
        api.sweep(CFG, "x", run_dir="y")  # type: ignore[misc]
    with pytest.raises(UserError, match=r"satbench.api.capability: too many positional arguments"):
        api.capability(CFG, "r", 1)  # type: ignore[misc]


@pytest.mark.parametrize("field, flag", [("api_key_file", "--api-key-file"), ("ca_cert", "--ca-cert")])
@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_a_key_or_ca_file_is_read_bounded_and_without_blocking(field, flag, kind, tmp_path):
    import os

    from satbench.config.limits import MAX_API_KEY_FILE_BYTES, MAX_CA_CERT_BYTES

    path = tmp_path / "f"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path = tmp_path / "zero"
        path.symlink_to("/dev/zero")
    else:
        with open(path, "wb") as fh:  # sparse: no disk taken
            fh.truncate(2 * max(MAX_API_KEY_FILE_BYTES, MAX_CA_CERT_BYTES))
    rc = RuntimeConfig(kind="url", url="https://127.0.0.1:9", **{field: str(path)})
    cfg = RunConfig(lanes=[LaneConfig(name="a", runtime=rc)])
    with pytest.raises(UserError) as info:
        api.prepare_sweep(cfg, tmp_path / "r")
    msg = str(info.value)
    assert msg.startswith(f"{flag} (lane file: {field}): ") and "\n" not in msg, msg
    assert not (tmp_path / "r").exists()
