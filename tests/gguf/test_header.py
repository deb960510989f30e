"""What a GGUF says it is (models/header): architecture, name, parameters, file type, trained context,
experts and the synthetic marker, read from the header alone; a truncated, corrupt or crafted header
is one ModelError, never a traceback or a huge allocation."""

from __future__ import annotations

import contextlib
import random
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

from satbench.cli.main import main
from satbench.errors import ModelError
from satbench.gguf.architectures import described_architecture
from satbench.gguf.files import MAX_ARRAY_ITEMS, MAX_KEYS, MAX_TENSORS
from satbench.gguf.header import ModelHeader, file_type_name, read_model_header
from satbench.gguf.resolve import resolve_model
from satbench.gguf.synthetic import parameter_count, write_synthetic_gguf

# (arch, size) → what its header must say: architecture, file type, trained context, experts, experts used
EXPECTED = {
    ("llama", "tiny"): ("F16", 4096, None, None),
    ("llama", "small"): ("Q8_0", 4096, None, None),
    ("qwen3moe", "tiny"): ("F16", 4096, 8, 2),
    ("qwen3moe", "small"): ("Q8_0", 4096, 16, 2),
    ("deepseek2", "tiny"): ("F16", 4096, 8, 2),
    ("deepseek4", "tiny"): ("F16", 1_048_576, 8, 2),
    ("deepseek4", "small"): ("Q8_0", 1_048_576, 16, 2),
}


def _made(tmp_path: Path, arch: str, size: str) -> Path:
    """A synthetic model written by `satbench models make`, as a user makes one."""
    out = tmp_path / f"{arch}-{size}.gguf"
    assert main(["models", "make", "--arch", arch, "--size", size, "-o", str(out), "--quiet"]) == 0
    return out


def _reference(path: Path) -> dict:
    """The same figures as the gguf package's full reader gives them (it maps the tensor data too)."""
    r = gguf.GGUFReader(path)
    arch = r.get_field("general.architecture").contents()

    def value(key: str):
        field = r.get_field(key)
        return None if field is None else field.contents()

    return {"architecture": arch, "name": value("general.name"),
            "parameter_count": sum(int(t.n_elements) for t in r.tensors),
            "context_length": value(f"{arch}.context_length"), "expert_count": value(f"{arch}.expert_count"),
            "expert_used_count": value(f"{arch}.expert_used_count"),
            "file_type": file_type_name(value("general.file_type")), "synthetic": value("satbench.synthetic")}


@pytest.mark.parametrize("arch, size", list(EXPECTED))
def test_a_synthetic_model_says_what_it_is(tmp_path, arch, size):
    path = _made(tmp_path, arch, size)
    h = read_model_header(path)
    ftype, ctx, experts, used = EXPECTED[arch, size]
    assert h == ModelHeader(architecture=arch, name=f"satbench-synthetic-{arch}-{size}",
                            parameter_count=h.parameter_count, file_type=ftype, context_length=ctx,
                            expert_count=experts, expert_used_count=used, synthetic=True)
    assert vars(h) == _reference(path)
    assert h.parameter_count == parameter_count(arch, size)  # what `models make` says it wrote


def test_resolve_records_the_header_in_model_info(tmp_path):
    path, info = resolve_model("synthetic:deepseek4-tiny", tmp_path)
    assert path is not None and info.architecture == "deepseek4" and info.synthetic is True
    assert (info.file_type, info.context_length, info.expert_count, info.expert_used_count) == \
        ("F16", 1_048_576, 8, 2)
    assert info.name == "satbench-synthetic-deepseek4-tiny" and info.parameter_count > 0
    _, user = resolve_model(str(path), tmp_path)  # the same file named by path: the same description
    assert user.model_dump(exclude={"source"}) == info.model_dump(exclude={"source"})
    _, remote = resolve_model(None, tmp_path)  # a --url lane: no file here, nothing guessed
    assert remote.architecture is None and remote.parameter_count is None and remote.file_type is None


def test_architecture_labels():
    assert described_architecture("deepseek4") == "deepseek4 (DeepSeek V4)"
    assert described_architecture("deepseek2") == "deepseek2 (DeepSeek V2/V3)"
    assert described_architecture("qwen3moe") == "qwen3moe (Qwen3 MoE)"
    assert described_architecture("llama") == "llama" and described_architecture("mamba9") == "mamba9"
    assert described_architecture(None) == "not recorded"


def test_file_type_names():
    assert [file_type_name(v) for v in (0, 1, 7, 15, 32)] == ["F32", "F16", "Q8_0", "Q4_K_M", "BF16"]
    assert file_type_name(15 | 1024) == "Q4_K_M (guessed)" and file_type_name(999) == "file type 999"


