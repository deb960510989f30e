"""Server sampler: /metrics, /slots and the server process, each in its own task, ≥10 Hz.

Only this module scrapes /metrics (its `*_tokens_seconds` gauges reset at every scrape, so
two pollers would corrupt each other). An endpoint that fails is recorded as such; after a
run of failures its poller stops, writing one last error sample (STOPPED…) so that every later
level can say why the figures it feeds are unavailable. A failed GPU reading never costs the
process sample its RSS and CPU (see `_process`). A sample that cannot be written (disk full)
stops its poller too, and `check_written()` re-raises that error for the caller: a run must not
go on without saying so.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TypedDict

import psutil

from satbench.config.limits import (
    MAX_CTX_TOKENS,
    MAX_METRICS_BYTES,
    MAX_SLOTS,
    MAX_SLOTS_BYTES,
    checked_int,
    json_answer,
)
from satbench.errors import ParseError, RunDirError
from satbench.host.gpu import GpuReading, NvmlGpus
from satbench.http.access import EndpointSession, read
from satbench.http.endpoint import Endpoint
from satbench.http.errors import RequestFailed, describe
from satbench.http.promparse import llamacpp_values
from satbench.records.events import (
    GPU_FAILED,
    STOPPED,
    MetricsSample,
    ProcessSample,
    Scenario,
    SlotsSample,
)
from satbench.records.writer import JsonlWriter

MAX_CONSECUTIVE_FAILURES = 20
_LIMIT_BYTES = {"/metrics": MAX_METRICS_BYTES, "/slots": MAX_SLOTS_BYTES}


class _Tag(TypedDict):
    """The fields every sample of one sampler carries."""

    lane: str
    scenario: Scenario


def parse_slots(payload: object, total_slots: int | None = None) -> tuple[int, list[int], dict[int, int]]:
    """/slots JSON → (n_slots, busy slot ids, tokens decoded per busy slot).

    Strict, so a sample is never built from nonsense (ParseError naming the field instead): at most
    `total_slots` entries (what /props reports, when known; else MAX_SLOTS), each with a distinct
    integer id in 0..MAX_SLOTS-1, `is_processing` a bool when present, n_decoded (when it is there)
    an integer in 0..MAX_CTX_TOKENS. A sample lists each busy slot once (~20 bytes of JSON), so one
    written per poll stays within ~20 bytes × the server's slots."""
    if not isinstance(payload, list):
        raise ParseError("/slots did not return a JSON list")
    if len(payload) > MAX_SLOTS:
        raise ParseError(f"/slots lists {len(payload)} slots, more than {MAX_SLOTS}")
    if total_slots is not None and len(payload) > total_slots:
        raise ParseError(f"/slots lists {len(payload)} slots, more than the {total_slots} of /props "
                         "total_slots")
    busy, decoded, seen = [], {}, set()
    for slot in payload:
        if not isinstance(slot, dict) or "id" not in slot:
            raise ParseError("/slots entry without an integer id")
        sid = checked_int(slot["id"], 0, MAX_SLOTS - 1, "/slots id")
        if sid in seen:
            raise ParseError(f"/slots lists slot id {sid} twice")
        seen.add(sid)
        processing = slot.get("is_processing", False)
        if not isinstance(processing, bool):
            raise ParseError(f"/slots slot {sid}: is_processing is not true or false")
        if processing:
            busy.append(sid)
            nxt = slot.get("next_token")
            first = nxt[0] if isinstance(nxt, list) and nxt else None
            if isinstance(first, dict) and first.get("n_decoded") is not None:
                decoded[sid] = checked_int(first["n_decoded"], 0, MAX_CTX_TOKENS,
                                           f"/slots slot {sid}: n_decoded")
    return len(payload), sorted(busy), decoded


