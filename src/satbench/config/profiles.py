"""How a lane loads its server, one class per load profile, chosen from the lane's fields in one place.

A lane's closed loop is either its fixed levels (FixedLevels: each level × `repetitions`,
interleaved) or the adaptive sweep (AdaptiveSweep: levels doubling from 1 up to the highest of
`levels`, each repeated until its throughput CI is narrow enough); its open loop (OpenRates),
when it gives rates, runs Poisson arrivals at each rate after the levels. The lane keeps the fields
it has always had (run.json records them); `LaneConfig.profile` and `LaneConfig.open_loop` read them
into profiles in one place, so that what `levels` means (run as given, or the ceiling of the
doubling) is the profile's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from satbench.config.ranges import (
    MAX_LEVEL,
    MAX_REQUESTS_PER_LEVEL,
    Budget,
    Fraction,
    Repetitions,
    RequestsPerStream,
    Retries,
)
from satbench.config.strict import Strict

DEFAULT_CI_TARGET = 0.05
RATE_WINDOW_S = 20.0  # an open-loop rate's default arrivals span about this long
RATE_MIN_REQUESTS = 100  # an open-loop rate's fewest default arrivals: a p95 needs 59 for an upper bound
MAX_RATE_SPAN_S = 86_400.0  # one day: the longest an open-loop rate's arrivals may span
OneRepetitionCi = Literal["none", "batch_means"]
Warmup = Literal["every_level", "first_level"]
# what a new adaptive lane runs with; a run.json written before these fields existed reads as the
# models' defaults, the behaviour it was measured and derived with
NEW_RUN_ADAPTIVE: dict[str, str] = {"one_repetition_ci": "batch_means", "warmup": "first_level"}


class AdaptiveConfig(Strict):
    """The adaptive sweep (saturation/planner.py): levels doubling from 1, each level's repetitions
    (interleaved with its neighbours') until its throughput CI is narrow enough. A lane without it runs
    its fixed levels × repetitions, interleaved."""

    ci_target: Fraction = Field(DEFAULT_CI_TARGET, description="stop a level's repetitions once the "
                                "throughput 95 % CI half-width ÷ mean is at most this")
    min_repetitions: Repetitions = Field(2, description="repetitions every level gets (a CI needs two)")
    max_repetitions: Repetitions = Field(5, description="most repetitions of one level (contended ones "
                                         "re-measured besides)")
    requests_per_stream: RequestsPerStream = Field(4, description="measured requests per stream and "
                                                   "repetition (a repetition is N × this)")
    contended_retries: Retries = Field(2, description="extra repetitions of a level measured while other "
                                       "processes took CPU")
    budget_s: Budget | None = Field(None, description="wall-clock budget of the lane's adaptive sweep, "
                                    "at least 1 s; None: no budget")
    one_repetition_ci: OneRepetitionCi = Field(
        "none", description="a level measured once: batch_means gives its throughput a CI from the batch "
        "means of its steady window, at least ±ONE_REPETITION_CI_FLOOR (metrics/throughput.py), and it "
        "needs no second repetition when every step to its neighbours is decided (saturation/planner.py); "
        "none: no CI from one repetition (runs made before it)")
    warmup: Warmup = Field("every_level", description="first_level: one warmup per stream before the "
                           "first level a server runs, later levels start warm; every_level: before each "
                           "level's first repetition (runs made before it)")

    @model_validator(mode="after")
    def _reps_ordered(self) -> AdaptiveConfig:
        if self.min_repetitions > self.max_repetitions:
            raise ValueError(f"min_repetitions {self.min_repetitions} > max_repetitions "
                             f"{self.max_repetitions}")
        return self


def design_minimum_requests(level: int) -> int:
    """At least max(8·N, 32) measured requests per level (docs/sweep.md)."""
    return max(8 * level, 32)


class FixedLevels(Strict):
    """The lane's levels run as given, each `repetitions` times, interleaved: every measurement is
    known before the sweep starts; --refine may add levels between them, and the fairness checks all run."""

    kind: Literal["fixed"] = "fixed"
    levels: list[int]
    repetitions: int
    requests_per_level: int | None = None

    given_levels: ClassVar[bool] = True
    """Runs its levels as given, each `repetitions` times: refine and repetitions act on it."""

    def measured_requests(self, level: int) -> int:
        """Measured requests per repetition of `level`: the user's number, else max(8N, 32)."""
        return design_minimum_requests(level) if self.requests_per_level is None else self.requests_per_level

    def ceiling(self, running_slots: int | None) -> int:
        """The highest level the lane may run: the highest given."""
        return max(self.levels)

    def most_repetitions(self) -> int:
        """The most repetitions one level can get."""
        return self.repetitions

    def solo_steps(self, refined: Sequence[int] = ()) -> list[tuple[int, int]]:
        """(level, repetition) of every solo measurement, repetition by repetition, with the levels
        --refine added (`refined`)."""
        return [(n, rep) for rep in range(1, self.repetitions + 1) for n in [*self.levels, *refined]]


class AdaptiveSweep(Strict):
    """The adaptive sweep: levels doubling from 1 up to the highest of `levels` (the ceiling), each
    repeated until its CI is narrow enough; the planner decides as it measures."""

    kind: Literal["adaptive"] = "adaptive"
    levels: list[int]
    adaptive: AdaptiveConfig
    requests_per_level: int | None = None

    given_levels: ClassVar[bool] = False

    def measured_requests(self, level: int) -> int:
        """Measured requests per repetition of `level`: the user's number, else N × requests_per_stream."""
        if self.requests_per_level is not None:
            return self.requests_per_level
        return level * self.adaptive.requests_per_stream

    def ceiling(self, running_slots: int | None) -> int:
        """The highest level the lane may run: max(levels); on a running server whose slot count is
        known (`running_slots`), at least one doubling past it (2 × slots), to see the server queue."""
        if running_slots:
            return min(max(max(self.levels), 2 * running_slots), MAX_LEVEL)
        return max(self.levels)

    def most_repetitions(self) -> int:
        """The most repetitions one level can get: the maximum and the contended ones re-measured."""
        return self.adaptive.max_repetitions + self.adaptive.contended_retries

    def solo_steps(self, refined: Sequence[int] = ()) -> list[tuple[int, int]]:
        """The estimate a progress bar starts from (the planner corrects it): the doubling levels up to
        the highest, `min_repetitions` each. Refinement does not apply."""
        top = max(self.levels)
        doubling = [1 << i for i in range(top.bit_length()) if 1 << i <= top]
        return [(n, rep) for n in doubling for rep in range(1, self.adaptive.min_repetitions + 1)]


class OpenRates(Strict):
    """Open-loop Poisson arrivals at each rate (requests/s), after the lane's levels, at most
    `cap` requests in flight."""

    kind: Literal["rates"] = "rates"
    rates: list[float]
    rate_requests: int | None = None
    max_concurrency: int | None = None

    def arrivals(self, rate_rps: float) -> int:
        """Measured arrivals of one rate: the user's rate_requests, else max(RATE_MIN_REQUESTS,
        ⌈RATE_WINDOW_S × rate⌉) (about RATE_WINDOW_S seconds of arrivals, and enough for a p95 with a
        bounded CI), at most MAX_REQUESTS_PER_LEVEL."""
        if self.rate_requests is not None:
            return self.rate_requests
        return min(max(RATE_MIN_REQUESTS, math.ceil(RATE_WINDOW_S * rate_rps)), MAX_REQUESTS_PER_LEVEL)

    def cap(self, slots: int) -> int:
        """Requests in flight at most: max_concurrency, else 2 × the server's slots."""
        return self.max_concurrency or min(2 * max(slots, 1), MAX_LEVEL)

    def span_problem(self) -> str | None:
        """Why a rate's arrivals would span more than MAX_RATE_SPAN_S (a rate of 0.0001/s would send
        its 100 arrivals over 11.6 days), or None."""
        for rate in self.rates:
            span_s = self.arrivals(rate) / rate
            if span_s > MAX_RATE_SPAN_S:
                return (f"rate {rate:g}/s: its {self.arrivals(rate):,} arrivals would take about "
                        f"{_span_text(span_s)}, more than {_span_text(MAX_RATE_SPAN_S)}: raise the rate or "
                        "lower rate_requests")
        return None


LoadProfile = Annotated[FixedLevels | AdaptiveSweep | OpenRates, Field(discriminator="kind")]
ClosedLoop = FixedLevels | AdaptiveSweep


def _span_text(seconds: float) -> str:
    """'11.6 days', '3.2 h', '45 s': a time span as a refusal names it."""
    if seconds >= 86_400:
        return f"{seconds / 86_400:.3g} days"
    return f"{seconds / 3600:.3g} h" if seconds >= 3600 else f"{seconds:.3g} s"
