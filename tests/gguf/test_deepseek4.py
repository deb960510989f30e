"""The synthetic DeepSeek V4 (deepseek4): its GGUF layout, determinism, sizes and refused shapes.

The load tests for tiny and small (real llama.cpp streams from them) are in test_synthetic.py,
which covers every table entry under 200 M parameters.
"""

from __future__ import annotations

import re
from math import prod
from pathlib import Path

import gguf
import numpy as np
import pytest

from satbench.cli.main import main
from satbench.errors import ModelError
from satbench.gguf import deepseek4
from satbench.gguf.resolve import resolve_synthetic
from satbench.gguf.shapes import parameter_count, parse_overrides, spec_for, tensor_list, tensor_name
from satbench.gguf.synthetic import _file_type, _nbytes, write_synthetic_gguf
from satbench.gguf.synthetic_meta import read_synthetic_metadata


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> gguf.GGUFReader:
    info = write_synthetic_gguf(tmp_path_factory.mktemp("v4") / "v4.gguf", arch="deepseek4", seed=3)
    return gguf.GGUFReader(info.path)


def _field(reader: gguf.GGUFReader, key: str) -> object:
    field = reader.get_field(key)
    assert field is not None, key
    return field.contents()


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    a = write_synthetic_gguf(tmp_path / "a.gguf", arch="deepseek4", size="small", seed=11)
    b = write_synthetic_gguf(tmp_path / "b.gguf", arch="deepseek4", size="small", seed=11)
    c = write_synthetic_gguf(tmp_path / "c.gguf", arch="deepseek4", size="small", seed=12)
    assert a.path.read_bytes() == b.path.read_bytes() and a.sha256 == b.sha256
    assert c.sha256 != a.sha256 and c.file_bytes == a.file_bytes
    assert read_synthetic_metadata(a.path) == {
        "satbench.synthetic": True, "satbench.seed": 11, "satbench.size": "small",
        "general.architecture": "deepseek4", "general.name": "satbench-synthetic-deepseek4-small",
    }
    assert 80_000_000 < a.file_bytes < 130_000_000  # "about 100 MB", Q8_0


def test_keys_have_the_types_llama_cpp_checks(tiny: gguf.GGUFReader) -> None:
    d = deepseek4.SPEC.sizes["tiny"]
    assert _field(tiny, "general.architecture") == "deepseek4"
    u32 = gguf.GGUFValueType.UINT32
    for key in ("attention.head_count", "attention.indexer.key_length", "hash_layer_count",
                "expert_gating_func", "hyper_connection.count", "attention.output_group_count",
                "expert_shared_count"):
        field = tiny.get_field(f"deepseek4.{key}")
        assert field is not None and field.types == [u32], key
    assert _field(tiny, "deepseek4.expert_gating_func") == 4  # sqrt-softplus: the only scoring V4 loads
    assert _field(tiny, "deepseek4.context_length") == 1_048_576  # V4-Flash's: no slot is capped below it
    ratios = _field(tiny, "deepseek4.attention.compress_ratios")
    assert list(ratios) == list(d.compress_ratios)  # type: ignore[call-overload]
    assert len(_field(tiny, "deepseek4.swiglu_clamp_exp")) == d.n_layer  # type: ignore[arg-type]
    scale = tiny.get_field("deepseek4.expert_weights_scale")
    assert scale is not None and scale.types == [gguf.GGUFValueType.FLOAT32]


