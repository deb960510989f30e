"""What a run will cost before it starts: satbench's own memory per level, open-loop rate and fairness
check (`workload_bytes`, `check_memory_fits`), and the records it writes at least (`fixed_records`,
`check_records_fit`), each refused with one line when it cannot fit.
"""

from __future__ import annotations

from satbench.config.limits import MAX_EVENTS
from satbench.config.ranges import MAX_LEVEL, MAX_REQUESTS_PER_LEVEL
from satbench.config.schema import LaneConfig, RunConfig
from satbench.errors import UserError
from satbench.workload.builder import BACKGROUND_POOL_PER_STREAM

# satbench's own memory per request and per stream (see `workload_bytes`)
REQUEST_BYTES = 4096  # the request, its id, its prefix's ids, its event record
BYTES_PER_PROMPT_ID = 8  # one list slot per prompt token id (the filler's ints are shared)
STREAM_BYTES = 256 * 1024  # one connection: its task, socket buffers, response and SSE parser buffers
BYTES_PER_SENT_ID = 8  # a prompt id in flight, as JSON text (up to 7 digits and a comma)
BYTES_PER_OUTPUT_TOKEN = 128  # a streamed token: its SSE event text and its (time, tokens) record


def level_requests(lane: LaneConfig, level: int, background: bool) -> int:
    """Requests a level's plan builds before it runs: warmup, measured and (together) background."""
    pool = level * BACKGROUND_POOL_PER_STREAM if background else 0
    return level * lane.warmup_per_stream + lane.measured_requests(level) + pool


def workload_bytes(lane: LaneConfig, level: int, background: bool) -> int:
    """satbench's own memory for one level of `lane`, in bytes:

        requests(N) × (REQUEST_BYTES + prompt_tokens × BYTES_PER_PROMPT_ID)
        + N × (STREAM_BYTES + prompt_tokens × BYTES_PER_SENT_ID + output_tokens × BYTES_PER_OUTPUT_TOKEN)

    where requests(N) = N × warmup_per_stream + measured requests + (together) N × background pool per
    stream: every request of the level is built, each with its prompt's token ids, before the first is
    sent, and each of the N streams holds one connection with a request in flight. prompt_tokens and
    output_tokens are the most a request can draw (`WorkloadConfig.prompt_bounds`, `output_bounds`)."""
    prompt, output = lane.workload.prompt_bounds()[1], lane.workload.output_bounds()[1]
    per_request = REQUEST_BYTES + prompt * BYTES_PER_PROMPT_ID
    per_stream = STREAM_BYTES + prompt * BYTES_PER_SENT_ID + output * BYTES_PER_OUTPUT_TOKEN
    planned = level_requests(lane, level, background) * per_request
    streams = level * per_stream
    return planned + streams


def open_bytes(lane: LaneConfig) -> int:
    """satbench's own memory for the lane's largest open-loop rate, by `workload_bytes`'s rule: its
    requests are built before the first arrives, and at most `open_cap` of them are in flight (the cap
    of a server with the slots the lane asks for)."""
    rates = lane.open_loop
    assert rates is not None
    w = lane.workload
    planned = rates.arrivals(max(rates.rates)) * (REQUEST_BYTES + w.prompt_tokens * BYTES_PER_PROMPT_ID)
    streams = rates.cap(lane.slots_wanted()) * (STREAM_BYTES + w.prompt_tokens * BYTES_PER_SENT_ID
                                                + w.output_tokens * BYTES_PER_OUTPUT_TOKEN)
    return planned + streams


MAX_CHECK_STREAMS = MAX_LEVEL  # requests in flight at once in one fairness check, as in one level
MAX_CHECK_PLANNED = MAX_REQUESTS_PER_LEVEL  # requests one fairness check builds, as one level may


def check_memory_fits(cfg: RunConfig, lane_file: bool, available_bytes: int | None = None) -> None:
    """UserError when one of `_memory_needs` needs more of satbench's own memory than is available
    (`available_bytes`, default hardware.ram_available()), after `check_fairness_sizes` of each lane."""
    fairness = cfg.with_fairness or cfg.fairness_only
    if fairness:
        for lane in cfg.lanes:
            check_fairness_sizes(lane, lane_file)
    if available_bytes is None:
        from satbench.host import hardware

        available_bytes = hardware.ram_available()
    for where, nbytes in _memory_needs(cfg, lane_file, fairness):
        if nbytes > available_bytes:
            raise UserError(f"{where}: satbench would need about {_gib(nbytes)} for its requests and "
                            f"streams, more than the {_gib(available_bytes)} of memory available; use lower "
                            "levels, fewer requests per level or shorter prompts")


def _memory_needs(cfg: RunConfig, lane_file: bool, fairness: bool) -> list[tuple[str, int]]:
    """(what, bytes of satbench's own memory it needs), in this order: the largest level of each lane
    (alone) and its largest open-loop rate, the together scenario (every lane's top level at once:
    their `workload_bytes` summed), and (`fairness`) each lane's largest check (`fairness_checks`)."""
    need: list[tuple[str, int]] = []
    if not cfg.fairness_only:
        need += [(f"{f'lane {lane.name}: concurrency' if lane_file else '--concurrency'} {max(lane.levels)}",
                  workload_bytes(lane, max(lane.levels), False)) for lane in cfg.lanes]
        need += [(f"{_lane(lane, lane_file)}--rate {max(rates.rates):g}", open_bytes(lane))
                 for lane in cfg.lanes if (rates := lane.open_loop) is not None]
        if cfg.together:
            need.append(("the together scenario (every lane's top level at once)",
                         sum(workload_bytes(lane, max(lane.levels), True) for lane in cfg.lanes)))
    for lane in cfg.lanes if fairness else ():
        sizes = fairness_checks(lane)
        check = max(sizes, key=lambda c: _check_bytes(*sizes[c]), default=None)
        if check is not None:
            need.append((f"{_lane(lane, lane_file)}fairness check {check}", _check_bytes(*sizes[check])))
    return need


