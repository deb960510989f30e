"""`models make` refuses, before a byte is written, a model too large to write or to build."""

from __future__ import annotations

from collections import namedtuple

import pytest

from satbench.cli.main import main
from satbench.errors import ModelError, UserError
from satbench.gguf import synthetic
from satbench.gguf.shapes import MAX_LAYERS, spec_for
from satbench.gguf.synthetic import MAX_SYNTHETIC_BYTES, write_synthetic_gguf
from tests.faults.common import one_error_line

HUGE = {"n_embd": 65536, "n_ff": 1_000_000, "n_layer": 100}


def test_the_reviewers_shape_is_one_line_naming_the_total_and_the_cap(tmp_path, capsys):
    out = tmp_path / "x.gguf"
    argv = ["models", "make", "--arch", "llama", "--size", "tiny", "-o", str(out)]
    argv += [arg for name, value in HUGE.items() for arg in ("--dim", f"{name}={value}")]
    assert main(argv) == UserError.exit_code
    line = one_error_line(capsys.readouterr().err)
    assert "19,665,980,555,264 parameters" in line and "over the cap of 64.0 GiB" in line, line
    assert list(tmp_path.iterdir()) == []


def test_a_layer_count_past_llama_cpps_limit_is_refused_before_the_tensor_list():
    with pytest.raises(ModelError, match=f"n_layer must be at most {MAX_LAYERS}"):
        spec_for("llama", "tiny", overrides={"n_layer": 2**31 - 1})
    spec_for("llama", "tiny", overrides={"n_layer": MAX_LAYERS})  # the limit itself is a shape


def test_the_largest_table_size_is_under_the_cap():
    spec, d = spec_for("deepseek4", "gpu")
    n_bytes = sum(synthetic._nbytes(s, q) for (_, _, s), q in synthetic.file_tensors(spec, d))
    assert 9e9 < n_bytes < MAX_SYNTHETIC_BYTES


def test_too_little_free_disk_is_refused_naming_it(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(synthetic.shutil, "disk_usage", lambda _p: usage(10**6, 10**6 - 1000, 1000))
    with pytest.raises(ModelError, match=rf"would be .* GiB; {tmp_path} has 0\.0 GiB free"):
        write_synthetic_gguf(tmp_path / "m.gguf")
    assert list(tmp_path.iterdir()) == []


def test_a_tensor_larger_than_the_available_memory_is_refused(tmp_path, monkeypatch):
    memory = namedtuple("memory", "available")
    monkeypatch.setattr(synthetic.psutil, "virtual_memory", lambda: memory(1 << 20))
    needs = r"building its largest tensor \([\d,]+ values\) needs .* GiB of memory and 0\.0 GiB is available"
    with pytest.raises(ModelError, match=needs):
        write_synthetic_gguf(tmp_path / "m.gguf")
    assert list(tmp_path.iterdir()) == []


def test_a_model_within_every_bound_is_still_written(tmp_path):
    info = write_synthetic_gguf(tmp_path / "m.gguf")
    assert info.file_bytes == (tmp_path / "m.gguf").stat().st_size > 0
