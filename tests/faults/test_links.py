"""A hostile run directory: a symbolic link or a hard link placed where satbench writes a file
(or plots/ as a link) stops sweep --resume, fairness --resume, analyze, recommend and report
with one line naming it, and the file outside the run directory is left as it was.

The runs are made once per module against the fake servers (the stand-in llama-server binary,
so server logs exist; the fake HTTP server for the fairness checks) and copied per test."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from satbench.cli.main import main
from satbench.errors import RunDirError
from satbench.records.events import ProcessSample
from satbench.records.manifest import read_manifest, write_manifest, write_text_atomic
from satbench.records.rundir import RUN_SUBDIRS, check_run_dir, open_run_file, refuse_if_in_use
from satbench.records.writer import JsonlWriter
from satbench.run.resume import repair_torn_tail
from tests.conftest import FakeProcess
from tests.fakes.fairness_harness import FAIR
from tests.faults.common import FAKE_BIN, one_error_line

# what a resume of a finished-then-reopened one-lane native run writes (its server's log included)
RESUME_WRITES = [".lock", "events.jsonl", "server_samples.jsonl", "run.json", "server-default-resume1.log",
                 "results.json", "recommendations.json", "results.csv", "EVIDENCE.md", "report.html",
                 "SHA256SUMS", "plots/default-throughput.png"]
# the derivation removes these before it writes them anew
REMOVED_BEFORE_DERIVING = ["results.json", "recommendations.json", "SHA256SUMS"]
FAIRNESS_RESUME_WRITES = [".lock", "events.jsonl", "run.json", "verdicts.json", "results.json", "SHA256SUMS"]
ANALYZE_WRITES = ["results.json"]
FAIRNESS_ANALYZE_WRITES = ["results.json", "verdicts.json"]
RECOMMEND_WRITES = ["recommendations.json"]
REPORT_WRITES = ["plots/default-throughput.png", "results.csv", "EVIDENCE.md", "report.html", "SHA256SUMS"]
KINDS = ["symlink", "hardlink"]
WHY = {"symlink": "is a symbolic link", "hardlink": "has 2 hard links"}


@pytest.fixture(autouse=True)
def _no_source_check(monkeypatch):
    """Other work in this checkout changes its git status while the tests run: a resume is judged
    on the run directory alone here (the source check has its own tests)."""
    monkeypatch.setattr("satbench.run.sweep.satbench_source", lambda: (None, []))


@pytest.fixture(scope="module")
def native_run(tmp_path_factory):
    from satbench.gguf.synthetic import write_synthetic_gguf

    base = tmp_path_factory.mktemp("native")
    model = base / "tiny.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    run = base / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("satbench.run.sweep.satbench_source", lambda: (None, []))
        assert main(["sweep", "--server-bin", FAKE_BIN, "--model", str(model), "--concurrency", "2",
                     "--requests-per-level", "4", "--repetitions", "1", "--prompt-tokens", "64",
                     "--output-tokens", "4", "-o", str(run)]) == 0
    assert (run / "server.log").exists() and (run / "plots").is_dir()
    return run


@pytest.fixture(scope="module")
def fair_server(tmp_path_factory):
    fake = FakeProcess(tmp_path_factory.mktemp("fake"), FAIR)
    yield fake
    fake.kill()


@pytest.fixture(scope="module")
def fairness_run(tmp_path_factory, fair_server):
    run = tmp_path_factory.mktemp("fair") / "run"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("satbench.run.sweep.satbench_source", lambda: (None, []))
        assert main(["fairness", "--url", fair_server.base_url, "--batch-size", "256",
                     "--prompt-tokens", "32", "--output-tokens", "16", "--checks", "S1", "-o", str(run)]) == 0
    assert (run / "verdicts.json").exists()
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(run, dest, symlinks=True)
    return dest


def _reopened(run: Path, tmp_path: Path) -> Path:
    """A copy of `run` as if it had been interrupted before its first unit: a resume measures it all."""
    dest = _copy(run, tmp_path)
    m = read_manifest(dest).model_copy(
        update={"status": "interrupted", "completed_units": [], "finished_at": None})
    write_manifest(dest, m)
    return dest


def _plant(run: Path, name: str, kind: str, tmp_path: Path) -> Path:
    """Put a `kind` link at RUN/name to a file outside the run directory (holding what the run's
    own file held, so the command reads on until it writes); return that outside file."""
    target = run / name
    outside = tmp_path / "outside" / name.replace("/", "_")
    outside.parent.mkdir(exist_ok=True)
    outside.write_bytes(target.read_bytes() if target.is_file() else b"precious\n")
    target.unlink(missing_ok=True)
    if kind == "symlink":
        target.symlink_to(outside)
    else:
        os.link(outside, target)
    return outside


def _snapshot(path: Path) -> tuple[bytes, int, int]:
    st = path.stat()
    return path.read_bytes(), st.st_mtime_ns, st.st_size


def _refused(argv: list[str], run: Path, name: str, why: str, capsys) -> None:
    assert main(argv) == RunDirError.exit_code
    line = one_error_line(capsys.readouterr().err)
    assert f"{run / name} {why}" in line, line
    assert "; satbench writes only " in line and " of its own in a run directory (remove " in line, line


@pytest.mark.parametrize("preflight", [True, False], ids=["preflight", "at-the-write"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", RESUME_WRITES)
def test_a_resume_refuses_a_link_where_it_writes(native_run, tmp_path, capsys, monkeypatch, name, kind,
                                                 preflight):
    if not preflight:  # each writer holds to the rule on its own, not only the check before the sweep
        monkeypatch.setattr("satbench.records.rundir.check_run_dir", lambda run_dir: None)
    run = _reopened(native_run, tmp_path)
    outside = _plant(run, name, kind, tmp_path)
    before = _snapshot(outside)
    events_before = (run / "events.jsonl").read_bytes() if name != "events.jsonl" else None
    if not preflight and name in REMOVED_BEFORE_DERIVING:  # unlinking a name never follows it
        assert main(["sweep", "--resume", str(run)]) == 0
        assert not (run / name).is_symlink() and os.stat(run / name).st_nlink == 1
    else:
        _refused(["sweep", "--resume", str(run)], run, name, WHY[kind], capsys)
    assert _snapshot(outside) == before
    if preflight:  # a run.json that is a link is not read through: the file it names is the run's
        m = read_manifest(outside.parent if name == "run.json" else run)
        assert m.status == "interrupted" and not m.resumes  # nothing written
        if events_before is not None:
            assert (run / "events.jsonl").read_bytes() == events_before


def test_the_reopened_run_resumes_without_links(native_run, tmp_path, capsys):
    """The control: the same copy, no link, resumes to a complete run (the refusals above are the links')."""
    run = _reopened(native_run, tmp_path)
    assert main(["sweep", "--resume", str(run)]) == 0
    m = read_manifest(run)
    assert m.status == "complete" and len(m.resumes) == 1 and (run / "server-default-resume1.log").exists()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", FAIRNESS_RESUME_WRITES)
def test_a_fairness_resume_refuses_a_link_where_it_writes(fairness_run, tmp_path, capsys, name, kind):
    run = _reopened(fairness_run, tmp_path)
    outside = _plant(run, name, kind, tmp_path)
    before = _snapshot(outside)
    _refused(["fairness", "--resume", str(run)], run, name, WHY[kind], capsys)
    assert _snapshot(outside) == before
    assert not read_manifest(outside.parent if name == "run.json" else run).resumes


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("command", "name"), [("analyze", n) for n in ANALYZE_WRITES]
                         + [("recommend", n) for n in RECOMMEND_WRITES]
                         + [("report", n) for n in REPORT_WRITES])
