"""The synthetic check reads the GGUF header only: the same answer as gguf.GGUFReader, without
decoding (or, for a synthetic file, even reading) the vocabulary."""

from pathlib import Path

import gguf
import pytest

from satbench.errors import ModelError
from satbench.gguf import files
from satbench.gguf.synthetic import write_synthetic_gguf
from satbench.gguf.synthetic_meta import read_synthetic_metadata

KEYS = ("satbench.synthetic", "satbench.seed", "satbench.size", "general.architecture", "general.name")
BIG_VOCAB = 262_144


def reference(path: Path) -> dict | None:
    """What read_synthetic_metadata answered when it parsed the whole file with gguf.GGUFReader."""
    reader = gguf.GGUFReader(path)
    field = reader.get_field("satbench.synthetic")
    if field is None or not field.contents():
        return None
    return {k: f.contents() for k in KEYS if (f := reader.get_field(k)) is not None}


def header_only(path: Path, synthetic: bool | None, n_tokens: int = 16,
                endian: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE) -> Path:
    """A GGUF with no tensors: the keys a synthetic model starts with (or none), then arrays of
    every kind, the vocabulary last."""
    w = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    w.add_name("header only")
    if synthetic is not None:
        w.add_bool("satbench.synthetic", synthetic)
        w.add_uint32("satbench.seed", 5)
        w.add_string("satbench.size", "tiny")
    w.add_context_length(4096)
    w.add_float32("x.f32", 0.5)
    w.add_int64("x.i64", -3)
    w.add_float64("x.f64", 1.25)
    w.add_array("x.ints", [1, 2, 3])
    w.add_array("x.floats", [0.5, 1.5])
    w.add_array("x.bools", [True, False])
    w.add_array("x.nested", [[1, 2], [3]])
    w.add_token_list([f"tok{i}" for i in range(n_tokens)])
    w.add_token_scores([0.0] * n_tokens)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return path


@pytest.mark.parametrize("arch", ["llama", "qwen3moe", "deepseek2"])
@pytest.mark.parametrize("seed", [0, 7])
def test_same_answer_as_the_full_reader_on_synthetic_files(tmp_path, arch, seed):
    path = write_synthetic_gguf(tmp_path / "m.gguf", arch=arch, seed=seed).path
    assert read_synthetic_metadata(path) == reference(path) is not None
    other = write_synthetic_gguf(tmp_path / "v.gguf", arch=arch, seed=seed, n_vocab=600).path
    assert read_synthetic_metadata(other) == reference(other)


@pytest.mark.parametrize("synthetic", [None, False, True])
@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_same_answer_as_the_full_reader_on_other_files(tmp_path, synthetic, endian):
    path = header_only(tmp_path / "h.gguf", synthetic, endian=endian)
    assert read_synthetic_metadata(path) == reference(path)
    assert (read_synthetic_metadata(path) is not None) is bool(synthetic)


def test_a_file_that_is_not_gguf_is_refused_in_one_line(tmp_path):
    path = tmp_path / "notes.gguf"
    path.write_bytes(b"hello world, not a model at all")
    with pytest.raises(ModelError, match=r"cannot read GGUF .*truncated or corrupt"):
        read_synthetic_metadata(path)


def test_a_corrupt_length_is_refused_not_allocated(tmp_path):
    path = header_only(tmp_path / "h.gguf", True)
    data = bytearray(path.read_bytes())
    i = data.index(b"general.name")
    data[i - 8:i] = (2**62).to_bytes(8, "little")  # the key's length
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="truncated or corrupt"):
        read_synthetic_metadata(path)


def test_the_vocabulary_of_a_synthetic_file_is_not_read(tmp_path, monkeypatch):
    """The satbench keys come before the vocabulary, and the check stops there: it reads a few
    hundred bytes of a file whose 262,144-token vocabulary is megabytes, and it answers even when
    the file is cut inside the vocabulary (the full reader fails there)."""
    path = header_only(tmp_path / "big.gguf", True, n_tokens=BIG_VOCAB)
    requested = []
    real_open = open

    class Counting:
        def __init__(self, fh):
            self.fh = fh

        def read(self, n=-1):
            data = self.fh.read(n)
            requested.append(len(data))
            return data

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr(files, "open", lambda *a, **k: Counting(real_open(*a, **k)), raising=False)
    meta = read_synthetic_metadata(path)
    assert meta == {"satbench.synthetic": True, "satbench.seed": 5, "satbench.size": "tiny",
                    "general.architecture": "llama", "general.name": "header only"}
    assert path.stat().st_size > 2_000_000 and sum(requested) < 4096
    monkeypatch.undo()

    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:1_000_000])
    assert read_synthetic_metadata(cut) == meta
    with pytest.raises((LookupError, ValueError)):  # the old check (the full reader) failed on it
        reference(cut)


def test_a_non_synthetic_file_with_a_large_vocabulary_is_walked_without_decoding(tmp_path):
    """No satbench keys: the whole key-value section is walked, the string lengths only."""
    path = header_only(tmp_path / "big.gguf", None, n_tokens=BIG_VOCAB)
    assert read_synthetic_metadata(path) is None
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:1_000_000])
    with pytest.raises(ModelError, match="truncated or corrupt"):
        read_synthetic_metadata(cut)


def test_resolving_a_synthetic_spec_reads_its_header_once(tmp_path, monkeypatch):
    from satbench.gguf import resolve

    resolve.resolve_model("synthetic:llama-tiny", tmp_path)
    calls = []
    real = resolve.read_synthetic_metadata
    monkeypatch.setattr(resolve, "read_synthetic_metadata", lambda p: calls.append(p) or real(p))
    _, info = resolve.resolve_model("synthetic:llama-tiny", tmp_path)
    assert info.synthetic is True and len(calls) == 1


def _raw_gguf(path: Path, version: int, kv_bytes: bytes, n_kv: int) -> Path:
    import struct
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", version, 0, n_kv) + kv_bytes)
    return path


def test_arrays_nested_past_any_real_file_are_refused_in_one_line(tmp_path):
    """3,000 nested arrays (36 KB) used to exhaust the stack: a traceback, not the one-line error."""
    import struct
    payload = b"".join(struct.pack("<IQ", 9, 1) for _ in range(3000)) + struct.pack("<IQ", 4, 0)
    key = struct.pack("<Q", 1) + b"a" + struct.pack("<I", 9)
    with pytest.raises(ModelError, match="nested more than"):
        files.read_gguf_keys(_raw_gguf(tmp_path / "nested.gguf", 3, key + payload, 1), frozenset({"x"}))


def test_a_gguf_version_other_than_2_or_3_is_named(tmp_path):
    with pytest.raises(ModelError, match="GGUF version 1 is not supported"):
        files.read_gguf_keys(_raw_gguf(tmp_path / "v1.gguf", 1, b"", 0), frozenset({"x"}))
