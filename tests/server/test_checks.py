"""Checks made when a lane's server answers, before anything is measured: levels above the
slot count (warning, or refused with --strict) and a workload that cannot fit a slot."""

from __future__ import annotations

from satbench.cli.main import main

TINY = ["--requests-per-level", "4", "--repetitions", "1", "--prompt-tokens", "16", "--output-tokens", "4"]


def test_a_level_above_the_slot_count_warns_and_is_flagged(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    assert main(["sweep", "--url", fake.base_url, "--concurrency", "1,4", *TINY,
                 "-o", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert ("satbench: warning: lane default: level 4 exceeds the server's 2 slots: "
            "the extra requests queue at the server") in err


def test_strict_refuses_it_before_anything_is_measured(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    run = tmp_path / "r"
    code = main(["sweep", "--url", fake.base_url, "--concurrency", "1,4,8", "--strict", *TINY,
                 "-o", str(run)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith(
        "satbench: error: lane default: levels 4, 8 exceed the server's 2 slots (--strict)")
    assert not run.exists()  # refused before the run directory is made: the corrected command can reuse -o


def test_a_workload_that_cannot_fit_a_slot_is_refused_naming_the_fix(fake_server, tmp_path, capsys):
    fake = fake_server(n_slots=2, n_ctx=64, decode_iteration_ms=2.0)  # 32 tokens per slot
    code = main(["sweep", "--url", fake.base_url, "--concurrency", "1", "--requests-per-level", "4",
                 "--repetitions", "1", "--prompt-tokens", "24", "--output-tokens", "16",
                 "-o", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert "a request needs prompt 24 + output 16 = 40 tokens but the server's per-slot context is 32" in err
    assert "-c" in err and "-np" in err
    assert not (tmp_path / "r").exists()


def test_a_resumed_or_restarted_lane_must_run_the_same_llama_server_bytes():
    """A build that reports no build number ("0 (unknown)") is the same build only if its
    binary digest is: another one is refused by name; a run recorded before the digest
    existed (None) is not refused for lacking it."""
    import pytest

    from satbench.errors import UserError
    from satbench.records.manifest import LaneProvenance, ModelInfo, NetworkInfo, RuntimeInfo
    from satbench.server.checks import check_same_server

    def rt(digest):
        return RuntimeInfo(kind="native", name="llama-server binary (/opt/llama-server)",
                           version="version: 0 (unknown)", llamacpp=True, build_info="b0-unknown",
                           binary_sha256=digest, base_url="http://127.0.0.1:1")

    model = ModelInfo(path="/m.gguf", sha256="c" * 64)
    stored = LaneProvenance(model=model, runtime=rt("a" * 64), network=NetworkInfo(path="loopback"))
    check_same_server("dense", stored, "solo", model, rt("a" * 64))
    with pytest.raises(UserError, match="binary_sha256"):
        check_same_server("dense", stored, "solo", model, rt("b" * 64))
    older = stored.model_copy(update={"runtime": rt(None)})
    check_same_server("dense", older, "solo", model, rt("b" * 64))


def test_a_ctx_size_too_small_for_a_slot_is_refused_before_a_server_or_run_directory(tmp_path, capsys):
    """-c 512 over 8 slots gives each slot at most 64 tokens: refused before the model is even
    resolved (a model that does not exist is not the error reported) and nothing is left behind."""
    run = tmp_path / "r"
    code = main(["sweep", "--model", str(tmp_path / "absent.gguf"), "--ctx-size", "512",
                 "--concurrency", "1,8", "--prompt-tokens", "300", "--output-tokens", "16", "-o", str(run)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and not run.exists()
    assert ("a request needs prompt 300 + output 16 = 316 tokens but --ctx-size 512 over 8 slots "
            "gives each slot at most 256") in err, err


def test_the_planned_fit_refuses_only_what_cannot_fit():
    from satbench.config.schema import slot_ctx_at_most

    # b11434 said so
    assert slot_ctx_at_most(500, 3, False) == 256 and slot_ctx_at_most(1000, 3, False) == 512
    assert slot_ctx_at_most(512, 8, True) == 512  # unified: every slot may use the whole cache
    assert slot_ctx_at_most(4096, 1, False) == 4096
