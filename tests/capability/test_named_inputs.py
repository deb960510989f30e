"""What `satbench capability` takes from the user by name: the api_bases it writes into the report
(the one form `fleet merge` reads them back by, capability.identity.api_base_problem) and the
recommendations file, which must be there and be JSON (exit 5, the class of a run directory's file
missing, unreadable or half-written: docs/faults.md)."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from satbench.capability.identity import api_base_problem, parse_api_bases
from satbench.cli.main import main
from satbench.errors import UserError
from tests.fleet.reports import no_recommendations

URL = "http://127.0.0.1:9"  # nothing listens: the lane is unmeasured, the report is still written


def capability(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["capability", "--url", URL, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("base", [
    "http://[2001:db8::1/v1", "http://h:0/v1", "http://h/v1?", "http://h/v1#", "ftp://h/v1", "file:///v1",
    "gopher://h/v1", "//h:8080/v1", " http://h/v1", "http://h/v1 ", "http://h\t/v1", "http://h/v1\n",
    "http://h/v1\u2028", "http://h/" + "v" * 100_000, "http://h:+80/v1", "http://h:８０/v1",
])
def test_capability_refuses_an_api_base_merge_would_refuse_in_one_line(tmp_path, capsys, base):
    recs = str(no_recommendations(tmp_path))
    for item in (base, f"default={base}"):
        code, out, err = capability(capsys, "--recommendations", recs, "--api-base", item)
        assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("satbench: "), err


def test_a_loopback_api_base_is_taken_by_capability_and_refused_only_by_the_fleet(tmp_path, capsys):
    """One difference, kept in capability.identity.api_base_problems: a router on the node itself."""
    code, out, err = capability(capsys, "--recommendations", str(no_recommendations(tmp_path)),
                                "--api-base", "http://127.0.0.1:8080/v1")
    assert code == 0, err
    assert json.loads(out)["node"]["api_base"] == {"default": "http://127.0.0.1:8080/v1"}


@given(st.text(max_size=60) | st.text(max_size=30).map(lambda s: "http://h" + s))
def test_any_text_is_an_api_base_in_form_or_one_line_of_refusal(text):
    problem = api_base_problem(text)
    if problem is None:
        parts = urllib.parse.urlsplit(text)
        assert parts.scheme in ("http", "https") and parts.hostname and 1 <= (parts.port or 80) <= 65_535
        assert not re.search(r"[\s?#@]", text) and text.isprintable()
        assert parse_api_bases([text], ["a"]) == {"a": text}
        return
    with pytest.raises(UserError) as err:
        parse_api_bases([text], ["a"])
    assert "\n" not in str(err.value) and "\u2028" not in str(err.value)


def unreadable(tmp_path: Path) -> dict[str, Path]:
    regular = tmp_path / "file"
    regular.write_text("x")
    (tmp_path / "dir").mkdir()
    half = tmp_path / "half.json"
    half.write_text(no_recommendations(tmp_path).read_text()[:40])
    return {"missing": tmp_path / "none.json", "under a regular file": regular / "recommendations.json",
            "a directory": tmp_path / "dir", "under /dev/null": Path("/dev/null/x"), "half-written": half}


def test_a_named_recommendations_file_that_cannot_be_read_is_an_error(tmp_path, capsys):
    faults = (Path(__file__).parents[2] / "docs" / "faults.md").read_text()
    (row,) = re.findall(r"^\| `capability` \| ([0-9, ]+) \|$", faults, re.M)
    assert "5" in row.split(", ")  # the table says it: a run directory's file missing or half-written
    for what, path in unreadable(tmp_path).items():
        code, out, err = capability(capsys, "--recommendations", str(path))
        assert code == 5 and out == "" and err.count("\n") == 1, (what, err)
        assert str(path) in err, (what, err)
