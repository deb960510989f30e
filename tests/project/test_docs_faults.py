"""docs/faults.md states satbench's limits: every figure it gives for a named constant is that constant."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from satbench.analysis import results
from satbench.cli import lanefile
from satbench.config import limits
from satbench.config import ranges as config
from satbench.load import liveness
from satbench.records import events, manifest
from satbench.server import server_args

DOC = Path(__file__).resolve().parents[2] / "docs" / "faults.md"
SECTIONS = {"What a server may send": (limits, liveness),
            "What a user may give": (config, lanefile, server_args),
            "What a run directory may hold": (limits, events, manifest, results)}
UNITS = {"MiB": 2**20, "KiB": 2**10}


def _sections() -> dict[str, str]:
    parts = re.split(r"^## ", DOC.read_text(encoding="utf-8"), flags=re.M)
    return {p.splitlines()[0]: p for p in parts[1:]}


def _value(text: str) -> float:
    """The figure a cell or phrase gives: a size (1 MiB), else the largest number in it."""
    size = re.search(r"([\d,]+) (MiB|KiB)", text)
    if size:
        return int(size.group(1).replace(",", "")) * UNITS[size.group(2)]
    numbers = [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", text)]
    assert numbers, f"no figure in {text!r}"
    return max(numbers)


def _constant(name: str, modules: tuple) -> float:
    for module in modules:
        if hasattr(module, name):
            return getattr(module, name)
    raise AssertionError(f"docs/faults.md names {name}, which no module of its section defines")


def _stated() -> list[tuple[str, str, tuple, str]]:
    out = []
    for title, modules in SECTIONS.items():
        text = _sections()[title]
        for row in re.findall(r"^\|[^|\n]*\| `([A-Z_]+)` \|([^|\n]*)\|", text, flags=re.M):
            out.append((title, row[0], modules, row[1]))
        for name, figure in re.findall(r"`([A-Z_]+)` = ([\d,]+(?: MiB| KiB)?)", text):
            out.append((title, name, modules, figure))
    return out


def test_the_page_states_the_limits() -> None:
    stated = {name for _, name, _, _ in _stated()}
    assert {"MAX_PROPS_BYTES", "STREAM_BYTES_PER_TOKEN", "LIVENESS_TIMEOUT_S", "MAX_LEVEL", "MAX_TIMEOUT_S",
            "MAX_NESTING"} <= stated
    assert len(stated) >= 40


@pytest.mark.parametrize("section,name,modules,figure", _stated(),
                         ids=lambda x: x if isinstance(x, str) else "")
def test_each_figure_is_its_constant(section: str, name: str, modules: tuple, figure: str) -> None:
    assert _value(figure) == pytest.approx(float(_constant(name, modules))), f"{section}: {name}"
