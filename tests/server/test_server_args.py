"""More llama-server flags for a server satbench starts ([lanes.server] args): checked before the run
against the server (a native binary's --help; xllamacpp's parameters for the embedded runtime), put
on its command line, recorded in run.json and compared by --resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satbench.cli.main import main
from satbench.errors import UserError
from satbench.gguf.synthetic import write_synthetic_gguf
from satbench.records.manifest import read_manifest
from satbench.server.server_args import (
    READS_FILE,
    REFUSED,
    apply_embedded,
    check_native,
    parse_embedded,
    read_files,
    split_flags,
)

BIN = str(Path(__file__).resolve().parents[1] / "fakes" / "fake_llama_server_bin.py")
HELP = ("usage: llama-server\n  -fa, --flash-attn [on|off|auto]  set Flash Attention\n"
        "  -ctk, --cache-type-k TYPE\n")


def test_flags_and_their_values_are_grouped():
    assert split_flags(["-fa", "on", "--cache-type-k=q8_0", "-nkvo", "-ts", "3,1"]) == [
        ("-fa", ["on"]), ("--cache-type-k", ["q8_0"]), ("-nkvo", []), ("-ts", ["3,1"])]
    with pytest.raises(UserError, match="comes before any flag"):
        split_flags(["on", "-fa"])


@pytest.mark.parametrize("args, needle", [
    (["-np", "4"], "-np is set by satbench: use --parallel"),
    (["--ctx-size", "4096"], "use --ctx-size"),
    (["--port", "9"], "use --port"),
    (["--metrics"], "--metrics is set by satbench: satbench turns these endpoints on"),
    (["-v"], "-v is set by satbench: satbench sets the log level"),
    (["--rope-scaling", "yarn"], "--rope-scaling has no xllamacpp parameter"),
    (["-fa", "maybe"], "-fa maybe: expected one of on, off, auto"),
    (["-ctk", "q3_k"], "expected one of f32, f16"),
    (["-nkvo", "1"], "takes no value"),
    (["-ts=nan"], "expected proportions like 3,1"),
    (["-ts=1e308,nan"], "expected proportions like 3,1"),
    (["-ts", "inf"], "expected proportions like 3,1"),
    (["-ts", "0,0"], "not all 0"),
    (["-ts", "1,,2"], "expected proportions"),
    (["-ts", "1e7,1"], "each from 0 to 1e"),
    (["-mg=9999"], "expected a device index from 0 to 127"),
])
def test_the_embedded_runtime_refuses_what_it_cannot_set(args, needle):
    with pytest.raises(UserError, match=needle):
        parse_embedded(args)


def test_the_embedded_runtime_sets_xllamacpps_parameters():
    xllamacpp = pytest.importorskip("xllamacpp")
    p = xllamacpp.CommonParams()
    apply_embedded(p, ["-fa", "on", "-ctk", "q8_0", "--cache-type-v=q4_0", "-sm", "row", "-ts", "3,1",
                       "-nkvo", "--no-warmup"])
    assert p.flash_attn_type == xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert p.cache_type_k == xllamacpp.ggml_type.GGML_TYPE_Q8_0
    assert p.cache_type_v == xllamacpp.ggml_type.GGML_TYPE_Q4_0
    assert p.split_mode == xllamacpp.llama_split_mode.LLAMA_SPLIT_MODE_ROW
    assert list(p.tensor_split[:3]) == [3.0, 1.0, 0.0] and p.no_kv_offload and not p.warmup


def test_a_native_flag_must_be_in_the_binarys_help():
    check_native(["-fa", "on", "--cache-type-k", "q8_0"], HELP, "llama-server")
    with pytest.raises(UserError, match="--rope-scaling is not a flag of llama-server"):
        check_native(["--rope-scaling", "yarn"], HELP, "llama-server")
    with pytest.raises(UserError, match="cannot read llama-server --help"):
        check_native(["-fa", "on"], None, "llama-server")


FULL_HELP = "\n".join(sorted(REFUSED | dict.fromkeys(READS_FILE))) + "\n"  # a server that lists them all


@pytest.mark.parametrize("args, needle", [
    (["--log-file", "../elsewhere.log"], "--log-file writes a log outside the run directory"),
    (["--slot-save-path", "/tmp"], "--slot-save-path writes files outside the run directory"),
    (["-hf", "org/repo"], "-hf fetches a model from the network, in place of the lane's: give a local file "
                          "with --model"),
    (["-mu", "http://example.com/m.gguf"], "-mu fetches a model from the network"),
    (["--api-key", "k"], "--api-key would lock satbench out of the server it measures"),
    (["--path", "/"], "--path adds or moves network endpoints"),
    (["--rpc", "10.0.0.1:50052"], "--rpc adds or moves network endpoints"),
])
def test_flags_that_reach_outside_the_run_are_refused_for_both_runtimes(args, needle):
    with pytest.raises(UserError, match=needle):
        check_native(args, FULL_HELP, "llama-server")
    with pytest.raises(UserError, match=needle):
        parse_embedded(args)


def test_a_flag_that_reads_a_file_needs_a_regular_one_and_records_its_sha256(tmp_path):
    import hashlib
    import os

    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    args = ["--chat-template-file", str(template), "-fa", "on"]
    check_native(args, FULL_HELP + "-fa\n", "llama-server")
    assert read_files(args) == {str(template): hashlib.sha256(b"{{ messages }}").hexdigest()}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, needle in ((fifo, "not a regular file"), (tmp_path, "not a regular file"),
                         (tmp_path / "none", "No such file or directory")):
        with pytest.raises(UserError, match=needle):
            check_native(["--lora", str(path)], FULL_HELP, "llama-server")
    with pytest.raises(UserError, match="--lora needs a file"):
        read_files(["--lora"])


def _lane_file(tmp_path: Path, model: Path, args: list[str]) -> Path:
    path = tmp_path / "lanes.toml"
    path.write_text(f'[[lanes]]\nname = "n"\nruntime = "native"\nserver_bin = "{BIN}"\nmodel = "{model}"\n'
                    f'concurrency = [1]\nrepetitions = 1\nrequests_per_level = 4\nprompt_tokens = 48\n'
                    f'output_tokens = 8\n[lanes.server]\nargs = {json.dumps(args)}\n')
    return path


def test_a_native_lanes_args_reach_its_command_line_and_run_json(tmp_path):
    model = tmp_path / "m.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    out = tmp_path / "run"
    assert main(["sweep", "--lanes", str(_lane_file(tmp_path, model, ["-fa", "on", "-ctk", "q8_0"])),
                 "-o", str(out)]) == 0
    m = read_manifest(out)
    assert m.config.lanes[0].server.extra_args == ["-fa", "on", "-ctk", "q8_0"]
    # the command line the server ran with, as run.json records it
    assert "--ubatch-size 512 -fa on -ctk q8_0" in " ".join(m.provenance.lanes["n"].runtime.server_args)
    assert "-fa on -ctk q8_0" in (out / "EVIDENCE.md").read_text()


def test_an_unknown_native_flag_is_refused_before_the_run(tmp_path, capsys):
    model = tmp_path / "m.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    out = tmp_path / "run"
    assert main(["sweep", "--lanes", str(_lane_file(tmp_path, model, ["--rope-scaling", "yarn"])),
                 "-o", str(out)]) == 2
    assert "lane n: server args: --rope-scaling is not a flag of" in capsys.readouterr().err
    assert not out.exists()


def test_server_arg_flags_add_up_and_are_checked(tmp_path, capsys):
    model = tmp_path / "m.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    out = tmp_path / "run"
    common = ["sweep", "--server-bin", BIN, "--model", str(model), "--concurrency", "1", "--repetitions", "1",
              "--requests-per-level", "4", "--prompt-tokens", "48", "--output-tokens", "8"]
    assert main(common + ["--server-arg", "-fa on", "--server-arg=-ctk", "--server-arg=q8_0",
                          "-o", str(out)]) == 0
    assert read_manifest(out).config.lanes[0].server.extra_args == ["-fa", "on", "-ctk", "q8_0"]
    assert main(common + ["--server-arg", "-np 4", "-o", str(tmp_path / "refused")]) == 2
    assert "server args: -np is set by satbench: use --parallel" in capsys.readouterr().err
    assert main(["sweep", "--url", "http://127.0.0.1:1", "--server-arg", "-fa on"]) == 2
    assert "would not be applied" in capsys.readouterr().err


def test_a_started_server_that_serves_another_model_is_refused(tmp_path, capsys, monkeypatch):
    """/props names another file than the lane's (here: the fake told to say so): the lane does not start."""
    model = tmp_path / "m.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    monkeypatch.setenv("FAKE_BIN_SCRIPT", json.dumps({"model_path": "/elsewhere/other.gguf"}))
    code = main(["sweep", "--server-bin", BIN, "--model", str(model), "--concurrency", "1",
                 "--requests-per-level", "4", "--repetitions", "1", "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 3 and "serves '/elsewhere/other.gguf', not the lane's model" in err, err


def test_the_prompt_cache_settings_reach_the_embedded_server():
    """The prompt cache's settings (docs/workloads.md) set xllamacpp's own parameters; a value out
    of range is one line naming the flag."""
    args = ["-sps", "0", "--cache-reuse", "256", "--cache-ram", "0", "--ctx-checkpoints", "4"]
    assert parse_embedded(args) == [("slot_prompt_similarity", 0.0, "value"), ("n_cache_reuse", 256, "value"),
            ("cache_ram_mib", 0, "value"), ("n_ctx_checkpoints", 4, "value")]
    for bad, says in ((["--slot-prompt-similarity", "1.5"], "fraction"), (["--cache-ram", "lots"], "MiB")):
        with pytest.raises(UserError, match=says):
            parse_embedded(bad)
