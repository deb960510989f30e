"""--resume of a url-lane run recorded under the url runtime's former name ('remote server (given by
--url)'; now 'running server (given by --url)'): the name is satbench's label, not the server's
identity, so the resume goes on; the server's model, build and shape are still compared. A resume
refused because the server differs leaves the run resumable once the server is right again."""

from __future__ import annotations

import re

import pytest

from satbench.cli.main import main
from satbench.errors import UserError
from satbench.records.manifest import (
    LaneProvenance,
    ModelInfo,
    NetworkInfo,
    RuntimeInfo,
    read_manifest,
    write_manifest,
)
from satbench.server.checks import check_same_server
from tests.builders import replaced

OLD_NAME = "remote server (given by --url)"  # what runs recorded before the rename
TINY = ["--concurrency", "1,2", "--requests-per-level", "3", "--repetitions", "1", "--prompt-tokens", "16",
        "--output-tokens", "4"]


def _url_rt(name: str, **change) -> RuntimeInfo:
    """A url lane's runtime as an interrupted run made by the old code recorded it."""
    return RuntimeInfo(**{"kind": "url", "name": name, "llamacpp": True, "build_info": "b0-unknown",
                          "base_url": "http://127.0.0.1:18731", "total_slots": 2, "per_slot_ctx": 256,
                          "model_alias": "/m/dense.gguf", **change})


def _stored() -> LaneProvenance:
    return LaneProvenance(model=ModelInfo(path="/m/dense.gguf",
                                          source="reported by the remote server's /props"),
                          runtime=_url_rt(OLD_NAME), network=NetworkInfo(path="loopback"))


def test_a_url_lanes_name_is_a_label_not_its_identity():
    from satbench.server.remote import UrlRuntime

    now = UrlRuntime("http://127.0.0.1:18731").name_and_version()[0]
    assert now != OLD_NAME  # the rename this guards against
    model = ModelInfo(path="/m/dense.gguf")
    check_same_server("default", _stored(), "solo", model, _url_rt(now))


@pytest.mark.parametrize("change, field", [({"build_info": "b11434-abc"}, "build_info"),
                                           ({"total_slots": 4}, "total_slots"),
                                           ({"per_slot_ctx": 512}, "per_slot_ctx"),
                                           ({"llamacpp": False}, "llamacpp")])
def test_a_url_lanes_build_and_shape_are_still_compared(change, field):
    with pytest.raises(UserError, match=f"the server's {field} is"):
        check_same_server("default", _stored(), "solo", ModelInfo(path="/m/dense.gguf"),
                          _url_rt("running server (given by --url)", **change))


def test_a_url_lanes_model_path_is_still_compared():
    with pytest.raises(UserError, match=re.escape("now serves /m/other.gguf, not /m/dense.gguf")):
        check_same_server("default", _stored(), "solo", ModelInfo(path="/m/other.gguf"),
                          _url_rt("running server (given by --url)"))


def test_a_started_servers_name_is_still_compared():
    """A native lane's name carries its binary's path: another binary is another server."""
    def native(name):
        return RuntimeInfo(kind="native", name=name, llamacpp=True, build_info="b1-x",
                           base_url="http://127.0.0.1:1")

    stored = LaneProvenance(model=ModelInfo(path="/m.gguf"), runtime=native("llama-server binary (/a)"),
                            network=NetworkInfo(path="loopback"))
    with pytest.raises(UserError, match="the server's name is"):
        check_same_server("d", stored, "solo", ModelInfo(path="/m.gguf"), native("llama-server binary (/b)"))


