"""The committed CPU evidence bundles verify with this satbench: a later minor schema (new fields,
reworded definitions) must not make an untouched bundle fail (results 3.1 and recommendations 1.7
added fields with values, which an older file cannot hold)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satbench.pipeline import verify
from tests.bundles import unpacked_copy

EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"
BUNDLE = EVIDENCE / "cpu-2core-2026-11-30" / "run"
BUNDLES_2026_12_01 = ["run", "v4-vs-deepseek2/run", "v4-gpu/run"]


def _unpacked(bundle: Path, tmp_path: Path) -> Path:
    """A copy with every gzipped raw file restored (SHA256SUMS holds their uncompressed hashes)."""
    return unpacked_copy(bundle, tmp_path / "run")


def test_the_committed_cpu_bundle_verifies(tmp_path):
    v = verify(_unpacked(BUNDLE, tmp_path))
    assert v.ok, (v.modified, v.missing, v.inconsistent, v.unlisted)
    assert not v.modified and not v.inconsistent


@pytest.mark.parametrize("name", BUNDLES_2026_12_01)
def test_the_dense_and_v4_bundles_verify_and_hold_their_memory(tmp_path, name):
    copy = _unpacked(EVIDENCE / "cpu-2core-2026-12-01" / name, tmp_path)
    v = verify(copy)
    assert v.ok and not v.modified and not v.inconsistent, (v.modified, v.missing, v.inconsistent)
    text = (copy / "EVIDENCE.md").read_text()
    assert "## Memory per slot" in text and "slots that fit" in text and "SYNTHETIC" in text


@pytest.mark.parametrize("name", ["run", "cache-ram-sweep/run", "cache-ram/run-default"])
def test_the_h200_bundles_verify(tmp_path, name):
    """The first GPU run: its raw files as the device wrote them, derived again by this satbench."""
    copy = _unpacked(EVIDENCE / "h200-2026-12-04" / name, tmp_path)
    v = verify(copy)
    assert v.ok and not v.modified and not v.inconsistent, (v.modified, v.missing, v.inconsistent)
    assert "NVIDIA H200" in (copy / "EVIDENCE.md").read_text()


@pytest.mark.parametrize("name", ["run-1", "run-2"])
def test_the_h200_runs_without_the_ram_cache_verify(tmp_path, name):
    """The second GPU session: lanes with --cache-ram 0, as the device derived them."""
    copy = _unpacked(EVIDENCE / "h200-2026-12-04-cache-ram-0" / name / "run", tmp_path)
    v = verify(copy)
    assert v.ok and not v.modified and not v.inconsistent, (v.modified, v.missing, v.inconsistent)
    lanes = json.loads((copy / "run.json").read_text())["config"]["lanes"]
    assert all(lane["server"]["extra_args"] == ["--cache-ram", "0"] for lane in lanes)


@pytest.mark.parametrize("name", ["run", "v4/run", "levers/run"])
def test_the_chat_bundles_verify_and_show_what_the_cache_did(tmp_path, name):
    """Random prompts against conversations (docs/workloads.md): each chat lane's levels carry cache
    figures, every conversation found its history below the slot count, and fewer did past it."""
    copy = _unpacked(EVIDENCE / "cpu-2core-2026-12-04-chat" / name, tmp_path)
    v = verify(copy)
    assert v.ok and not v.modified and not v.inconsistent, (v.modified, v.missing, v.inconsistent)
    results = json.loads((copy / "results.json").read_text())
    slots = {lane["lane"]: lane["memory"]["slots"] for lane in results["lanes"]}
    chat = [lane for lane in results["lanes"] if lane["workload"].get("chat")
            and lane["server_params"].get("extra_args") != ["--slot-prompt-similarity", "0"]]
    assert chat and "cache hit/found" in (copy / "EVIDENCE.md").read_text()
    for lane in chat:
        found = {lv["concurrency"]: lv["cache"]["history_found_rate"] for lv in lane["levels"]}
        assert all(rate == 1.0 for n, rate in found.items() if n <= slots[lane["lane"]]), found
        assert found[max(found)] < 0.5, found
