"""CLI: flags map onto typed config; user errors print one line and exit non-zero."""

import json

import pytest

from satbench.analysis.results import RESULTS_SCHEMA_VERSION
from satbench.cli.args import build_parser, lane_config
from satbench.cli.main import main
from satbench.errors import UserError


def cfg_of(*argv):
    return lane_config(build_parser().parse_args(["sweep", *argv]))


def test_defaults_are_the_embedded_builtin_model_at_1_2_4_8():
    cfg = cfg_of()
    assert cfg.levels == [1, 2, 4, 8]
    assert cfg.runtime.kind == "embedded" and cfg.runtime.model == "builtin:gemma3-270m"
    assert cfg.runtime.model_dir.endswith(".satbench/models")
    assert cfg.slots_wanted() == 8
    assert cfg.ctx_wanted() >= 8 * (cfg.workload.prompt_tokens + cfg.workload.output_tokens)


def test_llama_server_knobs_and_workload_flags():
    cfg = cfg_of("--model", "m.gguf", "--concurrency", "1,2,4,8,16", "--prompt-tokens", "256",
                 "--output-tokens", "128", "--requests-per-level", "64", "--repetitions", "3",
                 "--parallel", "16", "--ctx-size", "8192", "--batch-size", "1024", "--ubatch-size", "256",
                 "--threads", "2", "--n-gpu-layers", "99")
    assert cfg.levels == [1, 2, 4, 8, 16] and cfg.measured_requests(16) == 64
    s = cfg.server
    assert (s.n_parallel, s.n_ctx, s.n_batch, s.n_ubatch, s.n_threads, s.n_gpu_layers) \
        == (16, 8192, 1024, 256, 2, 99)
    assert cfg.ctx_wanted() == 8192


def test_default_request_count_follows_the_design_minimum():
    cfg = cfg_of("--concurrency", "1,2,4,8,16")  # fixed levels: max(8N, 32) per repetition
    assert cfg.adaptive is None
    assert [cfg.measured_requests(n) for n in (1, 2, 4, 8, 16)] == [32, 32, 32, 64, 128]


def test_without_levels_the_sweep_is_adaptive_with_short_repetitions():
    cfg = cfg_of("--budget", "2m")
    assert cfg.adaptive is not None and cfg.adaptive.budget_s == 120.0
    assert [cfg.measured_requests(n) for n in (1, 2, 4, 8)] == [4, 8, 16, 32]


def test_a_budget_with_fixed_levels_is_refused():
    with pytest.raises(UserError, match="--budget: a budget applies to the adaptive sweep"):
        cfg_of("--budget", "2m", "--concurrency", "1,2")
    with pytest.raises(UserError, match="--budget: a duration like 90s"):
        cfg_of("--budget", "soon")


def test_model_dir_from_environment(monkeypatch):
    monkeypatch.setenv("SATBENCH_MODEL_DIR", "/big/disk/models")
    assert cfg_of().runtime.model_dir == "/big/disk/models"
    assert cfg_of("--model-dir", "/x").runtime.model_dir == "/x"


def test_url_and_server_bin_select_the_runtime():
    assert cfg_of("--url", "http://127.0.0.1:8080").runtime.kind == "url"
    assert cfg_of("--server-bin", "/bin/llama-server", "--model", "m.gguf").runtime.kind == "native"