def test_derivations_refuse_a_link_where_they_write(native_run, tmp_path, capsys, command, name, kind):
    run = _copy(native_run, tmp_path)
    outside = _plant(run, name, kind, tmp_path)
    before = _snapshot(outside)
    _refused([command, str(run)], run, name, WHY[kind], capsys)
    assert _snapshot(outside) == before


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", FAIRNESS_ANALYZE_WRITES)
def test_analyze_of_a_fairness_run_refuses_a_link_where_it_writes(fairness_run, tmp_path, capsys, name, kind):
    run = _copy(fairness_run, tmp_path)
    outside = _plant(run, name, kind, tmp_path)
    before = _snapshot(outside)
    _refused(["analyze", str(run)], run, name, WHY[kind], capsys)
    assert _snapshot(outside) == before


@pytest.mark.parametrize("name", ["results.json", "recommendations.json"])
def test_report_refuses_a_dangling_link_where_it_would_derive_a_missing_file(native_run, tmp_path, capsys,
                                                                             name):
    run = _copy(native_run, tmp_path)
    (run / name).unlink()
    (run / name).symlink_to(tmp_path / "not-yet")
    _refused(["report", str(run)], run, name, WHY["symlink"], capsys)
    assert not (tmp_path / "not-yet").exists()


@pytest.mark.parametrize("argv", [["report"], ["sweep", "--resume"]])
def test_plots_as_a_link_to_a_directory_outside_is_refused(native_run, tmp_path, capsys, argv):
    run = _reopened(native_run, tmp_path) if "--resume" in argv else _copy(native_run, tmp_path)
    outside = tmp_path / "elsewhere"
    shutil.copytree(run / "plots", outside)
    before = {p.name: _snapshot(p) for p in outside.iterdir()}
    shutil.rmtree(run / "plots")
    (run / "plots").symlink_to(outside, target_is_directory=True)
    _refused([*argv, str(run)], run, "plots", WHY["symlink"], capsys)
    assert {p.name: _snapshot(p) for p in outside.iterdir()} == before


