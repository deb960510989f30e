"""Requests of a sweep: prompt and output lengths fixed or drawn per request (workload/lengths.py), a
unique prefix per request.

When the server can tokenize (llama.cpp's `/tokenize`), prompts are token-id lists of
exactly `prompt_tokens` ids: a unique text prefix (tokenized with BOS) followed by filler
tokens. Elsewhere the prompt is text of about `prompt_tokens` words and the real count
comes back in the server's `usage`.

For the chat endpoint (workload.endpoint "chat") the prompt is always text, the content of one
user message: where the server tokenizes, the unique prefix followed by the text of
`prompt_tokens` − (prefix tokens) filler tokens (llama.cpp's /detokenize), so the message is
about `prompt_tokens` tokens; the server's template adds its own, and `usage.prompt_tokens`
says how many it processed.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Awaitable, Callable
from typing import Literal

from satbench.config.limits import MAX_EVENTS
from satbench.config.ranges import MAX_LEVEL, MAX_REQUESTS_PER_LEVEL
from satbench.config.schema import LaneConfig, RunConfig, WorkloadConfig
from satbench.errors import UserError
from satbench.http.client import CompletionRequest
from satbench.workload.lengths import Lengths

Tokenizer = Callable[[str, bool], Awaitable[list[int]]]  # (text, add_special) -> ids
Detokenizer = Callable[[list[int]], Awaitable[str]]  # ids -> text
Phase = Literal["warmup", "measured", "background"]

FILLER_TEXT = (
    "The river ran past the old mill and under the stone bridge where the children of the "
    "village met each morning before school to trade stories about the weather, the harvest, "
    "the travelling market and the strange lights that some of them said they had seen above "
    "the hills during the long summer nights when nobody could sleep because of the heat. "
)


class WorkloadBuilder:
    """Builds the `CompletionRequest`s of every level; one instance per lane and run."""

    def __init__(self, cfg: WorkloadConfig, tokenizer: Tokenizer | None, run_nonce: str,
                 detokenizer: Detokenizer | None = None) -> None:
        self.cfg = cfg
        self._tokenize = tokenizer
        self._detokenize = detokenizer
        self._nonce = run_nonce
        self._filler: list[int] = []
        self._lengths = Lengths(cfg)
        self._filler_text: dict[int, str] = {}  # chat: the text of the first n filler tokens, by n

    def derive(self, cfg: WorkloadConfig, run_nonce: str) -> WorkloadBuilder:
        """A builder with other sizes that shares this one's tokenizer (the same server)."""
        return WorkloadBuilder(cfg, self._tokenize, run_nonce, self._detokenize)

    @property
    def exact_prompt_length(self) -> bool:
        return self._tokenize is not None

    async def prepare(self) -> None:
        """Tokenize the filler once (no BOS), so every prompt is cut from the same tokens."""
        if self._tokenize is None:
            return
        text = FILLER_TEXT * (1 + self.cfg.prompt_tokens // 40)
        self._filler = await self._tokenize(text, False)
        if not self._filler:
            raise UserError("the server tokenized the filler text to zero tokens")

    async def check_prefix_fits(self, lane: str, max_level: int, max_repetition: int) -> None:
        """Refuse, before the lane runs, a prompt too short for the longest request id it can
        use: ids grow with the level, repetition and sequence number, so a check per request
        let a run fail midway (and every resume with it). Sequence numbers are bounded by
        999,999 (background requests of the together scenario run on as long as needed), and
        several digit strings are tried since a tokenizer splits them unevenly."""
        if self._tokenize is None or self.cfg.shared_prefix:
            return
        longest = 0
        for text in longest_prefixes(self._nonce, lane, max_level, max_repetition):
            longest = max(longest, len(await self._tokenize(text, True)))
        check_prompt_room(self.cfg, longest)

    def request_id(self, lane: str, level: int, repetition: int, phase: Phase, seq: int) -> str:
        return request_id(self._nonce, lane, level, repetition, phase, seq)

    async def build(
        self, lane: str, level: int, repetition: int, phase: Phase, count: int
    ) -> list[CompletionRequest]:
        """`count` requests for one level repetition and phase, each with its own id and its lengths
        (`Lengths.of(phase, repetition, seq)`: the fixed ones, or its draw under the lane's seed)."""
        out = []
        for seq in range(count):
            rid = self.request_id(lane, level, repetition, phase, seq)
            out.append(await self._one(rid, *self._lengths.of(phase, repetition, seq)))
        return out

    async def build_open(self, lane: str, rate_index: int, repetition: int,
                         count: int) -> list[CompletionRequest]:
        """`count` requests of one open-loop rate (its 1-based position `rate_index`), in arrival order;
        drawn lengths are phase "open"'s, the same at every rate (the rates compare one workload)."""
        return [await self._one(open_request_id(self._nonce, lane, rate_index, repetition, seq),
                                *self._lengths.of("open", repetition, seq))
                for seq in range(count)]

    async def _one(self, request_id: str, n_prompt: int, n_out: int) -> CompletionRequest:
        return await self.one(request_id, n_prompt, n_out)

    async def one(self, request_id: str, n_prompt: int, n_out: int, grow: bool = False) -> CompletionRequest:
        """One request of exactly `n_prompt` prompt tokens (when the server tokenizes) and
        `n_out` output tokens, with the unique prefix `request_id`. With `grow`, a prompt too
        short for the prefix is lengthened to prefix + 8 tokens instead of refused. For the chat
        endpoint the prompt is text (`_chat_text`, or words where the server does not tokenize)."""
        if self._tokenize is not None and len(self._filler) < 1:
            raise UserError("WorkloadBuilder.prepare() must run before requests are built")
        prefix_text = "" if self.cfg.shared_prefix else prefix_of(request_id)
        prompt: str | list[int]
        if self.cfg.endpoint == "chat" and self._tokenize is not None and self._detokenize is not None:
            prompt, n_prompt = await self._chat_text(prefix_text, n_prompt, grow)
        elif self._tokenize is None or self.cfg.endpoint == "chat":
            prompt = prefix_text + _words(n_prompt - len(prefix_text.split()))
        else:
            prefix = await self._tokenize(prefix_text, True)
            n_prompt = _fitted(len(prefix), n_prompt, grow)
            prompt = prefix + _cycle(self._filler, n_prompt - len(prefix))
        return CompletionRequest(request_id=request_id, prompt=prompt, prompt_tokens=n_prompt,
                                 max_tokens=n_out, cache_prompt=self.cfg.shared_prefix)

    async def _chat_text(self, prefix_text: str, n_prompt: int, grow: bool) -> tuple[str, int]:
        """(text, its length asked for): `prefix_text` and the text of the first n_prompt − (prefix
        tokens, no BOS: the chat template adds its own) filler tokens, each length detokenized once.
        With `grow`, as `one`."""
        assert self._tokenize is not None and self._detokenize is not None
        prefix = await self._tokenize(prefix_text, False) if prefix_text else []
        n_prompt = _fitted(len(prefix), n_prompt, grow)
        n = n_prompt - len(prefix)
        if n not in self._filler_text:
            self._filler_text[n] = await self._detokenize(_cycle(self._filler, n))
        return prefix_text + self._filler_text[n].lstrip(" "), n_prompt


def _fitted(n_prefix: int, n_prompt: int, grow: bool) -> int:
    """`n_prompt`, or (with `grow`) n_prefix + 8 when that is more; UserError when the prefix leaves
    no room for filler."""
    if grow and n_prefix + 8 > n_prompt:
        n_prompt = n_prefix + 8
    if n_prefix >= n_prompt:
        raise UserError(f"--prompt-tokens {n_prompt} is too small for the unique request prefix "
                        f"({n_prefix} tokens); use at least {n_prefix + 8}")
    return n_prompt


NONCE_BYTES = 3  # a run's nonce: this many random bytes, as hex (2 digits a byte), starts every request id
TOGETHER_SUFFIX = ".together"  # appended to the lane name in the ids of requests not run solo
BACKGROUND_POOL_PER_STREAM = 4  # together: background requests built per stream, reused round-robin


def new_nonce() -> str:
    """A run's nonce (NONCE_BYTES random bytes as hex): keeps its prompts apart from any other run's."""
    return secrets.token_hex(NONCE_BYTES)


def request_id(nonce: str, lane: str, level: int, repetition: int, phase: Phase, seq: int) -> str:
    """The id of one request of a run (and its unique prompt prefix, see `prefix_of`)."""
    return f"{nonce}-{lane}-n{level}-r{repetition}-{phase[0]}{seq}"


def open_request_id(nonce: str, lane: str, rate_index: int, repetition: int, seq: int) -> str:
    """The id of one open-loop request: "q" and the rate's position where a level has "n", and "o" for its
    phase letter, so no closed-loop id equals it; never longer than the longest closed-loop id of the
    lane while rate_index and seq stay below the prefix check's bounds (MAX_LEVELS_PER_LANE, 999,999)."""
    return f"{nonce}-{lane}-q{rate_index}-r{repetition}-o{seq}"


def prefix_of(rid: str) -> str:
    """The text a request's prompt starts with: its id, which makes every prompt unique."""
    return f"[{rid}] "


PHASES: tuple[Phase, ...] = ("warmup", "measured", "background")
LONGEST_SEQS = (999_999, 987_654, 100_000)  # background runs on as long as needed: bounded by 999,999


def longest_prefixes(nonce: str, lane: str, max_level: int, max_repetition: int) -> list[str]:
    """The prefixes of the longest request ids a lane can use, in every phase (a tokenizer splits
    digit strings unevenly, so several are tried); the prefix check measures the longest of them."""
    return [prefix_of(request_id(nonce, lane, max_level, max_repetition, phase, seq))
            for phase in PHASES for seq in LONGEST_SEQS]


def check_prefix_length(prompt_tokens: int, longest: int, where: str = "--prompt-tokens",
                        bound: bool = False) -> None:
    """UserError when `prompt_tokens` leaves no room after the longest prefix (`longest` tokens; with
    `bound`, a lower bound on that count, read off the model's vocabulary)."""
    if prompt_tokens <= longest:
        at_least = "at least " if bound else "up to "
        raise UserError(f"{where} {prompt_tokens} is too small for the unique request prefix "
                        f"({at_least}{longest} tokens in this run); use at least {longest + 8}")


def check_prompt_room(w: WorkloadConfig, longest: int, where: str = "--prompt-tokens",
                      bound: bool = False) -> None:
    """`check_prefix_length` for the shortest prompt `w` can draw (its fixed length, or the lowest of
    its distribution, which the UserError names)."""
    if w.prompt_lengths is None:
        check_prefix_length(w.prompt_tokens, longest, where, bound)
        return
    shortest = w.prompt_bounds()[0]
    if shortest <= longest:
        at_least = "at least " if bound else "up to "
        raise UserError(f"{where} {w.prompt_lengths.spec}: its shortest prompt, {shortest} tokens, is too "
                        f"small for the unique request prefix ({at_least}{longest} tokens in this run); "
                        f"make every prompt at least {longest + 8} tokens")


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


def _cycle(items: list, n: int) -> list:
    """The first `n` items of `items` repeated end to end."""
    return list(itertools.islice(itertools.cycle(items), n))


def _words(n: int) -> str:
    return " ".join(_cycle(FILLER_TEXT.split(), max(n, 1)))
