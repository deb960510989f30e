"""Table cells every report table writes alike: a number or a distribution's percentile, "n/a" when
there is none (report/table.py, report/rates.py)."""

from __future__ import annotations

from satbench.metrics.stats import Distribution


def pct_cell(d: Distribution, key: str, digits: int = 0) -> str:
    """The distribution's `key` ("p50", "p95", …) to `digits` decimals, or "n/a"."""
    v = getattr(d, key)
    return "n/a" if v is None else f"{v:.{digits}f}"


def num_cell(v: float | None, fmt: str = "{:.2f}") -> str:
    """`v` formatted by `fmt`, or "n/a"."""
    return "n/a" if v is None else fmt.format(v)
