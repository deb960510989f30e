"""`satbench models make -o`: a file satbench did not write is never replaced unless forced, and a
bad output path is refused before a byte of the model is written."""

from pathlib import Path

import gguf
import pytest

from satbench.cli.main import main
from satbench.gguf import synthetic
from satbench.gguf.synthetic import write_synthetic_gguf
from satbench.gguf.synthetic_meta import is_synthetic_gguf


def real_gguf(path: Path) -> bytes:
    """A small GGUF that satbench did not write (no satbench.* keys)."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("a real model")
    w.add_token_list(["<unk>", "<s>", "</s>", "hello"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path.read_bytes()


def make(out, *extra) -> int:
    return main(["models", "make", "--arch", "llama", "--size", "tiny", "-o", str(out), *extra])


@pytest.fixture
def no_writing(monkeypatch):
    """Fail the test if the model's bytes would be written at all."""
    def boom(*args):
        raise AssertionError("the model was written")

    monkeypatch.setattr(synthetic, "_write_gguf", boom)


@pytest.mark.parametrize("content", ["real gguf", "text"])
def test_make_refuses_to_replace_a_file_it_did_not_write(tmp_path, capsys, no_writing, content):
    out = tmp_path / "model.gguf"
    before = real_gguf(out) if content == "real gguf" else out.write_bytes(b"my notes") and out.read_bytes()
    assert make(out) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not a synthetic model written by satbench" in err
    assert "--force" in err and out.read_bytes() == before


def test_make_replaces_its_own_synthetic_file(tmp_path):
    out = tmp_path / "model.gguf"
    write_synthetic_gguf(out, seed=1)
    first = out.read_bytes()
    assert make(out, "--seed", "2") == 0
    assert out.read_bytes() != first and is_synthetic_gguf(out)


def test_force_replaces_a_file_it_did_not_write(tmp_path, capsys):
    out = tmp_path / "model.gguf"
    real_gguf(out)
    assert main(["models", "make", "--arch", "llama", "--size", "tiny", "-o", str(out), "--force"]) == 0
    assert is_synthetic_gguf(out)


@pytest.mark.parametrize("name, needle", [("", "no output file"), ("dir", "is a directory"),
                                          ("model.bin", "must end in .gguf")])
def test_bad_output_paths_are_refused_before_writing(tmp_path, capsys, no_writing, monkeypatch, name, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dir").mkdir()
    assert make(name) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and needle in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"] and list((tmp_path / "dir").iterdir()) == []
