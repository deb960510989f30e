"""What the fake llama.cpp server does, scripted (`FakeScript`); its vocabulary and tokenizer; one
request's record (`FakeRequest`); the JSON it answers without the engine (usage, /v1/models, /props).
How the scheduler uses the knobs, and the true value of each fairness check's statistic a graded
knob produces: fake_scheduler's module docstring.
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat

# decode ms per iteration with k = 1…8 generating slots: throughput X(k) ∝ k ÷ ms(k) is flat from 1 to 2
# (a 2-core CPU: a batch of 2 costs twice a batch of 1), then rises: X(3) = 1.2, X(4) = 1.4, X(5) = 1.45,
# X(6) = 1.5, X(7) = 1.55, X(8) = 1.6 × X(1) (ms(k) = 10·k ÷ (X(k) ÷ X(1)), rounded to 0.01 ms)
PLATEAU_ITERATION_MS = (10.0, 20.0, 25.0, 28.57, 34.48, 40.0, 45.16, 50.0)


# ASCII-only vocabulary: every token's text is safe inside a JSON string as-is.
_WORDS = ("the of and to in is it that for on with as was at by be this are from or "
          "an but not have all can one has more when will time which out up about "
          "so than them some could into other then now only its over new also").split()
VOCAB_BASE = 1000
VOCAB = {VOCAB_BASE + i: " " + w for i, w in enumerate(_WORDS)}


def generated_token(k: int) -> int:
    """Token id of the k-th generated token (deterministic)."""
    return VOCAB_BASE + k % len(_WORDS)


def tokenize(text: str, chars_per_token: int | None = None) -> list[int]:
    """Fake tokenizer: one token per whitespace-separated word (at least one); with
    `chars_per_token`, a word of c characters is ceil(c / chars_per_token) tokens, as a longer id
    is more tokens to a real tokenizer."""
    ids = [VOCAB_BASE + len(_WORDS) + zlib.crc32(w.encode()) % 30000 for w in text.split()
           for _ in range(-(-len(w) // chars_per_token) if chars_per_token else 1)]
    return ids or [1]


class FakeRequest:
    """One admitted completion; the engine fills the counters, the sink writes bytes."""

    __slots__ = (
        "admit_ns",
        "arrival_ns",
        "cache_n",
        "cancelled",
        "chunk_deadline_ns",
        "chunk_ns",
        "decode_credit",
        "done",
        "end_ns",
        "extra",
        "extra_iters",
        "gen_start_ns",
        "generating",
        "headers_ns",
        "hold_iters",
        "last_token_ns",
        "late_ns_max",
        "n_decode_iters",
        "n_decoded",
        "n_predict",
        "n_processed",
        "n_stop",
        "params",
        "prompt_ids",
        "prompt_n",
        "prompt_start_ns",
        "rid",
        "sink",
        "skip_iters",
        "slot",
        "task_id",
        "truncated",
    )

    def __init__(self, rid: str | None, prompt_n: int, n_predict: int, params: dict, sink, arrival_ns: int,
                 prompt_ids: list[int] | None = None):
        self.rid, self.prompt_n, self.n_predict = rid, prompt_n, n_predict
        self.prompt_ids = prompt_ids  # the prompt's tokens (prompt_n of them), None when not known
        self.cache_n = 0  # prompt tokens its slot's cache held (prompt_cache.py); prefill starts after them
        self.params, self.sink = params, sink
        self.task_id = -1
        self.slot = -1
        self.n_stop = n_predict  # tokens it will generate (the engine caps it at the slot context)
        self.n_processed = self.n_decoded = self.n_decode_iters = 0
        self.generating = self.cancelled = self.done = self.truncated = False
        self.arrival_ns = arrival_ns
        self.admit_ns = self.prompt_start_ns = self.gen_start_ns = 0
        self.last_token_ns = self.headers_ns = self.end_ns = 0
        self.chunk_ns: list[int] = []
        self.chunk_deadline_ns: list[int] = []  # the scripted deadline of each chunk_ns entry
        self.late_ns_max = 0
        self.extra: dict = {}
        self.decode_credit = 0.0  # slow_slot_rate's accumulator
        self.hold_iters = self.skip_iters = 0  # admit_delay / second_prompt_delay: whole iterations left
        self.extra_iters = 0.0  # their fractions: decode iterations added to the one completing the prompt

    @property
    def prefill_n(self) -> int:
        """The prompt tokens it prefills: prompt_n − cache_n (llama.cpp's timings.prompt_n, ≥ 1)."""
        return self.prompt_n - self.cache_n

    def timings(self) -> dict:
        """llama.cpp ``timings`` object (prompt_ms = measured prefill, predicted_ms = first→last token;
        cache_n + prompt_n = the whole prompt)."""
        p_ms = max(self.gen_start_ns - self.prompt_start_ns, 1000) / 1e6
        g_ms = max(self.last_token_ns - self.gen_start_ns, 1000) / 1e6
        n, p = max(self.n_decoded, 1), self.prefill_n
        return {"cache_n": self.cache_n, "prompt_n": p, "prompt_ms": p_ms,
                "prompt_per_token_ms": p_ms / p, "prompt_per_second": 1e3 / p_ms * p,
                "predicted_n": self.n_decoded, "predicted_ms": g_ms,
                "predicted_per_token_ms": g_ms / n, "predicted_per_second": 1e3 / g_ms * self.n_decoded}


class Sink(Protocol):
    def tokens(self, req: FakeRequest, ids: list[int], done: bool, deadline_ns: int) -> None: ...


class FakeScript(BaseModel):
    """Everything the fake does, scripted. Times in ms of real (perf_counter) time."""

    model_config = ConfigDict(extra="forbid")

    n_slots: int = Field(4, ge=1)
    n_ctx: int | None = Field(None, ge=1, description="total (-c); per slot = n_ctx // n_slots; "
                              "None = 4096 per slot")
    n_batch: int = Field(2048, ge=1)
    prefill_ms_per_token: float = Field(0.05, ge=0)
    decode_iteration_ms: float = Field(10.0, ge=0)
    decode_ms_per_busy_slot: float = Field(0.0, ge=0)
    decode_iteration_ms_by_batch: list[NonNegativeFloat] | None = Field(
        None, min_length=1, description="decode ms of an iteration with k generating slots = element k−1 "
        "(the last one for wider batches), instead of decode_iteration_ms + k·decode_ms_per_busy_slot; "
        "PLATEAU_ITERATION_MS (X(2) = X(1), X(4) = 1.4·X(1), X(8) = 1.6·X(1)) is a CPU's batch of 2 "
        "costing twice a batch of 1")
    first_token_extra_ms: float = Field(0.0, ge=0)
    tokens_per_chunk: int = Field(1, ge=1)
    build_info: str = "b11549-fake"
    model_alias: str = "fake-model"
    model_path: str = "/models/fake-model-Q8_0.gguf"
    llamacpp: bool = True
    endpoint_metrics: bool = True
    tokenize_chars_per_token: int | None = Field(None, ge=1,
                                                 description="/tokenize: None = one token per word")
    endpoint_slots: bool = True
    headers_at_first_token: bool | None = Field(
        None, description="send the status line with the first token (llama.cpp since PR 16486); "
        "None = llamacpp")
    keep_alive_timeout_s: float = Field(5.0, gt=0)
    keep_alive_max: int = Field(100, ge=1)
    http_threads: int | None = Field(
        None, ge=1, description="cpp-httplib pool: a connection holds a thread for its whole keep-alive "
        "life; connections beyond this wait unread (llama-server: max(n_parallel + 2, n_cpu - 1)); "
        "None = unlimited")
    slot_prompt_similarity: float | None = Field(
        None, ge=0, le=1, description="slot choice: None = the lowest idle slot (the rule the fairness "
        "knobs' figures assume); a number s = llama-server's --slot-prompt-similarity (its default: "
        "prompt_cache.LLAMACPP_SLOT_PROMPT_SIMILARITY): the idle slot whose cached tokens share the "
        "largest fraction (> s) of the prompt, else the least recently used idle slot; 0 = LRU only "
        "(prompt_cache.py). The prompt cache itself works under every rule")
    cache_ram_tokens: int | None = Field(
        None, ge=1, description="llama-server's host-memory prompt cache (--cache-ram, 8192 MiB by "
        "default there): a slot's sequence is saved when another request takes the slot, and the saved "
        "one that best serves a prompt is restored into its slot (prompt_cache.py); this many tokens in "
        "all at most, oldest dropped first. None = off (llama-server --cache-ram 0)")
    precise_timing: bool = Field(True, description="keep deadlines with a timer thread "
                                 "(else loop.call_later)")
    schedule_log: Path | None = None
    api_key: str | None = Field(None, description="like llama-server --api-key: every endpoint but /health "
                                "needs `Authorization: Bearer KEY` (else 401); never recorded")
    tls_cert: Path | None = Field(None, description="PEM certificate: serve HTTPS (with tls_key)")
    tls_key: Path | None = None
    # -- deliberately unfair / starving schedulers (tests of the fairness checks) --
    prefill_first: bool = Field(
        False, description="while some busy slot has prompt left, an iteration holds ONLY prompt tokens "
        "(up to n_batch, slot order): every generating slot freezes until no prompt is pending")
    admit_when_idle: bool = Field(
        False, description="waiting / arriving requests get slots only when NO slot is busy (then up to "
        "n_slots at once); until then they wait (requests_deferred) while free slots stay empty")
    hold_while_decoding: bool = Field(
        False, description="an arriving or waiting request gets a free slot only while no slot is "
        "generating, or when a request has just completed: a free slot is held while the others decode")
    slow_slots: list[int] = Field(
        default_factory=list, description="these slots emit decode tokens at `slow_slot_rate` of the others' "
        "rate (default: every second iteration they take part in); prefill and the first token unaffected")
    slow_slot_rate: float = Field(
        0.5, gt=0, le=1, description="F1/F2 degree r: a request in a slow slot gains r credit per decode "
        "iteration and emits on each one where its credit reaches 1 (then spends 1), so over n iterations "
        "it gets ⌊n·r⌋ tokens; true per-stream decode-rate ratio max/min = 1/r (F1's bound 1.10 ⇔ "
        "r = 1/1.1; r = 11/12 → 1.0909); 1 = fair")
    queue_order: Literal["fifo", "lifo"] = Field(
        "fifo", description="which waiting request a freed slot takes: lifo = the most recently arrived")
    lifo_share: float = Field(
        0.0, ge=0, le=1, description="F3 degree p (with queue_order fifo): a slot freed while two or more "
        "requests wait takes the most recently arrived with probability p (RNG seeded by lifo_seed), else "
        "the oldest; the oldest waiter is passed over a geometric number of times, mean p/(1−p): 0 = FIFO, "
        "1 = LIFO (with more clients than slots one client starves: its service gap grows without bound)")
    lifo_seed: int = Field(0, description="seed of lifo_share's draws (vary it between runs for independent "
                           "ones)")
    serial: bool = Field(
        False, description="only the busy slot with the lowest index progresses in an iteration "
        "(its prompt chunk or its decode token); the others wait")
    prefill_chunk_factor: float = Field(
        1.0, ge=1, description="S1 degree f: an iteration that carries decode tokens takes up to "
        "⌊f·n_batch⌋ − n_generating prompt tokens (fair f = 1: n_batch − n_generating); with K "
        "decoders and p = prefill_ms_per_token the decoders' max ITL during a long prefill is "
        "(⌊f·n_batch⌋ − K)·p + decode ms of K (the last chunk may be smaller), i.e. (max ITL − "
        "baseline) ÷ (n_batch ÷ prefill rate) = (⌊f·n_batch⌋ − K) ÷ n_batch against S1's 1.5; the "
        "prefill itself takes no longer")
    admit_delay_iterations: float = Field(
        0.0, ge=0, description="S2 degree d: a request arriving while some slot is generating waits ⌊d⌋ "
        "iteration boundaries in the queue (requests_deferred; an idle server holds nobody), and the "
        "iteration that completes its prompt lasts (d − ⌊d⌋) × that iteration's decode ms longer: its "
        "TTFT grows by exactly d decode iterations of the slots beside it (S2: admission delay = "
        "fair + d·T(K), bound 2·T(K))")
    second_prompt_delay_iterations: float = Field(
        0.0, ge=0, description="S3 degree d: a prompt arriving while another busy slot has prompt left is "
        "left out of the first ⌊d⌋ iterations that would have carried its tokens, and the iteration that "
        "completes it lasts (d − ⌊d⌋) × that iteration's decode ms longer (one generating slot at "
        "least): in S3 (prompts ≤ n_batch) the second TTFT grows by exactly d·T(1); with n_batch-token "
        "prompts the fair one is 10 ms (the gap between the prompts) under S3's bound")
    # -- injected faults (tests/faults), all off by default. "The k-th completion" counts completion
    #    requests from 1 in arrival order (a sweep's first ones are its warmups); a faulted request
    #    is logged with status "fault_<kind>" ("hung" for a hang), a fully served one with "ok". --
    die_at_completion: int | None = Field(
        None, ge=1, description="SIGKILL the fake's own process when the k-th completion request arrives "
        "(the schedule log is flushed first: it lists every request served before the death)")
    die_at_busy_slots: int | None = Field(
        None, ge=1, description="SIGKILL the fake's own process when an iteration would batch this many "
        "busy slots (llama.cpp b11434 aborted on a 64-expert MoE at 64 sequences; the schedule log is "
        "flushed first)")
    hang_from_completion: int | None = Field(
        None, ge=1, description="from the k-th completion on: read the request, never answer, keep the "
        "connection open")
    completion_fault: Literal["http_500", "http_503", "http_400_ctx", "drop", "bad_chunk", "invalid_json",
                              "malformed_sse", "error_event", "wrong_token_count",
                              "no_final_event"] | None = Field(
        None, description="what goes wrong with every `fault_every`-th completion (streamed, /completion): "
        "http_*: that HTTP error with llama.cpp's JSON body instead of a stream (400: context exceeded); "
        "after `fault_after_tokens` token events: drop = close the connection, bad_chunk = a chunk-size "
        "line that is not hex, invalid_json = `data: {cut`, malformed_sse = a payload that is not an "
        "event object, error_event = llama.cpp's `data: {\"error\": …}` then the end of the stream; "
        "wrong_token_count = a normal stream one token short of n_predict; no_final_event = every token "
        "but no `stop: true` event, then a clean end of the chunked body and close")
    stall: Literal["keepalive", "drip", "nohead"] | None = Field(
        None, description="once stalling (`stall_from_completion`, or SIGUSR1 to the fake's process): each "
        "new completion gets its stream head, then no token ever: keepalive = an SSE comment (`: keepalive`) "
        "every `stall_every_s`, drip = one byte every `stall_every_s`; nohead = not even the head (the "
        "request is read and never answered); /health and /slots keep answering, their slots idle")
    stall_from_completion: int | None = Field(None, ge=1, description="stall from the k-th completion on")
    stall_every_s: float = Field(1.0, gt=0, description="the stall's interval between writes")
    fault_every: int = Field(1, ge=1, description="completion_fault hits the k-th, 2k-th, … completion")
    fault_after_tokens: int = Field(1, ge=1,
                                    description="mid-stream faults strike after this many token events")
    metrics_delay_s: float = Field(0.0, ge=0, description="answer /metrics this many seconds late")
    slots_delay_s: float = Field(0.0, ge=0, description="answer /slots this many seconds late")
    metrics_fail: bool = Field(False, description="/metrics answers HTTP 500")
    slots_fail: bool = Field(False, description="/slots answers HTTP 500")

    @property
    def n_ctx_slot(self) -> int:
        return 4096 if self.n_ctx is None else self.n_ctx // self.n_slots



def usage_json(req: FakeRequest) -> dict:
    """OpenAI ``usage`` as llama.cpp fills it: prompt_tokens = the whole prompt, cached_tokens of it
    from the slot's cache."""
    return {"completion_tokens": req.n_decoded, "prompt_tokens": req.prompt_n,
            "total_tokens": req.n_decoded + req.prompt_n,
            "prompt_tokens_details": {"cached_tokens": req.cache_n}}


def models_json(s: FakeScript) -> dict:
    data = [{"id": s.model_alias, "object": "model", "created": int(time.time()),
             "owned_by": "llamacpp" if s.llamacpp else "fake"}]
    if not s.llamacpp:
        return {"object": "list", "data": data}
    data[0]["meta"] = {"vocab_type": 1, "n_vocab": 32000, "n_ctx_train": 32768, "n_embd": 768}
    return {"models": [{"name": s.model_alias, "model": s.model_alias, "type": "model",
                        "capabilities": ["completion"]}], "object": "list", "data": data}


def props_json(s: FakeScript) -> dict:
    return {"default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": s.n_ctx_slot,
                                            "speculative": False, "is_processing": False,
                                            "params": {"n_predict": -1}},
            "total_slots": s.n_slots, "model_alias": s.model_alias, "model_path": s.model_path,
            "modalities": {"vision": False, "audio": False}, "chat_template": "", "bos_token": "<s>",
            "eos_token": "</s>", "build_info": s.build_info}
