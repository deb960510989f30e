"""The two quantiles the CIs of `satbench.metrics.stats` need, without scipy (importing scipy.stats
costs more CPU than deriving a whole run):

- `binomial_quantile(q, n, p)`: the smallest k in 0..n with P(X <= k) >= q, X ~ Binomial(n, p), as
  `scipy.stats.binom.ppf(q, n, p)` gives it. P is summed from the probabilities relative to the mode,
  pmf(i + 1) / pmf(i) = (n − i) / (i + 1) · p / (1 − p), over the terms at least TAIL of the mode (the
  rest cannot move a sum at double precision), normalised by their total; an upper quantile (q >= 0.5)
  compares the upper tail with 1 − q, so no sum near 1 is rounded. O(σ) terms, σ = √(n p (1 − p)).
- `t_quantile_975(df)`: the 0.975 quantile of Student's t with `df` degrees of freedom (a 95 %
  two-sided CI), bit for bit as `scipy.special.stdtrit(df, 0.975)` gives it: a table for df = 1..99
  (a mean over up to MAX_REPETITIONS repetitions), scipy itself above.

And one distribution function, for the Welch tests of `satbench.saturation.gain`:

- `t_cdf(t, df)`: P(T <= t) for Student's t with a real `df` > 0 (Welch–Satterthwaite's is not an
  integer), as `scipy.stats.t.cdf` gives it to ~1e-14: with x = df / (df + t²), the tail P(T <= −|t|)
  is I_x(df/2, 1/2) / 2, I the regularized incomplete beta function, evaluated by its continued
  fraction (modified Lentz, BETACF_EPS) on the side of x where it converges fast.
"""

from __future__ import annotations

import math
from itertools import accumulate

TAIL = 1e-30  # binomial terms below this fraction of the mode's are left out
BETACF_EPS = 1e-16  # the continued fraction stops when a step changes it by less than this fraction
BETACF_MAX_STEPS = 10_000  # a guard: for the df and t a Welch test meets it converges in < 200


def binomial_quantile(q: float, n: int, p: float) -> int:
    """Smallest k in 0..n with P(X <= k) >= q for X ~ Binomial(n, p); 0 < q < 1, 0 < p < 1, n >= 1."""
    if not (0.0 < q < 1.0 and 0.0 < p < 1.0 and n >= 1):
        raise ValueError(f"binomial_quantile needs 0 < q < 1, 0 < p < 1 and n >= 1, got {q}, {p}, {n}")
    lo, weights = _weights(n, p)
    total = math.fsum(weights)
    if q < 0.5:  # P(X <= k) = Σ_{i <= k} w_i / total
        target = q * total
        return lo + next((k for k, s in enumerate(accumulate(weights)) if s >= target), len(weights) - 1)
    target = (1.0 - q) * total  # P(X <= k) >= q  ⟺  P(X > k) = Σ_{i > k} w_i / total <= 1 − q
    above, k = 0.0, len(weights) - 1  # above: Σ of the weights after index k
    while k > 0 and above + weights[k] <= target:
        above += weights[k]
        k -= 1
    return lo + k


def _weights(n: int, p: float) -> tuple[int, list[float]]:
    """(i of the first weight, [pmf(i) / pmf(mode), ...]) over the terms of at least TAIL."""
    mode = min(n, math.floor((n + 1) * p))
    odds = p / (1.0 - p)
    up: list[float] = []
    w, i = 1.0, mode
    while i < n:
        w *= (n - i) / (i + 1) * odds
        i += 1
        if w < TAIL:
            break
        up.append(w)
    down: list[float] = []
    w, i = 1.0, mode
    while i > 0:
        w *= i / (n - i + 1) / odds
        i -= 1
        if w < TAIL:
            break
        down.append(w)
    down.reverse()
    return mode - len(down), [*down, 1.0, *up]


