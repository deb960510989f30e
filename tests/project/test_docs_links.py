"""The README is a quickstart that links every page of docs/, and no link in them is dead.

Every relative link in README.md and docs/*.md names a file of the repository, and an anchor, when
given, names a heading of that file by GitHub's rule (lowercase; spaces to `-`; punctuation other
than `-` and `_` dropped; a repeated heading gets `-1`, `-2`, …). Links outside fenced code blocks
count. No link leaves the repository (a clone holds nothing outside it), and no source file or
page cites the team's own notes (`DESIGN.md`, `../shared`): what a user needs is in docs/.
README.md is at most 200 lines.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 200
OUTSIDE: set[str] = set()  # links out of the repository, relative to the repository root: none

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def _prose(path: Path) -> str:
    """The file's text without its fenced code blocks (a `#` comment there is no heading)."""
    return _FENCE.sub("", path.read_text(encoding="utf-8"))


def _slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in _HEADING.findall(_prose(path)):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def links(path: Path) -> list[str]:
    """The relative links of a Markdown file (no scheme, no mail address)."""
    found = _LINK.findall(_prose(path))
    return [t for t in found if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


def _target(source: str, target: str) -> Path:
    """The file a link of `source` names (the source itself for a bare #anchor)."""
    path_part = target.partition("#")[0]
    return (ROOT / source).parent.joinpath(path_part).resolve() if path_part else ROOT / source


def _all_links() -> list[tuple[str, str]]:
    return [(str(p.relative_to(ROOT)), t) for p in [README, *DOCS] for t in links(p)]


def _cases() -> list[tuple[str, str]]:
    return [(s, t) for s, t in _all_links() if _target(s, t).is_relative_to(ROOT)]


def test_a_link_out_of_the_repository_is_a_known_one() -> None:
    targets = [_target(s, t) for s, t in _all_links()]
    out = {os.path.relpath(f, ROOT) for f in targets if not f.is_relative_to(ROOT)}
    assert out <= OUTSIDE, f"links out of the repository not in OUTSIDE: {sorted(out - OUTSIDE)}"


def test_the_slug_rule() -> None:
    assert _slug("When things go wrong: faults, Ctrl-C and `--resume`") == (
        "when-things-go-wrong-faults-ctrl-c-and---resume")
    assert _slug("How long it takes (`benchmarks/time_to_answer.py`)") == (
        "how-long-it-takes-benchmarkstime_to_answerpy")


def test_the_pages_have_links_to_check() -> None:
    assert len(_cases()) >= 20


@pytest.mark.parametrize("source,target", _cases())
def test_each_link_names_a_file_and_a_heading(source: str, target: str) -> None:
    anchor = target.partition("#")[2]
    file = _target(source, target)
    assert file.exists(), f"{source}: {target} names no file"
    if anchor:
        assert file.suffix == ".md", f"{source}: {target} has an anchor into a file that is not Markdown"
        assert anchor in anchors(file), f"{source}: {target}: no heading gives #{anchor}"


def test_the_readme_is_a_quickstart() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES})"


def test_the_readme_links_every_doc() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README) if t.partition("#")[0]}
    missing = [p.name for p in DOCS if p.resolve() not in linked]
    assert not missing, f"README.md links no page {missing}"


def test_no_source_file_or_page_cites_the_team_s_own_notes():
    """src cited "DESIGN.md §N" 29 times, a file a clone does not hold: a contract is stated in the
    docstring itself or in docs/."""
    cited = [f"{p.relative_to(ROOT)}:{n}" for p in [*sorted((ROOT / "src").rglob("*.py")), README, *DOCS]
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if "DESIGN.md" in line or "../shared" in line]
    assert not cited, cited
