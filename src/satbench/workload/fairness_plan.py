"""The sizes of every fairness workload, derived from the lane (one place, used by the runner,
by the server's context sizing and by the verdicts).

The checks size their own requests and never draw them: a lane whose lengths are a distribution
(workload/lengths.py) gives them its rounded means (`WorkloadConfig.prompt_tokens`, `output_tokens`),
fixed for every request, since each verdict compares requests of known, equal or chosen sizes."""

from __future__ import annotations

import math

from satbench.config.schema import CheckName, FairnessConfig, LaneConfig, Strict
from satbench.records.manifest import NetworkInfo, RuntimeInfo

MIN_SHARED_MS = 250.0  # F1: an interval side by side counts when it lasted this long, less its edges
# trimmed from each end of an interval side by side: a client reading a stream late bunches it there
EDGE_MS = 50.0
F1_DECODE_TARGET_MS = 2 * (MIN_SHARED_MS + 2 * EDGE_MS)  # F1 sizes its requests to decode this long alone

CAL_OUTPUT = 48  # tokens of the lone decode request that measures the decode iteration
CAL_PREFILLS = 2  # lone prefill requests that measure the prefill rate (their median)
# lone references of F2's sizes and of S2's and S3's prompts: two, the fewest whose spread the
# steadiness guard (analysis/guards.solo_spread) can judge
REFERENCES = 2
REFERENCE_SETS = 2  # a second set of F2's and S3's references when the first was too unsteady to serve
S1_REFERENCES = 1  # S1's long prompt alone: its prefill costs as much as an injection round
F1_OUTPUT_MIN = 32  # F1's requests decode at least this many tokens (more on a fast server)
NAMES = {
    "F1": "equal requests",
    "F2": "mixed sizes",
    "F3": "backlogged clients",
    "S1": "decode stall during a long prefill",
    "S2": "prompt admission while decoding",
    "S3": "prompt behind prompt",
}


class FairnessPlan(Strict):
    slots: int
    per_slot_ctx: int | None
    jitter_ms: float
    n_batch: int
    prompt: int
    output: int
    f1_streams: int
    f1_output: int
    f2_sizes: list[tuple[int, int]]
    f3_clients: int
    s1_decoders: int
    s1_prompt: int
    s1_decoder_output: int
    s2_decoders: int
    s2_decoder_output: int
    s3_prompt: int
    s3_output: int
    calibration_prompt: int
    calibration_output: int

    def per_slot_ctx_needed(self) -> int:
        """Largest prompt + output any single request of the checks needs, plus a margin."""
        largest = max([p + o for p, o in self.f2_sizes] + [
                       self.s1_prompt + 4, self.s3_prompt + self.s3_output,
                       self.prompt + self.f1_output,
                       self.prompt + self.s1_decoder_output, self.prompt + self.s2_decoder_output,
                       self.calibration_prompt + self.calibration_output])
        return largest + 16


def in_flight(plan: FairnessPlan, check: str) -> int:
    """The most requests a check has in flight at once (what a server that fell over was asked)."""
    return {"F1": plan.f1_streams, "F2": len(plan.f2_sizes), "F3": plan.f3_clients,
            "S1": plan.s1_decoders + 1, "S2": plan.s2_decoders + 1, "S3": 2}.get(check, 1)


def check_requests(plan: FairnessPlan, f: FairnessConfig) -> dict[CheckName, tuple[int, int]]:
    """(lone references, requests per round) of each check the plan can run: per round F1's and F3's
    closed loops (a warmup per stream), F2's N requests together, S1's decoders and injected prompt,
    S2's decoders and probes, S3's pair."""
    n2 = len(plan.f2_sizes)
    two = plan.slots >= 2
    per_round: dict[CheckName, int] = {
        "F1": plan.f1_streams * (1 + f.f1_requests_per_stream) if plan.f1_streams >= 2 else 0,
        "F2": n2 if n2 >= 2 else 0, "F3": plan.f3_clients * (1 + f.f3_requests_per_client),
        "S1": plan.s1_decoders + 1 if two else 0, "S2": plan.s2_decoders + f.s2_probes if two else 0,
        "S3": 2 if two else 0}
    fixed: dict[CheckName, int] = {"F1": 0, "F2": REFERENCES * n2, "F3": 0, "S1": S1_REFERENCES,
                                   "S2": REFERENCES, "S3": REFERENCES}
    return {c: (fixed[c], n) for c, n in per_round.items() if n}


def check_request_count(plan: FairnessPlan, f: FairnessConfig, check: CheckName) -> int:
    """How many requests one check sends at most: its lone references and every round to its cap
    (0 for a check the plan cannot run)."""
    fixed, n = check_requests(plan, f).get(check, (0, 0))
    return fixed + n * f.rounds(check)[1] if n else 0


