"""How sure a recommendation is: the probability that the next measured level above it still gains.

Formula: with the repetitions' output tok/s x_r (n_r values, mean m_r, variance s_r²) at the
recommended level r and x_h at the next higher clean level h, and g = 1.1^log2(h/r) the gain that
counts (10 % per doubling), d = m_h − g·m_r has standard error se = sqrt(s_h²/n_h + g²·s_r²/n_r)
(Welch). P(higher gains) = T_ν(d / se), T_ν the Student-t CDF with Welch–Satterthwaite ν degrees
of freedom. Near 0 the answer is settled; near 0.5 the repetitions cannot tell; above 0.5 the
higher level probably still gains (the knee rule did not see it through the CI).
"""

from __future__ import annotations

import math
import statistics

from pydantic import Field

from satbench.config.schema import Strict
from satbench.saturation.knee import MIN_GAIN_PER_DOUBLING

CONFIDENT_BELOW = 0.1  # P(higher gains) under this: the recommendation is settled


class Confidence(Strict):
    recommended: int
    higher_level: int
    p_higher_gains: float = Field(ge=0, le=1, description="P(X(higher) ≥ 1.1^log2(higher/recommended) × "
                                                          "X(recommended)), from the repetitions")
    statement: str


def p_higher_gains(low: list[float], high: list[float], factor: float) -> float | None:
    """P(mean(high) ≥ factor × mean(low)) by Welch's t (module formula); None with < 2 values on a side."""
    if len(low) < 2 or len(high) < 2:
        return None
    from scipy import stats as sps

    m_l, m_h = statistics.fmean(low), statistics.fmean(high)
    v_l, v_h = statistics.variance(low) / len(low), statistics.variance(high) / len(high)
    var = v_h + factor * factor * v_l
    d = m_h - factor * m_l
    if var <= 0:
        return 1.0 if d >= 0 else 0.0
    df = var * var / ((v_h * v_h) / (len(high) - 1) + (factor ** 4) * (v_l * v_l) / (len(low) - 1))
    return float(sps.t.cdf(d / math.sqrt(var), df))


def confidence(rec: int, by_level: dict[int, list[float]],
               min_gain: float = MIN_GAIN_PER_DOUBLING) -> Confidence | None:
    """The confidence of recommending `rec`, from `by_level` (clean level → repetitions' output tok/s):
    against the next measured level above it; None when there is none or too few repetitions."""
    above = sorted(n for n in by_level if n > rec)
    if rec not in by_level or not above:
        return None
    h = above[0]
    factor = (1.0 + min_gain) ** math.log2(h / rec)
    p = p_higher_gains(by_level[rec], by_level[h], factor)
    if p is None:
        return None
    verdict = ("settled" if p < CONFIDENT_BELOW else "the repetitions cannot tell" if p < 0.5
               else "the higher level probably still gains")
    return Confidence(recommended=rec, higher_level=h, p_higher_gains=round(p, 4),
                      statement=f"P(N={h} gains ≥ {factor - 1:.0%} over N={rec}) = {p:.2f} from "
                                f"{len(by_level[rec])} and {len(by_level[h])} repetitions: {verdict}")
