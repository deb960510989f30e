"""Tests of the synthetic GGUF writer; the load tests run real llama.cpp in a child process."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pydantic
import pytest

from satbench.errors import ModelError
from satbench.gguf import synthetic
from satbench.gguf.synthetic import (
    ARCHS,
    N_VOCAB,
    build_vocab,
    parameter_count,
    suppressed_token_ids,
    write_synthetic_gguf,
)
from satbench.gguf.synthetic_meta import SyntheticModelInfo, is_synthetic_gguf, read_synthetic_metadata

# the sizes small enough to write in every test; 1.5b and 64e are checked in test_shapes.py
ALL_MODELS = [
    (arch, size) for arch in ARCHS for size in ARCHS[arch].sizes
    if parameter_count(arch, size) < 200_000_000
]
# the tiny sizes load in the default run; the larger ones (10-100 MB, ~10 s each) with -m slow
LOADED = [pytest.param(arch, size, marks=[pytest.mark.slow] if size != "tiny" else [])
          for arch, size in ALL_MODELS]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def small_llama(tmp_path_factory: pytest.TempPathFactory) -> SyntheticModelInfo:
    """The Q8_0 "small" llama, written once per module (about a second)."""
    return write_synthetic_gguf(tmp_path_factory.mktemp("small") / "small.gguf", size="small")


# ----------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("arch", list(ARCHS))
def test_same_seed_gives_identical_bytes(tmp_path: Path, arch: str) -> None:
    a = write_synthetic_gguf(tmp_path / "a.gguf", arch=arch, seed=7)
    b = write_synthetic_gguf(tmp_path / "b.gguf", arch=arch, seed=7)
    assert _sha256(a.path) == _sha256(b.path) == a.sha256 == b.sha256
    assert a.path.read_bytes() == b.path.read_bytes()


def test_other_seed_gives_other_bytes(tmp_path: Path) -> None:
    a = write_synthetic_gguf(tmp_path / "a.gguf", seed=0)
    b = write_synthetic_gguf(tmp_path / "b.gguf", seed=1)
    assert a.sha256 != b.sha256
    assert a.file_bytes == b.file_bytes  # same layout, other weights


@pytest.mark.parametrize(("arch", "size"), [m for m in ALL_MODELS if m[1] == "tiny"])
def test_tiny_is_small(tmp_path: Path, arch: str, size: str) -> None:
    """A few MB (how long writing takes: benchmarks/synthetic_write.py)."""
    info = write_synthetic_gguf(tmp_path / "m.gguf", arch=arch, size=size)
    assert 1_000_000 < info.file_bytes < 20_000_000


# ----------------------------------------------------------------------------- info and metadata


def test_info_describes_the_file(tmp_path: Path) -> None:
    info = write_synthetic_gguf(tmp_path / "m.gguf", seed=3)
    assert info.path == tmp_path / "m.gguf"
    assert (info.arch, info.size, info.seed) == ("llama", "tiny", 3)
    assert info.file_bytes == info.path.stat().st_size
    assert info.sha256 == _sha256(info.path)
    reader = gguf.GGUFReader(info.path)
    assert info.n_params == sum(int(t.n_elements) for t in reader.tensors)
    with pytest.raises(pydantic.ValidationError):
        info.seed = 4  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        SyntheticModelInfo(**info.model_dump(), extra=1)


def test_metadata_marks_the_file_synthetic(tmp_path: Path) -> None:
    info = write_synthetic_gguf(tmp_path / "m.gguf", seed=42)
    assert is_synthetic_gguf(info.path)
    assert read_synthetic_metadata(info.path) == {
        "satbench.synthetic": True,
        "satbench.seed": 42,
        "satbench.size": "tiny",
        "general.architecture": "llama",
        "general.name": "satbench-synthetic-llama-tiny",
    }
    field = gguf.GGUFReader(info.path).get_field("satbench.seed")
    assert field is not None and field.types == [gguf.GGUFValueType.UINT32]


def test_plain_gguf_is_not_synthetic(tmp_path: Path) -> None:
    path = tmp_path / "plain.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("not-synthetic")
    writer.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert not is_synthetic_gguf(path)
    assert read_synthetic_metadata(path) is None


@pytest.mark.parametrize("content", [b"", b"hello", b"GGUF\x03\x00\x00\x00\xff"])
def test_unreadable_file_raises_model_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelError):
        is_synthetic_gguf(path)


def test_missing_file_raises_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError):
        is_synthetic_gguf(tmp_path / "nope.gguf")


def test_truncated_synthetic_file_raises_model_error(tmp_path: Path) -> None:
    info = write_synthetic_gguf(tmp_path / "m.gguf")
    """Cut anywhere in the header up to the satbench keys (all the check reads)."""
    data = info.path.read_bytes()
    cut = tmp_path / "cut.gguf"
    for n in (3, 10, 20, 100, data.index(b"satbench.size") + 5, data.index(b"satbench.size") + 20):
        cut.write_bytes(data[:n])
        with pytest.raises(ModelError, match="truncated or corrupt"):
            is_synthetic_gguf(cut)


# ----------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"arch": "gpt2"}, "architecture"),
        ({"size": "huge"}, "size"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
        ({"n_vocab": 100}, "vocabulary"),
        ({"arch": "qwen3moe", "size": "64e"}, "size"),
    ],
)
def test_bad_arguments_raise_model_error(
    tmp_path: Path, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ModelError, match=match):
        write_synthetic_gguf(tmp_path / "m.gguf", **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_missing_directory_raises_model_error(tmp_path: Path) -> None:
    with pytest.raises(ModelError):
        write_synthetic_gguf(tmp_path / "no" / "such" / "m.gguf")


# ----------------------------------------------------------------------------- atomic write


def test_write_replaces_existing_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "m.gguf"
    target.write_bytes(b"old")
    info = write_synthetic_gguf(target)
    assert info.file_bytes > 3 and is_synthetic_gguf(target)
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]


def test_failed_write_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "m.gguf"
    target.write_bytes(b"old")

    def boom(*args: object) -> int:
        raise OSError("disk full")

    monkeypatch.setattr(synthetic, "_write_gguf", boom)
    with pytest.raises(ModelError, match="disk full"):
        write_synthetic_gguf(target)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["m.gguf"]


# ----------------------------------------------------------------------------- vocabulary, weights


def test_vocabulary_is_sentencepiece_with_ascii_pieces() -> None:
    tokens, scores, types = build_vocab()
    assert len(tokens) == len(set(tokens)) == len(scores) == len(types) == N_VOCAB
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert tokens[3:259] == [f"<0x{b:02X}>" for b in range(256)]
    assert set(types[3:259]) == {gguf.TokenType.BYTE}
    assert set(types[259:]) == {gguf.TokenType.NORMAL}
    assert all(t.replace("\u2581", " ").isascii() for t in tokens[259:])
    assert "\u2581the" in tokens


def test_tensors_follow_gguf_tables_and_bias_channel(tmp_path: Path) -> None:
    info = write_synthetic_gguf(tmp_path / "m.gguf")
    reader = gguf.GGUFReader(info.path)
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 3 + 4 * 9
    model_field = reader.get_field("tokenizer.ggml.model")
    assert model_field is not None and model_field.contents() == "llama"
    out = np.asarray(tensors["output.weight"].data, dtype=np.float32)
    embd = np.asarray(tensors["token_embd.weight"].data, dtype=np.float32)
    bad = suppressed_token_ids()
    assert (out[bad, 0] < 0).all() and (out[:, 0] <= 0).all()
    assert np.all(embd[:, 0] == embd[0, 0]) and embd[0, 0] > 0
    for name in ("blk.0.attn_output.weight", "blk.3.ffn_down.weight"):
        assert not np.asarray(tensors[name].data)[0].any()


def test_small_is_q8_0(small_llama: SyntheticModelInfo) -> None:
    reader = gguf.GGUFReader(small_llama.path)
    kinds = {t.name: t.tensor_type for t in reader.tensors}
    assert kinds["blk.11.ffn_up.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert kinds["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32
    assert 20_000_000 < small_llama.file_bytes < 100_000_000
    assert small_llama.n_params > 50_000_000


def test_vocabulary_override_keeps_everything_else(tmp_path: Path) -> None:
    base = write_synthetic_gguf(tmp_path / "a.gguf", seed=2)
    info = write_synthetic_gguf(tmp_path / "b.gguf", seed=2, n_vocab=32_000)
    assert (base.n_vocab, info.n_vocab) == (N_VOCAB, 32_000)
    assert info.n_params == base.n_params + 2 * (32_000 - N_VOCAB) * 256
    again = write_synthetic_gguf(tmp_path / "c.gguf", seed=2, n_vocab=32_000)
    assert again.sha256 == info.sha256  # same arguments, same bytes
    reader = gguf.GGUFReader(info.path)
    tensors = {t.name: t for t in reader.tensors}
    assert tuple(tensors["output.weight"].shape) == (256, 32_000)  # ggml order
    tokens = reader.get_field("tokenizer.ggml.tokens")
    assert tokens is not None and len(tokens.contents()) == 32_000
    name = reader.get_field("general.name")
    assert name is not None and name.contents() == "satbench-synthetic-llama-tiny-vocab32000"
    out = np.asarray(tensors["output.weight"].data, dtype=np.float32)
    assert out.shape == (32_000, 256) and (out[suppressed_token_ids(), 0] < 0).all()
    assert (out[:, 0] <= 0).all() and out[1000:].std() > 0.04
    same = write_synthetic_gguf(tmp_path / "d.gguf", seed=2, n_vocab=N_VOCAB)
    assert same.sha256 == base.sha256  # the size's own vocabulary is no override


def test_pool_stream_wraps_around_with_its_period() -> None:
    pool = synthetic._Pool(seed=1, size=7)
    normals = np.random.default_rng(1).standard_normal(7, dtype=np.float32)
    first = np.concatenate(list(pool.take(3, 1.0)))
    chunks = list(pool.take(20, 0.5))
    assert [c.size for c in chunks] == [7, 7, 6] and pool.pos == 23
    np.testing.assert_array_equal(first, normals[:3].astype(np.float16))
    expect = (normals * np.float32(0.5)).astype(np.float16)[(3 + np.arange(20)) % 7]
    np.testing.assert_array_equal(np.concatenate(chunks), expect)
    out = np.empty((4, 5), dtype=np.float16)
    pool.fill(out, 1.0)
    np.testing.assert_array_equal(out.ravel(), normals.astype(np.float16)[(23 + np.arange(20)) % 7])


def test_models_bigger_than_the_pool_repeat_it_but_keep_the_bias_channel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(synthetic, "POOL_SIZE", 10_007)  # a prime, far below the 2.9 M weights
    info = write_synthetic_gguf(tmp_path / "m.gguf", seed=4)
    tensors = {t.name: t for t in gguf.GGUFReader(info.path).tensors}
    up = np.asarray(tensors["blk.1.ffn_up.weight"].data).ravel()
    assert up.size > 10 * 10_007
    np.testing.assert_array_equal(up[:-10_007], up[10_007:])  # one period of the stream
    rows = np.asarray(tensors["blk.1.ffn_up.weight"].data)
    assert len({r.tobytes() for r in rows}) == len(rows)  # no row repeats within a matrix
    embd = np.asarray(tensors["token_embd.weight"].data, dtype=np.float32)
    out = np.asarray(tensors["output.weight"].data, dtype=np.float32)
    assert np.all(embd[:, 0] == 16.0) and (out[suppressed_token_ids(), 0] == -2.0).all()
    assert not np.asarray(tensors["blk.2.ffn_down.weight"].data)[0].any()
    assert info.sha256 == _sha256(info.path)


def test_sha256_is_hashed_while_writing_and_matches_the_file(
    tmp_path: Path, small_llama: SyntheticModelInfo
) -> None:
    assert small_llama.sha256 == _sha256(small_llama.path)
    assert small_llama.file_bytes % 32 == 0  # tensor data padded to the GGUF alignment


# ----------------------------------------------------------------------------- real llama.cpp

_CHILD = r"""
import json, sys, urllib.request
import xllamacpp