def first_round_requests(plan: FairnessPlan, f: FairnessConfig) -> int:
    """How many requests the fairness checks send at least when every check in `f.checks` runs: the
    prefill calibration, the lone decode, and each check's lone references and first round."""
    counts = check_requests(plan, f)
    return CAL_PREFILLS + 1 + sum(sum(counts[c]) for c in f.checks if c in counts)


def request_count(plan: FairnessPlan, lane: LaneConfig) -> int:
    """How many requests the fairness workloads send at most, every check to its cap (the
    progress bar's total: the runner takes off the top-ups a decided check does not run)."""
    f = lane.fairness
    return CAL_PREFILLS + 1 + sum(check_request_count(plan, f, c) for c in f.checks)


def s3_prompt_tokens(plan: FairnessPlan, f: FairnessConfig, prefill_tok_per_s: float | None) -> int:
    """S3's prompts, sized to the lane's calibrated prefill rate: about `s3_prefill_ms` of prefill
    alone, at most the plan's (s3_prompt_batches × n_batch, within the per-slot context), at least
    the plan's prompt (the lane's request); the plan's without a calibration."""
    if not prefill_tok_per_s:
        return plan.s3_prompt
    wanted = math.ceil(prefill_tok_per_s * f.s3_prefill_ms / 1000.0)
    return max(min(plan.prompt, plan.s3_prompt), min(wanted, plan.s3_prompt))


def make_plan(lane: LaneConfig, slots: int, per_slot_ctx: int | None = None,
              jitter_ms: float = 0.0) -> FairnessPlan:
    """Sizes for `slots` slots; with the server's `per_slot_ctx` known, long prompts are capped
    to fit it (S1 then says whether the cap still leaves a prompt ≫ n_batch). `jitter_ms` (the
    client↔server round trip's p95) widens the latency bounds by what the client cannot resolve."""
    f, w = lane.fairness, lane.workload
    n_batch = lane.server.n_batch
    if per_slot_ctx:  # llama.cpp lowers n_batch to the whole context when that is smaller
        n_batch = min(n_batch, per_slot_ctx if lane.server.kv_unified else per_slot_ctx * slots)
    p, o = w.prompt_tokens, w.output_tokens
    room = (per_slot_ctx - 16) if per_slot_ctx else None
    s1_prompt = math.ceil(f.s1_prompt_batches * n_batch)
    if room is not None:
        s1_prompt = min(s1_prompt, room - 4)
    s1_decoders = max(1, min(f.s1_decoders or 3, slots - 1))  # each decoder holds a slot beside the prompt
    chunks = math.ceil(s1_prompt / n_batch)
    sizes = [(max(8, p // 2), max(2, o // 2)), (p, o), (2 * p, 2 * o),
             (4 * p, 4 * o)][: max(1, min(slots, 4))]
    if room is not None:
        sizes = [(min(sp, room - so), so) for sp, so in sizes]
    s3_prompt = math.ceil(f.s3_prompt_batches * n_batch)
    if room is not None:
        s3_prompt = min(s3_prompt, room - 16)
    cal_prompt = min(n_batch, 512)
    if room is not None:  # a calibration the per-slot context refuses leaves every bound without its rate
        cal_prompt = min(cal_prompt, room - CAL_OUTPUT)
    return FairnessPlan(
        slots=slots, per_slot_ctx=per_slot_ctx, jitter_ms=jitter_ms, n_batch=n_batch, prompt=p, output=o,
        f1_streams=min(f.f1_streams or min(slots, 4), slots) if slots >= 2 else 0,
        # the floor; the runner lengthens to decode F1_DECODE_TARGET_MS alone (run/fairness.py f1_output)
        f1_output=max(F1_OUTPUT_MIN, o),
        f2_sizes=sizes,
        f3_clients=slots + (f.f3_extra_clients or max(2, slots // 2)),
        s1_decoders=s1_decoders, s1_prompt=s1_prompt,
        s1_decoder_output=16 + 2 * chunks + 16,
        s2_decoders=max(1, slots - 1), s2_decoder_output=max(64, 8 * f.s2_probes + 32),
        s3_prompt=s3_prompt, s3_output=16,
        calibration_prompt=cal_prompt, calibration_output=CAL_OUTPUT,
    )


def fairness_plan(lane: LaneConfig, runtime: RuntimeInfo, network: NetworkInfo) -> FairnessPlan:
    """The plan for the server as it started: its slots, per-slot context and RTT jitter, all
    recorded in run.json, so `analyze` rebuilds exactly the plan the run used."""
    return make_plan(lane, runtime.total_slots or lane.slots_wanted(), runtime.per_slot_ctx,
                     network.rtt_ms_p95 or 0.0)
