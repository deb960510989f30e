"""A hostile run directory: named pipes, directories and over-long names where satbench reads,
event values out of every range, lines past MAX_RECORD_BYTES, and old run.json values above
today's caps. Each command answers with one `satbench:` line and its exit code (5 for a run
directory, 2 for a user's path, 7 for a verify finding), never an internal error (1), never a
hang, never a traceback.

The bundle is a small real run, swept once per module against the stand-in llama-server."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from satbench.cli.main import main
from satbench.config.schema import LaneConfig, RunConfig
from satbench.errors import RunDirError, UserError
from satbench.run.resume import check_same_config
from tests.faults.common import FAKE_BIN, native_bundle, one_error_line

FIFO_WAIT_S = 120.0  # a reader that blocks on a pipe is unblocked (and the test fails) after this
NAME_TOO_LONG = "x" * 300  # one path component past NAME_MAX (255)
VERIFY_CODES = (5, 7)  # verify: a refusal (run directory) or a finding


@pytest.fixture(autouse=True)
def _no_traceback(monkeypatch):
    monkeypatch.delenv("SATBENCH_TRACEBACK", raising=False)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    run = native_bundle(tmp_path_factory.mktemp("hostile"))
    return run


@pytest.fixture
def run(bundle, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(bundle, copy)
    return copy


def _answer(argv: list[str], capsys, codes: tuple[int, ...] = (5,)) -> str:
    """The one error line (exit 2 or 5), or verify's findings (exit 7, on stdout)."""
    code = main(argv)
    out, err = capsys.readouterr()
    assert "internal error" not in err and "Traceback" not in out + err, err[-2000:]
    assert code in codes, (code, err[-2000:])
    if code == 7:
        assert "verify FAILED" in out, out
        return out
    return one_error_line(err) if code != 0 else ""


def _answer_unblocked(argv: list[str], fifo: Path, capsys, codes: tuple[int, ...]) -> str:
    """`_answer`, with a watchdog that opens `fifo` for writing if the command is still running
    after FIFO_WAIT_S (a reader blocked on the pipe then gets EOF, and the test fails)."""
    done, hung = threading.Event(), []

    def watchdog() -> None:
        if not done.wait(FIFO_WAIT_S):
            hung.append(True)
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO when nobody reads: then no hang
            os.close(fd)

    guard = threading.Thread(target=watchdog, daemon=True)
    guard.start()
    try:
        line = _answer(argv, capsys, codes)
    finally:
        done.set()
        guard.join()
    assert not hung, f"{argv[0]} blocked on the named pipe {fifo}"
    return line


COMMANDS = [("analyze", (5,)), ("report", (5,)), ("verify", VERIFY_CODES), ("recommend", (5,))]


def _interrupted(run: Path) -> None:
    """The run as a sweep interrupted before its first unit left it (so a resume reads on)."""
    m = json.loads((run / "run.json").read_text())
    m.update(status="interrupted", completed_units=[], finished_at=None)
    (run / "run.json").write_text(json.dumps(m))


PIPES = [(name, command, codes) for name in ("run.json", "events.jsonl")
         for command, codes in COMMANDS + [("sweep --resume", (5,))]
         if not (command == "recommend" and name == "events.jsonl")]  # recommend reads results.json only


@pytest.mark.parametrize(("name", "command", "codes"), PIPES)
def test_a_named_pipe_is_refused_without_blocking(run, capsys, name, command, codes):
    if command == "sweep --resume":
        _interrupted(run)
    (run / name).unlink()
    os.mkfifo(run / name)
    line = _answer_unblocked([*command.split(), str(run)], run / name, capsys, codes)
    assert name in line


@pytest.mark.parametrize(("name", "argv", "codes"), [("results.json", ["recommend", "{run}"], (5,)),
                                                    ("results.json", ["compare", "{run}", "{run}"], (5,)),
                                                    ("recommendations.json", ["report", "{run}"], (5,))])
def test_a_derived_file_that_is_a_pipe_is_refused(run, capsys, name, argv, codes):
    (run / name).unlink()
    os.mkfifo(run / name)
    line = _answer_unblocked([a.format(run=run) for a in argv], run / name, capsys, codes)
    assert f"{name} is a named pipe" in line


def test_a_lane_file_and_a_recommendations_file_that_are_pipes(tmp_path, capsys):
    lanes = tmp_path / "lanes.toml"
    os.mkfifo(lanes)
    argv = ["sweep", "--lanes", str(lanes), "-o", str(tmp_path / "out")]
    line = _answer_unblocked(argv, lanes, capsys, (2,))
    assert "named pipe" in line
    recs = tmp_path / "recommendations.json"
    os.mkfifo(recs)
    from satbench.capability.checks import load_recommendations

    done = threading.Timer(FIFO_WAIT_S, lambda: os.close(os.open(recs, os.O_WRONLY | os.O_NONBLOCK)))
    done.start()
    try:
        file, why, _ = load_recommendations(recs)
    finally:
        done.cancel()
    assert file is None and "named pipe" in why


