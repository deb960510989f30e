"""The F checks: equal requests (F1), mixed sizes (F2) and backlogged clients (F3) (DESIGN.md §6).

Each takes the check's events (warmups included for the closed-loop F1 and F3), the lane's
`FairnessPlan` and `FairnessConfig`, and returns one `Verdict` whose bounds are derived from the
lane's own measurements; `inconclusive` with a reason when the evidence cannot decide.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from satbench.analysis.guards import (
    BACKLOG_SHARE_MIN,
    F1_COVERAGE_MIN,
    MIN_SHARED_TOKENS,
    RESOLUTION_MS,
    all_in_flight,
    backlog_window,
    backlogged_share,
    shared_token_ratios,
    slow_compute_only,
)
from satbench.analysis.verdicts import (
    MS,
    Calibration,
    Verdict,
    inconclusive,
    jain_index,
    median_or_none,
    of_role,
    request_errors,
    served_decode_rate,
)
from satbench.analysis.verdicts import make_verdict as _v
from satbench.config.schema import FairnessConfig
from satbench.metrics.latency import first_token_ns, ttft_ms
from satbench.metrics.throughput import completed_in_window
from satbench.metrics.window import steady_window
from satbench.records.events import RequestEvent, itl_ms
from satbench.workload.fairness_plan import EDGE_MS, MIN_SHARED_MS, FairnessPlan


def f1(events: Sequence[RequestEvent], plan: FairnessPlan, cal: Calibration, cfg: FairnessConfig) -> Verdict:
    n = plan.f1_streams
    if n < 2:
        return inconclusive("F1", f"needs at least 2 slots (server has {plan.slots})")
    if not events:
        return inconclusive("F1", "no F1 requests were recorded")
    if (err := request_errors(events)):
        return inconclusive("F1", err, len(events))
    win, why = steady_window(list(events), n)
    done = completed_in_window(list(events), win) if win else []
    if len(done) < 2 * n:
        return inconclusive("F1", f"{len(done)} requests in the steady window, need {2 * n} "
                                  f"({why or 'too few'})",
                            len(done))
    if cal.prefill_tok_per_s is None:
        return inconclusive("F1", "no prefill-rate calibration")
    rates = [r for e in done if (r := served_decode_rate(e)) is not None]
    shares = shared_token_ratios(done, [e for e in events if e.ok])
    uncompared = sorted({e.stream for e in done} - {e.stream for e, _ in shares})
    if len(shares) < max(2, F1_COVERAGE_MIN * len(done)) or uncompared:
        # a stream left out could be the one the scheduler favours: no verdict on the others alone
        return inconclusive("F1", f"only {len(shares)} of the {len(done)} requests in the steady window "
                            f"decoded side by side with another for {MIN_SHARED_MS:g} ms (past {EDGE_MS:g} "
                            "ms "
                            f"edges) and {MIN_SHARED_TOKENS} tokens"
                            + (f"; never stream(s) {uncompared}" if uncompared else "")
                            + ": decodes too short or too staggered to compare their shares", len(shares))
    relative = [share for _, share in shares]
    ratio, jain = max(relative) / min(relative), jain_index(relative)
    iteration = median_or_none([g for e in done for g in itl_ms(e)]) or 0.0
    max_ttft = max(t for e in done if (t := ttft_ms(e)) is not None)
    spans = [(e.end_ns - first) / MS for e in done if (first := first_token_ns(e)) is not None]
    if plan.jitter_ms and statistics.median(spans) < 20 * plan.jitter_ms:
        return inconclusive("F1", f"decodes of {statistics.median(spans):.1f} ms are too short to resolve a "
                            f"10 % rate difference with {plan.jitter_ms:.2f} ms of round-trip jitter",
                            len(done))
    prefill_ms = n * plan.prompt / cal.prefill_tok_per_s * 1000.0
    ttft_bound = prefill_ms + cfg.f1_ttft_iterations * iteration + plan.jitter_ms
    shares_ok = ratio <= cfg.f1_max_min_ratio and jain >= cfg.f1_jain_min
    over = [e for e in done if (t := ttft_ms(e)) is not None and t > ttft_bound]
    # only when every stream's prompt fits one batch together: a prompt split over batches could
    # have its later chunks starved, which its own prompt time would then include
    one_batch = n * plan.prompt <= plan.n_batch
    slow = (slow_compute_only(over, ttft_bound - prefill_ms + RESOLUTION_MS, prefill_ms)
            if shares_ok and one_batch else None)
    ok = shares_ok and not over
    return _v("F1", "inconclusive" if slow else "pass" if ok else "fail", samples=len(shares), reason=slow,
              measured={"max_min_decode_rate": ratio, "jain_index": jain, "max_ttft_ms": max_ttft,
                        "max_min_decode_rate_across_rounds": max(rates) / min(rates) if rates else None},
              bounds={"max_min_decode_rate": cfg.f1_max_min_ratio, "jain_index": cfg.f1_jain_min,
                      "max_ttft_ms": ttft_bound},
              derivation=(f"{n} equal streams; max_min_decode_rate and jain over {len(shares)} of "
                          f"{len(done)} requests' token shares = (its tokens + 1) ÷ (its neighbours' + 1) "
                          "while they "
                          "decoded side by side (a host-wide slowdown or a narrower batch slows both "
                          "alike); "
                          f"TTFT bound = Σprompt {n}×{plan.prompt} tok ÷ prefill "
                          f"{cal.prefill_tok_per_s:.0f} tok/s + {cfg.f1_ttft_iterations:g} × iteration "
                          f"{iteration:.1f} ms (median ITL at N={n}) + RTT jitter {plan.jitter_ms:.2f} ms"))


def f2(events: Sequence[RequestEvent], plan: FairnessPlan, cfg: FairnessConfig) -> Verdict:
    n = len(plan.f2_sizes)
    if n < 2:
        return inconclusive("F2", f"needs at least 2 slots (server has {plan.slots})")
    if (err := request_errors(events)):
        return inconclusive("F2", err, len(events))
    alone: dict[int, list[float]] = {}
    together: dict[int, list[float]] = {}
    rounds: dict[int, list[RequestEvent]] = {}
    for e in of_role(events, "together"):
        rounds.setdefault(e.repetition, []).append(e)
    # a round counts only if its N requests were all in flight at one moment (on a loaded host
    # they can run one after another, which would say nothing about sharing the server)
    overlapped = {rep: evs for rep, evs in rounds.items() if len(evs) == n and all_in_flight(evs)}
    for e in of_role(events, "alone"):
        alone.setdefault(e.seq, []).append((e.end_ns - e.sent_ns) / MS)
    for evs in overlapped.values():
        for e in evs:
            together.setdefault(e.seq, []).append((e.end_ns - e.sent_ns) / MS)
    if set(alone) != set(range(n)) or not rounds:
        return inconclusive("F2", "missing alone or together requests", len(events))
    if set(together) != set(range(n)):
        return inconclusive("F2", f"in none of {len(rounds)} rounds were all {n} requests in flight at once "
                            f"(each ended before the last was sent): nothing was shared", len(events))
    slow = {i: statistics.mean(together[i]) / statistics.median(alone[i]) for i in range(n)}
    worst = max(slow, key=slow.__getitem__)
    bound = cfg.f2_slowdown_factor * n
    return _v("F2", "pass" if slow[worst] <= bound else "fail", samples=len(events),
              measured={"max_slowdown": slow[worst], **{f"slowdown_size{i}": slow[i] for i in range(n)}},
              bounds={"max_slowdown": bound},
              derivation=(f"{n} requests of sizes {_sizes_sent(events, plan)} (prompt, output) sent "
                          "together; slowdown = mean E2E together ÷ median E2E alone (3 runs); bound "
                          f"{cfg.f2_slowdown_factor:g} "
                          f"× N; worst: size {worst}; {len(overlapped)} of {len(rounds)} rounds had all {n} "
                          "in "
                          f"flight at once (only those count)"))


def _sizes_sent(events: Sequence[RequestEvent], plan: FairnessPlan) -> str:
    """F2's sizes as sent: a prompt too short for its request id grew to fit (plan.f2_sizes is the plan)."""
    def prompt(i: int, planned: int) -> str:
        sent = sorted({e.prompt_tokens for e in events if e.seq == i and e.role in ("alone", "together")})
        return str(planned) if not sent else f"{sent[0]}" if len(sent) == 1 else f"{sent[0]}-{sent[-1]}"
    return "[" + ", ".join(f"({prompt(i, p)}, {o})" for i, (p, o) in enumerate(plan.f2_sizes)) + "]"


