"""The S checks: decode stall during a long prefill (S1), prompt admission while decoding (S2)
and prompt behind prompt (S3) (docs/fairness.md).

Each takes the check's measured events, the lane's `FairnessPlan` and `FairnessConfig` (S1 and S3
also its `Calibration`), and returns one `Verdict` whose statistics carry their CIs at the decision
level of the check's looks (analysis/intervals); timings the client stamped late are left out
(`late_stamped`), and `inconclusive` with a reason replaces a verdict the evidence cannot back.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from itertools import pairwise

from satbench.analysis.guards import (
    RESOLUTION_MS,
    known,
    late_stamped,
    prefilling_when_sent,
    solo_spread,
    stamp_note,
)
from satbench.analysis.intervals import (
    BOOTSTRAP_RESAMPLES,
    decision_level,
    median_interval,
    statistic,
    t_interval,
)
from satbench.analysis.verdicts import (
    MS,
    NO_TRUSTED,
    Calibration,
    Verdict,
    inconclusive,
    judged,
    median_or_none,
    of_role,
    request_errors,
    rounds_of,
)
from satbench.config.schema import FairnessConfig
from satbench.metrics.latency import first_token_ns, ttft_ms
from satbench.metrics.stats import percentile
from satbench.metrics.throughput import counted_prompt_tokens
from satbench.records.events import RequestEvent
from satbench.workload.fairness_plan import FairnessPlan

T_METHOD = "Student-t over rounds"


def _gaps(e: RequestEvent) -> list[tuple[int, int, float]]:
    """(start ns, end ns, ms per token) for each gap between token-carrying chunks."""
    ts = [(t, n) for t, n in e.chunks if n > 0]
    return [(a[0], b[0], (b[0] - a[0]) / MS / b[1]) for a, b in pairwise(ts)]


def decode_stall(events: Sequence[RequestEvent], plan: FairnessPlan, cal: Calibration,
                 cfg: FairnessConfig) -> Verdict:
    if plan.slots < 2:
        return inconclusive("S1", f"needs at least 2 slots (server has {plan.slots})")
    if (err := request_errors(events)):
        return inconclusive("S1", err, len(events))
    if plan.s1_prompt < 1.5 * plan.n_batch:
        return inconclusive("S1", f"the per-slot context ({plan.per_slot_ctx}) fits only a "
                                  f"{plan.s1_prompt}-token "
                            f"prompt, not one ≫ n_batch {plan.n_batch}")
    solo, inj, dec = of_role(events, "solo"), of_role(events, "injected"), of_role(events, "decoder")
    if not (solo and inj and dec):
        return inconclusive("S1", "missing the solo prompt, the injected prompt or the decoders")
    trusted = [e for e in solo if not late_stamped(e)]
    injections = [e for e in inj if not late_stamped(e)]
    if not trusted or not injections:
        return inconclusive("S1", stamp_note(solo + inj, NO_TRUSTED), len(events))
    solos = [ttft_ms(e) for e in trusted]
    if (unsteady := solo_spread(solos)):
        return inconclusive("S1", unsteady, len(events))
    rounds = []  # (baseline ITL, the decoders' ITLs during the injected prefill, its prefill ms)
    for e in injections:
        mine = [d for d in dec if d.repetition == e.repetition]
        end = known(first_token_ns(e))
        baseline = median_or_none([ms for d in mine for a, b, ms in _gaps(d) if b <= e.sent_ns])
        during = [ms for d in mine for a, b, ms in _gaps(d) if b > e.sent_ns and a < end]
        if baseline is not None and during:
            rounds.append((baseline, during, known(ttft_ms(e))))
    if not rounds:
        return inconclusive("S1", "the decoders were not decoding across the injected prefill", len(events))
    solo_prefill = statistics.median(known(t) for t in solos)
    # the prefill rate of this very prompt alone (long prompts prefill slower than short ones:
    # attention grows with the context), from the server's timings when it gives them
    rate = statistics.median(t.prompt_n / t.prompt_ms * 1000.0
                             if (t := e.timings) and t.prompt_n and t.prompt_ms
                             else counted_prompt_tokens(e) / known(ttft_ms(e)) * 1000.0 for e in trusted)
    baseline = statistics.median(b for b, _, _ in rounds)
    itl_bound = cfg.s1_batch_factor * plan.n_batch / rate * 1000.0 + baseline + plan.jitter_ms
    level = decision_level(cfg.looks("S1"))
    maxima = [max(during) for _, during, _ in rounds]
    ratios = [p / solo_prefill for _, _, p in rounds]
    stats = [statistic("max_itl_ms", statistics.mean(maxima), t_interval(maxima, level), itl_bound,
                       level=level, n=len(rounds), method=T_METHOD),
             statistic("prefill_ratio", statistics.mean(ratios), t_interval(ratios, level),
                       cfg.s1_prefill_factor, level=level, n=len(rounds), method=T_METHOD)]
    during = [g for _, d, _ in rounds for g in d]
    return judged("S1", stats, samples=len(during), rounds=rounds_of(inj), rounds_max=cfg.rounds("S1")[1],
                  measured={"p99_itl_ms": percentile(during, 99), "stalls": float(sum(
                      1 for b, d, _ in rounds for g in d if g > cfg.s1_stall_factor * b)),
                            "baseline_itl_ms": baseline,
                            "prefill_ms": statistics.mean(p for _, _, p in rounds),
                            "solo_prefill_ms": solo_prefill},
                  derivation=(f"{len(dec)} decoders, injected prompt {inj[0].prompt_tokens} tok (n_batch "
                              f"{plan.n_batch}, {cfg.s1_prompt_batches:g} × n_batch: more than the "
                              f"{cfg.s1_batch_factor:g} batches the bound allows a stall); {len(rounds)} "
                              f"injection(s), each statistic a mean over them; ITL bound = "
                              f"{cfg.s1_batch_factor:g} × n_batch ÷ its solo "
                              f"prefill rate {rate:.0f} tok/s + baseline {baseline:.1f} ms + jitter "
                              f"{plan.jitter_ms:.2f} ms; prefill_ratio = its prefill ÷ solo "
                              f"{solo_prefill:.0f} ms (median of {len(solos)}); stall = ITL > "
                              f"{cfg.s1_stall_factor:g} × baseline"
                              + (f"; {note}" if (note := stamp_note(solo + inj)) else "")))


def prompt_admission(events: Sequence[RequestEvent], plan: FairnessPlan, cfg: FairnessConfig) -> Verdict:
    if plan.slots < 2:
        return inconclusive("S2", f"needs at least 2 slots (server has {plan.slots})")
    if (err := request_errors(events)):
        return inconclusive("S2", err, len(events))
    solo, probes, dec = of_role(events, "solo"), of_role(events, "probe"), of_role(events, "decoder")
    if not (solo and probes and dec):
        return inconclusive("S2", "missing solo probes, probes or decoders")
    iterations, valid = [], []
    for rep in sorted({p.repetition for p in probes}):
        mine = [d for d in dec if d.repetition == rep]
        sent = [p for p in probes if p.repetition == rep]
        first_probe = min(p.sent_ns for p in sent)
        it = median_or_none([ms for e in mine for a, b, ms in _gaps(e) if b <= first_probe])
        # a probe counts if every decoder of its round was mid-stream when it was sent (a scheduler
        # that then holds it until the decoders end is what this check exists to catch)
        ok = [p for p in sent if mine and all(known(first_token_ns(d)) <= p.sent_ns < d.end_ns for d in mine)]
        if it is not None and ok:
            iterations.append(it)
            valid += ok
    if not iterations:
        return inconclusive("S2", "no probe was sent while all decoders were decoding", len(events))
    iteration = statistics.median(iterations)
    if cfg.s2_iterations * iteration < 2 * RESOLUTION_MS:
        return inconclusive("S2", f"{cfg.s2_iterations:g} iterations of {iteration:.2f} ms are below what "
                                  "the client "
                            f"resolves (~{RESOLUTION_MS:g} ms)", len(valid))
    trusted_solo = [e for e in solo if not late_stamped(e)]
    timed = [p for p in valid if not late_stamped(p)]
    if not trusted_solo or not timed:
        return inconclusive("S2", stamp_note(solo + valid, NO_TRUSTED), len(events))
    solo_ttft = statistics.median(known(ttft_ms(e)) for e in trusted_solo)
    delays = sorted(known(ttft_ms(p)) - solo_ttft for p in timed)
    bound = cfg.s2_iterations * iteration + plan.jitter_ms
    level = decision_level(cfg.looks("S2"))
    # the median: one late probe of a few is client noise, a scheduler that holds probes moves them all
    # (and leaves few valid ones: a held probe is admitted when a decoder ends, the next finds none)
    stats = [statistic("admission_delay_p50_ms", statistics.median(delays),
                       median_interval(delays, level, "S2"), bound, level=level, n=len(delays),
                       method=f"median over probes, percentile bootstrap ({BOOTSTRAP_RESAMPLES} resamples)")]
    return judged("S2", stats, samples=len(timed), rounds=rounds_of(probes), rounds_max=cfg.rounds("S2")[1],
                  measured={"max_admission_delay_ms": delays[-1],
                            "probes_over_bound": float(sum(1 for d in delays if d > bound))},
                  derivation=(f"{len(dec)} decoders, a slot free; delay = probe TTFT − solo TTFT "
                              f"{solo_ttft:.1f} ms (median of {len(trusted_solo)}); the median delay of "
                              f"{len(delays)} probes; bound = {cfg.s2_iterations:g} × "
                              "iteration "
                              f"{iteration:.1f} ms (decoders' median ITL) + RTT jitter "
                              f"{plan.jitter_ms:.2f} ms"
                              + (f"; {note}" if (note := stamp_note(solo + valid)) else "")))


def prompt_vs_prompt(events: Sequence[RequestEvent], plan: FairnessPlan, cal: Calibration,
                         cfg: FairnessConfig) -> Verdict:
    if plan.slots < 2:
        return inconclusive("S3", f"needs at least 2 slots (server has {plan.slots})")
    if (err := request_errors(events)):
        return inconclusive("S3", err, len(events))
    solo = of_role(events, "solo")
    halves: dict[int, dict[str, RequestEvent]] = {}
    for e in events:
        if e.role in ("first", "second"):
            halves.setdefault(e.repetition, {})[e.role] = e
    pairs = {rep: p for rep, p in halves.items() if len(p) == 2}  # a run stopped mid-pair leaves half of one
    if not solo or not pairs or cal.decode_iteration_ms is None:
        return inconclusive("S3", "missing the solo prompt, a complete pair or calibration")
    trusted = [e for e in solo if not late_stamped(e)]
    stamped = {rep: p for rep, p in pairs.items()
               if not (late_stamped(p["first"]) or late_stamped(p["second"]))}
    if not trusted or not stamped:
        return inconclusive("S3", stamp_note(solo + [e for p in pairs.values() for e in p.values()],
                                             NO_TRUSTED), len(events))
    solos = [ttft_ms(e) for e in trusted]
    if (unsteady := solo_spread(solos)):
        return inconclusive("S3", unsteady, len(events))
    # a pair counts only if the second prompt came while the first was still prefilling: else
    # nothing stood between them (a fast prefill, or a client that sent the second late)
    competed = {rep: p for rep, p in stamped.items() if prefilling_when_sent(p["first"], p["second"])}
    if not competed:
        took = known(ttft_ms(stamped[min(stamped)]["first"]))
        return inconclusive("S3", f"in none of the {len(stamped)} pair(s) was the second prompt sent "
                                  "before the first's "
                            f"first token (its prefill took {took:.1f} "
                            f"ms): the prompts never competed", len(events))
    solos_ms = [known(t) for t in solos]
    solo_prefill = statistics.median(solos_ms)
    # the second's own prefill is taken as its pair's first's TTFT: the same prompt length, prefilled
    # alone a moment before on the same host, so a host that is slower or faster in this pair shifts
    # both alike and the pair's own scatter stays in the CI (a lone reference measured earlier would
    # shift every pair at once, which no CI over pairs can see)
    excess = [known(ttft_ms(p["second"])) - 2 * known(ttft_ms(p["first"]))
              for _, p in sorted(competed.items())]
    bound = cfg.s3_iterations * cal.decode_iteration_ms + plan.jitter_ms
    level = decision_level(cfg.looks("S3"))
    stats = [statistic("second_wait_ms", statistics.mean(excess), t_interval(excess, level), bound,
                       level=level, n=len(excess), method="Student-t over pairs")]
    prompt = competed[min(competed)]["first"].prompt_tokens
    return judged("S3", stats, samples=len(excess), rounds=len(pairs), rounds_max=cfg.rounds("S3")[1],
                  measured={"max_second_wait_ms": max(excess)},
                  derivation=(f"two {prompt}-token prompts 10 ms apart (sized to prefill about "
                              f"{cfg.s3_prefill_ms:g} ms alone at the calibrated "
                              + (f"{cal.prefill_tok_per_s:.0f} tok/s" if cal.prefill_tok_per_s else "rate")
                              + f", at most {cfg.s3_prompt_batches:g} × n_batch {plan.n_batch}); wait = "
                              "second's TTFT − first's − its own prefill "
                              "(the first's TTFT, the same prompt; "
                              f"alone it took {solo_prefill:.0f} ms, median of {len(solos)}), the mean over "
                              f"{len(excess)} of {len(pairs)} pairs (those whose second came while the first "
                              f"was prefilling); bound = {cfg.s3_iterations:g} × iteration "
                              f"{cal.decode_iteration_ms:.1f} ms (lone decode ITL) + RTT jitter "
                              f"{plan.jitter_ms:.2f} ms"
                              + (f"; {note}" if (note := stamp_note(events)) else "")))
