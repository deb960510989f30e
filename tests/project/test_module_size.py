"""Modules stay small: no module of src over MAX_MODULE_LINES lines (the size rules of functions are
ruff's: C901, PLR0912, PLR0915 in pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "satbench"
MAX_MODULE_LINES = 400


def long_modules(root: Path, limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    """{path relative to root: lines} of the .py files under root with more than `limit` lines."""
    sizes = {str(p.relative_to(root)): len(p.read_text().splitlines()) for p in root.rglob("*.py")}
    return {p: n for p, n in sizes.items() if n > limit}


def test_no_module_of_src_is_over_400_lines():
    assert long_modules(SRC) == {}


def test_the_rule_sees_a_long_module(tmp_path):
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert long_modules(tmp_path) == {"long.py": MAX_MODULE_LINES + 1}
