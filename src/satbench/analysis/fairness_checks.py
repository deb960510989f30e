"""The F checks: equal requests (F1), mixed sizes (F2) and backlogged clients (F3) (docs/fairness.md).

Each takes the check's events (warmups included for the closed-loop F1 and F3: F1 pairs their
decodes, but takes TTFT from measured requests only), the lane's
`FairnessPlan` and `FairnessConfig`, and returns one `Verdict`: its statistics with their CIs at
the decision level of the check's looks (analysis/intervals), bounds derived from the lane's own
measurements, and `inconclusive` with a reason when the evidence cannot decide.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from satbench.analysis.guards import (
    BACKLOG_SHARE_MIN,
    MIN_SHARED_TOKENS,
    RESOLUTION_MS,
    all_in_flight,
    backlog_window,
    backlogged_share,
    off_closed_loop,
    slow_compute_only,
    solo_spread,
    waited_ms,
)
from satbench.analysis.intervals import (
    BOOTSTRAP_RESAMPLES,
    decision_level,
    quantile_estimate,
    quantile_interval,
    statistic,
    t_interval,
)
from satbench.analysis.service import (
    gap_series,
    gap_statistics,
    pair_blocks,
    pair_ratios,
    service_ratio,
    stream_shares,
)
from satbench.analysis.verdicts import (
    MS,
    Calibration,
    Verdict,
    inconclusive,
    jain_index,
    judged,
    median_or_none,
    of_role,
    request_errors,
    rounds_of,
    served_decode_rate,
)
from satbench.config.schema import FairnessConfig
from satbench.metrics.latency import first_token_ns, ttft_ms
from satbench.records.events import RequestEvent, itl_ms
from satbench.workload.fairness_plan import EDGE_MS, F1_DECODE_TARGET_MS, MIN_SHARED_MS, FairnessPlan


def _f1_unjudgeable(events: Sequence[RequestEvent], plan: FairnessPlan, cal: Calibration) -> Verdict | None:
    """F1 inconclusive before its events are paired: fewer than 2 streams, no events, failed requests,
    no prefill-rate calibration, or streams that did not keep the closed loop; None: none of these."""
    n = plan.f1_streams
    if n < 2:
        return inconclusive("F1", f"needs at least 2 slots (server has {plan.slots})")
    if not events:
        return inconclusive("F1", "no F1 requests were recorded")
    if (err := request_errors(events)):
        return inconclusive("F1", err, len(events))
    if cal.prefill_tok_per_s is None:
        return inconclusive("F1", "no prefill-rate calibration")
    if (broken := off_closed_loop(events, n, "F1")):
        return inconclusive("F1", broken, len(events))
    return None


def equal_requests(events: Sequence[RequestEvent], plan: FairnessPlan, cal: Calibration,
                   cfg: FairnessConfig) -> Verdict:
    """F1: each pair of the `plan.f1_streams` equal streams gets the same service while decoding side
    by side, and each measured request's TTFT is within its bound (docs/fairness.md);
    `_f1_unjudgeable` first."""
    if (refused := _f1_unjudgeable(events, plan, cal)) is not None:
        return refused
    n = plan.f1_streams
    assert cal.prefill_tok_per_s is not None  # _f1_unjudgeable refuses a lane without it
    streams = sorted({e.stream for e in events})
    blocks = pair_blocks(events)
    wanted = {(i, j) for k, i in enumerate(streams) for j in streams[k + 1:]}
    if missing := sorted(wanted - set(blocks)):
        # a pair left out could hide the stream the scheduler favours: no verdict on the others alone
        return inconclusive("F1", f"stream pair(s) {missing} never decoded side by side for "
                            f"{MIN_SHARED_MS:g} ms (past {EDGE_MS:g} ms edges) and {MIN_SHARED_TOKENS} "
                            "tokens: decodes too short or too staggered to compare their service",
                            len(events))
    spans = [(e.end_ns - first) / MS for e in events if (first := first_token_ns(e)) is not None]
    if plan.jitter_ms and statistics.median(spans) < 20 * plan.jitter_ms:
        return inconclusive("F1", f"decodes of {statistics.median(spans):.1f} ms are too short to resolve a "
                            f"10 % rate difference with {plan.jitter_ms:.2f} ms of round-trip jitter",
                            len(events))
    level = decision_level(cfg.looks("F1"))
    ratio, ratio_ci = service_ratio(blocks, level)
    ratios = pair_ratios(blocks)
    shares = stream_shares(ratios, streams)
    intervals = sum(len(b) for b in blocks.values())
    # TTFT of measured requests only: a warmup's first token carries the cold start (a batch shape the
    # server has not run yet: 50 ms against 10 on an H200), which says nothing of the scheduler
    measured = [e for e in events if e.phase == "measured"]
    ttfts = [t for e in measured if (t := ttft_ms(e)) is not None]
    if not ttfts:
        return inconclusive("F1", "no measured F1 request produced a first token", len(events))
    iteration = median_or_none([g for e in events for g in itl_ms(e)]) or 0.0
    prefill_ms = n * plan.prompt / cal.prefill_tok_per_s * 1000.0
    ttft_bound = prefill_ms + cfg.f1_ttft_iterations * iteration + plan.jitter_ms
    q = cfg.f1_ttft_quantile
    stats = [statistic("service_ratio", ratio, ratio_ci, cfg.f1_max_min_ratio, level=level, n=intervals,
                       method=f"percentile bootstrap over {BOOTSTRAP_RESAMPLES} resamples of "
                              f"{intervals} blocks of {MIN_SHARED_MS:g} ms within the {len(blocks)} pairs"),
             statistic(f"ttft_p{100 * q:g}_ms", quantile_estimate(ttfts, q),
                       quantile_interval(ttfts, q, level), ttft_bound, level=level, n=len(ttfts),
                       method="order statistics (distribution-free)")]
    rates = [r for e in measured if (r := served_decode_rate(e)) is not None]
    rounds = rounds_of(events)
    extra: dict[str, float | None] = {}
    if stats[1].decision != "pass":  # where the TTFT went, by the server's own timings
        waits = [w for e in measured if (w := waited_ms(e)) is not None]
        prefills = [e.timings.prompt_ms for e in measured if e.timings and e.timings.prompt_ms is not None]
        extra = {"wait_before_prefill_p50_ms": statistics.median(waits) if waits else None,
                 "server_prefill_p50_ms": statistics.median(prefills) if prefills else None}
    verdict = judged("F1", stats, samples=len(events), rounds=rounds, rounds_max=cfg.rounds("F1")[1],
                     measured={"jain_index": jain_index(list(shares.values())), "max_ttft_ms": max(ttfts),
                               "max_min_request_decode_rate": max(rates) / min(rates) if rates else None,
                               **extra},
                     derivation=(f"{n} equal streams, {rounds} round(s), requests of "
                                 f"{max(e.max_tokens for e in events)} output tokens (sized to decode "
                                 f"≥ {F1_DECODE_TARGET_MS:g} ms alone at the calibrated iteration"
                                 + (f" {cal.decode_iteration_ms:.1f} ms" if cal.decode_iteration_ms else "")
                                 + f"); service_ratio = max over the {len(blocks)} pairs of streams of "
                                 "(Σ its tokens + 1) ÷ (Σ the other's + 1) over the intervals they "
                                 "decoded side by side (a host-wide slowdown or a narrower batch slows both "
                                 f"alike); TTFT bound = Σprompt {n}×{plan.prompt} tok ÷ prefill "
                                 f"{cal.prefill_tok_per_s:.0f} tok/s + "
                                 f"{cfg.f1_ttft_iterations:g} × iteration {iteration:.1f} ms (median ITL at "
                                 f"N={n}) + RTT jitter {plan.jitter_ms:.2f} ms"))
    # a TTFT over the bound that the server spent computing slower than calibrated (a stalled host) says
    # nothing of the scheduler; only when every stream's prompt fits one batch together (a prompt split
    # over batches could have its later chunks starved, which its own prompt time would then include)
    if stats[1].decision != "pass" and stats[0].decision == "pass" and n * plan.prompt <= plan.n_batch:
        over = [e for e in measured if (t := ttft_ms(e)) is not None and t > ttft_bound]
        if (slow := slow_compute_only(over, ttft_bound - prefill_ms + RESOLUTION_MS, prefill_ms)):
            return verdict.model_copy(update={"verdict": "inconclusive", "reason": slow})
    return verdict


def mixed_sizes(events: Sequence[RequestEvent], plan: FairnessPlan, cfg: FairnessConfig) -> Verdict:
    import numpy as np

    n = len(plan.f2_sizes)
    if n < 2:
        return inconclusive("F2", f"needs at least 2 slots (server has {plan.slots})")
    if (err := request_errors(events)):
        return inconclusive("F2", err, len(events))
    alone: dict[int, list[float]] = {}
    rounds: dict[int, list[RequestEvent]] = {}
    for e in of_role(events, "together"):
        rounds.setdefault(e.repetition, []).append(e)
    # a round counts only if its N requests were all in flight at one moment (on a loaded host
    # they can run one after another, which would say nothing about sharing the server)
    overlapped = [{e.seq: (e.end_ns - e.sent_ns) / MS for e in evs}
                  for _, evs in sorted(rounds.items()) if len(evs) == n and all_in_flight(evs)]
    for e in of_role(events, "alone"):
        alone.setdefault(e.seq, []).append((e.end_ns - e.sent_ns) / MS)
    if set(alone) != set(range(n)) or not rounds:
        return inconclusive("F2", "missing alone or together requests", len(events))
    if not overlapped:
        return inconclusive("F2", f"in none of {len(rounds)} rounds were all {n} requests in flight at once "
                            f"(each ended before the last was sent): nothing was shared", len(events))
    for i in range(n):
        if (unsteady := solo_spread(alone[i])):
            return inconclusive("F2", f"size {i}: {unsteady}", len(events))
    together = np.asarray([[r[i] for i in range(n)] for r in overlapped])  # rounds × sizes, ms
    runs = [np.asarray(alone[i]) for i in range(n)]
    per_round = together / np.asarray([np.median(a) for a in runs])  # rounds × sizes: slowdowns
    worst_of_round = [float(x) for x in per_round.max(axis=1)]
    slow = per_round.mean(axis=0)
    level = decision_level(cfg.looks("F2"))
    bound = cfg.f2_slowdown_factor * n
    stats = [statistic("max_slowdown", statistics.mean(worst_of_round), t_interval(worst_of_round, level),
                       bound, level=level, n=len(worst_of_round),
                       method="Student-t over the rounds of each round's largest slowdown")]
    return judged("F2", stats, samples=len(events), rounds=len(rounds), rounds_max=cfg.rounds("F2")[1],
                  measured={f"slowdown_size{i}": float(slow[i]) for i in range(n)},
                  derivation=(f"{n} requests of sizes {_sizes_sent(events, plan)} (prompt, output) sent "
                              "together; slowdown = E2E together ÷ median E2E alone "
                              f"({min(len(a) for a in runs)} runs); max_slowdown = the mean over rounds of "
                              f"each round's largest; bound {cfg.f2_slowdown_factor:g} × N; worst on "
                              f"average: size {int(np.argmax(slow))}; {len(overlapped)} of {len(rounds)} "
                              f"rounds had all {n} in flight at once (only those count)"))


def _sizes_sent(events: Sequence[RequestEvent], plan: FairnessPlan) -> str:
    """F2's sizes as sent: a prompt too short for its request id grew to fit (plan.f2_sizes is the plan)."""
    def prompt(i: int, planned: int) -> str:
        sent = sorted({e.prompt_tokens for e in events if e.seq == i and e.role in ("alone", "together")})
        return str(planned) if not sent else f"{sent[0]}" if len(sent) == 1 else f"{sent[0]}-{sent[-1]}"
    return "[" + ", ".join(f"({prompt(i, p)}, {o})" for i, (p, o) in enumerate(plan.f2_sizes)) + "]"


