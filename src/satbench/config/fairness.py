"""The fairness and starvation checks' configuration (docs/fairness.md): which checks a lane runs, their
workload sizes, thresholds (docs/definitions.md#fairness-bounds), base rounds and caps; config/schema
re-exports it for the lane model.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from satbench.config.ranges import (
    CheckRequests,
    CheckStreams,
    Factor,
    Fraction,
    InjectedBatches,
    Iterations,
    Milliseconds,
    Probes,
    Quantile,
    Ratio,
    Repetitions,
    Rounds,
    Slots,
)
from satbench.config.strict import Strict

CheckName = Literal["F1", "F2", "F3", "S1", "S2", "S3"]  # the fairness (F) and starvation (S) checks
CHECK_NAMES: tuple[CheckName, ...] = ("F1", "F2", "F3", "S1", "S2", "S3")


class FairnessConfig(Strict):
    """Workload sizes, thresholds and rounds of the fairness and starvation checks (docs/fairness.md).

    Every bound is derived from the lane's own measurements (prefill rate at N = 1, decode
    iteration time); these numbers only scale them. Each check runs its base rounds, then one
    more round at a time while its CI straddles a bound, up to its cap (`rounds`; docs/fairness.md).
    Override any of them per lane in the lane file under [lanes.fairness].
    """

    checks: list[CheckName] = Field(
        default_factory=lambda: list(CHECK_NAMES), min_length=1,
        description="which checks to run (all six by default)")
    f1_streams: CheckStreams | None = Field(None, description="F1 concurrency (default min(slots, 4))")
    f1_requests_per_stream: CheckRequests = Field(4, description="F1 requests per stream and round "
                                                  "(after one warmup each; 4 streams × 4 give 16 "
                                                  "measured TTFTs, the fewest whose p75 has an upper "
                                                  "end at 97.5 %)")
    f1_rounds_max: Rounds = Field(2, description="F1 rounds at most (one, then more while a CI straddles)")
    f1_max_min_ratio: Ratio = Field(1.10, description="max over pairs of streams of their pooled token "
                                    "ratio (either way)")
    f1_jain_min: Fraction = Field(0.99, description="reported beside the ratio (it does not decide)")
    f1_ttft_iterations: Iterations = Field(
        2.0, description="iterations added to Σprompt ÷ prefill rate")
    f1_ttft_quantile: Quantile = Field(0.75, description="the TTFT quantile held to the work-conserving "
                                       "bound")
    f2_slowdown_factor: Factor = Field(1.1, description="bound = factor × N")
    f2_repetitions: Repetitions = Field(3, description="F2 together rounds before the first look")
    f2_rounds_max: Rounds = Field(4, description="F2 together rounds at most")
    f3_extra_clients: Slots | None = Field(None, description="clients beyond the slots "
                                           "(default max(2, slots/2))")
    f3_requests_per_client: CheckRequests = Field(4, description="F3 requests per client and round")
    f3_rounds_max: Rounds = Field(2, description="F3 rounds at most")
    f3_gap_quantile: Quantile = Field(0.9, description="the quantile of the service gap over completions")
    f3_diff_costliest: Factor = Field(2.0, description="bound on the gap's quantile, in costliest requests")
    f3_trend_costliest: Factor = Field(0.5, description="bound on the gap's drift per client cycle, in "
                                       "costliest requests")
    s1_prompt_batches: InjectedBatches = Field(
        1.75, description="injected prompt = this × n_batch tokens (more than s1_batch_factor, so that "
        "decoders frozen for the whole prefill fail)")
    s1_decoders: Slots | None = Field(None, description="decoding streams (default min(slots - 1, 3))")
    s1_batch_factor: Factor = Field(1.5, description="max ITL ≤ factor × n_batch ÷ prefill rate "
                                                     "+ baseline")
    s1_prefill_factor: Ratio = Field(1.25, description="injected prefill ≤ factor × its solo time")
    s1_stall_factor: Ratio = Field(3.0, description="a stall is an ITL > factor × baseline median")
    s1_rounds: Rounds = Field(2, description="S1 injections before the first look")
    s1_rounds_max: Rounds = Field(3, description="S1 injections at most")
    s2_iterations: Factor = 2.0
    s2_probes: Probes = Field(5, description="S2 probes per round")
    s2_rounds_max: Rounds = Field(3, description="S2 rounds at most")
    s3_iterations: Factor = 2.0
    s3_prompt_batches: Factor = Field(1.0, description="each prompt = at most this × n_batch tokens")
    s3_prefill_ms: Milliseconds = Field(1000.0, description="each prompt is sized to prefill about this "
                                        "long alone at the calibrated rate (at most s3_prompt_batches × "
                                        "n_batch)")
    s3_repetitions: Repetitions = Field(3, description="S3 pairs before the first look")
    s3_rounds_max: Rounds = Field(5, description="S3 pairs at most")

    def rounds(self, check: CheckName) -> tuple[int, int]:
        """(base rounds, cap) of a check: a round is F1's or F3's closed loop, F2's together round,
        one S1 injection, S2's decoders with their probes, one S3 pair."""
        return {"F1": (1, self.f1_rounds_max), "F2": (self.f2_repetitions, self.f2_rounds_max),
                "F3": (1, self.f3_rounds_max), "S1": (self.s1_rounds, self.s1_rounds_max),
                "S2": (1, self.s2_rounds_max), "S3": (self.s3_repetitions, self.s3_rounds_max)}[check]

    def looks(self, check: CheckName) -> int:
        """How often a check may be decided: after its base rounds and after each top-up."""
        base, cap = self.rounds(check)
        return cap - base + 1

    @field_validator("checks")
    @classmethod
    def _checks_once(cls, checks: list[CheckName]) -> list[CheckName]:
        if len(set(checks)) != len(checks):
            raise ValueError(f"a check is named twice: {', '.join(checks)}")
        return checks

    @model_validator(mode="after")
    def _caps_above_bases(self) -> FairnessConfig:
        for check in CHECK_NAMES:
            base, cap = self.rounds(check)
            if cap < base:
                raise ValueError(f"{check.lower()}_rounds_max {cap} is below its {base} base rounds")
        return self