def test_tensors_follow_llama_cpps_loader(tiny: gguf.GGUFReader) -> None:
    d = deepseek4.SPEC.sizes["tiny"]
    t = {x.name: x for x in tiny.tensors}
    e, hd, h = d.n_embd, d.head_dim, d.n_head
    # ggml ne order, as load_arch_tensors asks for them
    assert tuple(t["blk.0.attn_kv.weight"].shape) == (e, hd)
    assert tuple(t["blk.0.attn_q_b.weight"].shape) == (d.q_lora, h * hd)
    out_a = (h * hd // d.n_out_group, d.out_lora * d.n_out_group)
    assert tuple(t["blk.0.attn_output_a.weight"].shape) == out_a
    assert tuple(t["blk.0.hc_attn_fn.weight"].shape) == (4 * e, 24)
    assert tuple(t["output_hc_fn.weight"].shape) == (4 * e, 4)
    ratio4 = d.compress_ratios.index(4)
    ratio128 = d.compress_ratios.index(128)
    assert tuple(t[f"blk.{ratio4}.attn_compressor_kv.weight"].shape) == (e, 2 * hd)
    assert tuple(t[f"blk.{ratio128}.attn_compressor_ape.weight"].shape) == (hd, 128)
    assert f"blk.{ratio4}.indexer.proj.weight" in t and f"blk.{ratio128}.indexer.proj.weight" not in t
    assert "blk.0.attn_compressor_kv.weight" not in t  # ratio 0: the raw window only
    # hash-routed layers carry a token -> experts table (I32), the others a score bias
    assert t["blk.0.ffn_gate_tid2eid.weight"].tensor_type == gguf.GGMLQuantizationType.I32
    assert "blk.0.exp_probs_b.bias" not in t and f"blk.{d.n_hash_layer}.exp_probs_b.bias" in t
    ids = np.asarray(t["blk.0.ffn_gate_tid2eid.weight"].data).reshape(d.n_vocab, d.n_expert_used)
    assert ids.min() >= 0 and ids.max() < d.n_expert
    assert all(len(set(row)) == d.n_expert_used for row in ids.tolist())
    assert len(set(ids[:, 0].tolist())) == d.n_expert  # every expert gets tokens
    assert t["blk.1.hc_ffn_fn.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    # the bias channel: no residual writer touches dimension 0 (random output stays ASCII)
    for name in ("blk.2.attn_output_b.weight", "blk.2.ffn_down_shexp.weight"):
        assert not np.asarray(t[name].data, dtype=np.float32)[0].any(), name


def test_the_gpu_size_is_v4_flash_shaped_and_fits_the_h200_machine() -> None:
    spec, d = spec_for("deepseek4", "gpu")
    assert isinstance(d, deepseek4.V4Dims)
    attention = (d.head_dim, d.n_head, d.rope_dim, d.q_lora, d.n_out_group, d.out_lora)
    assert attention == (512, 64, 64, 1024, 8, 1024)
    assert (d.n_expert_used, d.n_expert_shared, d.n_hash_layer, d.n_vocab, d.n_swa) == (6, 1, 3, 129_280, 128)
    assert (d.n_indexer_head, d.indexer_key_len, d.indexer_top_k) == (64, 128, 512)
    assert {4, 128} <= set(d.compress_ratios) and d.n_expert >= 32 and not d.quantized
    n = parameter_count("deepseek4", "gpu")
    stated = re.search(r"([\d,]+) parameters, ([\d.]+) GB in F16", Path(deepseek4.__file__).read_text())
    assert stated is not None and int(stated[1].replace(",", "")) == n
    size = sum(_nbytes(s, _file_type(k, s, d)) for k, _, s in tensor_list(spec, d))
    assert 5e9 < size < 15e9 and abs(size / 1e9 - float(stated[2])) < 0.05


@pytest.mark.parametrize(("dims", "rule"), [
    (["compress_ratios=0,128,128,0"], "at least one layer must have compress ratio 4"),
    (["indexer_key_len=128"], "head_dim (128) must differ from indexer_key_len"),
    (["indexer_key_len=96"], "indexer_key_len (96) must be a positive multiple of 64"),
    (["rope_dim=128", "head_dim=256"], "indexer_key_len (64) must be at least rope_dim (128)"),
    (["n_out_group=3"], "n_out_group (3) must divide n_head (4)"),
    (["hc_count=3"], "hc_count must be 4"),
    (["compress_ratios=0,4,8,0"], "each must be 0, 4 or 128"),
    (["compress_ratios=0,4,128"], "compress_ratios has 3 entries for 4 layers"),
])
def test_a_shape_llama_cpp_crashes_on_is_refused_in_one_line_before_writing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], dims: list[str], rule: str) -> None:
    out = tmp_path / "m.gguf"
    argv = ["models", "make", "--arch", "deepseek4", "--size", "tiny", "-o", str(out)]
    assert main(argv + [x for d in dims for x in ("--dim", d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("satbench: error: deepseek4 shape refused: ")
    assert rule in err
    assert list(tmp_path.iterdir()) == []


def test_an_allowed_override_is_written_and_recorded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.gguf"
    assert main(["models", "make", "--arch", "deepseek4", "--size", "tiny", "--dim", "head_dim=256",
                 "--dim", "compress_ratios=4,4,128,0", "-o", str(out)]) == 0
    assert "dimensions head_dim=256,compress_ratios=4:4:128:0" in capsys.readouterr().out
    meta = read_synthetic_metadata(out)
    assert meta is not None and meta["satbench.dims"] == "head_dim=256,compress_ratios=4:4:128:0"
    assert meta["general.name"] == "satbench-synthetic-deepseek4-tiny-dims"
    tensors = {t.name: t for t in gguf.GGUFReader(out).tensors}
    assert tuple(tensors["blk.0.attn_kv.weight"].shape) == (256, 256)
    assert "blk.0.indexer.proj.weight" in tensors
    # a lane's synthetic:deepseek4-tiny is the table's shape: a variant under its name is not reused
    lane_path = tmp_path / "synthetic-deepseek4-tiny-seed0.gguf"
    out.rename(lane_path)
    assert resolve_synthetic("synthetic:deepseek4-tiny", tmp_path) == lane_path
    rewritten = read_synthetic_metadata(lane_path)
    assert rewritten is not None and rewritten["general.name"] == "satbench-synthetic-deepseek4-tiny"


@pytest.mark.parametrize(("pairs", "match"), [
    (["head_dim"], "expected NAME=INTEGER"), (["head_dim=x"], "expected NAME=INTEGER"), (["=4"], "expected"),
])
def test_malformed_overrides_are_refused(pairs: list[str], match: str) -> None:
    with pytest.raises(ModelError, match=match):
        parse_overrides(pairs)


@pytest.mark.parametrize(("arch", "overrides", "match"), [
    ("deepseek4", {"n_dense_lead": 1}, "no dimension 'n_dense_lead'"),  # V4 does not read it: not ignored
    ("llama", {"n_expert": 4}, "no dimension 'n_expert'"),
    ("deepseek4", {"head_dim": (4, 4)}, "must be an integer"),
    ("deepseek4", {"n_layer": 0}, "n_layer must be at least 1"),
    ("deepseek4", {"n_vocab": 10}, "vocabulary"),
])
def test_overrides_name_real_dimensions(arch: str, overrides: dict, match: str) -> None:
    with pytest.raises(ModelError, match=match):
        spec_for(arch, "tiny", overrides=overrides)


def test_a_single_value_for_a_list_dimension_is_a_list() -> None:
    _, d = spec_for("deepseek4", "tiny", overrides={"n_layer": 1, "compress_ratios": 4})
    assert isinstance(d, deepseek4.V4Dims) and d.compress_ratios == (4,)
    spec = deepseek4.SPEC
    names = [tensor_name(k, b) for k, b, _ in tensor_list(spec, d)]
    assert "blk.0.indexer.proj.weight" in names and sum(prod(s) for _, _, s in tensor_list(spec, d)) > 0


@pytest.mark.parametrize(("arch", "overrides", "match"), [
    ("llama", {"n_head_kv": 0}, "n_head_kv must be at least 1"),
    ("llama", {"n_head_kv": 3}, "n_head_kv \\(3\\) must divide n_head \\(4\\)"),
    ("qwen3moe", {"n_expert_used": 9}, "n_expert_used \\(9\\) must be 1 to n_expert \\(8\\)"),
    ("deepseek2", {"n_dense_lead": 4}, "must leave a MoE layer"),
    ("deepseek4", {"q_lora": 0}, "q_lora, out_lora, n_ff_exp, n_indexer_head and head_dim must be at"),
    ("deepseek4", {"hc_sinkhorn_iters": 2**32}, "an integer 0 to 2,147,483,647"),
])
def test_every_architecture_refuses_shapes_it_cannot_load(arch: str, overrides: dict, match: str) -> None:
    with pytest.raises(ModelError, match=match):
        spec_for(arch, "tiny", overrides=overrides)