def backlogged_clients(events: Sequence[RequestEvent], plan: FairnessPlan, cfg: FairnessConfig) -> Verdict:
    c = plan.f3_clients
    if (err := request_errors(events)):
        return inconclusive("F3", err, len(events))
    if (broken := off_closed_loop(events, c, "F3")):
        return inconclusive("F3", broken, len(events))
    series, shares, done_all = [], [], []
    for rep in sorted({e.repetition for e in events}):
        mine = [e for e in events if e.repetition == rep]
        window = backlog_window(mine)
        # measured requests only: a warmup ending inside the window would credit only the clients
        # whose warmup happened to end late (each client has exactly one)
        done = [e for e in mine if window and e.phase == "measured" and window[0] <= e.end_ns <= window[1]]
        if window is None or len(done) < 2 * c:
            continue
        shares.append(backlogged_share(mine, window, plan.slots))
        done_all.append(done)
    completions = sum(len(d) for d in done_all)
    if not done_all:
        return inconclusive("F3", f"no round had {2 * c} completions while all {c} clients were backlogged",
                            len(events))
    if min(shares) < BACKLOG_SHARE_MIN:
        return inconclusive("F3", f"more requests than the {plan.slots} slots were in flight for only "
                            f"{100 * min(shares):.1f} % of a round's window (need "
                            f"{100 * BACKLOG_SHARE_MIN:.0f} %): the clients did not keep the server "
                            "backlogged",
                            completions)
    costliest = max(e.prompt_tokens + 2 * e.output_tokens for d in done_all for e in d)
    series = [gap_series(d, c, costliest) for d in done_all]
    level = decision_level(cfg.looks("F3"))
    q = cfg.f3_gap_quantile
    (gap, gap_ci), (drift, drift_ci) = gap_statistics(series, c, q, level)
    method = f"moving-block bootstrap over completions ({BOOTSTRAP_RESAMPLES} resamples, blocks of {c})"
    stats = [statistic(f"service_gap_p{100 * q:g}_costliest", gap, gap_ci, cfg.f3_diff_costliest,
                       level=level, n=completions, method=method),
             statistic("gap_drift_costliest_per_cycle", drift, drift_ci, cfg.f3_trend_costliest,
                       level=level, n=completions, method=method + " of the fit's residuals")]
    return judged("F3", stats, samples=completions, rounds=rounds_of(events), rounds_max=cfg.rounds("F3")[1],
                  measured={"max_service_gap_costliest": max(max(g) for g in series),
                            "backlogged_share": min(shares)},
                  derivation=(f"{c} closed-loop clients on {plan.slots} slots, {len(series)} round(s); gap = "
                              "max − min over clients of Σ(prompt + 2·output) of their measured requests "
                              f"ended in the window, after each completion, in costliest requests "
                              f"({costliest} weighted tokens); drift = its OLS slope per client cycle ({c} "
                              "completions) within each round; more requests than slots in flight for "
                              f"{100 * min(shares):.0f} % of the window"))
