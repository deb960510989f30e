"""The committed CPU evidence bundle verifies with this satbench: a later minor schema (new fields,
reworded definitions) must not make an untouched bundle fail (results 3.1 and recommendations 1.7
added fields with values, which an older file cannot hold)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from satbench.report.integrity import verify

BUNDLE = Path(__file__).resolve().parents[2] / "evidence" / "cpu-2core-2026-11-30" / "run"


def test_the_committed_cpu_bundle_verifies(tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(BUNDLE, copy)
    packed = copy / "server_samples.jsonl.gz"
    (copy / "server_samples.jsonl").write_bytes(gzip.decompress(packed.read_bytes()))
    packed.unlink()
    v = verify(copy)
    assert v.ok, (v.modified, v.missing, v.inconsistent, v.unlisted)
    assert not v.modified and not v.inconsistent
    assert any(o.startswith("recommendations.json: schema") for o in v.older_schema), v.older_schema