def fixed_records(cfg: RunConfig) -> int:
    """Records a run writes to events.jsonl at least, if its servers serve: per repetition of each
    fixed level (lanes without an adaptive sweep, alone and again with --together) its
    `level_requests` and two level marks; per open-loop rate its arrivals and two marks; and the
    fairness checks of a lane whose checks all run (one that satbench starts and that has no adaptive
    sweep, which stops its checks at the first that fails): the prefill calibration and each check's
    lone references and first round (`fairness_plan.first_round_requests`). Adaptive climbs, top-up
    rounds and background requests add to it; the run's writer stops at MAX_EVENTS (records.writer)."""
    from satbench.workload.fairness_plan import first_round_requests, make_plan

    total = 0
    for lane in cfg.lanes:
        profile, rates = lane.profile, lane.open_loop
        if profile.given_levels and not cfg.fairness_only:
            per_pass = sum(level_requests(lane, n, False) + 2 for n, _rep in profile.solo_steps())
            total += per_pass * (2 if cfg.together else 1)
        if rates is not None and not cfg.fairness_only:
            total += sum(rates.arrivals(r) + 2 for r in rates.rates)
        all_checks_run = profile.given_levels and lane.runtime.starts_server
        if (cfg.with_fairness or cfg.fairness_only) and all_checks_run:
            total += first_round_requests(make_plan(lane, lane.slots_wanted()), lane.fairness)
    return total


def check_records_fit(cfg: RunConfig) -> None:
    """UserError when what the run writes at least (`fixed_records`) is more records than
    events.jsonl's readers hold (MAX_EVENTS): such a run could be measured but not analyzed."""
    if (n := fixed_records(cfg)) > MAX_EVENTS:
        raise UserError(f"this run would record at least {n:,} requests and level marks, more than the "
                        f"{MAX_EVENTS:,} satbench analyzes in one run; use fewer levels, repetitions or "
                        "requests per level, or split it into several runs")


def fairness_checks(lane: LaneConfig) -> dict[str, tuple[int, int, int, int]]:
    """(requests built, streams in flight, prompt tokens, output tokens) of each fairness check the
    lane runs, from the plan for the slots the lane asks for (`LaneConfig.slots_wanted`: what a
    server satbench starts has; a guess for a running server). The requests built are those of one
    round with the lone references (a round's closed loop builds all its requests before the first
    is sent): `fairness_plan.check_requests`."""
    from satbench.workload.fairness_plan import check_requests, make_plan

    f, plan = lane.fairness, make_plan(lane, lane.slots_wanted())
    counts = check_requests(plan, f)
    shapes = {
        "F1": (plan.f1_streams, plan.prompt, plan.f1_output),
        "F2": (len(plan.f2_sizes), max(p for p, _ in plan.f2_sizes), max(o for _, o in plan.f2_sizes)),
        "F3": (plan.f3_clients, plan.prompt, plan.output),
        "S1": (plan.s1_decoders + 1, max(plan.s1_prompt, plan.prompt), plan.s1_decoder_output),
        "S2": (plan.s2_decoders + 1, plan.prompt, plan.s2_decoder_output),
        "S3": (2, plan.s3_prompt, plan.s3_output),
    }
    return {c: (sum(counts[c]), *shapes[c]) for c in counts if c in f.checks}


def check_fairness_sizes(lane: LaneConfig, lane_file: bool) -> None:
    """UserError, before anything starts, for fairness settings a check cannot run as meant: S1's
    explicit s1_decoders beyond the slots - 1 of a server satbench starts (each decoder holds a slot
    while the long prompt is injected), or a check with more than MAX_CHECK_STREAMS streams in flight
    or MAX_CHECK_PLANNED requests."""
    f, where = lane.fairness, _lane(lane, lane_file)
    slots = lane.slots_wanted()
    if "S1" in f.checks and f.s1_decoders and lane.runtime.starts_server and slots >= 2 \
            and f.s1_decoders > slots - 1:
        raise UserError(f"{where}fairness s1_decoders {f.s1_decoders}: S1 needs a slot for each decoder and "
                        f"one for the injected prompt, and the lane has {slots} slots; use at most "
                        f"{slots - 1}, or leave it unset")
    for check, (planned, streams, _, _) in fairness_checks(lane).items():
        if streams > MAX_CHECK_STREAMS or planned > MAX_CHECK_PLANNED:
            raise UserError(f"{where}fairness check {check} would run {streams:,} streams and build "
                            f"{planned:,} requests; at most {MAX_CHECK_STREAMS:,} streams and "
                            f"{MAX_CHECK_PLANNED:,} requests per check (lower its clients, decoders or "
                            "requests per client)")


def _check_bytes(planned: int, streams: int, prompt: int, output: int) -> int:
    """satbench's own memory for one fairness check, by the same rule as `workload_bytes`."""
    return (planned * (REQUEST_BYTES + prompt * BYTES_PER_PROMPT_ID)
            + streams * (STREAM_BYTES + prompt * BYTES_PER_SENT_ID + output * BYTES_PER_OUTPUT_TOKEN))


def _lane(lane: LaneConfig, lane_file: bool) -> str:
    return f"lane {lane.name}: " if lane_file else ""


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.1f} GiB"
