"""Scripted, deterministic continuous-batching scheduler behind the fake llama.cpp server.

Model (one engine "thread" like llama.cpp's ``update_slots``); every knob lives in `FakeScript`
(fake_script.py):

* A request takes the lowest free slot (or, with ``slot_prompt_similarity``, llama.cpp's choice by
  prompt similarity, else LRU), else waits FIFO (``requests_deferred``). Each slot keeps a prompt
  cache (prompt_cache.py): a request with ``cache_prompt`` (the default) prefills only the prompt
  tokens after the prefix its slot already holds (``cache_n``); a request of the scripted_time
  Sim has no prompt tokens and never hits it.
* A request generates ``min(n_predict, n_ctx_slot - prompt_n)`` tokens: like llama.cpp
  without context shift it stops (``truncated``) when prompt + generated reach the slot
  context; a prompt of ``n_ctx_slot`` tokens or more is refused (HTTP 400, the server).
* Each iteration (one ``llama_decode`` call) holds one decode token for every
  generating slot, then fills up to ``n_batch`` with prompt tokens of prefilling
  slots in slot-index order. It lasts::

      [T(n_generating)   if n_generating]
      + prompt_tokens_in_batch * prefill_ms_per_token   (cached tokens are not in a batch)
      + [first_token_extra_ms   if some prompt completes in this batch]

  where T(k), the decode ms with k generating slots, is ``decode_iteration_ms +
  k * decode_ms_per_busy_slot``, or ``decode_iteration_ms_by_batch[k - 1]`` (its last
  element past its end) when that table is set.
* At the end of an iteration every generating slot emits ``tokens_per_chunk``
  tokens (the last chunk may carry fewer) and a slot whose prompt completed emits
  its first token (always one). A slot is freed after its last token (see above);
  waiting requests enter freed slots and join the next iteration.

Deliberately unfair knobs (all off by default; see the fields' descriptions):
``prefill_first``, ``admit_when_idle``, ``hold_while_decoding``, ``slow_slots``, ``queue_order``,
``serial``.

Graded unfairness: one continuous knob per check of DESIGN.md §6 (fair at 1 for a rate, 0 for a
delay; mechanics in the fields' descriptions) and the TRUE value of the check's statistic it gives,
so a benchmark can place degrees around each bound (K = the check's decoders, p =
prefill_ms_per_token; `scripted_time.Sim` replays a script on a virtual clock for exact figures):

* F1 ``slow_slots=[j]``, ``slow_slot_rate=r``: in F1's closed loop a stream keeps its slot, so the
  per-stream decode-rate ratio max/min is 1/r (bound 1.10 ⇔ r = 0.909; 11/12 → 1.091).
* F2 the same with ``slow_slots=[N - 1]``: sent biggest first into the lowest free slot, the
  smallest size decodes in slot N - 1 together and every size alone in slot 0, so only the
  smallest, together, is slowed; its slowdown: ``scripted_time.f2_slowdowns`` (bound 1.1·N).
* F3 ``lifo_share=p`` (``lifo_seed``): the oldest waiter is passed over a geometric number of
  releases, mean p/(1 − p); the clients' service gap then grows like √time, linearly at p = 1.
* S1 ``prefill_chunk_factor=f``: (max ITL − baseline) ÷ (n_batch ÷ prefill rate) =
  (⌊f·n_batch⌋ − K) ÷ n_batch against 1.5; the injected prefill takes no longer.
* S2 ``admit_delay_iterations=d``: admission delay = the fair one + exactly d·T(K) (bound
  2·T(K)); the fair one here is the rest of the iteration the probe came in + T(K).
* S3 ``second_prompt_delay_iterations=d``: the second TTFT grows by exactly d·T(1) (prompts ≤
  n_batch); with S3's n_batch-token prompts the fair one is the 10 ms gap under the bound.
* Plateau (DESIGN.md §7): ``decode_iteration_ms_by_batch=PLATEAU_ITERATION_MS``, 8 slots: X(2) =
  X(1), X(4) ≈ 1.4·X(1), X(8) ≈ 1.6·X(1); the right recommendation is 8.

A CPU hog is not a knob: a benchmark runs a busy-loop process beside the fake (benchmarks/fake_proc.py).

Iterations chain on scripted deadlines (``perf_counter_ns``), so timer jitter does
not accumulate; a tick later than ``max(2 ms, its duration)`` re-bases on "now"
and counts as an overrun (the fake could not keep up). Deadlines are kept by a
timer thread (``precise_timing``): asyncio's epoll timeout has 1 ms steps and
float rounding adds another, so ``call_later`` alone wakes up to 2 ms late.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

try:
    from .fake_script import (
        VOCAB,
        FakeRequest,
        FakeScript,
        Sink,
        generated_token,
        models_json,
        props_json,
        tokenize,
        usage_json,
    )
    from .prompt_cache import PromptCache, retokenized
except ImportError:  # run as a script (fake_llama_server.py puts this folder on sys.path)
    from fake_script import (  # type: ignore[no-redef]
        VOCAB,
        FakeRequest,
        FakeScript,
        Sink,
        generated_token,
        models_json,
        props_json,
        tokenize,
        usage_json,
    )
    from prompt_cache import PromptCache, retokenized  # type: ignore[no-redef]

__all__ = ["VOCAB", "Engine", "FakeRequest", "FakeScript", "Sink", "generated_token", "models_json",
           "props_json", "tokenize", "usage_json"]

_perf_ns = time.perf_counter_ns


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


class Clock(Protocol):
    """The engine's time: `now_ns`, and `arm(deadline_ns, tick)`, which calls ``tick(deadline_ns)`` once
    that time has come (the latest arming replaces the one before); `stop` cancels it."""

    def now_ns(self) -> int: ...
    def arm(self, deadline_ns: int, tick: Callable[[int], None]) -> None: ...
    def stop(self) -> None: ...


class WallClock:
    """``perf_counter_ns``; a deadline is kept on the running event loop, by `_Ticker`'s thread when
    `precise` (asyncio's epoll has 1 ms steps), else by ``call_later``."""

    def __init__(self, precise: bool = True):
        self.precise = precise
        self._timer: asyncio.TimerHandle | None = None
        self._ticker: _Ticker | None = None

    def now_ns(self) -> int:
        return _perf_ns()

    def arm(self, deadline_ns: int, tick: Callable[[int], None]) -> None:
        if self.precise:
            if self._ticker is None:
                self._ticker = _Ticker(asyncio.get_running_loop(), tick)
            self._ticker.arm(deadline_ns)
        else:
            delay = (deadline_ns - _perf_ns()) / 1e9
            self._timer = asyncio.get_running_loop().call_later(max(delay, 0.0), tick, deadline_ns)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._ticker is not None:
            self._ticker.close()
            self._ticker = None


class VirtualClock:
    """Time that moves only when told (`scripted_time.Sim` steps it): `now` ns, and the deadline armed
    last (`next_deadline`), which the stepper passes to `tick` when it gets there."""

    def __init__(self) -> None:
        self.now = 0
        self.next_deadline: int | None = None
        self.tick: Callable[[int], None] | None = None

    def now_ns(self) -> int:
        return self.now

    def arm(self, deadline_ns: int, tick: Callable[[int], None]) -> None:
        self.next_deadline, self.tick = deadline_ns, tick

    def stop(self) -> None:
        self.next_deadline = None


class Engine:
    """Slots, queue of deferred requests, the iteration timer and llama.cpp's metrics."""

    def __init__(self, script: FakeScript, clock: Clock | None = None):
        self.s = script
        self.clock: Clock = clock or WallClock(script.precise_timing)
        self.slots: list[FakeRequest | None] = [None] * script.n_slots
        self.cache = PromptCache(script.n_slots, script.slot_prompt_similarity, script.cache_ram_tokens)
        self.waiting: deque[FakeRequest] = deque()
        self._batch: list[tuple[FakeRequest, int]] = []  # (req, prompt tokens; 0 = decode)
        self._deadline = 0
        self._running = False
        self._next_task = 0
        self._rng = random.Random(script.lifo_seed)  # lifo_share's draws
        self._span_ns = int(max(self.decode_ms(k) for k in range(1, script.n_slots + 1)) * 1e6)
        self.before_death = lambda: None  # the server flushes its schedule log here
        # llama.cpp server_metrics
        self.m = {"prompt_tokens_total": 0, "prompt_tokens_cached_total": 0, "prompt_seconds_total": 0.0,
                  "tokens_predicted_total": 0, "tokens_predicted_seconds_total": 0.0, "n_decode_total": 0,
                  "n_busy_slots_total": 0, "n_tokens_max": 0}
        self.bucket = {"n_prompt": 0, "t_prompt_ms": 0.0, "n_pred": 0, "t_pred_ms": 0.0}
        self.stats = {"iterations": 0, "chunks": 0, "overruns": 0, "late_ns_max": 0, "deferred_total": 0}

    def now_ns(self) -> int:
        """The engine's clock: a `WallClock`, or the `VirtualClock` that scripted_time.Sim steps."""
        return self.clock.now_ns()

    def decode_ms(self, n_generating: int) -> float:
        """T(k): the decode part of an iteration with k generating slots, ms (0 for none)."""
        s = self.s
        if n_generating <= 0:
            return 0.0
        if s.decode_iteration_ms_by_batch:
            table = s.decode_iteration_ms_by_batch
            return table[min(n_generating, len(table)) - 1]
        return s.decode_iteration_ms + n_generating * s.decode_ms_per_busy_slot

    # -- admission -------------------------------------------------------
    def submit(self, req: FakeRequest) -> None:
        s = self.s
        req.task_id = self._next_task
        self._next_task += 1
        req.n_stop = max(1, min(req.n_predict, s.n_ctx_slot - req.prompt_n))
        busy = [r for r in self.slots if r is not None]
        if s.admit_delay_iterations and any(r.generating for r in busy):
            whole = int(s.admit_delay_iterations)
            req.hold_iters, req.extra_iters = whole, s.admit_delay_iterations - whole
        if s.second_prompt_delay_iterations and any(not r.generating for r in busy):
            whole = int(s.second_prompt_delay_iterations)
            req.skip_iters = whole
            req.extra_iters += s.second_prompt_delay_iterations - whole
        if self.waiting or req.hold_iters or not self._may_admit() or not self._take_slot(req):
            self.waiting.append(req)
            self.stats["deferred_total"] += 1
        if not self._running:
            self._start_iteration(self.now_ns())

    def cancel(self, req: FakeRequest) -> None:
        if req.done or req.cancelled:
            return
        req.cancelled = True
        if req.slot >= 0 and self.slots[req.slot] is req:
            self._release(req)
            self._admit()
        elif req in self.waiting:
            self.waiting.remove(req)

    def _may_admit(self, just_completed: bool = False) -> bool:
        if self.s.hold_while_decoding and not just_completed and any(
                r is not None and r.generating for r in self.slots):
            return False
        return not self.s.admit_when_idle or all(r is None for r in self.slots)

    def _take_slot(self, req: FakeRequest, now_ns: int = 0) -> bool:
        """Put `req` in the idle slot the cache's rule chooses, its cached prefix already processed."""
        idle = [i for i, r in enumerate(self.slots) if r is None]
        if not idle:
            return False
        i = self.cache.take(req.prompt_ids, idle)
        self.slots[i], req.slot, req.admit_ns = req, i, now_ns or self.now_ns()
        req.cache_n = req.n_processed = self.cache.reuse(i, req.prompt_ids,
                                                         bool(req.params.get("cache_prompt", True)))
        return True

    def _release(self, req: FakeRequest) -> None:
        """Free `req`'s slot; it keeps the prompt tokens processed and the decoded tokens (every
        generated one but the last, which llama.cpp samples and never decodes)."""
        self.slots[req.slot] = None
        held = [] if req.prompt_ids is None else req.prompt_ids[:req.n_processed]
        gen = [generated_token(k) for k in range(max(req.n_decoded - 1, 0))] if held else []
        self.cache.release(req.slot, held + retokenized(gen))

    def _newest_first(self, n_ready: int) -> bool:
        """Whether a freed slot takes the most recently arrived of `n_ready` eligible waiters."""
        s = self.s
        if s.queue_order == "lifo":
            return True
        return s.lifo_share > 0 and n_ready > 1 and self._rng.random() < s.lifo_share

    def _admit(self, just_completed: bool = False) -> None:
        if not self._may_admit(just_completed):  # admit_when_idle: all at once, and only into an idle server
            return
        now, holds = self.now_ns(), self.s.admit_delay_iterations > 0
        if holds and all(r is None for r in self.slots):
            for r in self.waiting:  # an idle server holds nobody (no iteration would count the hold down)
                r.hold_iters = 0
        while self.waiting and None in self.slots:
            if not (holds and any(r.hold_iters for r in self.waiting)):
                self._take_slot(self.waiting.pop() if self._newest_first(len(self.waiting))
                                else self.waiting.popleft(), now)
                continue
            ready = [r for r in self.waiting if not r.hold_iters]
            if not ready:
                return
            req = ready[-1] if self._newest_first(len(ready)) else ready[0]
            self.waiting.remove(req)
            self._take_slot(req, now)

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
        chunk = int(s.prefill_chunk_factor * s.n_batch) if n_gen else s.n_batch
        budget, n_prompt, completes, extra_iters, skipped = chunk - n_gen, 0, False, 0.0, False
        for r in active:
            if not r.generating and budget > 0:
                if r.skip_iters:  # second_prompt_delay: it could start now, and is left out
                    r.skip_iters -= 1
                    skipped = True
                    continue
                n = min(budget, r.prompt_n - r.n_processed)
                if r.n_processed == r.cache_n:
                    r.prompt_start_ns = start_ns
                batch.append((r, n))
                budget -= n
                n_prompt += n
                if r.n_processed + n == r.prompt_n:
                    completes = True
                    extra_iters += r.extra_iters
        if not batch:
            if skipped:  # an iteration that would carry nothing else holds nobody back
                for r in active:
                    r.skip_iters = 0
                return self._start_iteration(start_ns)
            self._running = False
            return
        batch.sort(key=lambda e: e[0].slot)
        dur_ms = (n_prompt * s.prefill_ms_per_token + (s.first_token_extra_ms if completes else 0.0)
                  + self.decode_ms(n_gen) + extra_iters * self.decode_ms(max(n_gen, 1)))
        self._batch = batch
        self.m["n_decode_total"] += 1
        self.m["n_busy_slots_total"] += len(busy)
        self._deadline = deadline = start_ns + int(dur_ms * 1e6)
        self._running = True
        self._arm(deadline)

    def _arm(self, deadline_ns: int) -> None:
        """Call ``_tick(deadline_ns)`` at that time (of the clock)."""
        self.clock.arm(deadline_ns, self._tick)

    def _tick(self, deadline: int) -> None:
        if not self._running or deadline != self._deadline:
            return
        now = self.now_ns()
        self.stats["iterations"] += 1
        late = now - deadline
        self.stats["late_ns_max"] = max(self.stats["late_ns_max"], late)
        s, m = self.s, self.m
        tpc = s.tokens_per_chunk
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
                m["prompt_tokens_total"] += req.prefill_n
                m["prompt_tokens_cached_total"] += req.cache_n
                m["prompt_seconds_total"] += p_ms / 1e3
                self.bucket["n_prompt"] += req.prefill_n
                self.bucket["t_prompt_ms"] += p_ms
                k = 1
            else:
                req.n_decode_iters += 1
                if req.slot in s.slow_slots:
                    req.decode_credit += s.slow_slot_rate
                    if req.decode_credit < 1.0 - 1e-9:
                        continue  # a slow slot: this iteration yields nothing for it
                    req.decode_credit -= 1.0
                k = min(tpc, req.n_stop - req.n_decoded)
            ids = [generated_token(req.n_decoded + j) for j in range(k)]
            req.n_decoded += k
            req.last_token_ns = now
            done = req.n_decoded >= req.n_stop
            m["n_tokens_max"] = max(m["n_tokens_max"], req.prompt_n + req.n_decoded)
            if done:
                completed = True
                req.done = True
                req.truncated = req.prompt_n + req.n_decoded >= s.n_ctx_slot  # llama.cpp: ctx check first
                self._release(req)
                g_ms = (now - req.gen_start_ns) / 1e6
                m["tokens_predicted_total"] += req.n_decoded
                m["tokens_predicted_seconds_total"] += g_ms / 1e3
                self.bucket["n_pred"] += req.n_decoded
                self.bucket["t_pred_ms"] += g_ms
            self.stats["chunks"] += 1
            req.sink.tokens(req, ids, done, deadline)
        self._admit(just_completed=completed)
        if s.admit_delay_iterations:
            for r in self.waiting:  # one more boundary passed for every held request still waiting
                if r.hold_iters:
                    r.hold_iters -= 1
        after = self.now_ns()
        if after - deadline > max(2_000_000, self._span_ns):
            self.stats["overruns"] += 1
            self._start_iteration(after)
        else:
            self._start_iteration(deadline)

    def stop(self) -> None:
        self._running = False
        self.clock.stop()

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
            (c, "prompt_tokens_cached_total", "Number of prompt tokens served from the cache.",
             m["prompt_tokens_cached_total"]),
            (c, "tokens_predicted_total", "Number of generation tokens processed.",
             m["tokens_predicted_total"]),
            (c, "tokens_predicted_seconds_total", "Predict process time",
             m["tokens_predicted_seconds_total"]),
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
            lines += [f"# HELP llamacpp:{name} {help_}", f"# TYPE llamacpp:{name} {typ}",
                      f"llamacpp:{name} {value:g}"]
        return "\n".join(lines) + "\n"

    def slots_json(self) -> list[dict]:
        out = []
        for i, r in enumerate(self.slots):
            d = {"id": i, "n_ctx": self.s.n_ctx_slot, "speculative": False, "is_processing": r is not None}
            if r is not None:
                d.update(id_task=r.task_id, n_prompt_tokens=r.prompt_n,
                         n_prompt_tokens_processed=r.n_processed - r.cache_n, n_prompt_tokens_cache=r.cache_n,
                         params=r.params,
                         next_token=[{"has_next_token": not r.done, "has_new_line": False,
                                      "n_remain": r.n_predict - r.n_decoded, "n_decoded": r.n_decoded}])
            out.append(d)
        return out