def test_plots_dir_name_is_the_one_the_rule_checks():
    from satbench.records.layout import PLOTS_DIR

    assert PLOTS_DIR in RUN_SUBDIRS


# ---------------------------------------------------------------- the helpers each writer opens with


def _link(kind: str, at: Path, outside: Path) -> None:
    outside.write_bytes(b"precious\n")
    if kind == "symlink":
        at.symlink_to(outside)
    else:
        os.link(outside, at)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["a", "ab", "r+b", "w", "wb"])
def test_open_run_file_never_follows_a_link(tmp_path, mode, kind):
    _link(kind, tmp_path / "f", tmp_path / "outside")
    with pytest.raises(RunDirError, match=f"{tmp_path / 'f'} {WHY[kind]}"):
        open_run_file(tmp_path / "f", mode)
    assert (tmp_path / "outside").read_bytes() == b"precious\n"


def test_open_run_file_refuses_a_dangling_link_and_creates_nothing(tmp_path):
    (tmp_path / "f").symlink_to(tmp_path / "nowhere")
    with pytest.raises(RunDirError, match="is a symbolic link"):
        open_run_file(tmp_path / "f", "a")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize(("what", "mode", "why"), [("fifo", "r+b", "is a named pipe, not a regular file"),
                                                    ("fifo", "a", "No such device"),  # no reader: no wait
                                                    ("dir", "a", "Is a directory")])
def test_open_run_file_refuses_what_is_not_a_regular_file_without_blocking(tmp_path, what, mode, why):
    path = tmp_path / "f"
    os.mkfifo(path) if what == "fifo" else path.mkdir()
    with pytest.raises(RunDirError, match=f"{path}.*{why}"):
        open_run_file(path, mode)


def test_open_run_file_w_truncates_only_a_file_that_passed(tmp_path):
    path = tmp_path / "f"
    path.write_text("old content\n")
    with open_run_file(path, "w") as fh:
        fh.write("new\n")
    assert path.read_text() == "new\n" and stat.S_IMODE(path.stat().st_mode) & 0o600 == 0o600


@pytest.mark.parametrize("kind", KINDS)
def test_the_jsonl_writer_refuses_a_link(tmp_path, kind):
    _link(kind, tmp_path / "server_samples.jsonl", tmp_path / "outside")
    with pytest.raises(RunDirError, match=WHY[kind]):
        JsonlWriter(tmp_path / "server_samples.jsonl")
    assert (tmp_path / "outside").read_bytes() == b"precious\n"


def test_the_jsonl_writer_appends_to_its_own_file(tmp_path):
    w = JsonlWriter(tmp_path / "s.jsonl")
    w.write(ProcessSample(lane="a", t_ns=1))
    w.close()
    assert json.loads((tmp_path / "s.jsonl").read_text())["kind"] == "process"


@pytest.mark.parametrize("kind", KINDS)
def test_a_torn_tail_is_not_cut_through_a_link(tmp_path, kind):
    outside = tmp_path / "outside"
    _link(kind, tmp_path / "events.jsonl", outside)
    outside.write_bytes(b'{"whole": 1}\n{"torn"')
    with pytest.raises(RunDirError, match=WHY[kind]):
        repair_torn_tail(tmp_path / "events.jsonl")
    assert outside.read_bytes() == b'{"whole": 1}\n{"torn"'


@pytest.mark.parametrize("kind", KINDS)
def test_an_atomic_write_refuses_a_link_as_its_target(tmp_path, kind):
    _link(kind, tmp_path / "results.json", tmp_path / "outside")
    with pytest.raises(RunDirError, match=WHY[kind]):
        write_text_atomic(tmp_path / "results.json", "{}\n")
    assert (tmp_path / "outside").read_bytes() == b"precious\n"
    assert (tmp_path / "results.json").is_symlink() == (kind == "symlink")  # left as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside", "results.json"]  # no temporary left


