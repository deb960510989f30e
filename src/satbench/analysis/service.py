"""The service F1 and F3 compare, as statistics of the scheduler with bootstrap CIs (docs/fairness.md).

F1 (`pair_blocks`, `service_ratio`): for each pair of streams (i, j), r_ij = (Σ n_i(I) + 1) ÷
(Σ n_j(I) + 1), the tokens each received over the intervals I in which their requests decoded side by
side (overlap trimmed by EDGE_MS at each end, ≥ MIN_SHARED_MS long, ≥ MIN_SHARED_TOKENS to one of
them). A batching server gives every running sequence one token per iteration, so on a fair server
r_ij = 1 whatever the iteration costs; a slot served at 11/12 of its neighbours' rate gives 12/11.
The sums pool every interval, so the noise of the estimate shrinks as requests are added instead of
its maximum growing (a max/min of per-request ratios grows with the number compared). Statistic:
max over pairs of max(r_ij, 1/r_ij). CI: percentile bootstrap resampling, within each pair, the
blocks of BLOCK_MS its intervals are cut into (chunk boundaries make neighbouring blocks' counts
anti-correlated, so the resampled spread is, if anything, too wide).

F3 (`gap_series`, `gap_quantile`, `gap_drift`): after each completion, the max − min accumulated
weighted service (prompt + 2·output tokens) over the clients, in costliest requests; statistics:
its `f3_gap_quantile` quantile over completions, and its drift per client cycle (OLS slope against
completions ÷ clients, within each round). CIs: moving-block bootstrap over completions, blocks of
one client cycle (the gap is autocorrelated over a cycle).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

from satbench.analysis.guards import MIN_SHARED_TOKENS, tokens_between
from satbench.analysis.intervals import BOOTSTRAP_RESAMPLES, percentile_interval, resampled_sums, seeded
from satbench.metrics.latency import first_token_ns
from satbench.records.events import RequestEvent
from satbench.workload.fairness_plan import EDGE_MS, MIN_SHARED_MS

if TYPE_CHECKING:
    import numpy as np

BLOCK_MS = MIN_SHARED_MS  # F1's resampling unit: a shared interval is cut into blocks this long
Pair = tuple[int, int]


Span = tuple[RequestEvent, int, int]  # a request, its first token and its end (ns)


def _overlapping(spans: Sequence[Span]) -> Iterator[tuple[Span, Span]]:
    """The pairs of `spans` (sorted by send time) in combinations' order, but for those that cannot
    share an interval: a request sent after another's end starts decoding after it too."""
    for k, a in enumerate(spans):
        for j in range(k + 1, len(spans)):
            if spans[j][0].sent_ns >= a[2]:
                break  # every later one is sent later still
            yield a, spans[j]


