"""Scripted, deterministic continuous-batching scheduler behind the fake llama.cpp server.

Model (one engine "thread" like llama.cpp's ``update_slots``):

* A request takes the lowest free slot, else waits FIFO (``requests_deferred``).
* A request generates ``min(n_predict, n_ctx_slot - prompt_n)`` tokens: like llama.cpp
  without context shift it stops (``truncated``) when prompt + generated reach the slot
  context; a prompt of ``n_ctx_slot`` tokens or more is refused (HTTP 400, the server).
* Each iteration (one ``llama_decode`` call) holds one decode token for every
  generating slot, then fills up to ``n_batch`` with prompt tokens of prefilling
  slots in slot-index order. It lasts::

      [decode_iteration_ms + n_generating * decode_ms_per_busy_slot   if n_generating]
      + prompt_tokens_in_batch * prefill_ms_per_token
      + [first_token_extra_ms   if some prompt completes in this batch]

* At the end of an iteration every generating slot emits ``tokens_per_chunk``
  tokens (the last chunk may carry fewer) and a slot whose prompt completed emits
  its first token (always one). A slot is freed after its last token (see above);
  waiting requests enter freed slots and join the next iteration.

Deliberately unfair knobs (all off by default; see the fields' descriptions):
``prefill_first``, ``admit_when_idle``, ``slow_slots``, ``queue_order``, ``serial``.

Iterations chain on scripted deadlines (``perf_counter_ns``), so timer jitter does
not accumulate; a tick later than ``max(2 ms, its duration)`` re-bases on "now"
and counts as an overrun (the fake could not keep up). Deadlines are kept by a
timer thread (``precise_timing``): asyncio's epoll timeout has 1 ms steps and
float rounding adds another, so ``call_later`` alone wakes up to 2 ms late.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import zlib
from collections import deque
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

_perf_ns = time.perf_counter_ns

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


class FakeScript(BaseModel):
    """Everything the fake does, scripted. Times in ms of real (perf_counter) time."""

    model_config = ConfigDict(extra="forbid")

    n_slots: int = Field(4, ge=1)
    n_ctx: int | None = Field(None, ge=1, description="total (-c); per slot = n_ctx // n_slots; None = 4096 per slot")
    n_batch: int = Field(2048, ge=1)
    prefill_ms_per_token: float = Field(0.05, ge=0)
    decode_iteration_ms: float = Field(10.0, ge=0)
    decode_ms_per_busy_slot: float = Field(0.0, ge=0)
    first_token_extra_ms: float = Field(0.0, ge=0)
    tokens_per_chunk: int = Field(1, ge=1)
    build_info: str = "b11549-fake"
    model_alias: str = "fake-model"
    model_path: str = "/models/fake-model-Q8_0.gguf"
    llamacpp: bool = True
    endpoint_metrics: bool = True
    tokenize_chars_per_token: int | None = Field(None, ge=1, description="/tokenize: None = one token per word")
    endpoint_slots: bool = True
    headers_at_first_token: bool | None = Field(
        None, description="send the status line with the first token (llama.cpp since PR 16486); None = llamacpp")
    keep_alive_timeout_s: float = Field(5.0, gt=0)
    keep_alive_max: int = Field(100, ge=1)
    http_threads: int | None = Field(
        None, ge=1, description="cpp-httplib pool: a connection holds a thread for its whole keep-alive life; "
        "connections beyond this wait unread (llama-server: max(n_parallel + 2, n_cpu - 1)); None = unlimited")
    precise_timing: bool = Field(True, description="keep deadlines with a timer thread (else loop.call_later)")
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
        False, description="an arriving or waiting request gets a free slot only while no slot is generating, "
        "or when a request has just completed: a free slot is held while the others decode")
    slow_slots: list[int] = Field(
        default_factory=list, description="these slots emit decode tokens only on every second iteration "
        "they take part in (half the decode rate); prefill and the first token unaffected")
    queue_order: Literal["fifo", "lifo"] = Field(
        "fifo", description="which waiting request a freed slot takes: lifo = the most recently arrived")
    serial: bool = Field(
        False, description="only the busy slot with the lowest index progresses in an iteration "
        "(its prompt chunk or its decode token); the others wait")
    # -- injected faults (tests/faults), all off by default. "The k-th completion" counts completion
    #    requests from 1 in arrival order (a sweep's first ones are its warmups); a faulted request
    #    is logged with status "fault_<kind>" ("hung" for a hang), a fully served one with "ok". --
    die_at_completion: int | None = Field(
        None, ge=1, description="SIGKILL the fake's own process when the k-th completion request arrives "
        "(the schedule log is flushed first: it lists every request served before the death)")
    die_at_busy_slots: int | None = Field(
        None, ge=1, description="SIGKILL the fake's own process when an iteration would batch this many busy "
        "slots (llama.cpp b11434 aborted on a 64-expert MoE at 64 sequences; the schedule log is flushed first)")
    hang_from_completion: int | None = Field(
        None, ge=1, description="from the k-th completion on: read the request, never answer, keep the "
        "connection open")
    completion_fault: Literal["http_500", "http_503", "http_400_ctx", "drop", "bad_chunk", "invalid_json",
                              "malformed_sse", "error_event", "wrong_token_count", "no_final_event"] | None = Field(
        None, description="what goes wrong with every `fault_every`-th completion (streamed, /completion): "
        "http_*: that HTTP error with llama.cpp's JSON body instead of a stream (400: context exceeded); "
        "after `fault_after_tokens` token events: drop = close the connection, bad_chunk = a chunk-size "
        "line that is not hex, invalid_json = `data: {cut`, malformed_sse = a payload that is not an "
        "event object, error_event = llama.cpp's `data: {\"error\": …}` then the end of the stream; "
        "wrong_token_count = a normal stream one token short of n_predict; no_final_event = every token "
        "but no `stop: true` event, then a clean end of the chunked body and close")
    fault_every: int = Field(1, ge=1, description="completion_fault hits the k-th, 2k-th, … completion")
    fault_after_tokens: int = Field(1, ge=1, description="mid-stream faults strike after this many token events")
    metrics_delay_s: float = Field(0.0, ge=0, description="answer /metrics this many seconds late")
    slots_delay_s: float = Field(0.0, ge=0, description="answer /slots this many seconds late")
    metrics_fail: bool = Field(False, description="/metrics answers HTTP 500")
    slots_fail: bool = Field(False, description="/slots answers HTTP 500")

    @property
    def n_ctx_slot(self) -> int:
        return 4096 if self.n_ctx is None else self.n_ctx // self.n_slots


class FakeRequest:
    """One admitted completion; the engine fills the counters, the sink writes bytes."""

    __slots__ = ("rid", "task_id", "prompt_n", "n_predict", "n_stop", "truncated", "params", "sink", "slot",
                 "n_processed", "n_decoded", "n_decode_iters", "generating", "cancelled", "done", "arrival_ns",
                 "admit_ns", "prompt_start_ns", "gen_start_ns", "last_token_ns", "chunk_ns",
                 "chunk_deadline_ns", "late_ns_max", "headers_ns", "end_ns", "extra")

    def __init__(self, rid: str | None, prompt_n: int, n_predict: int, params: dict, sink, arrival_ns: int):
        self.rid, self.prompt_n, self.n_predict, self.params, self.sink = rid, prompt_n, n_predict, params, sink
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

    def timings(self) -> dict:
        """llama.cpp ``timings`` object (prompt_ms = measured prefill, predicted_ms = first→last token)."""
        p_ms = max(self.gen_start_ns - self.prompt_start_ns, 1000) / 1e6
        g_ms = max(self.last_token_ns - self.gen_start_ns, 1000) / 1e6
        n = max(self.n_decoded, 1)
        return {"cache_n": 0, "prompt_n": self.prompt_n, "prompt_ms": p_ms,
                "prompt_per_token_ms": p_ms / self.prompt_n, "prompt_per_second": 1e3 / p_ms * self.prompt_n,
                "predicted_n": self.n_decoded, "predicted_ms": g_ms,
                "predicted_per_token_ms": g_ms / n, "predicted_per_second": 1e3 / g_ms * self.n_decoded}


class Sink(Protocol):
    def tokens(self, req: FakeRequest, ids: list[int], done: bool, deadline_ns: int) -> None: ...


class _Ticker:
    """Calls ``cb(deadline_ns)`` on the loop at ``deadline_ns`` (~0.1 ms late) from a helper thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cb):
        self.loop, self.cb = loop, cb
        self.cv = threading.Condition()
        self.deadline: int | None = None
        self.closed = False
        threading.Thread(target=self._run, name="fake-llama-ticker", daemon=True).start()

    def arm(self, deadline_ns: int) -> None:
        with self.cv:
            self.deadline = deadline_ns
            self.cv.notify()

    def close(self) -> None:
        with self.cv:
            self.closed, self.deadline = True, None
            self.cv.notify()

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self.closed:
                    if self.deadline is None:
                        self.cv.wait()
                        continue
                    rem = self.deadline - _perf_ns()
                    if rem <= 0:
                        break
                    self.cv.wait(rem / 1e9)
                if self.closed:
                    return
                d, self.deadline = self.deadline, None
            try:
                self.loop.call_soon_threadsafe(self.cb, d)
            except RuntimeError:  # loop closed
                return


