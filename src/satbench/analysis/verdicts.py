"""Verdicts of the six checks, computed from raw events alone (DESIGN.md §6).

Every verdict carries the measured value, the bound and how the bound was derived from this
lane's own measurements: prefill rate at N = 1 and decode iteration time. `inconclusive` (with
its reason) replaces a silent pass whenever the evidence is missing or tainted.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, Literal

from pydantic import Field

from satbench.analysis.guards import (
    BACKLOG_SHARE_MIN,
    F1_COVERAGE_MIN,
    MIN_SHARED_TOKENS,
    RESOLUTION_MS,
    all_in_flight,
    backlog_window,
    backlogged_share,
    known,
    late_stamped,
    prefilling_when_sent,
    shared_token_ratios,
    slow_compute_only,
    solo_spread,
    stamp_note,
)
from satbench.config.schema import CHECK_NAMES, CheckName, FairnessConfig, Strict
from satbench.metrics.latency import first_token_ns, itl_ms, ttft_ms
from satbench.metrics.stats import percentile
from satbench.metrics.throughput import completed_in_window
from satbench.metrics.window import steady_window
from satbench.records.events import RequestEvent
from satbench.workload.fairness_plan import EDGE_MS, MIN_SHARED_MS, NAMES, FairnessPlan

MS = 1e6
S2_OUTLIER_MIN_PROBES = 5  # with this many valid probes, one late probe is taken as client noise
S2_OUTLIERS_ALLOWED = 1
NO_TRUSTED = "cannot be timed, leaving no reference or no measured request"


VerdictKind = Literal["pass", "fail", "inconclusive"]


class Verdict(Strict):
    check: CheckName
    name: str
    verdict: VerdictKind
    measured: dict[str, float | None] = Field(default_factory=dict)
    bounds: dict[str, float | None] = Field(default_factory=dict)
    derivation: str = ""
    reason: str | None = None
    samples: int = 0
    concurrency: int | None = Field(None, description="requests in flight while the check ran")


class Calibration(Strict):
    prefill_tok_per_s: float | None
    decode_iteration_ms: float | None


def _v(check: CheckName, verdict: VerdictKind, **kw: Any) -> Verdict:
    return Verdict(check=check, name=NAMES[check], verdict=verdict, **kw)


def _inconclusive(check: CheckName, reason: str, samples: int = 0) -> Verdict:
    return _v(check, "inconclusive", reason=reason, samples=samples)


def _errors(events: Sequence[RequestEvent]) -> str | None:
    bad = [e for e in events if not e.ok]
    if not bad:
        return None
    kinds = sorted({e.error.type for e in bad if e.error})
    return f"{len(bad)} request(s) failed ({', '.join(kinds)})"


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _role(events: Sequence[RequestEvent], role: str) -> list[RequestEvent]:
    return [e for e in events if e.role == role]


def calibrate(cal: Sequence[RequestEvent]) -> Calibration:
    """Prefill tok/s = median prompt_n ÷ prompt_ms of the lone prefill requests (TTFT when the
    server gives no timings); decode iteration = median ITL of the lone decode request."""
    rates = []
    for e in _role(cal, "prefill"):
        if not e.ok:
            continue
        if e.timings and e.timings.prompt_n and e.timings.prompt_ms:
            rates.append(e.timings.prompt_n / e.timings.prompt_ms * 1000.0)
        elif (t := ttft_ms(e)) is not None:
            rates.append(e.prompt_tokens / t * 1000.0)
    itls = [g for e in _role(cal, "decode") if e.ok for g in itl_ms(e)]
    return Calibration(prefill_tok_per_s=_median(rates), decode_iteration_ms=_median(itls))


def decode_rate(e: RequestEvent) -> float | None:
    """Per-request decode rate = (output tokens − 1) ÷ (end − first token), tokens/s."""
    first = first_token_ns(e)
    if first is None or e.output_tokens < 2 or e.end_ns <= first:
        return None
    return (e.output_tokens - 1) / ((e.end_ns - first) / 1e9)


def served_decode_rate(e: RequestEvent) -> float | None:
    """The rate the server decoded at = (predicted_n − 1) ÷ predicted_ms from its own timings,
    tokens/s; the client's decode_rate when the server gives none. A client that reads a stream
    late sees its chunks bunched (on a loaded host, 60 ms of decoding arrived within 16 ms), which
    is not the scheduler's doing."""
    t = e.timings
    if t is not None and t.predicted_n is not None and t.predicted_n >= 2 and t.predicted_ms:
        return (t.predicted_n - 1) / (t.predicted_ms / 1000.0)
    return decode_rate(e)