def pair_blocks(events: Sequence[RequestEvent]) -> dict[Pair, np.ndarray]:
    """For each pair of streams (i < j) that decoded side by side: (tokens of i, tokens of j) in each
    block of their shared intervals, rows in time order (request pairs in send order)."""
    import numpy as np

    spans = [(e, t, e.end_ns) for e in sorted(events, key=lambda e: (e.sent_ns, e.stream))
             if (t := first_token_ns(e)) is not None and e.end_ns > t]
    edge, block = int(EDGE_MS * 1e6), BLOCK_MS * 1e6
    rows: dict[Pair, list[tuple[int, int]]] = {}
    for (a, a0, a1), (b, b0, b1) in _overlapping(spans):
        if a.stream == b.stream:
            continue
        lo, hi = max(a0, b0) + edge, min(a1, b1) - edge
        if (hi - lo) / 1e6 < MIN_SHARED_MS:
            continue
        if max(tokens_between(a, lo, hi), tokens_between(b, lo, hi)) < MIN_SHARED_TOKENS:
            continue
        first, second = (a, b) if a.stream < b.stream else (b, a)
        k = int((hi - lo) // block)
        cuts = [lo + round(m * (hi - lo) / k) for m in range(k + 1)]
        rows.setdefault((first.stream, second.stream), []).extend(
            (tokens_between(first, s, t), tokens_between(second, s, t)) for s, t in pairwise(cuts))
    return {p: np.asarray(r, dtype=float) for p, r in sorted(rows.items())}


def _ratio(sums: np.ndarray) -> np.ndarray:
    """max(r, 1/r) of r = (Σ first + 1) ÷ (Σ second + 1), along the last axis (2 columns)."""
    import numpy as np

    r = (sums[..., 0] + 1.0) / (sums[..., 1] + 1.0)
    return np.maximum(r, 1.0 / r)


def pair_ratios(blocks: dict[Pair, np.ndarray]) -> dict[Pair, float]:
    """r_ij = (Σ n_i + 1) ÷ (Σ n_j + 1) of each pair (i over j)."""
    return {p: float((b[:, 0].sum() + 1.0) / (b[:, 1].sum() + 1.0)) for p, b in blocks.items()}


def service_ratio(blocks: dict[Pair, np.ndarray], level: float) -> tuple[float, tuple[float, float]]:
    """(max over pairs of max(r_ij, 1/r_ij), its percentile-bootstrap CI at `level`)."""
    import numpy as np

    estimate = max(float(_ratio(b.sum(axis=0))) for b in blocks.values())
    rng = seeded("F1", [(p, b.tolist()) for p, b in blocks.items()])
    resampled = np.max([_ratio(resampled_sums(b, rng)) for b in blocks.values()], axis=0)
    return estimate, percentile_interval(resampled, level)


def stream_shares(ratios: dict[Pair, float], streams: Sequence[int]) -> dict[int, float]:
    """Each stream's relative service: the geometric mean over its pairs of r (it over the other)."""
    logs: dict[int, list[float]] = {s: [] for s in streams}
    for (i, j), r in ratios.items():
        logs[i].append(math.log(r))
        logs[j].append(-math.log(r))
    return {s: math.exp(sum(v) / len(v)) for s, v in logs.items() if v}


def gap_series(done: Sequence[RequestEvent], clients: int, costliest: float) -> list[float]:
    """max − min accumulated weighted service over the clients after each completion, in costliest
    requests (a request's weight: prompt + 2·output tokens)."""
    served = {c: 0.0 for c in range(clients)}
    out = []
    for e in sorted(done, key=lambda e: e.end_ns):
        served[e.stream] += e.prompt_tokens + 2 * e.output_tokens
        out.append((max(served.values()) - min(served.values())) / costliest)
    return out


def _moving_blocks(series: Sequence[np.ndarray], length: int) -> list[np.ndarray]:
    """Every run of `length` consecutive values inside one round (a shorter round is one block)."""
    return [g[s:s + length] for g in series for s in range(max(1, len(g) - length + 1))]


def _resample(blocks: list[np.ndarray], size: int, rng: np.random.Generator) -> np.ndarray:
    """Blocks drawn with replacement, joined and cut to `size` values."""
    import numpy as np

    need = math.ceil(size / min(len(b) for b in blocks))
    return np.concatenate([blocks[i] for i in rng.integers(0, len(blocks), size=need)])[:size]


def _drift_fit(series: Sequence[np.ndarray], cycle: int) -> tuple[float, list[np.ndarray]]:
    """(OLS slope of the gap per client cycle with an intercept per round, each round's residuals)."""
    import numpy as np

    xs = [np.arange(len(g), dtype=float) / cycle for g in series]
    dx = [x - x.mean() for x in xs]
    den = float(sum((d * d).sum() for d in dx))
    slope = 0.0 if den == 0 else float(sum((d * (g - g.mean())).sum() for d, g in zip(dx, series)) / den)
    return slope, [g - g.mean() - slope * d for d, g in zip(dx, series)]


def gap_statistics(series: Sequence[Sequence[float]], clients: int, q: float, level: float
                   ) -> tuple[tuple[float, tuple[float, float]], tuple[float, tuple[float, float]]]:
    """((q quantile of the gap, CI), (drift per client cycle, CI)) over the rounds' gap series.
    CIs by moving-block bootstrap with blocks of one client cycle: the quantile from resampled
    gaps; the drift from the fit plus block-resampled residuals, refitted."""
    import numpy as np

    rounds = [np.asarray(g, dtype=float) for g in series]
    pooled = np.concatenate(rounds)
    quantile = float(np.quantile(pooled, q))
    drift, residuals = _drift_fit(rounds, clients)
    rng = seeded("F3", [g.tolist() for g in rounds], clients, q)
    gap_blocks, res_blocks = _moving_blocks(rounds, clients), _moving_blocks(residuals, clients)
    qs = [float(np.quantile(_resample(gap_blocks, len(pooled), rng), q)) for _ in range(BOOTSTRAP_RESAMPLES)]
    fitted = [g - r for g, r in zip(rounds, residuals)]
    slopes = [_drift_fit([f + _resample(res_blocks, len(f), rng) for f in fitted], clients)[0]
              for _ in range(BOOTSTRAP_RESAMPLES)]
    return ((quantile, percentile_interval(np.asarray(qs), level)),
            (drift, percentile_interval(np.asarray(slopes), level)))