class Engine:
    """Slots, queue of deferred requests, the iteration timer and llama.cpp's metrics."""

    def __init__(self, script: FakeScript):
        self.s = script
        self.slots: list[FakeRequest | None] = [None] * script.n_slots
        self.waiting: deque[FakeRequest] = deque()
        self._batch: list[tuple[FakeRequest, int]] = []  # (req, prompt tokens; 0 = decode)
        self._deadline = 0
        self._running = False
        self._timer: asyncio.TimerHandle | None = None
        self._ticker: _Ticker | None = None
        self._next_task = 0
        self.before_death = lambda: None  # the server flushes its schedule log here
        # llama.cpp server_metrics
        self.m = {"prompt_tokens_total": 0, "prompt_seconds_total": 0.0, "tokens_predicted_total": 0,
                      "tokens_predicted_seconds_total": 0.0, "n_decode_total": 0, "n_busy_slots_total": 0,
                      "n_tokens_max": 0}
        self.bucket = {"n_prompt": 0, "t_prompt_ms": 0.0, "n_pred": 0, "t_pred_ms": 0.0}
        self.stats = {"iterations": 0, "chunks": 0, "overruns": 0, "late_ns_max": 0, "deferred_total": 0}

    # -- admission -------------------------------------------------------
    def submit(self, req: FakeRequest) -> None:
        req.task_id = self._next_task
        self._next_task += 1
        req.n_stop = max(1, min(req.n_predict, self.s.n_ctx_slot - req.prompt_n))
        if self.waiting or not self._may_admit() or not self._take_slot(req):
            self.waiting.append(req)
            self.stats["deferred_total"] += 1
        if not self._running:
            self._start_iteration(_perf_ns())

    def cancel(self, req: FakeRequest) -> None:
        if req.done or req.cancelled:
            return
        req.cancelled = True
        if req.slot >= 0 and self.slots[req.slot] is req:
            self.slots[req.slot] = None
            self._admit()
        elif req in self.waiting:
            self.waiting.remove(req)

    def _may_admit(self, just_completed: bool = False) -> bool:
        if self.s.hold_while_decoding and not just_completed and any(
                r is not None and r.generating for r in self.slots):
            return False
        return not self.s.admit_when_idle or all(r is None for r in self.slots)

    def _take_slot(self, req: FakeRequest, now_ns: int = 0) -> bool:
        for i, r in enumerate(self.slots):
            if r is None:
                self.slots[i], req.slot, req.admit_ns = req, i, now_ns or _perf_ns()
                return True
        return False

    def _admit(self, just_completed: bool = False) -> None:
        if not self._may_admit(just_completed):  # admit_when_idle: all at once, and only into an idle server
            return
        lifo, now = self.s.queue_order == "lifo", _perf_ns()
        while self.waiting and None in self.slots:
            self._take_slot(self.waiting.pop() if lifo else self.waiting.popleft(), now)

    # -- iteration loop --------------------------------------------------
    def _start_iteration(self, start_ns: int) -> None:
        s, batch = self.s, []
        busy = [r for r in self.slots if r is not None]
        if s.die_at_busy_slots is not None and len(busy) >= s.die_at_busy_slots:
            self.before_death()
            os.kill(os.getpid(), signal.SIGKILL)
        active = busy[:1] if s.serial else busy  # serial: only the lowest busy slot progresses
        decode = not (s.prefill_first and any(not r.generating for r in active))
        n_gen = 0
        for r in active:
            if r.generating and decode:
                batch.append((r, 0))
                n_gen += 1
        budget, n_prompt, completes = s.n_batch - n_gen, 0, False
        for r in active:
            if not r.generating and budget > 0:
                n = min(budget, r.prompt_n - r.n_processed)
                if r.n_processed == 0:
                    r.prompt_start_ns = start_ns
                batch.append((r, n))
                budget -= n
                n_prompt += n
                completes |= r.n_processed + n == r.prompt_n
        if not batch:
            self._running = False
            return
        batch.sort(key=lambda e: e[0].slot)
        dur_ms = n_prompt * s.prefill_ms_per_token + (s.first_token_extra_ms if completes else 0.0)
        if n_gen:
            dur_ms += s.decode_iteration_ms + n_gen * s.decode_ms_per_busy_slot
        self._batch = batch
        self.m["n_decode_total"] += 1
        self.m["n_busy_slots_total"] += len(busy)
        self._deadline = deadline = start_ns + int(dur_ms * 1e6)
        self._running = True
        if s.precise_timing:
            if self._ticker is None:
                self._ticker = _Ticker(asyncio.get_running_loop(), self._tick)
            self._ticker.arm(deadline)
        else:
            delay = (deadline - _perf_ns()) / 1e9
            self._timer = asyncio.get_running_loop().call_later(max(delay, 0.0), self._tick, deadline)

    def _tick(self, deadline: int) -> None:
        if not self._running or deadline != self._deadline:
            return
        now = _perf_ns()
        self.stats["iterations"] += 1
        late = now - deadline
        self.stats["late_ns_max"] = max(self.stats["late_ns_max"], late)
        tpc, m = self.s.tokens_per_chunk, self.m
        completed = False
        for req, n_prompt in self._batch:
            if req.cancelled:
                continue
            if n_prompt:
                req.n_processed += n_prompt
                if req.n_processed < req.prompt_n:
                    continue
                req.generating, req.gen_start_ns = True, now
                p_ms = (now - req.prompt_start_ns) / 1e6
                m["prompt_tokens_total"] += req.prompt_n
                m["prompt_seconds_total"] += p_ms / 1e3
                self.bucket["n_prompt"] += req.prompt_n
                self.bucket["t_prompt_ms"] += p_ms
                k = 1
            else:
                req.n_decode_iters += 1
                if req.slot in self.s.slow_slots and req.n_decode_iters % 2:
                    continue  # a slow slot: this iteration yields nothing for it
                k = min(tpc, req.n_stop - req.n_decoded)
            ids = [generated_token(req.n_decoded + j) for j in range(k)]
            req.n_decoded += k
            req.last_token_ns = now
            done = req.n_decoded >= req.n_stop
            m["n_tokens_max"] = max(m["n_tokens_max"], req.prompt_n + req.n_decoded)
            if done:
                completed = True
                req.done = True
                req.truncated = req.prompt_n + req.n_decoded >= self.s.n_ctx_slot  # llama.cpp: ctx check first
                self.slots[req.slot] = None
                g_ms = (now - req.gen_start_ns) / 1e6
                m["tokens_predicted_total"] += req.n_decoded
                m["tokens_predicted_seconds_total"] += g_ms / 1e3
                self.bucket["n_pred"] += req.n_decoded
                self.bucket["t_pred_ms"] += g_ms
            self.stats["chunks"] += 1
            req.sink.tokens(req, ids, done, deadline)
        self._admit(just_completed=completed)
        after = _perf_ns()
        if after - deadline > max(2_000_000, self._deadline_span()):
            self.stats["overruns"] += 1
            self._start_iteration(after)
        else:
            self._start_iteration(deadline)

    def _deadline_span(self) -> int:
        s = self.s
        return int((s.decode_iteration_ms + s.n_slots * s.decode_ms_per_busy_slot) * 1e6)

    def stop(self) -> None:
        self._running = False
        if self._timer is not None:
            self._timer.cancel()
        if self._ticker is not None:
            self._ticker.close()
            self._ticker = None

    # -- observation -----------------------------------------------------
    @property
    def n_processing(self) -> int:
        return sum(r is not None for r in self.slots)

    def scrape(self) -> list[tuple[str, str, str, float]]:
        """(type, name, help, value) in llama.cpp's order; resets the throughput gauges."""
        m, b = self.m, self.bucket
        prompt_tps = 1e3 / b["t_prompt_ms"] * b["n_prompt"] if b["n_prompt"] and b["t_prompt_ms"] else 0.0
        pred_tps = 1e3 / b["t_pred_ms"] * b["n_pred"] if b["n_pred"] and b["t_pred_ms"] else 0.0
        self.bucket = {"n_prompt": 0, "t_prompt_ms": 0.0, "n_pred": 0, "t_pred_ms": 0.0}
        c, g = "counter", "gauge"
        return [
            (c, "prompt_tokens_total", "Number of prompt tokens processed.", m["prompt_tokens_total"]),
            (c, "prompt_seconds_total", "Prompt process time", m["prompt_seconds_total"]),
            (c, "prompt_tokens_cached_total", "Number of prompt tokens served from the cache.", 0),
            (c, "tokens_predicted_total", "Number of generation tokens processed.", m["tokens_predicted_total"]),
            (c, "tokens_predicted_seconds_total", "Predict process time", m["tokens_predicted_seconds_total"]),
            (c, "n_decode_total", "Total number of llama_decode() calls", m["n_decode_total"]),
            (c, "n_tokens_max", "Largest observed n_tokens.", m["n_tokens_max"]),
            (g, "prompt_tokens_seconds", "Average prompt throughput in tokens/s.", prompt_tps),
            (g, "predicted_tokens_seconds", "Average generation throughput in tokens/s.", pred_tps),
            (g, "requests_processing", "Number of requests processing.", self.n_processing),
            (g, "requests_deferred", "Number of requests deferred.", len(self.waiting)),
            (g, "n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
             m["n_busy_slots_total"] / max(m["n_decode_total"], 1)),
        ]

    def metrics_text(self) -> str:
        """Prometheus exposition as llama-server writes it (values printed like C++ ``<<``)."""
        lines = []
        for typ, name, help_, value in self.scrape():
            lines += [f"# HELP llamacpp:{name} {help_}", f"# TYPE llamacpp:{name} {typ}", f"llamacpp:{name} {value:g}"]
        return "\n".join(lines) + "\n"

    def slots_json(self) -> list[dict]:
        out = []
        for i, r in enumerate(self.slots):
            d = {"id": i, "n_ctx": self.s.n_ctx_slot, "speculative": False, "is_processing": r is not None}
            if r is not None:
                d.update(id_task=r.task_id, n_prompt_tokens=r.prompt_n, n_prompt_tokens_processed=r.n_processed,
                         n_prompt_tokens_cache=0, params=r.params,
                         next_token=[{"has_next_token": not r.done, "has_new_line": False,
                                      "n_remain": r.n_predict - r.n_decoded, "n_decoded": r.n_decoded}])
            out.append(d)
        return out


def usage_json(req: FakeRequest) -> dict:
    return {"completion_tokens": req.n_decoded, "prompt_tokens": req.prompt_n,
            "total_tokens": req.n_decoded + req.prompt_n, "prompt_tokens_details": {"cached_tokens": 0}}


def models_json(s: FakeScript) -> dict:
    data = [{"id": s.model_alias, "object": "model", "created": int(time.time()),
             "owned_by": "llamacpp" if s.llamacpp else "fake"}]
    if not s.llamacpp:
        return {"object": "list", "data": data}
    data[0]["meta"] = {"vocab_type": 1, "n_vocab": 32000, "n_ctx_train": 32768, "n_embd": 768}
    return {"models": [{"name": s.model_alias, "model": s.model_alias, "type": "model",
                        "capabilities": ["completion"]}], "object": "list", "data": data}


def props_json(s: FakeScript) -> dict:
    return {"default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": s.n_ctx_slot, "speculative": False,
                                            "is_processing": False, "params": {"n_predict": -1}},
            "total_slots": s.n_slots, "model_alias": s.model_alias, "model_path": s.model_path,
            "modalities": {"vision": False, "audio": False}, "chat_template": "", "bos_token": "<s>",
            "eos_token": "</s>", "build_info": s.build_info}
