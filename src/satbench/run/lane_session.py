"""One lane's server for one scenario: start it, describe it, measure levels on it, stop it.

The sweep (sweep.py) decides the order; a `LaneSession` does the work for one lane: start (or
reach) the server, probe it, build the workload, run the sampler, run level plans through the
load generator, and stop. Each session has its own server process, so memory and CPU figures
belong to that lane alone.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Protocol, TypeVar

from satbench.config.schema import LaneConfig
from satbench.errors import LevelFailedError, RuntimeStartError, SatbenchError
from satbench.host.gpu import NvmlGpus
from satbench.http.access import EndpointSession, auth_headers, tls_context_for
from satbench.http.client import Api, StreamClient
from satbench.http.endpoint import Endpoint, is_loopback
from satbench.http.errors import RequestFailed
from satbench.load.liveness import (
    LIVENESS_TIMEOUT_S,
    PROGRESS_TIMEOUT_S,
    LivenessProbe,
    ServerUnresponsive,
    StreamActivity,
    prefill_ms_per_token,
    progress_bound_s,
    run_watched,
    watch,
)
from satbench.load.loadgen import UNREACHABLE, LevelPlan, run_level
from satbench.load.open_loop import OpenPlan, open_seed, run_open
from satbench.load.sampler import ServerSampler
from satbench.records.events import LevelMark, RequestEvent, Scenario
from satbench.records.manifest import ModelInfo, NetworkInfo, RuntimeInfo, ServerMemory
from satbench.records.writer import JsonlWriter
from satbench.run.memory import started_memory
from satbench.server.base import Runtime
from satbench.server.embedded import EmbeddedRuntime
from satbench.server.memlog import LOG_VERBOSITY, StartupBuffers, startup_buffers
from satbench.server.native import NativeRuntime
from satbench.server.probe import (
    ServerFacts,
    llamacpp_detokenizer,
    llamacpp_tokenizer,
    measure_rtt_ms,
    probe_server,
    rtt_summary,
)
from satbench.server.remote import UrlRuntime, listening_pid, served_here
from satbench.server.server_args import read_files
from satbench.workload.builder import BACKGROUND_POOL_PER_STREAM, TOGETHER_SUFFIX, WorkloadBuilder

T = TypeVar("T")


class Progress(Protocol):
    """What a sweep tells its caller while it runs (the CLI draws a progress bar)."""

    def begin(self, total_requests: int) -> None: ...
    def level(self, lane: str, scenario: str, level: int, repetition: int) -> None: ...
    def request_done(self, event: RequestEvent) -> None: ...
    def skip(self, requests: int) -> None: ...
    def end(self) -> None: ...


class SilentProgress:
    """A Progress that draws nothing (a sweep run from code, not the CLI)."""

    def begin(self, total_requests: int) -> None: ...
    def level(self, lane: str, scenario: str, level: int, repetition: int) -> None: ...
    def request_done(self, event: RequestEvent) -> None: ...
    def skip(self, requests: int) -> None: ...
    def end(self) -> None: ...


def make_runtime(lane: LaneConfig, model_path: Path | None, log_path: Path,
                 verbosity: int | None = None) -> Runtime:
    """The lane's server; `verbosity` sets llama.cpp's log verbosity (None: its default)."""
    rc = lane.runtime
    if rc.kind == "url":
        assert rc.url is not None
        return UrlRuntime(rc.url)
    assert model_path is not None
    if rc.kind == "native":
        assert rc.server_bin is not None
        return NativeRuntime(rc.server_bin, str(model_path), lane.server, lane.slots_wanted(),
                             lane.ctx_wanted(), log_path, rc.startup_timeout_s, verbosity)
    return EmbeddedRuntime(str(model_path), lane.server, lane.slots_wanted(), lane.ctx_wanted(),
                           log_path, rc.startup_timeout_s, verbosity)


async def probe_buffers(lane: LaneConfig, model_path: Path | None, log_path: Path) -> StartupBuffers | None:
    """Start the lane's server once at log verbosity LOG_VERBOSITY, read the buffer sizes it printed
    (memlog.py) and stop it: the memory probe, the lane's first start, with the measured server's
    flags. RuntimeStartError when it does not start (the lane's start failure: a second start would
    fail alike, or wait out the same timeout); None for a running server (its log is not
    satbench's) or when nothing was printed."""
    if lane.runtime.kind == "url":
        return None
    runtime = make_runtime(lane, model_path, log_path, verbosity=LOG_VERBOSITY)
    try:
        await runtime.start_async()
        found = startup_buffers(runtime.log_path, runtime.log_offset)
    finally:
        runtime.stop()
    return found if found.buffers else None


def api_headers(lane: LaneConfig, url_secret: str | None) -> dict[str, str]:
    """Authorization for a remote server: key from api_key_env, api_key_file or the URL (access.py).

    The key lives only in this header; config, run.json and results carry the variable's
    name, the file's path or nothing.
    """
    return auth_headers(lane.runtime, lane.name, url_secret)


def parse_build(build_info: str | None, runtime: Runtime) -> tuple[int | None, str | None]:
    """(build number, commit) from /props build_info "b11549-1a2b3c4"; the xllamacpp wheel says
    "b0-unknown", so its number comes from the package version (2026.10.11549 → 11549)."""
    number, commit = None, None
    m = re.match(r"^b(\d+)-(\w+)$", build_info or "")
    if m:
        number = int(m[1]) or None
        commit = None if m[2] == "unknown" else m[2]
    if number is None and isinstance(runtime, EmbeddedRuntime):
        version = runtime.name_and_version()[1] or ""
        v = re.match(r"^\d+\.\d+\.(\d+)$", version)
        number = int(v[1]) if v else None
    return number, commit


def client_api(lane: LaneConfig, facts: ServerFacts) -> Api:
    """The API a lane's requests use: chat completions with endpoint chat; else llama.cpp's own
    /completion, or /v1/completions on another server."""
    if lane.workload.endpoint == "chat":
        return "chat"
    return "native" if facts.llamacpp else "openai"


class LaneSession:
    """The server of one lane in one scenario, and everything that talks to it."""

    def __init__(self, lane: LaneConfig, scenario: Scenario, runtime: Runtime, model: ModelInfo,
                 url_secret: str | None, nonce: str) -> None:
        self.lane, self.scenario, self.runtime, self.model = lane, scenario, runtime, model
        self.headers = api_headers(lane, url_secret)
        self.tls = tls_context_for(lane.runtime)  # the one TLS policy of every connection to the server
        self.nonce = nonce
        self.facts: ServerFacts | None = None
        self.rtts: list[float] = []
        self.memory: ServerMemory | None = None
        self._session: EndpointSession | None = None
        self._sampler: ServerSampler | None = None
        self.client: StreamClient | None = None
        self.workload: WorkloadBuilder | None = None
        self.session_index = 0  # which session of the run (0, or the n-th --resume) its records belong to
        self._on_this_machine: bool | None = None  # served_here(base URL), resolved once
        self.liveness_timeout_s = LIVENESS_TIMEOUT_S  # silent this long while requests are in flight: failed
        self.progress_timeout_s = PROGRESS_TIMEOUT_S  # no token and no /slots progress this long: failed
        self.prefill_ms_per_token: float | None = None  # the slowest prefill seen (liveness.progress_bound_s)
        self._probe: LivenessProbe | None = None  # the watchdog's evidence probe: /slots or /health

    async def open(self, samples: JsonlWriter, gpus: NvmlGpus | None,
                   buffers: StartupBuffers | None = None) -> None:
        """Probe the (started) server, measure RTT, record its memory (`buffers` from a memory probe,
        with what is left now), prepare the workload, start the sampler (with `gpus` only when the
        server is on this machine: loopback)."""
        endpoint = Endpoint.of(self.runtime.base_url, self.headers, self.tls)
        self._session = EndpointSession(endpoint, timeout_s=30)
        self.facts = await probe_server(self._session, self.lane.runtime.served_model)
        self._check_served_model()
        self.rtts = await measure_rtt_ms(self._session)
        self._probe = LivenessProbe(self._answers, self._session if self.facts.llamacpp else None)
        here = gpus if self.network_info().on_this_machine else None
        self.memory = started_memory(buffers, here, self.model.path) if buffers is not None else None
        tokenizer = llamacpp_tokenizer(self._session) if self.facts.llamacpp else None
        detokenizer = llamacpp_detokenizer(self._session) if self.facts.llamacpp else None
        self.workload = WorkloadBuilder(self.lane.workload, tokenizer, self.nonce, detokenizer)
        await self.workload.prepare()
        lane = self.lane
        if self.scenario != "fairness":  # the checks lengthen a prompt too short for its prefix
            await self.workload.check_prefix_fits(self._id_name, lane.ceiling(self.facts.total_slots),
                                                  lane.most_repetitions())
        # NVML sees this machine's GPUs: a server on another machine computes on its own
        pid = self.runtime.pid
        if pid is None and self.network_info().on_this_machine:  # a running server here: its process
            pid = listening_pid(self.runtime.base_url)
        self._sampler = ServerSampler(endpoint, lane.name, samples, interval_s=lane.sample_interval_s,
                                      llamacpp=self.facts.llamacpp, pid=pid,
                                      gpus=gpus if self.network_info().on_this_machine else None,
                                      scenario=self.scenario,
                                      total_slots=self.facts.total_slots)
        self.client = StreamClient(endpoint, client_api(lane, self.facts),
                                   model_name=self.facts.openai_model,
                                   request_timeout_s=lane.request_timeout_s,
                                   read_timeout_s=lane.read_timeout_s)
        await self._sampler.start()

    def _check_served_model(self) -> None:
        """A server satbench started serves the lane's model file: /props' model_path is that file
        (RuntimeStartError otherwise: another process on the port, or a flag that replaced the model).
        A server that does not say is taken at its start's word; a url lane's file is its own."""
        reported = self.facts.model_path if self.facts is not None else None
        if self.runtime.kind == "url" or not reported or self.model.path is None:
            return
        if os.path.realpath(reported) != os.path.realpath(self.model.path):
            raise RuntimeStartError(f"lane {self.lane.name}: the server at {self.runtime.base_url} serves "
                                    f"{reported!r}, not the lane's model {self.model.path!r}")

    async def _answers(self, timeout_s: float = 5.0) -> bool:
        """Whether the server still answers GET /health (with any status) within `timeout_s`."""
        assert self._session is not None
        return await self._session.answers("/health", timeout_s)

    async def _watchdog(self, activity: StreamActivity) -> str:
        """Returns when the server is to be declared failed (liveness.watch): its process is gone,
        nothing arrived on the requests in flight and its probe (LivenessProbe: /slots, or /health) was
        silent for `liveness_timeout_s`, or no token came and /slots showed no progress for
        `progress_bound_s` (`progress_timeout_s`, longer when PREFILL_BATCHES batches at the slowest
        prefill seen in this session take longer)."""
        probe = self._probe or LivenessProbe(self._answers)  # /health until open() knows better
        bound = progress_bound_s(self.progress_timeout_s, self.prefill_ms_per_token, self.lane.server.n_batch)
        return await watch(activity, self.runtime.alive, probe, self.liveness_timeout_s,
                           probed=lambda: probe.path, progress_timeout_s=bound,
                           slots_progress=lambda: probe.slots_progress)

    async def watched(self, work: Coroutine[object, object, T], activity: StreamActivity) -> T:
        """`await work` (whose requests report to `activity`) under the liveness watchdog; raises
        ServerUnresponsive when the watchdog stopped it (its requests in flight are recorded), and
        the sampler's RunDirError as soon as server_samples.jsonl cannot be written (the work is
        stopped then, its requests in flight recorded), also when the work ended first."""
        sampler = self._sampler
        result = await run_watched(work, activity, self._watchdog,
                                   stop=sampler.write_failed if sampler is not None else None)
        if sampler is not None:
            sampler.check_written()
        return result

    async def close(self) -> None:
        if self._sampler is not None:
            await self._sampler.stop()
            self._sampler = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def runtime_info(self) -> RuntimeInfo:
        assert self.facts is not None
        name, version = self.runtime.name_and_version()
        number, commit = parse_build(self.facts.build_info, self.runtime)
        return RuntimeInfo(
            kind=self.runtime.kind, name=name, version=version, llamacpp=self.facts.llamacpp,
            build_info=self.facts.build_info, build_number=number, build_commit=commit,
            binary_sha256=self.runtime.binary_sha256(),
            backend=self.runtime.backend(), base_url=self.runtime.base_url,
            total_slots=self.facts.total_slots, per_slot_ctx=self.facts.per_slot_ctx,
            model_alias=self.facts.model_alias or self.facts.openai_model,
            server_args=self.runtime.server_args, pid=self.runtime.pid, memory=self.memory,
            extra_server_args=list(self.lane.server.extra_args) if self.runtime.kind != "url" else [],
            server_arg_files=read_files(self.lane.server.extra_args) if self.runtime.kind != "url" else {},
        )

    def network_info(self) -> NetworkInfo:
        med, p95 = rtt_summary(self.rtts)
        if self._on_this_machine is None:
            self._on_this_machine = served_here(self.runtime.base_url)
        return NetworkInfo(path="loopback" if is_loopback(self.runtime.base_url) else "remote",
                           rtt_ms_median=med, rtt_ms_p95=p95, rtt_samples=len(self.rtts),
                           server_on_this_machine=self._on_this_machine)

    def model_info(self) -> ModelInfo:
        if self.runtime.kind == "url" and self.facts is not None and self.facts.model_path:
            return ModelInfo(path=self.facts.model_path, source="reported by the running server's /props")
        return self.model

    @property
    def _id_name(self) -> str:
        """The lane name this session's request ids carry (another for requests not run solo)."""
        return self.lane.name if self.scenario == "solo" else self.lane.name + TOGETHER_SUFFIX

    async def plan(self, level: int, repetition: int, background: bool, warmup: bool = True,
                   measured: int | None = None) -> LevelPlan:
        """The level's requests (tokenized by the server): `measured` of them (None: the lane's own
        count), its warmup requests only with `warmup`; LevelFailedError if the server is gone."""
        try:
            return await self._plan(level, repetition, background, warmup, measured)
        except (SatbenchError, RequestFailed) as exc:
            await self.check_alive(f"level {level} (repetition {repetition})", level, repetition, exc)
            raise

    async def _plan(self, level: int, repetition: int, background: bool, warmup: bool = True,
                    measured: int | None = None) -> LevelPlan:
        assert self.workload is not None
        lane, w = self.lane, self.workload
        name = self._id_name
        return LevelPlan(
            lane=lane.name, level=level, repetition=repetition, scenario=self.scenario,
            session=self.session_index,
            warmup=(await w.build(name, level, repetition, "warmup", level * lane.warmup_per_stream)
                    if warmup else []),
            measured=await w.build(name, level, repetition, "measured",
                                   measured or lane.measured_requests(level)),
            background=(await w.build(name, level, repetition, "background",
                                      level * BACKGROUND_POOL_PER_STREAM) if background else []),
        )

    async def run(self, plan: LevelPlan, sink: JsonlWriter, progress: Progress,
                  keep_busy: asyncio.Event | None = None,
                  measured_done: asyncio.Event | None = None) -> LevelMark:
        """One level repetition; raises LevelFailedError if it failed (what finished is on disk),
        also when the liveness watchdog declared the server failed (liveness.py: silent for
        `liveness_timeout_s` while requests are in flight, or its process gone)."""
        assert self.client is not None
        client = self.client
        told = measured_done.set if measured_done is not None else None
        return await self._drive(plan, progress, lambda done, activity: run_level(
            client, plan, sink, on_done=done, keep_busy=keep_busy, measured_done=told, activity=activity))

    async def run_open(self, rate_index: int, repetition: int, seed: int, sink: JsonlWriter,
                       progress: Progress) -> LevelMark:
        """The lane's `rate_index`-th open-loop rate (1-based), once (load/open_loop.py), under the
        liveness watchdog; LevelFailedError if it lost the server (what finished is on disk)."""
        assert self.client is not None and self.workload is not None
        assert self.facts is not None and self.lane.rates is not None
        lane, rate, client = self.lane, self.lane.rates[rate_index - 1], self.client
        reqs = await self.workload.build_open(self._id_name, rate_index, repetition,
                                              lane.arrivals_per_rate(rate))
        plan = OpenPlan(LevelPlan(lane=lane.name, level=rate_index, repetition=repetition, warmup=[],
                                  measured=reqs, scenario="open", session=self.session_index),
                        rate, lane.open_cap(self.facts.total_slots or 1),
                        open_seed(seed, rate_index, repetition))
        return await self._drive(plan.level, progress, lambda done, activity: run_open(
            client, plan, sink, on_done=done, activity=activity))

    async def _drive(self, plan: LevelPlan, progress: Progress,
                     load: Callable[[Callable[[RequestEvent], None], StreamActivity],
                                    Coroutine[object, object, LevelMark]]) -> LevelMark:
        """Run `load(on_done, activity)` (a closed- or open-loop level) between two sampler snapshots,
        under the liveness watchdog; LevelFailedError when it failed, its server is gone, or the server
        no longer answers after a last request that could not reach it."""
        assert self._sampler is not None
        progress.level(self.lane.name, plan.scenario, plan.level, plan.repetition)
        await self._sampler.snapshot()
        last: list[RequestEvent] = []

        def done(event: RequestEvent) -> None:
            last[:] = [event]
            if (ms := prefill_ms_per_token(event)) is not None:
                self.prefill_ms_per_token = max(ms, self.prefill_ms_per_token or 0.0)
            progress.request_done(event)

        activity = StreamActivity()
        try:
            end = await self.watched(load(done, activity), activity)
        except ServerUnresponsive as exc:  # the level is on disk, failed, its requests in flight recorded
            raise self._level_failed(plan, self.why_unresponsive(exc)) from None
        await self._sampler.snapshot()
        self._sampler.check_written()  # server_samples.jsonl unwritable (disk full): stop, say so
        # a level can end on unreachable failures too few for run_level's "N + 3 in a row": ask the server
        tail = last[0].error if last and last[0].error and last[0].error.type in UNREACHABLE else None
        silent = tail is not None and end.status != "failed" and not await self._answers()
        if end.status == "failed" or not self.runtime.alive() or silent:
            if not self.runtime.alive():
                why = self._exit_words()
            elif silent and tail is not None:
                why = f"the server stopped answering (last request: {tail.type}: {tail.message})"
            else:
                why = str(end.reason)
            raise self._level_failed(plan, why)
        return end

    def _level_failed(self, plan: LevelPlan, why: str) -> LevelFailedError:
        what = (f"rate {self.lane.rates[plan.level - 1]:g}/s" if plan.scenario == "open" and self.lane.rates
                else f"level {plan.level}")
        return LevelFailedError(f"lane {self.lane.name}: {what} (repetition "
                                f"{plan.repetition}{', together' if self.scenario == 'together' else ''}) "
                                f"failed: {why}", lane=self.lane.name, scenario=plan.scenario,
                                level=plan.level, repetition=plan.repetition)

    def why_unresponsive(self, exc: ServerUnresponsive) -> str:
        """The watchdog's reason, or how the server process ended when it is gone."""
        return self._exit_words() if not self.runtime.alive() else str(exc)

    def _exit_words(self) -> str:
        """How the server ended, for a failure's reason: "the server process was killed by SIGFPE
        (signal 8)", "the server process exited with status 1"."""
        ended = self.runtime.ended()
        if ended is None:
            return "the server process exited"
        return f"the server process {'was ' if ended.startswith('killed') else ''}{ended}"

    async def check_alive(self, what: str, level: int, repetition: int = 1,
                          cause: BaseException | None = None) -> None:
        """After a fairness check, or when talking to the server raised `cause`: raise
        LevelFailedError if the server died or stopped answering; return if it is well."""
        if self.runtime.alive() and await self._answers():
            return
        why = self._exit_words() if not self.runtime.alive() else "the server stopped answering"
        if cause is not None:
            why += f" ({cause.__class__.__name__}: {cause})"[:300]
        raise self.check_failed(what, level, why, repetition) from cause

    def check_failed(self, what: str, level: int, why: str, repetition: int = 1) -> LevelFailedError:
        """The LevelFailedError of a fairness check (or other work) `what` that lost its server: `why`."""
        where = what if self.scenario != "fairness" else f"fairness {what} ({level} in flight)"
        return LevelFailedError(f"lane {self.lane.name}: {where} failed: {why}", lane=self.lane.name,
                                scenario=self.scenario, level=level, repetition=repetition)


async def together_step(active: list[LaneSession], k: int, rep: int, events: JsonlWriter,
                        progress: Progress) -> None:
    """The k-th level of every active lane at once: each lane's streams stay busy with background
    requests until every lane has its measured requests, so each is measured under the others'
    full load; one lane's failure stops the others' levels too (their marks say so)."""
    keep_busy = asyncio.Event()
    done = [asyncio.Event() for _ in active]
    plans = [await s.plan(s.lane.levels[k], rep, background=True) for s in active]

    async def release_when_all_measured() -> None:
        await asyncio.gather(*(d.wait() for d in done))
        keep_busy.set()

    releaser = asyncio.create_task(release_when_all_measured())
    tasks = [asyncio.create_task(s.run(p, events, progress, keep_busy=keep_busy, measured_done=d))
             for s, p, d in zip(active, plans, done)]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        failed = next((s.lane.name for s, t in zip(active, tasks) if t.done() and not t.cancelled()
                       and t.exception() is not None), "another lane")
        for t in tasks:
            t.cancel(f"stopped: lane {failed} failed in the together scenario")
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        keep_busy.set()
        releaser.cancel()