@pytest.mark.parametrize("argv, needle", [
    (["sweep", "--checks", "S1"], "add --with-fairness"),
    (["sweep", "--concurrency", "1,0"], "--concurrency: must be an integer from 1 to 4,096"),
    (["sweep", "--concurrency", "1,x"], "--concurrency: expected an integer, got 'x'"),
    (["sweep", "--concurrency", "2,2"], "repeat"),
    (["sweep", "--prompt-tokens", "3"], "--prompt-tokens: must be an integer from 8"),
    (["sweep", "--url", "http://h:1", "--model", "m.gguf"], "cannot be combined"),
    (["sweep", "--bogus"], "unrecognized arguments"),
    (["sweep", "--model", "/nonexistent/model.gguf", "-o", "{tmp}/run"], "does not exist"),
    (["analyze", "{tmp}/nothing"], "not a satbench run directory"),
    (["sweep", "--url", "http://127.0.0.1:1", "-o", "{tmp}/run"], "cannot reach http://127.0.0.1:1"),
    (["sweep", "--url", "ftp://h/x"], "expected http://HOST:PORT"),
    (["sweep", "--port", "99999"], "port"),
    (["sweep", "--url", "http://h:1", "--port", "8080"], "cannot be combined"),
    (["sweep", "--resume", "{tmp}/nothing"], "no such run directory"),
    (["sweep", "--resume", "{tmp}/afile"], "not a directory"),
    (["sweep", "--url", "http://127.0.0.1:99999"], "not a number from 0 to 65535"),
    (["sweep", "--url", "http://h:1", "-t", "4", "-np", "2"], "--parallel, --threads would not be applied"),
    (["sweep", "--url", "http://h:1", "--kv-unified"], "--kv-unified would not be applied"),
    (["sweep", "--url", "http://127.0.0.1:1", "-o", "{tmp}/afile"], "a file of that name exists"),
    (["sweep", "--lanes", "{tmp}/afile"], "not UTF-8 text"),
])
def test_user_errors_are_one_line_and_non_zero(argv, needle, capsys, tmp_path):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    (tmp_path / "afile").write_bytes(b"\xff\xfe not a directory, not UTF-8")
    code = main(argv)
    err = capsys.readouterr().err
    assert code != 0
    assert needle in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_a_refused_model_or_url_leaves_no_run_directory_behind(tmp_path, capsys, monkeypatch):
    """A typo is not a run: nothing is created under runs/ (the default -o) for it."""
    monkeypatch.chdir(tmp_path)
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 8)
    for argv in (["sweep", "--model", str(tmp_path / "missing.gguf")], ["sweep", "--model", str(truncated)],
                 ["sweep", "--url", "http://127.0.0.1:99999"]):
        assert main(argv) == 2
        assert "run directory" not in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_resume_of_a_run_that_stopped_before_its_first_request_is_not_told_events_are_missing(tmp_path):
    from satbench.run.resume import last_stamp_ns

    assert last_stamp_ns(tmp_path) == 0


def test_not_a_gguf_file(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 100)
    assert main(["sweep", "--model", str(bad), "-o", str(tmp_path / "run")]) == 2
    assert "not a GGUF file" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before the run directory is made


def test_schema_results_is_published(capsys):
    assert main(["schema", "results"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$id"] == f"urn:satbench:schema:results:{RESULTS_SCHEMA_VERSION}"
    assert "lanes" in schema["properties"]


def test_lanes_and_single_lane_flags_do_not_mix(tmp_path, capsys):
    lanes = tmp_path / "l.toml"
    lanes.write_text('[[lanes]]\nname = "a"\n')
    assert main(["sweep", "--lanes", str(lanes), "--concurrency", "1,2"]) == 2
    assert "--lanes describes every lane; drop --concurrency" in capsys.readouterr().err
    assert main(["sweep", "--together"]) == 2
    assert "--together needs a lane file" in capsys.readouterr().err


def test_an_unexpected_exception_is_one_line_and_exit_1(monkeypatch, capsys) -> None:
    import satbench.cli.main as cli

    def boom(a):
        raise ZeroDivisionError("a\nbug")

    monkeypatch.delenv(cli.TRACEBACK_ENV, raising=False)
    monkeypatch.setitem(cli.COMMANDS, "schema", boom)
    assert cli.main(["schema", "results"]) == cli.INTERNAL_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("satbench: internal error: ZeroDivisionError: a bug")
    monkeypatch.setenv(cli.TRACEBACK_ENV, "1")
    with pytest.raises(ZeroDivisionError):
        cli.main(["schema", "results"])


def test_an_os_error_no_reader_caught_is_one_line_naming_the_path(monkeypatch, capsys) -> None:
    import satbench.cli.main as cli

    def refuse(a):
        raise OSError(36, "File name too long", "x" * 300)

    monkeypatch.delenv(cli.TRACEBACK_ENV, raising=False)
    monkeypatch.setitem(cli.COMMANDS, "schema", refuse)
    assert cli.main(["schema", "results"]) == 2
    err = capsys.readouterr().err
    assert err == f"satbench: error: {'x' * 300}: File name too long\n"
