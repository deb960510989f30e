"""The server-flag policy against llama-server b11434's own --help (tests/server/data): a flag the
REFUSED list does not name but whose value is a file, directory or URL is refused; aliases and
`_` spellings count as the flag; a flag is given once; -ts and -mg values are range-checked for a
native server too; the environment may not set the server's flags."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from satbench.errors import UserError
from satbench.server.server_args import (
    check_environment,
    check_lane_args,
    check_native,
    help_entries,
    parse_embedded,
    read_files,
)

HELP = (Path(__file__).parent / "data" / "llama-server-b11434-help.txt").read_text()


def _native(args: list[str]) -> None:
    check_native(args, HELP, "llama-server")


def test_help_entries_read_each_flag_s_aliases_and_value():
    entries = help_entries(HELP)
    assert entries["-md"] == (frozenset({"-md", "--model-draft", "--spec-draft-model"}), "FNAME")
    assert entries["--webui-config-file"] == (frozenset({"--ui-config-file", "--webui-config-file"}), "PATH")
    assert entries["-kvo"][1] == "" and entries["-mg"][1] == "INDEX"


@pytest.mark.parametrize("args", [["--media-path", "/"], ["--webui-config-file", "/etc/passwd"],
                                  ["--ui-config-file", "/etc/passwd"], ["--models-preset", "p.ini"],
                                  ["--models-dir", "/"], ["-mmu", "http://example.com/p.gguf"],
                                  ["--mmproj-url", "http://example.com/p.gguf"],
                                  ["--log-prompts-dir", "/tmp"],
                                  ["--video-ffmpeg-dir", "/usr/bin"], ["-hff", "x.gguf"]])
def test_a_flag_whose_value_reaches_outside_the_run_is_refused_though_no_list_names_it(args):
    with pytest.raises(UserError, match=r"outside the run that satbench does not record|network"):
        _native(args)


@pytest.mark.parametrize("args,needle", [
    (["--log_file", "/tmp/x.log"], "--log-file writes a log outside"),
    (["--slot_save_path", "/tmp"], "--slot-save-path writes files outside"),
    (["--hf_repo", "a/b"], "--hf-repo fetches a model"),
    (["--api_key", "k"], "--api-key would lock satbench out"),
    (["--model_url", "http://h/m.gguf"], "--model-url fetches a model"),
    (["--reuse-port"], "adds or moves network endpoints"),
    (["--override-kv", "a=int:1"], "changes the model's metadata"),
    (["--tools", "all"], "runs tools"),
    (["--n_gpu_layers", "9"], "set by satbench"),
])
def test_underscore_spellings_and_the_new_refusals(args, needle):
    with pytest.raises(UserError, match=needle):
        _native(args)


def test_a_read_flag_by_its_alias_is_hashed_and_one_no_list_names_is_sent_to_the_named_one(tmp_path):
    draft = tmp_path / "d.gguf"
    draft.write_bytes(b"GGUF")
    _native(["--spec-draft-model", str(draft)])
    assert read_files(["--spec-draft-model", str(draft)]) == {str(draft): hashlib.sha256(b"GGUF").hexdigest()}
    with pytest.raises(UserError, match="give it as"):
        check_native(["--draft-model-file", str(draft)],
                     "--draft-model-file, -md FNAME   draft model\n", "llama-server")


@pytest.mark.parametrize("args", [["-mg", "1", "--main-gpu", "2"], ["-ts", "1", "-ts", "1"],
                                  ["-fa", "on", "--flash-attn", "off"]])
def test_a_flag_given_twice_is_refused_for_both_runtimes(args):
    with pytest.raises(UserError, match="given twice"):
        _native(args)
    with pytest.raises(UserError, match="given twice"):
        parse_embedded(args)


@pytest.mark.parametrize("args", [["-ts", "nan"], ["-ts", "1e308,nan"], ["-mg", "9999"], ["-mg", "１"],
                                  ["-ts", "١"], ["-ts", "1_0"]])
def test_native_tensor_split_and_main_gpu_values_are_range_checked(args):
    with pytest.raises(UserError, match=f"server args: {args[0]}"):
        _native(args)
    _native(["-ts", "3,1", "-mg", "1"])


def test_the_environment_may_not_set_the_server_s_flags(monkeypatch):
    check_environment({"PATH": "/bin", "HF_TOKEN": "x"})
    for name in ("LLAMA_ARG_HF_REPO", "LLAMA_API_KEY", "LLAMA_ARG_LOG_FILE"):
        with pytest.raises(UserError, match=f"the environment sets {name}, which llama-server reads"):
            check_environment({name: "x"})
    monkeypatch.setenv("LLAMA_ARG_MODEL_URL", "http://example.com/m.gguf")
    with pytest.raises(UserError, match="LLAMA_ARG_MODEL_URL"):
        check_lane_args("embedded", [], None)
    check_lane_args("url", [], None)  # a running server's environment is not satbench's