@pytest.mark.parametrize(("command", "codes"), COMMANDS[:2] + [("recommend", (5,)), ("sweep --resume", (5,))])
def test_a_directory_where_run_json_is(run, capsys, command, codes):
    _interrupted(run)
    (run / "run.json").unlink()
    (run / "run.json").mkdir()
    assert "run.json" in _answer([*command.split(), str(run)], capsys, codes)


@pytest.mark.parametrize("name", ["results.csv", "results.json"])
def test_verify_names_a_derived_file_that_is_a_directory(run, capsys, name):
    assert main(["report", str(run)]) == 0
    (run / name).unlink()
    (run / name).mkdir()
    capsys.readouterr()
    assert name in _answer(["verify", str(run)], capsys, (7,))


@pytest.mark.parametrize("argv", [["analyze", "{long}"], ["report", "{long}"], ["verify", "{long}"],
                                  ["recommend", "{long}"], ["compare", "{run}", "{long}"],
                                  ["sweep", "--resume", "{long}"],
                                  ["sweep", "--model", "{long}", "-o", "{out}"],
                                  ["sweep", "--model", "{model}", "-o", "{long}"]])
def test_a_name_too_long_is_one_line(run, tmp_path, capsys, monkeypatch, argv):
    # --model: the model's own check (models/files.py) leaves it to cli's last resort
    if "--model" not in argv or "{model}" in argv:
        monkeypatch.setenv("SATBENCH_TRACEBACK", "1")  # an OSError no reader turned into a message raises
    names = {"long": str(tmp_path / NAME_TOO_LONG), "run": str(run), "out": str(tmp_path / "out"),
             "model": str(tmp_path / "tiny.gguf")}
    line = _answer([a.format(**names) for a in argv], capsys, (2, 5))
    assert "too long" in line.lower() or "not a satbench run directory" in line or "missing" in line


def _rewrite_first(run: Path, kind: str, change) -> int:
    """Apply `change` to the first events.jsonl record of `kind`; its line number."""
    path = run / "events.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    for i, text in enumerate(lines):
        record = json.loads(text)
        if record["kind"] == kind:
            change(record)
            lines[i] = json.dumps(record) + "\n"
            path.write_text("".join(lines))
            return i + 1
    raise AssertionError(f"no {kind} record")


def _set(**fields):
    return lambda record: record.update(fields)


HOSTILE = [
    ("request", _set(level=0)), ("request", _set(level=-3)), ("level_start", _set(level=0)),
    ("level_end", _set(level=0)), ("request", lambda r: r.update(timings={"prompt_ms": 1e308})),
    ("request", lambda r: r.update(end_ns=r["sent_ns"] - 1)), ("request", _set(output_tokens=10**30)),
    ("request", _set(sent_ns=2**63)), ("request", _set(chunks=[[1, 10**30]])),
]


@pytest.mark.parametrize(("kind", "change"), HOSTILE)
def test_a_value_out_of_range_names_the_file_and_line(run, capsys, kind, change):
    lineno = _rewrite_first(run, kind, change)
    line = _answer(["analyze", str(run)], capsys)
    assert f"events.jsonl:{lineno}: not a valid record" in line
    _answer(["verify", str(run)], capsys, VERIFY_CODES)
    _answer(["report", str(run)], capsys)


def test_a_line_longer_than_the_record_limit_is_refused(run, capsys, monkeypatch):
    monkeypatch.setattr("satbench.records.events.MAX_RECORD_BYTES", 4096)
    monkeypatch.setattr("satbench.run.resume.MAX_RECORD_BYTES", 4096)
    with (run / "events.jsonl").open("a") as fh:
        fh.write('{"kind": "request", "lane": "' + "x" * 10_000 + '"}\n')
    assert "line 9 is longer than 4 KiB" in _answer(["analyze", str(run)], capsys)
    with (run / "events.jsonl").open("a") as fh:
        fh.write("y" * 10_000)  # a torn last line longer than any record: the resume will not cut it
    from satbench.run.resume import repair_torn_tail

    with pytest.raises(RunDirError, match="longer than 4 KiB"):
        repair_torn_tail(run / "events.jsonl")


def test_a_torn_tail_is_cut_reading_only_the_tail(run):
    from satbench.run.resume import repair_torn_tail

    path = run / "events.jsonl"
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"kind": "req')
    assert repair_torn_tail(path) == len(b'{"kind": "req') and path.read_bytes() == whole


def _old_style(run: Path, **server) -> None:
    m = json.loads((run / "run.json").read_text())
    lane = m["config"]["lanes"][0]
    lane["server"].update(server)
    lane["request_timeout_s"], lane["requests_per_level"] = 100_000.0, 200_000
    (run / "run.json").write_text(json.dumps(m))


