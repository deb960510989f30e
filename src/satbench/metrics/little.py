"""Little's-law check (DESIGN.md §5): in a closed loop, N ≈ X_req · E2E_mean."""

from __future__ import annotations

from satbench.config import Strict

TOLERANCE = 0.05


class LittleCheck(Strict):
    n_expected: int
    n_from_little: float
    relative_error: float
    within_tolerance: bool
    tolerance: float = TOLERANCE


def littles_law(n: int, req_per_s: float, e2e_mean_ms: float) -> LittleCheck:
    """L = X_req · E2E_mean (s); relative error = |L − N| ÷ N; flagged beyond 5 %."""
    l_value = req_per_s * e2e_mean_ms / 1000.0
    rel = abs(l_value - n) / n
    return LittleCheck(n_expected=n, n_from_little=l_value, relative_error=rel,
                       within_tolerance=rel <= TOLERANCE)