class ServerSampler:
    """Polls `endpoint` (its headers and TLS policy) until `stop()`; every sample goes straight to
    `server_samples.jsonl`. `timeout_s` bounds each scrape."""

    def __init__(
        self, endpoint: Endpoint, lane: str, writer: JsonlWriter, *, interval_s: float = 0.1,
        llamacpp: bool = True, pid: int | None = None, gpus: NvmlGpus | None = None,
        timeout_s: float = 2.0, clock: Callable[[], int] = time.perf_counter_ns,
        scenario: Scenario = "solo",
        total_slots: int | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.lane, self.writer, self.interval_s = lane, writer, interval_s
        self.tag: _Tag = {"lane": lane, "scenario": scenario}
        self.llamacpp, self.pid, self.gpus, self.clock = llamacpp, pid, gpus, clock
        self._timeout_s = timeout_s
        self.total_slots = total_slots  # /props total_slots: a /slots answer listing more is refused
        self._tasks: list[asyncio.Task] = []
        self._session: EndpointSession | None = None
        self.disabled: dict[str, str] = {}
        self._last_error: dict[str, str] = {}  # per poller: its latest failure
        self._gpu_failures = 0
        self.write_error: RunDirError | None = None  # a poller could not write its sample (disk full)
        self._write_failed = asyncio.Event()  # set with write_error

    async def start(self) -> None:
        self._session = EndpointSession(self.endpoint, self._timeout_s)
        if self.llamacpp:
            self._tasks.append(asyncio.create_task(self._loop("metrics", self._metrics)))
            self._tasks.append(asyncio.create_task(self._loop("slots", self._slots)))
        # always: host and satbench CPU are read for every lane (url lanes too), the server's own
        # RSS and CPU only when satbench started it (a known pid)
        self._tasks.append(asyncio.create_task(self._loop("process", self._process)))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def check_written(self) -> None:
        """Raise the RunDirError a poller met writing server_samples.jsonl (it stopped polling then)."""
        if self.write_error is not None:
            raise self.write_error

    async def write_failed(self) -> RunDirError:
        """Return, with it, once a poller met a RunDirError writing server_samples.jsonl: the work
        beside the sampler must stop then (liveness.run_watched's `stop`)."""
        await self._write_failed.wait()
        assert self.write_error is not None
        return self.write_error

    def _failed_write(self, exc: RunDirError) -> None:
        if self.write_error is None:
            self.write_error = exc
        self._write_failed.set()

    async def snapshot(self) -> None:
        """One process sample now (the sweep takes one at every level boundary, so even a level
        shorter than the sampling period has its memory figures)."""
        await self._process()

    async def _loop(self, name: str, poll: Callable) -> None:
        """Tick on an absolute schedule (no drift); a slow answer skips ticks, never piles up."""
        next_t = time.monotonic()
        failures = 0
        while True:
            try:
                ok = await poll()
            except RunDirError as exc:  # server_samples.jsonl cannot be written: the run must stop
                self._failed_write(exc)
                return
            failures = 0 if ok else failures + 1
            if failures >= MAX_CONSECUTIVE_FAILURES:
                self.disabled[name] = f"{failures} consecutive failures; stopped polling"
                self._write_stopped(name, f"{STOPPED} {failures} consecutive failures; last: "
                                          f"{self._last_error.get(name, 'unknown')}")
                return
            next_t += self.interval_s
            now = time.monotonic()
            if next_t < now:
                next_t = now
            await asyncio.sleep(next_t - now)

    def _write_stopped(self, name: str, error: str) -> None:
        """One last error sample, so that later levels can say why the poller's figures are missing."""
        t = self.clock()
        if name == "process":
            sample: MetricsSample | SlotsSample | ProcessSample = ProcessSample(**self._process_tag(), t_ns=t,
                                                                                error=error)
        else:
            kind = MetricsSample if name == "metrics" else SlotsSample
            sample = kind(**self.tag, sent_ns=t, t_ns=t, error=error)
        try:
            self.writer.write(sample)
        except RunDirError as exc:
            self._failed_write(exc)

    async def _get(self, path: str) -> tuple[int, bytes]:
        """(status, body) within the endpoint's limit (_LIMIT_BYTES) and the poll's timeout; else the
        RequestFailed of access.read (its `detail` is what the sample records)."""
        assert self._session is not None
        answer = await read(self._session, path, timeout_s=self._timeout_s, limit_bytes=_LIMIT_BYTES[path])
        return answer.status, answer.body

    async def _metrics(self) -> bool:
        sent = self.clock()
        try:
            status, body = await self._get("/metrics")
            if status != 200:
                raise ParseError(f"/metrics answered HTTP {status}")
            values = llamacpp_values(body.decode("utf-8", "replace"))
        except (RequestFailed, ParseError) as exc:
            self._last_error["metrics"] = _describe(exc)
            self.writer.write(MetricsSample(**self.tag, sent_ns=sent, t_ns=self.clock(),
                                            error=self._last_error["metrics"]))
            return False
        self.writer.write(MetricsSample(**self.tag, sent_ns=sent, t_ns=self.clock(), values=values))
        return True

    async def _slots(self) -> bool:
        sent = self.clock()
        try:
            status, body = await self._get("/slots")
            if status != 200:
                raise ParseError(f"/slots answered HTTP {status}")
            n, busy, decoded = parse_slots(json_answer(body, "/slots"), self.total_slots)
        except (RequestFailed, ParseError) as exc:
            self._last_error["slots"] = _describe(exc)
            self.writer.write(SlotsSample(**self.tag, sent_ns=sent, t_ns=self.clock(),
                                          error=self._last_error["slots"]))
            return False
        self.writer.write(SlotsSample(**self.tag, sent_ns=sent, t_ns=self.clock(), n_slots=n,
                                      busy_ids=busy, n_decoded=decoded))
        return True

    async def _process(self) -> bool:
        """RSS and CPU, then the GPU apart: a failed NVML reading leaves the GPU fields None and is
        recorded in a sample of its own (error GPU_FAILED…), never costing RSS/CPU or stopping this
        poller; after MAX_CONSECUTIVE_FAILURES of them in a row the GPU is no longer read. Every
        sample names the server and satbench processes it read, so a level never takes figures from
        another session's or a restarted server's process (metrics/memory.py)."""
        t_ns = self.clock()
        rss = cpu = busy = own = None
        error = None
        try:
            if self.pid is not None:
                rss, cpu = process_tree_usage(self.pid)
            busy, own = host_and_client_cpu()
        except (psutil.Error, OSError) as exc:
            error = self._last_error["process"] = _describe(exc)
        gpu, gpu_error = self._read_gpu()
        sample = ProcessSample(
            **self._process_tag(), t_ns=t_ns, rss_bytes=rss, cpu_seconds=cpu, host_busy_cpu_seconds=busy,
            client_cpu_seconds=own, gpu_mem_used_bytes=None if gpu is None else gpu.mem_used_bytes,
            gpu_util_pct=None if gpu is None else gpu.util_pct,
            gpu_sm_clock_mhz=None if gpu is None else gpu.sm_clock_mhz, error=error)
        self.writer.write(sample)
        if gpu_error is not None:
            self.writer.write(ProcessSample(**self._process_tag(), t_ns=t_ns, error=GPU_FAILED + gpu_error))
        return error is None

    def _process_tag(self) -> dict:
        return {**self.tag, "server_pid": self.pid, "client_pid": os.getpid()}

    def _read_gpu(self) -> tuple[GpuReading | None, str | None]:
        """(NVML's reading, None), or (None, the error to record) when NVML failed; (None, None) when
        no GPU is read."""
        if self.gpus is None or "gpu" in self.disabled:
            return None, None
        try:
            gpu = self.gpus.reading()
        except Exception as exc:  # NVML raises its own types; keep sampling
            self._gpu_failures += 1
            if self._gpu_failures < MAX_CONSECUTIVE_FAILURES:
                return None, _describe(exc)
            self.disabled["gpu"] = f"{self._gpu_failures} consecutive failures; stopped reading NVML"
            return None, f"{STOPPED} {self._gpu_failures} consecutive failures; last: {_describe(exc)}"
        self._gpu_failures = 0
        return gpu, None


CHILDREN_REFRESH_S = 1.0  # how long process_tree_usage goes on reading a server's descendants as listed
_MAX_TREES = 16  # server process trees remembered at once (the least recently read is forgotten)


class _Tree:
    """A server's psutil.Process and those of its descendants, as listed at `listed_s` (_clock's seconds)."""

    def __init__(self, root: psutil.Process, children: list[psutil.Process], listed_s: float) -> None:
        self.root, self.children, self.listed_s = root, children, listed_s

    def read(self) -> tuple[int, float, bool]:
        """(RSS bytes, user+system CPU seconds, whether every process was still there), summed over
        the processes still there."""
        rss, cpu, whole = 0, 0.0, True
        for p in [self.root, *self.children]:
            try:
                rss += p.memory_info().rss
                t = p.cpu_times()
                cpu += t.user + t.system
            except psutil.NoSuchProcess:
                whole = False
        return rss, cpu, whole


_trees: dict[int, _Tree] = {}
_clock: Callable[[], float] = time.monotonic


def _listed(pid: int, old: _Tree | None, now_s: float) -> _Tree:
    """The tree under `pid` listed now (NoSuchProcess when there is no such process), keeping the
    psutil.Process objects `old` already has for the same processes."""
    root = psutil.Process(pid)
    known = {p: p for p in ([old.root, *old.children] if old is not None else [])}
    return _Tree(known.get(root, root), [known.get(p, p) for p in root.children(recursive=True)], now_s)


def process_tree_usage(pid: int) -> tuple[int, float]:
    """(RSS bytes, user+system CPU seconds) of a process and all its descendants.

    Listing the descendants walks every process of the machine, so it is done once per
    CHILDREN_REFRESH_S per server, and again at once when a listed process is gone; in between, the
    processes listed are read. A descendant started since the last listing is missed until the next
    one, at most CHILDREN_REFRESH_S later: every descendant that lives longer than that is in the
    samples from then on until it exits. For a tree that does not change, the figures are the same
    as listing it at every sample. NoSuchProcess when `pid` is gone, or when every process read is
    gone or a zombie (no resident memory)."""
    now_s = _clock()
    tree = _trees.pop(pid, None)
    fresh = tree is None or now_s - tree.listed_s >= CHILDREN_REFRESH_S
    if fresh:
        tree = _listed(pid, tree, now_s)
    assert tree is not None
    rss, cpu, whole = tree.read()
    if not whole and not fresh:
        tree = _listed(pid, tree, now_s)
        rss, cpu, _ = tree.read()
    _trees[pid] = tree
    while len(_trees) > _MAX_TREES:
        del _trees[next(iter(_trees))]
    if rss == 0:  # every process gone or a zombie (killed, not yet reaped): no reading, not a zero
        raise psutil.NoSuchProcess(pid, msg="no resident memory: the server exited (not reaped yet)")
    return rss, cpu


def host_and_client_cpu() -> tuple[float, float]:
    """(machine-wide busy CPU seconds = total − idle − iowait, this process's user+system seconds)."""
    t = psutil.cpu_times()
    busy = sum(t) - t.idle - getattr(t, "iowait", 0.0)
    own = psutil.Process().cpu_times()
    return busy, own.user + own.system


def _describe(exc: BaseException) -> str:
    """'ClassName: message' (of what the HTTP stack raised, for a failed request), at most 300 characters."""
    return (exc.detail if isinstance(exc, RequestFailed) else describe(exc))[:300]