def _plain(path: Path, *, file_type: int | None = None, parameter_count: int | None = None,
           endian: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE) -> Path:
    """A small GGUF that satbench did not write, with real tensors (two F16 matrices, one F32 vector)."""
    w = gguf.GGUFWriter(str(path), "gemma3", endianess=endian)
    w.add_name("a plain model")
    w.add_context_length(32768)
    if file_type is not None:
        w.add_file_type(file_type)
    if parameter_count is not None:
        w.add_uint64("general.parameter_count", parameter_count)
    w.add_token_list([f"tok{i}" for i in range(64)])
    w.add_tensor("a.weight", np.zeros((8, 16), dtype=np.float16))  # the writer swaps bytes for BIG
    w.add_tensor("b.weight", np.zeros((4, 16), dtype=np.float16))
    w.add_tensor("n.weight", np.zeros(300, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_a_plain_model_without_file_type_is_guessed_from_its_matrices(tmp_path, endian):
    h = read_model_header(_plain(tmp_path / "p.gguf", endian=endian))
    assert h == ModelHeader(architecture="gemma3", name="a plain model",
                            parameter_count=8 * 16 + 4 * 16 + 300, file_type="F16 (guessed)",
                            context_length=32768, expert_count=None, expert_used_count=None, synthetic=False)


def test_stated_file_type_and_parameter_count_win(tmp_path):
    h = read_model_header(_plain(tmp_path / "p.gguf", file_type=15, parameter_count=270_000_000))
    assert h.file_type == "Q4_K_M" and h.parameter_count == 270_000_000


def _data_start(path: Path) -> int:
    return min(t.data_offset for t in gguf.GGUFReader(path).tensors)


def test_the_tensor_data_is_never_read(tmp_path):
    """A file cut where its tensor data begins reads the same: the reader stops at the header."""
    path = write_synthetic_gguf(tmp_path / "m.gguf", arch="qwen3moe").path
    whole = read_model_header(path)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:_data_start(path)])
    assert read_model_header(cut) == whole


def test_a_truncated_header_is_one_model_error(tmp_path):
    path = write_synthetic_gguf(tmp_path / "m.gguf", arch="deepseek2").path
    data = path.read_bytes()
    end = _data_start(path)
    cut = tmp_path / "cut.gguf"
    for at in sorted({*range(0, 64), *random.Random(3).sample(range(64, end - 64), 150)}):
        cut.write_bytes(data[:at])
        with pytest.raises(ModelError, match=r"cannot read the header of GGUF .*truncated or corrupt"):
            read_model_header(cut)


def _preamble(n_tensors: int, n_keys: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_keys)


def _key(name: str, vtype: int) -> bytes:
    raw = name.encode()
    return struct.pack("<Q", len(raw)) + raw + struct.pack("<I", vtype)


@pytest.mark.parametrize("body, needle", [
    (_preamble(MAX_TENSORS + 1, 0), "tensors, more than"),
    (_preamble(0, MAX_KEYS + 1), "keys, more than"),
    (_preamble(0, 1) + struct.pack("<Q", 1 << 62), "a string of 4611686018427387904 bytes"),
    (_preamble(0, 1) + _key("general.name", 8) + struct.pack("<Q", 1 << 40), "a string of"),
    (_preamble(0, 1) + _key("x.tokens", 9) + struct.pack("<IQ", 8, MAX_ARRAY_ITEMS + 1), "an array of"),
    (_preamble(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<I", 9), "9 dimensions"),
    (_preamble(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQQ", 2, 1 << 40, 1 << 40),
     "overflows 64 bits"),
    (_preamble(0, 1) + _key("x", 77), "unknown GGUF value type 77"),
    (b"GGUF" + struct.pack("<I", 1) + bytes(16), "version 1 is not supported"),
    (b"GGML" + bytes(20), "magic"),
])
def test_a_corrupt_or_crafted_header_is_one_model_error(tmp_path, body, needle):
    path = tmp_path / "bad.gguf"
    path.write_bytes(body + bytes(64))
    with pytest.raises(ModelError, match=r"^cannot read the header of GGUF") as err:
        read_model_header(path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_random_damage_is_a_model_error_or_a_reading(tmp_path):
    """Bytes flipped anywhere in the header: an answer or a ModelError, never another exception."""
    path = write_synthetic_gguf(tmp_path / "m.gguf", arch="deepseek4").path
    data = path.read_bytes()
    end = _data_start(path)
    rng = random.Random(11)
    bad = tmp_path / "bad.gguf"
    for _ in range(200):
        damaged = bytearray(data[:end])
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(4, end)] = rng.randrange(256)
        bad.write_bytes(bytes(damaged))
        with contextlib.suppress(ModelError):
            read_model_header(bad)


def test_a_file_that_is_not_there_is_one_model_error(tmp_path):
    with pytest.raises(ModelError, match="cannot read the header"):
        read_model_header(tmp_path / "missing.gguf")