def test_resume_of_a_run_recorded_under_the_old_name_goes_on(fake_server, monkeypatch, tmp_path, capsys):
    """A finished run rewritten to look like an interrupted one the old code made (old runtime name,
    first level done). A resume against a server of another shape is refused (exit 2) and leaves the
    run resumable; against the right one it finishes the run."""
    # the checkout may change meanwhile
    monkeypatch.setattr("satbench.run.sweep.satbench_source", lambda: (None, []))
    fake = fake_server(n_slots=2, decode_iteration_ms=1.0)
    run = tmp_path / "run"
    assert main(["sweep", "--url", fake.base_url, *TINY, "-o", str(run)]) == 0
    fake.stop()
    port = int(fake.base_url.rsplit(":", 1)[1])
    m = read_manifest(run)
    assert m.provenance is not None and m.completed_units[0] == "solo/default/1/1"
    m = replaced(m, {"provenance.lanes.default.runtime.name": OLD_NAME, "status": "interrupted",
                     "completed_units": m.completed_units[:1],
                     "finished_at": "2026-01-01T00:00:00+00:00"})  # long before any refusal here
    write_manifest(run, m)

    wrong = fake_server(port=port, n_slots=3, decode_iteration_ms=1.0)
    capsys.readouterr()
    assert main(["sweep", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert "the server's total_slots is 3 now, 2 in the run" in err and "server's name" not in err
    wrong.stop()
    refused = read_manifest(run)
    assert refused.status == "interrupted"  # as it was: a refused resume measured nothing (it said failed)
    assert refused.finished_at == m.finished_at  # not the refusal's time: measured_at reads it
    assert "a resume was refused: cannot continue lane default" in refused.status_reason
    assert refused.completed_units == m.completed_units[:1]  # nothing was measured

    fake_server(port=port, n_slots=2, decode_iteration_ms=1.0)
    capsys.readouterr()
    assert main(["sweep", "--resume", str(run)]) == 0, capsys.readouterr().err
    done = read_manifest(run)
    assert done.status == "complete" and done.completed_units == ["solo/default/1/1", "solo/default/2/1"]
    assert done.provenance.lanes["default"].runtime.name == OLD_NAME  # the run's record is not rewritten
    assert done.resumes[-1].servers["default/solo"].name == "running server (given by --url)"


def test_a_resume_that_lost_its_server_and_then_was_refused_is_failed_not_as_it_was(fake_server, monkeypatch,
                                                                                    tmp_path, capsys):
    """This session measured (a level whose server answered HTTP 500, recorded as a server failure)
    before the restarted server was refused: the run is not 'as it was', so it says failed."""
    import satbench.run.servers as servers_module
    from satbench.errors import UserError

    monkeypatch.setattr("satbench.run.sweep.satbench_source", lambda: (None, []))
    fake = fake_server(n_slots=2, decode_iteration_ms=1.0)
    run = tmp_path / "run"  # two repetitions: after N=2 fails, N=1's second one needs the server restarted
    assert main(["sweep", "--url", fake.base_url, *TINY[:4], "--repetitions", "2", *TINY[6:],
                 "-o", str(run)]) == 0
    fake.stop()
    m = read_manifest(run)
    write_manifest(run, m.model_copy(update={"status": "interrupted",
                                             "status_reason": "interrupted by Ctrl-C",
                                             "completed_units": m.completed_units[:1]}))
    fake_server(port=int(fake.base_url.rsplit(":", 1)[1]), n_slots=2, decode_iteration_ms=1.0,
                completion_fault="http_500")
    real, calls = servers_module.check_same_server, []

    def refused_on_restart(*a, **k):
        calls.append(a[2])
        if len(calls) >= 2:  # the server restarted after the failure: now another shape
            raise UserError("cannot continue lane default: the server's total_slots is 3 now, 2 in the run")
        return real(*a, **k)
    monkeypatch.setattr(servers_module, "check_same_server", refused_on_restart)
    assert main(["sweep", "--resume", str(run)]) == 2
    after = read_manifest(run)
    assert any(f.session == after.resumes[-1].session for f in after.server_failures)
    assert after.status == "failed" and "a resume was refused" not in (after.status_reason or "")


def test_a_refused_resume_of_a_killed_run_keeps_it_unfinished_and_says_once_why(fake_server, monkeypatch,
                                                                                 tmp_path, capsys):
    """A run killed mid-way has no end time: a refused resume must not give it one (measured_at
    would read the refusal's time), and a second refusal replaces the first's reason, not stacks it."""
    from satbench.report.integrity import write_sums

    monkeypatch.setattr("satbench.run.sweep.satbench_source", lambda: (None, []))
    fake = fake_server(n_slots=2, decode_iteration_ms=1.0)
    run = tmp_path / "run"
    assert main(["sweep", "--url", fake.base_url, *TINY, "-o", str(run)]) == 0
    fake.stop()
    m = read_manifest(run)
    write_manifest(run, m.model_copy(update={"status": "running", "status_reason": None, "finished_at": None,
                                             "completed_units": m.completed_units[:1]}))
    write_sums(run)  # as if reported
    wrong = fake_server(port=int(fake.base_url.rsplit(":", 1)[1]), n_slots=3, decode_iteration_ms=1.0)
    for _ in range(2):
        capsys.readouterr()
        assert main(["sweep", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    wrong.stop()
    after = read_manifest(run)
    assert after.status == "running" and after.finished_at is None
    assert after.status_reason.count("a resume was refused") == 1, after.status_reason
    # the bundle is stale: said so
    assert "SHA256SUMS no longer matches" in err and "`satbench recommend" in err
