"""The Python API raises only SatbenchError subclasses for anything a caller can pass: a wrong type
or value of any argument is a UserError of one line naming it (no AttributeError, TypeError,
OverflowError or pydantic ValidationError)."""

from __future__ import annotations

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
        msg = _one_line(lambda: fn(value))
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