def service_gap(done: Sequence[RequestEvent], clients: int, start_ns: int) -> list[tuple[float, float]]:
    """(t s, max − min accumulated weighted service over clients) after each completion, where a
    request's weight is prompt + 2·output tokens."""
    served = {c: 0.0 for c in range(clients)}
    out = []
    for e in sorted(done, key=lambda e: e.end_ns):
        served[e.stream] += e.prompt_tokens + 2 * e.output_tokens
        out.append(((e.end_ns - start_ns) / 1e9, max(served.values()) - min(served.values())))
    return out


def _slope(points: Sequence[tuple[float, float]]) -> float:
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 0.0 if den == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den


def f3(events: Sequence[RequestEvent], plan: FairnessPlan, cfg: FairnessConfig) -> Verdict:
    c = plan.f3_clients
    if (err := request_errors(events)):
        return inconclusive("F3", err, len(events))
    window = backlog_window(events)
    # measured requests only: a warmup ending inside the window would credit only the clients
    # whose warmup happened to end late (each client has exactly one)
    done = [e for e in events if window and e.phase == "measured" and window[0] <= e.end_ns <= window[1]]
    if window is None or len(done) < 2 * c:
        return inconclusive("F3", f"{len(done)} completions while all {c} clients were backlogged, need "
                                  f"{2 * c}",
                            len(done))
    share = backlogged_share(events, window, plan.slots)
    if share < BACKLOG_SHARE_MIN:
        return inconclusive("F3", f"more requests than the {plan.slots} slots were in flight for only "
                            f"{100 * share:.1f} % of the window (need {100 * BACKLOG_SHARE_MIN:.0f} %): "
                            f"the clients did not keep the server backlogged", len(done))
    costliest = max(e.prompt_tokens + 2 * e.output_tokens for e in done)
    gaps = service_gap(done, c, window[0])
    max_gap = max(g for _, g in gaps)
    growth = _slope(gaps) * (window[1] - window[0]) / 1e9
    ok = max_gap <= cfg.f3_diff_costliest * costliest and growth <= cfg.f3_trend_costliest * costliest
    return _v("F3", "pass" if ok else "fail", samples=len(done),
              measured={"max_service_gap_tokens": max_gap, "fitted_growth_tokens": growth,
                        "backlogged_share": share},
              bounds={"max_service_gap_tokens": cfg.f3_diff_costliest * costliest,
                      "fitted_growth_tokens": cfg.f3_trend_costliest * costliest},
              derivation=(f"{c} closed-loop clients on {plan.slots} slots; service = Σ(prompt + 2·output) "
                          "per client over the measured requests ending in the window; bounds "
                          f"{cfg.f3_diff_costliest:g}× and {cfg.f3_trend_costliest:g}× the costliest "
                          f"request ({costliest} weighted "
                          f"tokens); more requests than slots in flight for {100 * share:.0f} % of the "
                          "window"))
