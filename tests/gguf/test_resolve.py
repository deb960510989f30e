"""Model specs: builtin, synthetic (written once, reused, labelled), paths; `satbench models make`."""

import pytest

from satbench.cli.main import main
from satbench.errors import UserError
from satbench.gguf.resolve import parse_synthetic, resolve_model
from satbench.gguf.synthetic_meta import is_synthetic_gguf


def test_parse_synthetic():
    assert parse_synthetic("synthetic:deepseek2-small") == ("deepseek2", "small", 0)
    assert parse_synthetic("synthetic:llama-tiny-seed7") == ("llama", "tiny", 7)
    assert parse_synthetic("synthetic:llama-1.5b-seed2") == ("llama", "1.5b", 2)  # the realistic sizes
    assert parse_synthetic("synthetic:deepseek2-64e") == ("deepseek2", "64e", 0)
    with pytest.raises(UserError, match="unknown architecture"):
        parse_synthetic("synthetic:mamba-tiny")
    with pytest.raises(UserError, match="expected synthetic"):
        parse_synthetic("synthetic:llama")


def test_synthetic_model_is_written_once_and_labelled(tmp_path):
    path, info = resolve_model("synthetic:qwen3moe-tiny", tmp_path)
    assert path.name == "synthetic-qwen3moe-tiny-seed0.gguf" and info.synthetic is True
    assert "SYNTHETIC" in info.source
    mtime = path.stat().st_mtime_ns
    path2, info2 = resolve_model("synthetic:qwen3moe-tiny", tmp_path)
    assert path2 == path and path.stat().st_mtime_ns == mtime and info2.sha256 == info.sha256


def test_user_file_is_hashed_and_checked(tmp_path):
    path, _ = resolve_model("synthetic:llama-tiny", tmp_path)
    _, info = resolve_model(str(path), tmp_path)
    assert info.source == "user file" and info.synthetic is True and len(info.sha256) == 64
    assert resolve_model(None, tmp_path)[0] is None


def test_models_make_cli(tmp_path, capsys):
    out = tmp_path / "moe.gguf"
    assert main(["models", "make", "--arch", "deepseek2", "--size", "tiny", "--seed", "3",
                 "-o", str(out)]) == 0
    line = capsys.readouterr().out
    assert "SYNTHETIC" in line and "deepseek2" in line and "seed 3" in line
    assert is_synthetic_gguf(out)
    first = out.read_bytes()
    assert main(["models", "make", "--arch", "deepseek2", "--size", "tiny", "--seed", "3",
                 "-o", str(out)]) == 0
    assert out.read_bytes() == first  # same seed, same bytes
    assert main(["models", "make", "--arch", "gpt2", "--size", "tiny", "-o", str(out)]) == 2