def jain_index(xs: Sequence[float]) -> float:
    """Jain = (Σx)² ÷ (n·Σx²); 1 when all equal."""
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def f1(events: Sequence[RequestEvent], plan: FairnessPlan, cal: Calibration, cfg: FairnessConfig) -> Verdict:
    n = plan.f1_streams
    if n < 2:
        return _inconclusive("F1", f"needs at least 2 slots (server has {plan.slots})")
    if not events:
        return _inconclusive("F1", "no F1 requests were recorded")
    if (err := _errors(events)):
        return _inconclusive("F1", err, len(events))
    win, why = steady_window(list(events), n)
    done = completed_in_window(list(events), win) if win else []
    if len(done) < 2 * n:
        return _inconclusive("F1", f"{len(done)} requests in the steady window, need {2 * n} "
                                   f"({why or 'too few'})",
                             len(done))
    if cal.prefill_tok_per_s is None:
        return _inconclusive("F1", "no prefill-rate calibration")
    rates = [r for e in done if (r := served_decode_rate(e)) is not None]
    shares = shared_token_ratios(done, [e for e in events if e.ok])
    uncompared = sorted({e.stream for e in done} - {e.stream for e, _ in shares})
    if len(shares) < max(2, F1_COVERAGE_MIN * len(done)) or uncompared:
        # a stream left out could be the one the scheduler favours: no verdict on the others alone
        return _inconclusive("F1", f"only {len(shares)} of the {len(done)} requests in the steady window "
                             f"decoded side by side with another for {MIN_SHARED_MS:g} ms (past {EDGE_MS:g} "
                             "ms "
                             f"edges) and {MIN_SHARED_TOKENS} tokens"
                             + (f"; never stream(s) {uncompared}" if uncompared else "")
                             + ": decodes too short or too staggered to compare their shares", len(shares))
    relative = [share for _, share in shares]
    ratio, jain = max(relative) / min(relative), jain_index(relative)
    iteration = _median([g for e in done for g in itl_ms(e)]) or 0.0
    max_ttft = max(t for e in done if (t := ttft_ms(e)) is not None)
    spans = [(e.end_ns - first) / MS for e in done if (first := first_token_ns(e)) is not None]
    if plan.jitter_ms and statistics.median(spans) < 20 * plan.jitter_ms:
        return _inconclusive("F1", f"decodes of {statistics.median(spans):.1f} ms are too short to resolve a "
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
        return _inconclusive("F2", f"needs at least 2 slots (server has {plan.slots})")
    if (err := _errors(events)):
        return _inconclusive("F2", err, len(events))
    alone: dict[int, list[float]] = {}
    together: dict[int, list[float]] = {}
    rounds: dict[int, list[RequestEvent]] = {}
    for e in _role(events, "together"):
        rounds.setdefault(e.repetition, []).append(e)
    # a round counts only if its N requests were all in flight at one moment (on a loaded host
    # they can run one after another, which would say nothing about sharing the server)
    overlapped = {rep: evs for rep, evs in rounds.items() if len(evs) == n and all_in_flight(evs)}
    for e in _role(events, "alone"):
        alone.setdefault(e.seq, []).append((e.end_ns - e.sent_ns) / MS)
    for evs in overlapped.values():
        for e in evs:
            together.setdefault(e.seq, []).append((e.end_ns - e.sent_ns) / MS)
    if set(alone) != set(range(n)) or not rounds:
        return _inconclusive("F2", "missing alone or together requests", len(events))
    if set(together) != set(range(n)):
        return _inconclusive("F2", f"in none of {len(rounds)} rounds were all {n} requests in flight at once "
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
    if (err := _errors(events)):
        return _inconclusive("F3", err, len(events))
    window = backlog_window(events)
    # measured requests only: a warmup ending inside the window would credit only the clients
    # whose warmup happened to end late (each client has exactly one)
    done = [e for e in events if window and e.phase == "measured" and window[0] <= e.end_ns <= window[1]]
    if window is None or len(done) < 2 * c:
        return _inconclusive("F3", f"{len(done)} completions while all {c} clients were backlogged, need "
                                   f"{2 * c}",
                             len(done))
    share = backlogged_share(events, window, plan.slots)
    if share < BACKLOG_SHARE_MIN:
        return _inconclusive("F3", f"more requests than the {plan.slots} slots were in flight for only "
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


def _gaps(e: RequestEvent) -> list[tuple[int, int, float]]:
    """(start ns, end ns, ms per token) for each gap between token-carrying chunks."""
    ts = [(t, n) for t, n in e.chunks if n > 0]
    return [(a[0], b[0], (b[0] - a[0]) / MS / b[1]) for a, b in pairwise(ts)]


def s1(events: Sequence[RequestEvent], plan: FairnessPlan, cal: Calibration, cfg: FairnessConfig) -> Verdict:
    if plan.slots < 2:
        return _inconclusive("S1", f"needs at least 2 slots (server has {plan.slots})")
    if (err := _errors(events)):
        return _inconclusive("S1", err, len(events))
    if plan.s1_prompt < 1.5 * plan.n_batch:
        return _inconclusive("S1", f"the per-slot context ({plan.per_slot_ctx}) fits only a "
                                   f"{plan.s1_prompt}-token "
                             f"prompt, not one ≫ n_batch {plan.n_batch}")
    solo, inj, dec = _role(events, "solo"), _role(events, "injected"), _role(events, "decoder")
    if not (solo and inj and dec):
        return _inconclusive("S1", "missing the solo prompt, the injected prompt or the decoders")
    inj_e, start = inj[0], inj[0].sent_ns
    trusted = [e for e in solo if not late_stamped(e)]
    if not trusted or late_stamped(inj_e):
        return _inconclusive("S1", stamp_note(solo + inj, NO_TRUSTED), len(events))
    solos = [ttft_ms(e) for e in trusted]
    if (unsteady := solo_spread(solos)):
        return _inconclusive("S1", unsteady, len(events))
    end = first_token_ns(inj_e)
    baseline = _median([ms for e in dec for a, b, ms in _gaps(e) if b <= start])
    during = [ms for e in dec for a, b, ms in _gaps(e) if b > start and a < known(end)]
    if baseline is None or not during:
        return _inconclusive("S1", "the decoders were not decoding across the injected prefill", len(events))
    solos_ms = [known(t) for t in solos]
    max_itl, p99 = max(during), percentile(during, 99)
    stalls = sum(1 for g in during if g > cfg.s1_stall_factor * baseline)
    prefill, solo_prefill = known(ttft_ms(inj_e)), statistics.median(solos_ms)
    # the prefill rate of this very prompt alone (long prompts prefill slower than short ones:
    # attention grows with the context), from the server's timings when it gives them
    rate = statistics.median(t.prompt_n / t.prompt_ms * 1000.0
                             if (t := e.timings) and t.prompt_n and t.prompt_ms
                             else e.prompt_tokens / known(ttft_ms(e)) * 1000.0 for e in trusted)
    itl_bound = cfg.s1_batch_factor * plan.n_batch / rate * 1000.0 + baseline + plan.jitter_ms
    ok = max_itl <= itl_bound and prefill <= cfg.s1_prefill_factor * solo_prefill
    return _v("S1", "pass" if ok else "fail", samples=len(during),
              measured={"max_itl_ms": max_itl, "p99_itl_ms": p99, "stalls": float(stalls),
                        "baseline_itl_ms": baseline, "prefill_ms": prefill},
              bounds={"max_itl_ms": itl_bound, "prefill_ms": cfg.s1_prefill_factor * solo_prefill},
              derivation=(f"{len(dec)} decoders, injected prompt {inj_e.prompt_tokens} tok (n_batch "
                          f"{plan.n_batch}); ITL bound = {cfg.s1_batch_factor:g} × n_batch ÷ its solo "
                          f"prefill rate {rate:.0f} tok/s + baseline {baseline:.1f} ms + jitter "
                          f"{plan.jitter_ms:.2f} ms; "
                          "prefill bound = "
                          f"{cfg.s1_prefill_factor:g} × solo "
                          f"{solo_prefill:.0f} ms (median of {len(solos)}); stall = ITL > "
                          f"{cfg.s1_stall_factor:g} × baseline"
                          + (f"; {note}" if (note := stamp_note(solo)) else "")))


def s2(events: Sequence[RequestEvent], plan: FairnessPlan, cfg: FairnessConfig) -> Verdict:
    if plan.slots < 2:
        return _inconclusive("S2", f"needs at least 2 slots (server has {plan.slots})")
    if (err := _errors(events)):
        return _inconclusive("S2", err, len(events))
    solo, probes, dec = _role(events, "solo"), _role(events, "probe"), _role(events, "decoder")
    if not (solo and probes and dec):
        return _inconclusive("S2", "missing solo probes, probes or decoders")
    first_probe = min(p.sent_ns for p in probes)
    iteration = _median([ms for e in dec for a, b, ms in _gaps(e) if b <= first_probe])
    # a probe counts if every decoder was mid-stream when it was sent (a scheduler that then holds
    # it until the decoders end is what this check exists to catch)
    valid = [p for p in probes if all(known(first_token_ns(d)) <= p.sent_ns < d.end_ns for d in dec)]
    if iteration is None or not valid:
        return _inconclusive("S2", "no probe was sent while all decoders were decoding", len(events))
    if cfg.s2_iterations * iteration < 2 * RESOLUTION_MS:
        return _inconclusive("S2", f"{cfg.s2_iterations:g} iterations of {iteration:.2f} ms are below what "
                                   "the client "
                             f"resolves (~{RESOLUTION_MS:g} ms)", len(valid))
    trusted_solo = [e for e in solo if not late_stamped(e)]
    probes = [p for p in valid if not late_stamped(p)]
    if not trusted_solo or not probes:
        return _inconclusive("S2", stamp_note(solo + valid, NO_TRUSTED), len(events))
    solo_ttft = statistics.median(known(ttft_ms(e)) for e in trusted_solo)
    delays = sorted(known(ttft_ms(p)) - solo_ttft for p in probes)
    delay = statistics.median(delays)
    bound = cfg.s2_iterations * iteration + plan.jitter_ms
    late = sum(1 for d in delays if d > bound)
    allowed = S2_OUTLIERS_ALLOWED if len(probes) >= S2_OUTLIER_MIN_PROBES else 0
    ok = delay <= bound and late <= allowed
    return _v("S2", "pass" if ok else "fail", samples=len(probes),
              measured={"admission_delay_ms": delay, "max_admission_delay_ms": delays[-1],
                        "probes_over_bound": float(late)},
              bounds={"admission_delay_ms": bound, "probes_over_bound": float(allowed)},
              derivation=(f"{len(dec)} decoders, a slot free; delay = probe TTFT − solo TTFT "
                          f"{solo_ttft:.1f} ms (median of {len(probes)} probes; every probe is held to the "
                          "bound, "
                          f"{allowed} outlier allowed as client noise); bound = {cfg.s2_iterations:g} × "
                          f"iteration {iteration:.1f} ms (decoders' median ITL) + RTT jitter "
                          f"{plan.jitter_ms:.2f} ms"
                          + (f"; {note}" if (note := stamp_note(solo + valid)) else "")))


def s3(events: Sequence[RequestEvent], plan: FairnessPlan, cal: Calibration, cfg: FairnessConfig) -> Verdict:
    if plan.slots < 2:
        return _inconclusive("S3", f"needs at least 2 slots (server has {plan.slots})")
    if (err := _errors(events)):
        return _inconclusive("S3", err, len(events))
    solo = _role(events, "solo")
    halves: dict[int, dict[str, RequestEvent]] = {}
    for e in events:
        if e.role in ("first", "second"):
            halves.setdefault(e.repetition, {})[e.role] = e
    pairs = {rep: p for rep, p in halves.items() if len(p) == 2}  # a run stopped mid-pair leaves half of one
    if not solo or not pairs or cal.decode_iteration_ms is None:
        return _inconclusive("S3", "missing the solo prompt, a complete pair or calibration")
    trusted = [e for e in solo if not late_stamped(e)]
    stamped = {rep: p for rep, p in pairs.items()
               if not (late_stamped(p["first"]) or late_stamped(p["second"]))}
    if not trusted or not stamped:
        return _inconclusive("S3", stamp_note(solo + [e for p in pairs.values() for e in p.values()],
                                              NO_TRUSTED), len(events))
    solos = [ttft_ms(e) for e in trusted]
    if (unsteady := solo_spread(solos)):
        return _inconclusive("S3", unsteady, len(events))
    # a pair counts only if the second prompt came while the first was still prefilling: else
    # nothing stood between them (a fast prefill, or a client that sent the second late)
    competed = {rep: p for rep, p in stamped.items() if prefilling_when_sent(p["first"], p["second"])}
    if not competed:
        took = known(ttft_ms(stamped[min(stamped)]["first"]))
        return _inconclusive("S3", f"in none of the {len(stamped)} pair(s) was the second prompt sent "
                                   "before the first's "
                             f"first token (its prefill took {took:.1f} "
                             f"ms): the prompts never competed", len(events))
    pairs = competed
    solos_ms = [known(t) for t in solos]
    solo_prefill, spread = statistics.median(solos_ms), max(solos_ms) - min(solos_ms)
    excess, worst = [], (0.0, 0.0)
    for pair in pairs.values():
        t1, t2 = known(ttft_ms(pair["first"])), known(ttft_ms(pair["second"]))
        bound = t1 + solo_prefill + cfg.s3_iterations * cal.decode_iteration_ms + spread + plan.jitter_ms
        excess.append(t2 - bound)
        if t2 - bound >= max(excess):
            worst = (t2, bound)
    return _v("S3", "pass" if max(excess) <= 0 else "fail", samples=len(pairs),
              measured={"second_ttft_ms": worst[0]}, bounds={"second_ttft_ms": worst[1]},
              derivation=(f"two {plan.s3_prompt}-token prompts 10 ms apart; bound = first's TTFT + solo "
                          f"prefill {solo_prefill:.0f} ms (median of {len(solos)}) + {cfg.s3_iterations:g} × "
                          f"iteration {cal.decode_iteration_ms:.1f} ms (lone decode ITL) + the solo "
                          "prefills' own "
                          f"spread {spread:.1f} ms + RTT jitter {plan.jitter_ms:.2f} ms; worst of "
                          f"{len(pairs)} "
                          f"pairs where the second came while the first was prefilling"
                          + (f"; {note}" if (note := stamp_note(events)) else "")))


def lane_verdicts(events: Sequence[RequestEvent], plan: FairnessPlan, cfg: FairnessConfig,
                  llamacpp: bool, lost: str | None = None) -> list[Verdict]:
    """The verdicts of the lane's chosen checks (all six by default) from its fairness events;
    `lost` (why the server was lost) names the cause for the checks that never sent a request."""
    if not llamacpp:
        why = "the server is not llama.cpp: its slots and batch size are unknown"
        return [_inconclusive(c, why) for c in cfg.checks]
    by = {c: [e for e in events if e.check == c and e.phase != "warmup"]
          for c in ("CAL", "F2", "S1", "S2", "S3")}
    closed = {c: [e for e in events if e.check == c] for c in ("F1", "F3")}
    cal = calibrate(by["CAL"])
    verdicts = {"F1": lambda: f1(closed["F1"], plan, cal, cfg), "F2": lambda: f2(by["F2"], plan, cfg),
                "F3": lambda: f3(closed["F3"], plan, cfg), "S1": lambda: s1(by["S1"], plan, cal, cfg),
                "S2": lambda: s2(by["S2"], plan, cfg), "S3": lambda: s3(by["S3"], plan, cal, cfg)}
    level = {"F1": plan.f1_streams, "F2": len(plan.f2_sizes), "F3": plan.f3_clients,
             "S1": plan.s1_decoders + 1, "S2": plan.s2_decoders + 1, "S3": 2}
    out = []
    for c in CHECK_NAMES:
        if c in cfg.checks:
            ran = any(e.check == c for e in events)
            v = verdicts[c]() if ran or lost is None else _inconclusive(c, f"not run: {lost}"[:600])
            v.concurrency = level[c] or None
            out.append(v)
    return out
