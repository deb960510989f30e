"""What a killed model write leaves behind is cleaned on the next write; a file at a synthetic
model's name that satbench did not write is never replaced."""

import os
import time

import pytest

from satbench.errors import ModelError
from satbench.gguf.files import remove_stale_partials
from satbench.gguf.resolve import resolve_model
from satbench.gguf.synthetic import write_synthetic_gguf


def _partial(directory, name, age_s):
    tmp = directory / f".{name}.{int(age_s)}x.tmp"
    tmp.write_bytes(b"GGUF partial")
    old_s = time.time() - age_s
    os.utime(tmp, (old_s, old_s))
    return tmp


def test_stale_partials_go_and_fresh_ones_stay(tmp_path):
    target = tmp_path / "model.gguf"
    stale = _partial(tmp_path, "model.gguf", 3600)
    fresh = _partial(tmp_path, "model.gguf", 5)  # a writer still at work
    other = _partial(tmp_path, "other.gguf", 3600)  # another model's: not this target's
    assert remove_stale_partials(target) == [stale]
    assert not stale.exists() and fresh.exists() and other.exists()


def test_a_synthetic_write_cleans_what_a_killed_write_left(tmp_path):
    target = tmp_path / "m.gguf"
    stale = _partial(tmp_path, "m.gguf", 3600)
    write_synthetic_gguf(target, arch="llama", size="tiny")
    assert target.is_file() and not stale.exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_real_model_at_the_synthetic_name_is_not_replaced(tmp_path):
    real = tmp_path / "synthetic-llama-tiny-seed0.gguf"
    real.write_bytes(b"GGUF" + b"\0" * 64)  # not written by satbench (here: not even a whole header)
    before = real.read_bytes()
    with pytest.raises(ModelError, match="not a synthetic model written by satbench; not replacing"):
        resolve_model("synthetic:llama-tiny", tmp_path)
    assert real.read_bytes() == before


def test_an_older_synthetic_at_the_name_is_rewritten(tmp_path):
    path = tmp_path / "synthetic-llama-tiny-seed0.gguf"
    write_synthetic_gguf(path, arch="llama", size="tiny", seed=5)  # ours, other metadata: replaceable
    resolved, info = resolve_model("synthetic:llama-tiny", tmp_path)
    assert resolved == path.absolute() and info.synthetic
    from satbench.gguf.synthetic_meta import read_synthetic_metadata
    assert read_synthetic_metadata(path)["satbench.seed"] == 0


def test_a_name_with_glob_characters_cleans_its_own_partials_only(tmp_path):
    target = tmp_path / "m[1].gguf"
    mine = _partial(tmp_path, "m[1].gguf", 3600)
    other = _partial(tmp_path, "m1.gguf", 3600)  # what the unescaped pattern .m[1].gguf.* matched
    assert remove_stale_partials(target) == [mine]
    assert other.exists()
