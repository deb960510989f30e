"""`satbench verify` on whatever bytes a bundle's files hold: SHA256SUMS, run.json, results.json,
recommendations.json, results.csv and the raw JSONL files as arbitrary bytes, invalid UTF-8,
huge lines, JSON of the wrong types or nested past any parser's depth. The answer is always a
verdict: exit 7 with "verify FAILED" (each finding on a line of its own), or exit 5 with one
`satbench: error:` line; never an exception.

The bundle is a small real run, swept once per module against the stand-in llama-server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from satbench.cli.main import main
from satbench.pipeline import verify
from satbench.report.integrity import MAX_PROBLEMS_LISTED, SUMS_FILE, parse_sums
from tests.faults.common import native_bundle

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])
JSON_FILES = ["run.json", "results.json", "recommendations.json"]
RAW_FILES = ["events.jsonl", "server_samples.jsonl", "results.csv"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    run = native_bundle(tmp_path_factory.mktemp("fuzz"))
    assert verify(run).ok
    return run


class Rewritten:
    """Put `data` in one file of the bundle for the length of a `with`, then the original back."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path, self.data = path, data
        self.original = path.read_bytes()

    def __enter__(self) -> None:
        self.path.write_bytes(self.data)

    def __exit__(self, *exc: object) -> None:
        self.path.write_bytes(self.original)


def _verdict(run: Path, capsys) -> int:
    """Run `satbench verify` and check its answer is a verdict, not a crash; return the exit code."""
    capsys.readouterr()
    code = main(["verify", str(run)])
    out, err = capsys.readouterr()
    assert code in (5, 7), (code, out[-2000:], err[-2000:])
    if code == 5:
        assert out == "" and err.startswith("satbench: error: ") and err.count("\n") == 1, err[-2000:]
    else:
        assert err == "" and out.splitlines()[-1].startswith("verify FAILED: "), out[-2000:]
    return code


def _mutated_json(original: bytes, data: st.DataObject) -> bytes:
    """The original document with one key's value replaced by a JSON value of any type, or dropped."""
    doc = json.loads(original)
    key = data.draw(st.sampled_from(sorted(doc)))
    if data.draw(st.booleans()):
        del doc[key]
    else:
        doc[key] = data.draw(json_values)
    return json.dumps(doc).encode()


def _hostile_bytes(original: bytes) -> st.SearchStrategy[bytes]:
    nested = st.integers(min_value=1, max_value=200_000).map(lambda n: b"[" * n + b"]" * n)
    huge_line = st.integers(min_value=10_000, max_value=2_000_000).map(lambda n: b"a" * n)
    spliced = st.tuples(st.integers(0, len(original)), st.binary(min_size=1, max_size=64)).map(
        lambda t: original[:t[0]] + t[1] + original[t[0]:])
    return (st.binary(max_size=4096) | nested | huge_line | spliced | st.just(b"\xff\xfe" + original)
            | json_values.map(lambda v: json.dumps(v).encode()))


@FUZZ
@given(data=st.data())
def test_any_bytes_in_sha256sums_give_a_verdict(bundle, capsys, data):
    path = bundle / SUMS_FILE
    original = path.read_bytes()
    blob = data.draw(_hostile_bytes(original) | st.text().map(lambda t: t.encode("utf-8", "surrogatepass")))
    assume(blob != original)
    with Rewritten(path, blob):
        _verdict(bundle, capsys)


@FUZZ
@given(name=st.sampled_from(JSON_FILES + RAW_FILES), data=st.data())
def test_any_bytes_in_a_bundle_file_give_a_verdict(bundle, capsys, name, data):
    path = bundle / name
    original = path.read_bytes()
    if name in JSON_FILES and data.draw(st.booleans()):
        blob = _mutated_json(original, data)
    else:
        blob = data.draw(_hostile_bytes(original))
    assume(blob != original)
    with Rewritten(path, blob):
        assert _verdict(bundle, capsys) == 7  # a listed file changed: a FAILED verdict, whatever it holds


def test_a_binary_sha256sums_fails_the_bundle_and_still_checks_its_good_lines(bundle, capsys):
    path = bundle / SUMS_FILE
    good = path.read_bytes().splitlines(keepends=True)
    with Rewritten(path, b"".join(good[:2]) + b"\x00\xff\x89PNG\n" + b"".join(good[2:])):
        v = verify(bundle)
        capsys.readouterr()
        assert main(["verify", str(bundle)]) == 7
    assert v.modified == [f"{SUMS_FILE} (line 3: not UTF-8 text)"] and v.files_checked == len(good)
    assert not v.missing and not v.inconsistent and not v.uncovered  # the good lines were all checked
    out = capsys.readouterr().out
    assert "MODIFIED: SHA256SUMS (line 3: not UTF-8 text)\n" in out and "verify FAILED" in out


def test_malformed_sums_lines_are_named_then_counted():
    sums, problems = parse_sums(b"x\n" * (MAX_PROBLEMS_LISTED + 2) + b"0" * 64 + b"  run.json\n")
    assert sums == {"run.json": "0" * 64} and len(problems) == MAX_PROBLEMS_LISTED + 2
    assert problems[0] == "line 1: not a 'sha256  path' line"


def test_a_sha256sums_that_is_a_link_is_one_error_line(bundle, tmp_path, capsys):
    path = bundle / SUMS_FILE
    outside = tmp_path / "sums"
    outside.write_bytes(path.read_bytes())
    path.rename(tmp_path / "kept")
    path.symlink_to(outside)
    try:
        assert _verdict(bundle, capsys) == 5
    finally:
        path.unlink()
        (tmp_path / "kept").rename(path)
    assert verify(bundle).ok
