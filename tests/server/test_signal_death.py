"""A server that dies by a signal is named by it: llama.cpp kills itself with SIGFPE on some shapes
without writing a word, so "no error in its log" alone would hide what happened."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from satbench.cli.main import main
from satbench.config.schema import ServerParams
from satbench.errors import RuntimeStartError
from satbench.gguf.synthetic import write_synthetic_gguf
from satbench.server.base import describe_exit
from satbench.server.native import NativeRuntime

STUB = """#!/bin/sh
echo "srv    load_model: loading model '$2'"
kill -FPE $$
"""


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    path = tmp_path / "llama-server"
    path.write_text(STUB)
    path.chmod(0o755)
    return path


def test_a_stub_server_that_kills_itself_with_sigfpe_is_named_by_its_signal(
        stub: Path, tmp_path: Path) -> None:
    rt = NativeRuntime(str(stub), "/m.gguf", ServerParams(), 1, 512, tmp_path / "server.log")
    with pytest.raises(RuntimeStartError) as exc:
        rt.start()
    assert str(exc.value).startswith("llama-server killed by SIGFPE (signal 8) while loading: ")
    assert "last line: srv    load_model: loading model '/m.gguf'" in str(exc.value)
    assert rt.ended() == "killed by SIGFPE (signal 8)" and not rt.alive()


def test_the_sweep_says_it_in_one_line(
        stub: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = write_synthetic_gguf(tmp_path / "m.gguf").path
    code = main(["sweep", "--server-bin", str(stub), "--model", str(model), "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1
    assert "llama-server killed by SIGFPE (signal 8) while loading" in err


def test_exit_words() -> None:
    assert describe_exit(-signal.SIGFPE) == "killed by SIGFPE (signal 8)"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL (signal 9)"
    assert describe_exit(-99) == "killed by signal 99"
    assert describe_exit(3) == "exited with status 3"