def test_an_atomic_write_into_a_run_subdir_refuses_a_linked_parent(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    outside.mkdir()
    (run / "plots").symlink_to(outside, target_is_directory=True)
    with pytest.raises(RunDirError, match=f"{run / 'plots'} is a symbolic link"):
        write_text_atomic(run / "plots" / "a.png", b"png", run_dir=run)
    assert list(outside.iterdir()) == []


def test_an_atomic_write_outside_a_run_directory_takes_the_parent_as_named(tmp_path):
    """capability -o DIR_LINK/out.json: the directory is the user's to name; only the target is checked."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    write_text_atomic(tmp_path / "link" / "out.json", "{}\n")
    assert (tmp_path / "real" / "out.json").read_text() == "{}\n"


@pytest.mark.parametrize("kind", KINDS)
def test_the_lock_is_not_opened_through_a_link(tmp_path, kind):
    from satbench.records.rundir import run_lock

    _link(kind, tmp_path / ".lock", tmp_path.parent / f"outside-{tmp_path.name}")
    with pytest.raises(RunDirError, match=f"{tmp_path / '.lock'} {WHY[kind]}"), run_lock(tmp_path):
        pass
    assert (tmp_path.parent / f"outside-{tmp_path.name}").read_bytes() == b"precious\n"
    refuse_if_in_use(tmp_path)  # the readers' check does not follow it either, and refuses nothing


def test_check_run_dir_names_a_link_inside_plots(tmp_path):
    (tmp_path / "plots").mkdir()
    _link("symlink", tmp_path / "plots" / "x.png", tmp_path.parent / f"o-{tmp_path.name}")
    with pytest.raises(RunDirError, match=f"{tmp_path / 'plots' / 'x.png'} is a symbolic link"):
        check_run_dir(tmp_path)


@pytest.mark.parametrize("kind", KINDS)
def test_the_native_server_log_is_not_opened_through_a_link(tmp_path, kind):
    from satbench.config.schema import ServerParams
    from satbench.server.native import NativeRuntime

    log = tmp_path / "server-default-resume1.log"
    _link(kind, log, tmp_path / "outside")
    rt = NativeRuntime(FAKE_BIN, str(tmp_path / "m.gguf"), ServerParams(), 1, 512, log)
    with pytest.raises(RunDirError, match=f"{log} {WHY[kind]}"):
        rt._launch()
    assert rt._proc is None and (tmp_path / "outside").read_bytes() == b"precious\n"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("which", ["params", "log"])
def test_the_embedded_runtimes_files_are_not_opened_through_a_link(tmp_path, which, kind):
    from satbench.config.schema import ServerParams
    from satbench.server.embedded import EmbeddedRuntime

    log = tmp_path / "server.log"
    rt = EmbeddedRuntime(str(tmp_path / "m.gguf"), ServerParams(), 1, 512, log)
    at = rt._files()[0] if which == "params" else log
    _link(kind, at, tmp_path / "outside")
    with pytest.raises(RunDirError, match=f"{at} {WHY[kind]}"):
        rt._launch()
    assert rt._proc is None and (tmp_path / "outside").read_bytes() == b"precious\n"


@pytest.mark.parametrize("kind", KINDS)
def test_the_embedded_childs_ready_file_is_not_written_through_a_link(tmp_path, monkeypatch, capsys, kind):
    """The child writes READY.tmp then renames it: a link planted at READY.tmp is refused, not followed."""
    import io
    import signal
    import sys
    import types

    from satbench.server import embedded_child

    fake = types.ModuleType("xllamacpp")
    fake.CommonParams = lambda: types.SimpleNamespace(  # type: ignore[attr-defined]
        model=types.SimpleNamespace(), cpuparams=types.SimpleNamespace(),
        cpuparams_batch=types.SimpleNamespace())
    fake.Server = lambda params: types.SimpleNamespace(listening_address="http://127.0.0.1:1")  # type: ignore
    fake.get_device_info = lambda: []  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "xllamacpp", fake)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # its stdin watch sees EOF at once
    params, ready = tmp_path / "params.json", tmp_path / "ready.json"
    params.write_text(json.dumps({"model_path": "m", "n_parallel": 1, "n_ctx": 256, "n_batch": 64,
                                  "n_ubatch": 64}))
    _link(kind, tmp_path / "ready.json.tmp", tmp_path / "outside")
    assert embedded_child.main(["child", str(params), str(ready)]) == 3
    assert WHY[kind] in capsys.readouterr().err
    assert (tmp_path / "outside").read_bytes() == b"precious\n" and not ready.exists()
