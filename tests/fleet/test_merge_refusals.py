"""What `fleet merge` refuses as it reads a report, so that no output format meets an unchecked value:
a lane name outside satbench's rule, an api_base outside its one form or naming another host, a time
that is not one, figures the lane's status forbids, a key given twice. Each refusal is one line
(exit 8) and nothing is written, whatever the format."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from satbench.cli.main import main
from satbench.config.schema import LANE_NAME_PATTERN
from tests.fleet.reports import NOW, lane, report

FORMATS = ("json", "litellm", "prometheus")


def base() -> dict:
    return json.loads(report("node-a", [lane("dense"), lane("moe", measured=False)]).model_dump_json())


def merged(tmp_path, capsys, data: dict | str, fmt: str = "json") -> tuple[int, str, str]:
    path = tmp_path / "r.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    capsys.readouterr()
    code = main(["fleet", "merge", str(path), "--format", fmt])
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(tmp_path, capsys, data: dict | str, needle: str) -> None:
    for fmt in FORMATS:
        code, out, err = merged(tmp_path, capsys, data, fmt)
        assert code == 8 and out == "" and needle in err, (fmt, err)
        assert err.count("\n") == 2 and f"refused {tmp_path / 'r.json'}" in err, err  # its line, the summary


def edit(where: str, **values) -> dict:
    data = base()
    target = data["lanes"][int(where[-1])] if where.startswith("lane") else data[where]
    target.update(values)
    return data


FUTURE = (NOW + dt.timedelta(days=1)).isoformat()


@pytest.mark.parametrize("data, needle", [
    (edit("lane0", measured_at="yesterday"), "lanes.0.measured_at"),
    (edit("lane0", measured_at="2026-01-01\n00:00:00"), "expected an ISO 8601 time"),
    (edit("lane0", measured_at=FUTURE), "lane dense was measured in the future"),
    (edit("lane1", max_concurrency=50), "an unmeasured lane advertises max_concurrency 1, got 50"),
    (edit("lane1", expected_output_tok_per_s=500.0), "an unmeasured lane advertises no figures"),
    (edit("lane0", cache_bytes_per_slot=-1), "lanes.0.cache_bytes_per_slot"),
    (edit("lane0", slots_fit=-5), "lanes.0.slots_fit"),
    (edit("lane0", model_bytes=-1), "lanes.0.model_bytes"),
    (edit("lane0", per_slot_ctx=0), "lanes.0.per_slot_ctx"),
    (edit("lane0", concurrency_range=[3, 2]), "outside its concurrency_range [3, 2]"),
    (edit("lane0", concurrency_range=[1, 2]), "max_concurrency 4 is outside its concurrency_range [1, 2]"),
    (edit("lane0", expected_output_tok_per_s=0), "expected_output_tok_per_s must be above 0"),
    (edit("lane0", expected_output_tok_per_s=-0.0), "expected_output_tok_per_s must be above 0"),
    (edit("lane0", expected_p95_ttft_ms=0), "expected_p95_ttft_ms must be above 0"),
    (edit("lane0", expected_p95_tpot_ms=0.0), "expected_p95_tpot_ms must be above 0"),
    (edit("lane0", measured_at=None), "a measured lane advertises its expected_output_tok_per_s and"),
    (edit("node", addresses=["10.0.0.1\nx"]), "not an IP address"),
])
def test_a_forged_field_is_refused_in_every_format(tmp_path, capsys, data, needle):
    refused(tmp_path, capsys, data, needle)


def test_a_key_given_twice_is_refused_not_last_wins(tmp_path, capsys):
    text = json.dumps(base())
    forged = text[:-1] + ', "lanes": []}'
    refused(tmp_path, capsys, forged, "not valid JSON: key 'lanes' twice in one object")
    assert merged(tmp_path, capsys, text)[0] == 0


BAD_NAMES = ["a\nb", 'a"b', "a\\b", "a\0b", "\u202edense", "", " dense", "dense ", "dense\n", "x" * 10_000,
             "../x", "a/b", "dénse", "a b", "#x", "- x", "*a", "a\u2028b", "a}b"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_lane_name_outside_satbenchs_rule_is_refused(tmp_path, capsys, name):
    data = base()
    data["lanes"][0]["lane"] = name
    data["node"]["api_base"] = {"moe": data["node"]["api_base"]["moe"]}
    refused(tmp_path, capsys, data, "lanes.0.lane")
    data = base()  # as an api_base's key
    data["node"]["api_base"][name] = "http://node-a:8080/v1"
    refused(tmp_path, capsys, data, "node.api_base")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(max_size=80) | st.from_regex(LANE_NAME_PATTERN, fullmatch=True))
def test_a_lane_name_is_merged_exactly_when_satbench_would_take_it(tmp_path, capsys, name):
    data = base()
    data["lanes"][0]["lane"] = name
    data["node"]["api_base"] = {"moe": data["node"]["api_base"]["moe"]}
    if name == "moe":
        return
    code, out, err = merged(tmp_path, capsys, data, "prometheus")
    if re.fullmatch(LANE_NAME_PATTERN[1:-1], name):
        assert code == 0 and f'lane="{name}"' in out, err
    else:
        assert code == 8 and out == "" and err.count("\n") == 2, err


@pytest.mark.parametrize("url, needle", [
    ("http://node-a:0/v1", "the port must be from 1 to 65,535"),
    ("http://node-a/v1?", "a query string or fragment"),
    ("http://node-a/v1#", "a query string or fragment"),
    ("ftp://node-a/v1", "expected http(s)://HOST[:PORT][/PATH]"),
    ("file:///v1", "expected http(s)://HOST[:PORT][/PATH]"),
    ("gopher://node-a/v1", "expected http(s)://HOST[:PORT][/PATH]"),
    ("//node-a:8080/v1", "expected http(s)://HOST[:PORT][/PATH]"),
    (" http://node-a/v1", "holds whitespace or a control character"),
    ("http://node-a/v1\n", "holds whitespace or a control character"),
    ("http://node-a\t/v1", "holds whitespace or a control character"),
    ("http://node-a/v1\u2028", "holds whitespace or a control character"),
    ("http://node-a/" + "v" * 100_000, "longer than 2,048 characters"),
    ("http://[2001:db8::1/v1", "not a URL with a valid host and port"),
    ("http://node-a:８０/v1", "not a URL with a valid host and port"),
    ("http://node-a.evil.com:8080/v1", "names 'node-a.evil.com', which is not this node"),
])
def test_an_api_base_outside_its_form_or_naming_another_host_is_refused(tmp_path, capsys, url, needle):
    data = base()
    data["node"]["api_base"]["dense"] = url
    refused(tmp_path, capsys, data, needle)
