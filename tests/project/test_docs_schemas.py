"""docs/schemas.md is each JSON file's version history, checked against the code: the newest entry
under each heading is the version satbench writes now, and no source file keeps a changelog of its
own in comments (one place for the history)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from satbench.analysis.results import RESULTS_SCHEMA_VERSION, VERDICTS_SCHEMA_VERSION
from satbench.capability.report import CAPABILITY_SCHEMA_VERSION
from satbench.records.manifest import MANIFEST_SCHEMA_VERSION
from satbench.saturation.recommendations_file import RECOMMENDATIONS_SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "schemas.md").read_text(encoding="utf-8")


def _entries(heading_start: str) -> list[str]:
    section = PAGE.split(f"\n## {heading_start}", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^- \*\*(\d+\.\d+)\*\*:", section, re.M)


@pytest.mark.parametrize("heading, current", [("run.json", MANIFEST_SCHEMA_VERSION),
                                              ("results.json", RESULTS_SCHEMA_VERSION),
                                              ("verdicts.json", VERDICTS_SCHEMA_VERSION),
                                              ("recommendations.json", RECOMMENDATIONS_SCHEMA_VERSION),
                                              ("capability.json", CAPABILITY_SCHEMA_VERSION)])
def test_the_newest_entry_is_the_version_written_now(heading, current):
    versions = _entries(heading)
    assert versions and versions[0] == current, versions[:3]
    keys = [tuple(map(int, v.split("."))) for v in versions]
    assert keys == sorted(keys, reverse=True)  # newest first, each once
    assert len(set(keys)) == len(keys)


def test_no_source_file_keeps_a_changelog_in_comments():
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "src").rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.match(r"\s*# \d+\.\d+: ", line)]
    assert not found, found
