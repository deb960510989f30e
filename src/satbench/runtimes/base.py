"""The narrow runtime interface: start, stop, where it listens, what it is.

A runtime only provides a server; talking to it (probe, stream, sample) is done elsewhere
through HTTP, identically for every runtime.
"""

from __future__ import annotations

import socket
from abc import ABC, abstractmethod
from pathlib import Path

from satbench.config import ServerParams


class Runtime(ABC):
    kind: str = ""

    def __init__(self) -> None:
        self.base_url: str = ""
        self.pid: int | None = None
        self.log_path: Path | None = None
        self.server_args: list[str] = []

    @abstractmethod
    def start(self) -> None:
        """Bring the server up (blocking until it answers) or raise RuntimeStartError."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the server if satbench started it; safe to call twice."""

    @abstractmethod
    def name_and_version(self) -> tuple[str, str | None]:
        """What serves, e.g. ("xllamacpp wheel", "2026.10.11549")."""

    def alive(self) -> bool:
        return True

    def __enter__(self) -> Runtime:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_loopback_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (the server may still lose a race for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def llama_server_flags(params: ServerParams, n_parallel: int, n_ctx: int) -> list[str]:
    """llama-server command-line flags for the lane's knobs (same meaning as the CLI's)."""
    args = ["--parallel", str(n_parallel), "--ctx-size", str(n_ctx),
            "--batch-size", str(params.n_batch), "--ubatch-size", str(params.n_ubatch)]
    if params.n_threads is not None:
        args += ["--threads", str(params.n_threads), "--threads-batch", str(params.n_threads)]
    if params.n_gpu_layers is not None:
        args += ["--n-gpu-layers", str(params.n_gpu_layers)]
    if params.kv_unified:
        args += ["--kv-unified"]
    return args
