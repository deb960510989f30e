"""The S checks: decode stall during a long prefill (S1), prompt admission while decoding (S2)
and prompt behind prompt (S3) (DESIGN.md §6).

Each takes the check's measured events, the lane's `FairnessPlan` and `FairnessConfig` (S1 and S3
also its `Calibration`), and returns one `Verdict`; timings the client stamped late are left out
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
from satbench.analysis.verdicts import (
    MS,
    NO_TRUSTED,
    Calibration,
    Verdict,
    inconclusive,
    median_or_none,
    of_role,
    request_errors,
)
from satbench.analysis.verdicts import make_verdict as _v
from satbench.config.schema import FairnessConfig
from satbench.metrics.latency import first_token_ns, ttft_ms
from satbench.metrics.stats import percentile
from satbench.metrics.throughput import counted_prompt_tokens
from satbench.records.events import RequestEvent
from satbench.workload.fairness_plan import FairnessPlan

S2_OUTLIER_MIN_PROBES = 5  # with this many valid probes, one late probe is taken as client noise
S2_OUTLIERS_ALLOWED = 1


def _gaps(e: RequestEvent) -> list[tuple[int, int, float]]:
    """(start ns, end ns, ms per token) for each gap between token-carrying chunks."""
    ts = [(t, n) for t, n in e.chunks if n > 0]
    return [(a[0], b[0], (b[0] - a[0]) / MS / b[1]) for a, b in pairwise(ts)]


def s1(events: Sequence[RequestEvent], plan: FairnessPlan, cal: Calibration, cfg: FairnessConfig) -> Verdict:
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
    inj_e, start = inj[0], inj[0].sent_ns
    trusted = [e for e in solo if not late_stamped(e)]
    if not trusted or late_stamped(inj_e):
        return inconclusive("S1", stamp_note(solo + inj, NO_TRUSTED), len(events))
    solos = [ttft_ms(e) for e in trusted]
    if (unsteady := solo_spread(solos)):
        return inconclusive("S1", unsteady, len(events))
    end = first_token_ns(inj_e)
    baseline = median_or_none([ms for e in dec for a, b, ms in _gaps(e) if b <= start])
    during = [ms for e in dec for a, b, ms in _gaps(e) if b > start and a < known(end)]
    if baseline is None or not during:
        return inconclusive("S1", "the decoders were not decoding across the injected prefill", len(events))
    solos_ms = [known(t) for t in solos]
    max_itl, p99 = max(during), percentile(during, 99)
    stalls = sum(1 for g in during if g > cfg.s1_stall_factor * baseline)
    prefill, solo_prefill = known(ttft_ms(inj_e)), statistics.median(solos_ms)
    # the prefill rate of this very prompt alone (long prompts prefill slower than short ones:
    # attention grows with the context), from the server's timings when it gives them
    rate = statistics.median(t.prompt_n / t.prompt_ms * 1000.0
                             if (t := e.timings) and t.prompt_n and t.prompt_ms
                             else counted_prompt_tokens(e) / known(ttft_ms(e)) * 1000.0 for e in trusted)
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
        return inconclusive("S2", f"needs at least 2 slots (server has {plan.slots})")
    if (err := request_errors(events)):
        return inconclusive("S2", err, len(events))
    solo, probes, dec = of_role(events, "solo"), of_role(events, "probe"), of_role(events, "decoder")
    if not (solo and probes and dec):
        return inconclusive("S2", "missing solo probes, probes or decoders")
    first_probe = min(p.sent_ns for p in probes)
    iteration = median_or_none([ms for e in dec for a, b, ms in _gaps(e) if b <= first_probe])
    # a probe counts if every decoder was mid-stream when it was sent (a scheduler that then holds
    # it until the decoders end is what this check exists to catch)
    valid = [p for p in probes if all(known(first_token_ns(d)) <= p.sent_ns < d.end_ns for d in dec)]
    if iteration is None or not valid:
        return inconclusive("S2", "no probe was sent while all decoders were decoding", len(events))
    if cfg.s2_iterations * iteration < 2 * RESOLUTION_MS:
        return inconclusive("S2", f"{cfg.s2_iterations:g} iterations of {iteration:.2f} ms are below what "
                                  "the client "
                            f"resolves (~{RESOLUTION_MS:g} ms)", len(valid))
    trusted_solo = [e for e in solo if not late_stamped(e)]
    probes = [p for p in valid if not late_stamped(p)]
    if not trusted_solo or not probes:
        return inconclusive("S2", stamp_note(solo + valid, NO_TRUSTED), len(events))
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
