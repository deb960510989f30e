"""How sure a recommendation is (docs/definitions.md#confidence): the probability that a level above
it, which could still change the answer, gains over it.

The levels that could change the answer r are the clean measured levels h with r < h ≤ cap, where cap
is the tightest limit other than the knee (slots, SLO bound, fairness, memory, errors, a failed
server): a level above cap is forbidden whatever it gains. For each, P(h gains) is saturation/gain.py's
P(X(h) ≥ 1.1^log2(h/r) X(r)) (Welch's t over the repetitions). The answer is

- settled when every such P is below P_GAIN_MAX (5 %) and the ceiling (the slot count, or the highest
  level the server can hold, at most cap) is measured or r already reaches it;
- otherwise not settled: "the repetitions cannot tell" (the largest P below 0.5), "a higher level
  probably still gains" (0.5 or more), or "the ceiling is not measured" (a level up to it may gain).
A recommendation that is the lower end of a range (recommend.py: undetermined) is never settled: an
unmeasured level inside the range may gain.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from satbench.config.schema import Strict
from satbench.saturation.gain import MIN_GAIN_PER_DOUBLING, P_GAIN_MAX, Point, needed_gain, p_gain


class Confidence(Strict):
    recommended: int
    higher_level: int | None = Field(description="the level above the recommendation most likely to gain "
                                                 "(null: none could change the answer)")
    p_higher_gains: float | None = Field(ge=0, le=1, description="P(X(higher) ≥ 1.1^log2(higher/"
                                         "recommended) × X(recommended)), from the repetitions")
    p_by_level: dict[int, float | None] = Field(
        default_factory=dict, description="the same P for every level that could still change the answer")
    ceiling: int | None = Field(None, description="the level the answer is settled against")
    ceiling_measured: bool = True
    settled: bool = Field(False, description="every P below 5 % and the ceiling measured (or reached)")
    statement: str


def confidence(rec: int, points: Sequence[Point], cap: int | None, ceiling: int | None,
               span: tuple[int, int] | None = None,
               min_gain: float = MIN_GAIN_PER_DOUBLING) -> Confidence | None:
    """The confidence of recommending `rec` (module docstring), from the lane's knee points; `cap`: the
    tightest limit other than the knee (None: none), `ceiling`: the slot count or the highest level the
    server holds (None: none set), `span`: the range `rec` is the lower end of (None: not a range).
    None when `rec` has no clean point."""
    clean = sorted((p for p in points if not p.contended), key=lambda p: p.n)
    at = next((p for p in clean if p.n == rec), None)
    if at is None:
        return None
    could = [p for p in clean if p.n > rec and (cap is None or p.n <= cap)]
    probs = {p.n: p_gain(at, p, min_gain) for p in could}
    limit = min((c for c in (ceiling, cap) if c is not None), default=None)
    top = clean[-1].n
    reached = limit is None or rec >= limit or top >= limit
    known = {n: p for n, p in probs.items() if p is not None}
    worst = max(known, key=lambda n: known[n]) if known else (max(probs) if probs else None)
    p_max = known.get(worst) if worst is not None else None
    low = all(p is not None and p < P_GAIN_MAX for p in probs.values())
    ranged = span is not None and span[1] > rec
    settled = low and reached and not ranged
    each = "; ".join(f"P(N={p.n} gains ≥ {needed_gain(at, p, min_gain) - 1:.0%} over N={rec}) = "
                     f"{'unknown' if probs[p.n] is None else format(probs[p.n], '.2f')}" for p in could)
    against = (f"the ceiling N={limit}" if limit is not None and limit == ceiling
               else f"N={limit}, the most the other limits allow" if limit is not None
               else "the highest level measured")
    if not could:
        text = (f"no measured level above N={rec} can change it" +
                (f" (at most N={cap} is allowed)" if cap is not None and cap <= rec else ""))
    else:
        text = each + f", from {len(at.reps)} and {', '.join(str(len(p.reps)) for p in could)} repetitions"
    if ranged and span is not None:
        verdict = f"not settled: the answer lies between {span[0]} and {span[1]}"
    elif settled:
        verdict = f"settled against {against}"
    elif not reached and low:
        verdict = f"not settled: {against} is not measured (a level up to it may gain)"
    elif p_max is not None and p_max >= 0.5:
        verdict = "not settled: a higher level probably still gains"
    else:
        verdict = "not settled: the repetitions cannot tell"
        if not reached:
            verdict += f", and {against} is not measured"
    return Confidence(recommended=rec, higher_level=worst,
                      p_higher_gains=None if p_max is None else round(p_max, 4),
                      p_by_level={n: None if p is None else round(p, 4) for n, p in probs.items()},
                      ceiling=limit, ceiling_measured=reached, settled=settled,
                      statement=f"{text}: {verdict}")