T_975 = (  # scipy.special.stdtrit(df, 0.975) for df = 1..99 (tests/metrics check them)
    12.706204736174694, 4.302652729749462, 3.1824463052837078, 2.7764451051977934, 2.5705818356363146,
    2.4469118511449786, 2.364624251592784, 2.306004135204166, 2.262157162798205, 2.228138851986274,
    2.200985160091639, 2.1788128296672284, 2.1603686564627913, 2.144786687917804, 2.131449545559776,
    2.1199052992212546, 2.1098155778333156, 2.1009220402410382, 2.0930240544083087, 2.085963447265864,
    2.0796138447276795, 2.0738730679040254, 2.0686576104190486, 2.0638985616280245, 2.0595385527532972,
    2.0555294386428735, 2.0518305164802846, 2.0484071417952454, 2.045229642132703, 2.0422724563012378,
    2.039513446396408, 2.0369333434601016, 2.0345152974493383, 2.0322445093177186, 2.030107928250343,
    2.0280940009804502, 2.0261924630291093, 2.0243941639119694, 2.022690920036761, 2.021075390306273,
    2.019540970441376, 2.0180817028184443, 2.016692199227824, 2.0153675744437636, 2.014103388880846,
    2.012895598919429, 2.0117405137297655, 2.010634757624232, 2.0095752371292392, 2.008559112100761,
    2.007583770315836, 2.006646805061688, 2.0057459953178687, 2.0048792881880564, 2.0040447832891455,
    2.003240718847872, 2.002465459291007, 2.0017174841452356, 2.000995378088267, 2.0002978220142604,
    1.999623584994939, 1.9989715170333788, 1.998340542520741, 1.997729654317693, 1.9971379083920038,
    1.9965644189523117, 1.996008354025296, 1.9954689314298435, 1.9949454151072374, 1.994437111771186,
    1.9939433678456255, 1.9934635666618719, 1.992997125889855, 1.992543495180932, 1.9921021540022417,
    1.9916726096446642, 1.9912543953883846, 1.9908470688116906, 1.9904502102301285, 1.990063421254446,
    1.9896863234569029, 1.989318557136572, 1.9889597801751624, 1.9886096669757083, 1.9882679074772216,
    1.98793420623902, 1.9876082815890708, 1.9872898648311692, 1.986978699506281, 1.9866745407037683,
    1.9863771544186177, 1.98608631695113, 1.9858018143458227, 1.985523441866604, 1.9852510035054978,
    1.984984311522457, 1.9847231860139845, 1.9844674545084815, 1.9842169515864174,
)


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` >= 1 degrees of freedom."""
    if 1 <= df <= len(T_975):
        return T_975[df - 1]
    from scipy.special import stdtrit  # beyond any run's repetitions (its import is dear)

    return float(stdtrit(df, 0.975))


def t_two_sided_quantile(df: int, level: float) -> float:
    """The t with P(|T| <= t) = `level` for Student's t with `df` >= 1 degrees of freedom (the
    (1 + level) / 2 quantile), 0 < level < 1. P(|T| <= t) is the closed form for an integer df
    (θ = atan(t / √df); odd df: (2/π)(θ + sinθ cosθ Σ_k a_k cos^(2k)θ), a_0 = 1,
    a_k = a_(k−1)·2k/(2k+1), k < (df−1)/2; even df: sinθ Σ_k b_k cos^(2k)θ, b_0 = 1,
    b_k = b_(k−1)(2k−1)/(2k), k < df/2), inverted by bisection to double precision."""
    if not (0.0 < level < 1.0 and df >= 1):
        raise ValueError(f"t_two_sided_quantile needs df >= 1 and 0 < level < 1, got {df}, {level}")

    def inside(t: float) -> float:
        theta = math.atan(t / math.sqrt(df))
        c2, s = math.cos(theta) ** 2, math.sin(theta)
        term, total = 1.0, 1.0
        if df % 2:
            for k in range(1, (df - 1) // 2):
                term *= c2 * 2 * k / (2 * k + 1)
                total += term
            return (2 / math.pi) * (theta + (s * math.cos(theta) * total if df > 1 else 0.0))
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        return s * total

    lo, hi = 0.0, 1.0
    while inside(hi) < level:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if inside(mid) < level else (lo, mid)
    return hi


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` > 0 degrees of freedom (module docstring)."""
    if not df > 0 or math.isnan(t):
        raise ValueError(f"t_cdf needs df > 0 and a number t, got {df}, {t}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    t2 = t * t
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t2), t2 / (df + t2))
    return 1.0 - tail if t > 0 else tail


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1, with y = 1 − x computed by the
    caller (a subtraction would lose y's digits where x is near 1)."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, y) / b


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz), converging for x < (a + 1)/(a + b + 2)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, BETACF_MAX_STEPS):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < BETACF_EPS:
            return h
    raise ArithmeticError(f"the incomplete beta's continued fraction did not converge (a={a}, b={b}, x={x})")
