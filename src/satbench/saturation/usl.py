"""Universal Scalability Law fit (docs/definitions.md#usl):

    X(N) = λ·N / (1 + α(N−1) + β·N(N−1)),   λ > 0, α ≥ 0, β ≥ 0

fitted by bounded least squares on every repetition's throughput (not the means), so the fit
has degrees of freedom for a CI on β. The predicted peak N* = √((1−α)/β) is reported only if
β's 95 % CI excludes 0 and R² ≥ 0.9; otherwise the reason is given instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from satbench.config.schema import Strict
from satbench.metrics.quantiles import t_quantile_975

if TYPE_CHECKING:  # reading recommendations.json (its UslFit) needs no numpy
    import numpy as np

MIN_R2 = 0.9


class UslFit(Strict):
    fitted: bool
    lambda_x1: float | None = None
    alpha: float | None = None
    beta: float | None = None
    beta_ci: tuple[float, float] | None = None
    r2: float | None = None
    peak_n: float | None = None
    peak_reported: bool = False
    why_not: str | None = None
    points: int = 0


def usl(n: np.ndarray, lam: float, alpha: float, beta: float) -> np.ndarray:
    """X(N) = λN / (1 + α(N−1) + βN(N−1))."""
    return lam * n / (1.0 + alpha * (n - 1.0) + beta * n * (n - 1.0))


def usl_jacobian(n: np.ndarray, lam: float, alpha: float, beta: float) -> np.ndarray:
    """∂X/∂(λ, α, β), with D = 1 + α(N−1) + βN(N−1): N/D, −λN(N−1)/D², −λN²(N−1)/D²."""
    import numpy as np

    d = 1.0 + alpha * (n - 1.0) + beta * n * (n - 1.0)
    return np.column_stack([n / d, -lam * n * (n - 1.0) / d ** 2, -lam * n * n * (n - 1.0) / d ** 2])


def fit_usl(samples: Sequence[tuple[int, float]]) -> UslFit:
    """Fit (N, X) samples (`fit_usl_exact`), every figure written with FIT_DIGITS significant digits:
    machines whose numeric libraries differ in the last bits then write the same bytes."""
    fit = fit_usl_exact(samples)
    ci = None if fit.beta_ci is None else (_sig(fit.beta_ci[0]), _sig(fit.beta_ci[1]))
    return fit.model_copy(update={"beta_ci": ci, **{
        name: None if (v := getattr(fit, name)) is None else _sig(v)
        for name in ("lambda_x1", "alpha", "beta", "r2", "peak_n")}})


def fit_usl_exact(samples: Sequence[tuple[int, float]]) -> UslFit:
    """Fit (N, X) samples; at least 4 samples over at least 3 levels are needed."""
    pts = [(float(n), float(x)) for n, x in samples if x is not None and x > 0]
    levels = {n for n, _ in pts}
    if len(pts) < 4 or len(levels) < 3:
        return UslFit(fitted=False, points=len(pts), why_not="needs ≥ 4 samples over ≥ 3 levels")
    import numpy as np

    n = np.array([p[0] for p in pts])
    x = np.array([p[1] for p in pts])
    x1 = float(np.mean(x[n == n.min()])) / n.min()
    # analytic Jacobian and tolerances near machine precision: the optimum, not wherever a looser
    # stopping rule left it, so another scipy or numpy (the machine that measured) gives the same
    # figures to many digits and `satbench verify` can recompute them there and here
    from scipy import optimize  # imported where it fits: every derivation imports this module

    res = optimize.least_squares(lambda p: usl(n, *p) - x, x0=[max(x1, 1e-9), 0.01, 0.001],
                                 jac=lambda p: usl_jacobian(n, *p), x_scale="jac",
                                 bounds=([1e-12, 0.0, 0.0], [np.inf, np.inf, np.inf]),
                                 ftol=1e-14, xtol=1e-14, gtol=1e-14, max_nfev=10_000)
    lam, alpha, beta = (float(v) for v in res.x)
    resid = usl(n, lam, alpha, beta) - x
    ss_res = float(np.sum(resid ** 2))
    ss_tot = float(np.sum((x - x.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    fit = UslFit(fitted=True, lambda_x1=lam, alpha=alpha, beta=beta, r2=r2, points=len(pts))
    dof = len(pts) - 3
    try:
        jac = usl_jacobian(n, lam, alpha, beta)
        cov = np.linalg.inv(jac.T @ jac) * (ss_res / dof) if dof > 0 else None
    except np.linalg.LinAlgError:
        cov = None
    if cov is not None and np.isfinite(cov[2, 2]) and cov[2, 2] >= 0:
        half = t_quantile_975(dof) * math.sqrt(cov[2, 2])
        fit.beta_ci = (beta - half, beta + half)
    if beta > 0 and alpha < 1:
        fit.peak_n = math.sqrt((1.0 - alpha) / beta)
    if fit.beta_ci is None:
        fit.why_not = "no confidence interval for β (too few samples or a degenerate fit)"
    elif fit.beta_ci[0] <= 0:
        fit.why_not = (f"β's 95 % CI [{fit.beta_ci[0]:.2g}, {fit.beta_ci[1]:.2g}] includes 0: "
                       "no retrograde peak is evident")
    elif r2 < MIN_R2:
        fit.why_not = f"R² {r2:.2f} < {MIN_R2}: the law does not describe these points well"
    elif fit.peak_n is None:
        fit.why_not = "α ≥ 1 or β = 0: the fitted curve has no peak"
    else:
        fit.peak_reported = True
    if not fit.peak_reported:
        fit.peak_n = None  # an unreliable peak is not a number anyone should read
    return fit


FIT_DIGITS = 6  # significant digits a fit is written with: BLAS builds differ from the 12th digit on


def _sig(x: float) -> float:
    """x at FIT_DIGITS significant digits (a non-finite value as it is)."""
    return float(f"{x:.{FIT_DIGITS}g}") if math.isfinite(x) else x