path, prompt = sys.argv[1], json.loads(sys.argv[2])
params = xllamacpp.CommonParams()
params.model.path = path
params.hostnames = ["127.0.0.1"]
params.port = 0
params.n_parallel = 2
params.n_ctx = 1024
params.cpuparams.n_threads = 2
params.cpuparams_batch.n_threads = 2
server = xllamacpp.Server(params)
body = {"prompt": prompt, "n_predict": 16, "ignore_eos": True, "stream": True,
        "cache_prompt": False}
request = urllib.request.Request(
    server.listening_address + "/completion", data=json.dumps(body).encode(),
    headers={"Content-Type": "application/json"})
events = []
with urllib.request.urlopen(request, timeout=30) as response:
    for raw in response:
        line = raw.decode("utf-8").strip()
        if line.startswith("data: "):
            events.append(json.loads(line[len("data: "):]))
print(json.dumps(events))
del server
"""

needs_xllamacpp = pytest.mark.skipif(
    importlib.util.find_spec("xllamacpp") is None, reason="xllamacpp is not installed"
)


def _generate_in_child(path: Path, prompt: object) -> list[dict]:
    """Load ``path`` in a fresh interpreter (a GGML_ASSERT aborts it) and stream 16 tokens."""
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), json.dumps(prompt)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"child exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    events: list[dict] = json.loads(proc.stdout.strip().splitlines()[-1])
    return events


@pytest.mark.integration
@needs_xllamacpp
@pytest.mark.parametrize(("arch", "size"), LOADED)
def test_llama_cpp_loads_and_streams(tmp_path: Path, arch: str, size: str) -> None:
    info = write_synthetic_gguf(tmp_path / f"{arch}-{size}.gguf", arch=arch, size=size, seed=5)
    prompt: object = [1, 262, 300, 400, 500] if arch == "llama" else "Grüße, 世界! the model"
    events = _generate_in_child(info.path, prompt)
    tokens, final = events[:-1], events[-1]
    assert len(tokens) == 16, events
    assert all(len(e["tokens"]) == 1 and not e["stop"] for e in tokens), tokens
    assert all(e["content"].isascii() for e in tokens)
    assert final["stop"] is True
    assert final["stop_type"] == "limit"
    assert final["timings"]["predicted_n"] == 16
    assert final["tokens_predicted"] == 16


@pytest.mark.integration
@needs_xllamacpp
def test_llama_cpp_generates_utf8_from_a_large_vocabulary(tmp_path: Path) -> None:
    """A real-size vocabulary (tiny dims): text prompts tokenize, output is printable ASCII."""
    info = write_synthetic_gguf(tmp_path / "v32k.gguf", seed=9, n_vocab=32_000)
    events = _generate_in_child(info.path, "Grüße, 世界! The model said 42 things.")
    tokens, final = events[:-1], events[-1]
    assert len(tokens) == 16 and final["tokens_predicted"] == 16, events
    ids = [t for e in tokens for t in e["tokens"]]
    assert all(0 <= t < 32_000 and t not in suppressed_token_ids() for t in ids)
    assert any(t >= N_VOCAB for t in ids)  # pieces beyond the small vocabulary do come out
    text = "".join(e["content"] for e in tokens)
    assert text.encode("utf-8").decode("utf-8") == text
    assert all(" " <= c <= "~" or c in "\t\n" for c in text), text
