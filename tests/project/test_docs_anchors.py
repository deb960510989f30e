"""Every `docs/<page>.md#anchor` cited in src/, README.md or docs/ names a heading of that page, and
the README and docs/ link nowhere outside the repository.

Source docstrings and comments cite a definition by its section (`docs/definitions.md#knee`); a
heading renamed or removed would leave them pointing nowhere, so each citation's anchor must be one
GitHub gives a heading of the page (the slug rule of test_docs_links: lowercase, spaces to `-`,
punctuation other than `-` and `_` dropped, a repeated heading `-1`, `-2`, …). The checker is run
over a made-up citation too, so it is seen to fail. Outside code (fenced blocks and inline code
spans), README.md and docs/*.md carry no http(s) address at all (EXTERNAL, the allowed ones, is
empty): a clone holds everything a reader needs.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.project.test_docs_links import DOCS, README, ROOT, _prose, _slug, anchors

SOURCES = sorted((ROOT / "src").rglob("*.py"))
DEFINITIONS = ROOT / "docs" / "definitions.md"
EXTERNAL: set[str] = set()  # http(s) addresses README.md and docs/ may link to: none
MIN_SRC_CITATIONS = 20  # src cites the definitions by section at least this often

_CITATION = re.compile(r"\bdocs/([A-Za-z0-9_.-]+\.md)#([\w-]*[\w])")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_ADDRESS = re.compile(r"https?://[^\s)>\]`'\"]+", re.I)


def citations(text: str) -> list[tuple[str, str]]:
    """The (page, anchor) pairs `docs/<page>.md#anchor` cited in `text`."""
    return _CITATION.findall(text)


def dangling(text: str, where: str) -> list[str]:
    """The citations in `text` whose page is not in docs/ or has no heading giving the anchor."""
    out = []
    for page, anchor in citations(text):
        path = ROOT / "docs" / page
        if not path.is_file():
            out.append(f"{where}: docs/{page}#{anchor}: no such page")
        elif anchor not in anchors(path):
            out.append(f"{where}: docs/{page}#{anchor}: no heading gives #{anchor}")
    return out


def _cited_in() -> list[Path]:
    return [*SOURCES, README, *DOCS]


def test_every_cited_anchor_is_a_heading() -> None:
    found = [m for p in _cited_in() for m in dangling(p.read_text(encoding="utf-8"),
                                                      str(p.relative_to(ROOT)))]
    assert not found, "\n".join(found)


def test_the_checker_fails_on_a_made_up_anchor() -> None:
    text = ("see docs/definitions.md#knee and docs/definitions.md#no-such-definition, "
            "docs/no-such-page.md#knee")
    assert citations(text) == [("definitions.md", "knee"), ("definitions.md", "no-such-definition"),
                               ("no-such-page.md", "knee")]
    assert dangling(text, "x") == ["x: docs/definitions.md#no-such-definition: no heading gives "
                                   "#no-such-definition", "x: docs/no-such-page.md#knee: no such page"]
    assert dangling("docs/definitions.md#steady-window.", "x") == []  # a full stop ends a citation


def test_src_cites_the_definitions_by_section() -> None:
    cited = [a for p in SOURCES for page, a in citations(p.read_text(encoding="utf-8"))
             if page == "definitions.md"]
    assert len(cited) >= MIN_SRC_CITATIONS, f"{len(cited)} citations of docs/definitions.md in src"


def test_each_definition_has_its_own_heading() -> None:
    heads = re.findall(r"^### (.+)$", _prose(DEFINITIONS), re.M)
    slugs = anchors(DEFINITIONS)
    assert len(heads) >= 40 and len({_slug(h) for h in heads}) == len(heads), "a repeated definition"
    for needed in ("steady-window", "throughput", "ttft", "queue-time", "occupancy", "percentile-ci",
                   "mean-over-repetitions", "knee", "usl", "slo-bound", "verdict",
                   "recommended-concurrency", "range-between-a-and-b", "undetermined", "refusals"):
        assert needed in slugs, needed


def _addresses(path: Path) -> list[str]:
    """http(s) addresses in the page's prose: outside fenced blocks and inline code spans."""
    return _ADDRESS.findall(_CODE_SPAN.sub("", _prose(path)))


def test_the_readme_and_docs_link_nowhere_outside_the_repository() -> None:
    found = {f"{p.relative_to(ROOT)}: {a}" for p in [README, *DOCS] for a in _addresses(p)
             if a not in EXTERNAL}
    assert not found, sorted(found)


def test_an_address_in_prose_is_found() -> None:
    text = "a [link](https://example.org/x) and `http://in.code/span` and <http://auto.link>"
    assert _ADDRESS.findall(_CODE_SPAN.sub("", text)) == ["https://example.org/x", "http://auto.link"]
