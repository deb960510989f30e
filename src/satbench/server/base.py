"""The narrow runtime interface: start, stop, where it listens, what it is.

A runtime only provides a server; talking to it (probe, stream, sample) is done elsewhere
through HTTP, identically for every runtime.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from satbench.config.schema import RuntimeKind, ServerParams
from satbench.errors import RuntimeStartError, UserError
from satbench.server.logscan import failure_reason_from_file


class Runtime(ABC):
    kind: ClassVar[RuntimeKind]  # each concrete runtime names its kind

    def __init__(self) -> None:
        self.base_url: str = ""
        self.pid: int | None = None
        self.log_path: Path | None = None
        self.log_offset = 0  # where this start's part of the log begins (an existing file is appended to)
        self.server_args: list[str] = []

    @abstractmethod
    def start(self) -> None:
        """Bring the server up (blocking until it answers) or raise RuntimeStartError."""

    async def start_async(self) -> None:
        """`start()` for the event loop: waits without blocking it, so Ctrl-C and SIGTERM stop a
        server that is still starting (and stop it) instead of waiting for the startup to end."""
        self.start()

    @abstractmethod
    def stop(self) -> None:
        """Stop the server if satbench started it; safe to call twice."""

    @abstractmethod
    def name_and_version(self) -> tuple[str, str | None]:
        """What serves, e.g. ("xllamacpp wheel", "2026.10.11549")."""

    def backend(self) -> str | None:
        """Devices the server computes on ("CPU", "CUDA0 (NVIDIA H200)"); None when unknown."""
        return None

    def binary_sha256(self) -> str | None:
        """Digest of the server's executable code where satbench can read it (a native binary);
        None when the build number alone identifies it or the code is out of reach."""
        return None

    def alive(self) -> bool:
        return True

    def ended(self) -> str | None:
        """How the server process ended ("killed by SIGFPE (signal 8)"); None while it runs, or
        when satbench did not start it."""
        return None

    def __enter__(self) -> Runtime:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> Callable[[], None] | None:
    """Linux: a `preexec_fn` that has the kernel SIGKILL the child the moment satbench's thread
    that started it dies, however it dies (SIGKILL, the OOM killer), so no server outlives the
    run to hold its port and skew the next benchmark on the machine. Servers are started from
    the main thread (the event loop's), which lives as long as the run. None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # satbench died between fork and prctl
            os._exit(1)

    return arm


class ProcessRuntime(Runtime):
    """A runtime whose server is a child process satbench started and must stop."""

    label = "server"

    def __init__(self) -> None:
        super().__init__()
        self._proc: subprocess.Popen | None = None
        self.timeout_s = 180.0

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def ended(self) -> str | None:
        if self._proc is None or self._proc.poll() is None:
            return None
        return describe_exit(self._proc.returncode)

    def _wait_ready(self, ready: Callable[[], bool], poll_s: float) -> None:
        """Poll `ready()` until it holds; if the child exits first, raise with llama.cpp's reason."""
        deadline = time.monotonic() + self.timeout_s
        while not ready():
            self._raise_unless_starting(deadline)
            time.sleep(poll_s)

    async def _wait_ready_async(self, ready: Callable[[], bool], poll_s: float) -> None:
        """`_wait_ready` for the event loop: Ctrl-C (a cancellation) lands at the next poll, and
        the half-started server is stopped before the cancellation goes on."""
        deadline = time.monotonic() + self.timeout_s
        try:
            while not await asyncio.to_thread(ready):  # a /health GET may block up to its timeout
                self._raise_unless_starting(deadline)
                await asyncio.sleep(poll_s)
        except asyncio.CancelledError:
            self.stop()
            raise

    def _raise_unless_starting(self, deadline: float) -> None:
        """RuntimeStartError when the child has exited (with llama.cpp's reason) or the deadline passed."""
        assert self._proc is not None
        code = self._proc.poll()
        if code is not None:
            self._on_exit()
            reason = failure_reason_from_file(self.log_path) or "its log is empty"
            if code < 0:  # llama.cpp dies without a word on some shapes (SIGFPE): the signal is the news
                raise RuntimeStartError(f"{self.label} {describe_exit(code)} while loading: {reason}")
            raise RuntimeStartError(f"{self.label} failed to start (exit {code}): {reason}")
        if time.monotonic() >= deadline:
            self.stop()
            raise RuntimeStartError(f"{self.label} did not start within {self.timeout_s:.0f} s "
                                    f"(log: {self.log_path})")

    def _mark_log_start(self) -> None:
        """Remember where this start's lines will begin in the (appended) log file."""
        try:
            self.log_offset = self.log_path.stat().st_size if self.log_path is not None else 0
        except OSError:
            self.log_offset = 0

    def _on_exit(self) -> None:
        """Hook: release what the child held (e.g. its log file) once it has exited."""

    def _ask_to_stop(self, proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                self._ask_to_stop(proc)
                proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                proc.kill()
                proc.wait(timeout=10)
        self._on_exit()


def describe_exit(code: int) -> str:
    """How a process ended, in words: "killed by SIGFPE (signal 8)", or "exited with status 3"."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name} (signal {-code})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def free_loopback_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the server may still lose a race for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_taken(port: int) -> str | None:
    """None when 127.0.0.1:port can be listened on now, else why not (e.g. "Address already in use")."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # as llama-server does: TIME_WAIT is no obstacle
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen(1)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def check_port_free(port: int, where: str) -> None:
    """Before the run: UserError naming `where` (--port N, or the lane and its port) when it is taken."""
    why = port_taken(port)
    if why is not None:
        raise UserError(f"{where}: 127.0.0.1:{port} is not free ({why}); choose another port, or drop it "
                        "and satbench picks a free one")


def server_port(wanted: int | None) -> int:
    """The lane's port if it is still free on 127.0.0.1 (else a RuntimeStartError: something took
    it since the run began, and the sweep records it as that lane's failure), or a free one."""
    if wanted is None:
        return free_loopback_port()
    why = port_taken(wanted)
    if why is not None:
        raise RuntimeStartError(f"port {wanted}: 127.0.0.1:{wanted} is not free ({why})")
    return wanted


def llama_server_flags(params: ServerParams, n_parallel: int, n_ctx: int,
                       verbosity: int | None = None) -> list[str]:
    """llama-server command-line flags for the lane's knobs (same meaning as the CLI's), a log
    verbosity when one is asked for (memlog.py's probe start; None: llama.cpp's default), then the
    lane's own extra args."""
    args = ["--parallel", str(n_parallel), "--ctx-size", str(n_ctx),
            "--batch-size", str(params.n_batch), "--ubatch-size", str(params.n_ubatch)]
    if verbosity is not None:
        args += ["--verbosity", str(verbosity)]
    if params.n_threads is not None:
        args += ["--threads", str(params.n_threads), "--threads-batch", str(params.n_threads)]
    if params.n_gpu_layers is not None:
        args += ["--n-gpu-layers", str(params.n_gpu_layers)]
    if params.kv_unified:
        args += ["--kv-unified"]
    return args + list(params.extra_args)  # checked before the run (server_args.py)