def test_an_old_run_json_above_todays_caps_still_analyzes(run, capsys):
    _old_style(run, n_gpu_layers=999_999)
    assert main(["analyze", str(run)]) == 0, capsys.readouterr().err
    recorded = json.loads((run / "results.json").read_text())["config"]["lanes"][0]["server"]
    assert recorded["n_gpu_layers"] == 999_999
    assert main(["recommend", str(run)]) == 0 and main(["report", str(run)]) == 0
    code = main(["verify", str(run)])
    assert code == 0, capsys.readouterr()
    argv = ["sweep", "--server-bin", FAKE_BIN, "--n-gpu-layers", "999999", "-o", str(run.parent / "x")]
    line = _answer(argv, capsys, (2,))
    assert "n_gpu_layers" in line or "n-gpu-layers" in line


def test_an_invalid_run_json_names_its_first_failing_field(run, capsys):
    _old_style(run, n_gpu_layers="all")
    line = _answer(["analyze", str(run)], capsys)
    assert "config.lanes.0.server.n_gpu_layers" in line


def test_long_values_are_shortened_in_messages(capsys):
    line = _answer(["sweep", "--concurrency", "1" * 5000, "-o", "/nonexistent/x"], capsys, (2,))
    assert len(line) < 400
    stored = RunConfig(lanes=[LaneConfig(name="a")])
    given_cfg = RunConfig(lanes=[LaneConfig(name="a", levels=list(range(1, 60))), LaneConfig(name="b")])
    with pytest.raises(UserError) as exc:
        check_same_config(stored, given_cfg)
    assert len(str(exc.value)) < 800 and "\n" not in str(exc.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
REQUEST_FIELDS = ["level", "repetition", "stream", "seq", "prompt_tokens", "server_prompt_tokens",
                  "max_tokens", "targeted_ns", "sent_ns", "headers_ns", "end_ns", "chunks", "output_tokens",
                  "http_status",
                  "slot_id", "timings", "retries", "session", "phase", "scenario", "error"]
MARK_FIELDS = ["level", "repetition", "t_ns", "n_requests", "status", "session"]
SAMPLE_FIELDS = {"metrics": ["sent_ns", "t_ns", "values"], "slots": ["sent_ns", "t_ns", "n_slots", "busy_ids",
                                                                     "n_decoded"],
                 "process": ["t_ns", "rss_bytes", "cpu_seconds", "gpu_util_pct", "server_pid", "client_pid"]}
TARGETS = ([("events.jsonl", "request", f) for f in REQUEST_FIELDS]
           + [("events.jsonl", k, f) for k in ("level_start", "level_end") for f in MARK_FIELDS]
           + [("server_samples.jsonl", k, f) for k, fields in SAMPLE_FIELDS.items() for f in fields])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(target=st.sampled_from(TARGETS), value=json_values)
def test_any_value_in_one_record_field_is_a_result_or_one_line(bundle, tmp_path_factory, capsys, target,
                                                               value):
    """One field of the first measured record of its kind replaced by any JSON value: analyze gives a
    result (exit 0) or one line naming the file and line (exit 5), never an internal error."""
    name, kind, field = target
    run = tmp_path_factory.mktemp("h") / "run"
    shutil.copytree(bundle, run)
    lineno = _rewrite_field(run / name, kind, field, value)
    code = main(["analyze", str(run)])
    err = capsys.readouterr().err
    assert code in (0, 5), err[-2000:]
    if code == 5:
        assert f"{name}:{lineno}:" in one_error_line(err)
    else:
        assert json.loads((run / "results.json").read_text())["lanes"]
    shutil.rmtree(run.parent)


def _rewrite_field(path: Path, kind: str, field: str, value: object) -> int:
    """Set `field` of the first record of `kind` (a measured one, for requests) to `value`; its line."""
    lines = path.read_text().splitlines(keepends=True)
    for i, text in enumerate(lines):
        record = json.loads(text)
        if record["kind"] == kind and record.get("phase", "measured") == "measured":
            record[field] = value
            lines[i] = json.dumps(record) + "\n"
            path.write_text("".join(lines))
            return i + 1
    raise AssertionError(f"no {kind} record in {path}")


def test_a_complete_run_whose_events_file_was_cut_mid_line_is_refused_not_half_derived(tmp_path):
    """A torn last line is a crash's while a run is unfinished (ignored then); a complete run's cannot
    be, so analyze refuses rather than derive from what came before the cut."""
    from satbench.cli.main import main
    from tests.bundles import unpacked_copy

    bundle = Path(__file__).resolve().parents[2] / "evidence" / "cpu-2core-2026-12-01" / "run"
    run = unpacked_copy(bundle, tmp_path / "run")
    events = run / "events.jsonl"
    data = events.read_bytes()
    events.write_bytes(data[: len(data) // 2])  # cut in the middle of a line
    assert not events.read_bytes().endswith(b"\n")
    assert main(["analyze", str(run)]) == 5
    events.write_bytes(data[: data.rindex(b"\n", 0, len(data) // 2) + 1])  # cut at a line's end: verify's
    assert main(["analyze", str(run)]) == 0
