"""One lane's server for one scenario: start it, describe it, open what talks to it, stop it.

The sweep (sweep.py) decides the order; a `LaneSession` holds one lane's server: start (or reach)
it, probe it, build the workload, run the sampler, and stop. Its levels run through run.levels, its
liveness is run.watch's. Each session has its own server process, so memory and CPU figures belong
to that lane alone.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Protocol

from satbench.config.schema import LaneConfig
from satbench.errors import RuntimeStartError
from satbench.host.gpu import NvmlGpus
from satbench.http.access import EndpointSession, auth_headers, tls_context_for
from satbench.http.client import Api, StreamClient
from satbench.http.endpoint import Endpoint, is_loopback
from satbench.load.liveness import LIVENESS_TIMEOUT_S, PROGRESS_TIMEOUT_S, LivenessProbe
from satbench.load.sampler import ServerSampler
from satbench.records.events import RequestEvent, Scenario
from satbench.records.manifest import ModelInfo, NetworkInfo, RuntimeInfo, ServerMemory
from satbench.records.writer import JsonlWriter
from satbench.run.memory import started_memory
from satbench.run.watch import ServerWatch
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
from satbench.workload.builder import TOGETHER_SUFFIX, WorkloadBuilder
from satbench.workload.trace import TracePrompts


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
    if not lane.runtime.starts_server:
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
                 url_secret: str | None, nonce: str, session_index: int = 0,
                 liveness_timeout_s: float = LIVENESS_TIMEOUT_S) -> None:
        self.lane, self.scenario, self.runtime, self.model = lane, scenario, runtime, model
        self.headers = api_headers(lane, url_secret)
        self.tls = tls_context_for(lane.runtime)  # the one TLS policy of every connection to the server
        self.nonce = nonce
        self.facts: ServerFacts | None = None
        self.rtts: list[float] = []
        self.memory: ServerMemory | None = None
        self._session: EndpointSession | None = None
        self.client: StreamClient | None = None
        self.workload: WorkloadBuilder | None = None
        self.trace: TracePrompts | None = None  # a trace lane's requests (workload/trace.py), once open
        self.session_index = session_index  # the run's session (0, or the n-th --resume) its records are of
        self._on_this_machine: bool | None = None  # served_here(base URL), resolved once
        # failed when silent `liveness_timeout_s` with requests in flight, or PROGRESS_TIMEOUT_S without
        # a token or /slots progress; its probe and sampler are this session's once open
        self.watch = ServerWatch(lane, scenario, runtime, self._answers, liveness_timeout_s,
                                 PROGRESS_TIMEOUT_S)

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
        self.watch.probe = LivenessProbe(self._answers, self._session if self.facts.llamacpp else None)
        here = gpus if self.network_info().on_this_machine else None
        self.memory = started_memory(buffers, here, self.model.path) if buffers is not None else None
        tokenizer = llamacpp_tokenizer(self._session) if self.facts.llamacpp else None
        detokenizer = llamacpp_detokenizer(self._session) if self.facts.llamacpp else None
        self.workload = WorkloadBuilder(self.lane.workload, tokenizer, self.nonce, detokenizer)
        await self.workload.prepare()
        lane = self.lane
        if lane.workload.trace is not None:
            self.trace = TracePrompts(lane.workload, tokenizer, self.nonce)
            await self.trace.prepare()
        elif self.scenario != "fairness":  # the checks lengthen a prompt too short for its prefix
            await self.workload.check_prefix_fits(self.id_name, lane.ceiling(self.facts.total_slots),
                                                  lane.most_repetitions())
        # NVML sees this machine's GPUs: a server on another machine computes on its own
        pid = self.runtime.pid
        if pid is None and self.network_info().on_this_machine:  # a running server here: its process
            pid = listening_pid(self.runtime.base_url)
        sampler = ServerSampler(endpoint, lane.name, samples, interval_s=lane.sample_interval_s,
                                llamacpp=self.facts.llamacpp, pid=pid,
                                gpus=gpus if self.network_info().on_this_machine else None,
                                scenario=self.scenario, total_slots=self.facts.total_slots)
        self.watch.sampler = sampler
        self.client = StreamClient(endpoint, client_api(lane, self.facts),
                                   model_name=self.facts.openai_model,
                                   request_timeout_s=lane.request_timeout_s,
                                   read_timeout_s=lane.read_timeout_s)
        await sampler.start()

    def _check_served_model(self) -> None:
        """A server satbench started serves the lane's model file: /props' model_path is that file
        (RuntimeStartError otherwise: another process on the port, or a flag that replaced the model).
        A server that does not say is taken at its start's word; a url lane's file is its own."""
        reported = self.facts.model_path if self.facts is not None else None
        if not self.lane.runtime.starts_server or not reported or self.model.path is None:
            return
        if os.path.realpath(reported) != os.path.realpath(self.model.path):
            raise RuntimeStartError(f"lane {self.lane.name}: the server at {self.runtime.base_url} serves "
                                    f"{reported!r}, not the lane's model {self.model.path!r}")

    async def _answers(self, timeout_s: float = 5.0) -> bool:
        """Whether the server still answers GET /health (with any status) within `timeout_s`."""
        assert self._session is not None
        return await self._session.answers("/health", timeout_s)

    async def close(self) -> None:
        if self.watch.sampler is not None:
            await self.watch.sampler.stop()
            self.watch.sampler = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def runtime_info(self) -> RuntimeInfo:
        assert self.facts is not None
        name, version = self.runtime.name_and_version()
        number, commit = parse_build(self.facts.build_info, self.runtime)
        started = self.lane.runtime.starts_server  # a url lane's flags are its server's, not the lane's
        return RuntimeInfo(
            kind=self.runtime.kind, name=name, version=version, llamacpp=self.facts.llamacpp,
            build_info=self.facts.build_info, build_number=number, build_commit=commit,
            binary_sha256=self.runtime.binary_sha256(),
            backend=self.runtime.backend(), base_url=self.runtime.base_url,
            total_slots=self.facts.total_slots, per_slot_ctx=self.facts.per_slot_ctx,
            model_alias=self.facts.model_alias or self.facts.openai_model,
            server_args=self.runtime.server_args, pid=self.runtime.pid, memory=self.memory,
            extra_server_args=list(self.lane.server.extra_args) if started else [],
            server_arg_files=read_files(self.lane.server.extra_args) if started else {},
        )

    def network_info(self) -> NetworkInfo:
        med, p95 = rtt_summary(self.rtts)
        if self._on_this_machine is None:
            self._on_this_machine = served_here(self.runtime.base_url)
        return NetworkInfo(path="loopback" if is_loopback(self.runtime.base_url) else "remote",
                           rtt_ms_median=med, rtt_ms_p95=p95, rtt_samples=len(self.rtts),
                           server_on_this_machine=self._on_this_machine)

    def model_info(self) -> ModelInfo:
        if not self.lane.runtime.starts_server and self.facts is not None and self.facts.model_path:
            return ModelInfo(path=self.facts.model_path, source="reported by the running server's /props")
        return self.model

    @property
    def id_name(self) -> str:
        """The lane name this session's request ids carry (another for requests not run solo)."""
        return self.lane.name if self.scenario == "solo" else self.lane.name + TOGETHER_SUFFIX
