"""Embedded runtime: llama.cpp's own server from the xllamacpp wheel, in a child process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from satbench.config import ServerParams
from satbench.errors import RuntimeStartError
from satbench.runtimes.base import Runtime, llama_server_flags
from satbench.runtimes.logscan import failure_reason_from_file


class EmbeddedRuntime(Runtime):
    kind = "embedded"

    def __init__(self, model_path: str, params: ServerParams, n_parallel: int, n_ctx: int,
                 workdir: Path, startup_timeout_s: float = 180.0) -> None:
        super().__init__()
        self.model_path = model_path
        self.params, self.n_parallel, self.n_ctx = params, n_parallel, n_ctx
        self.workdir = workdir
        self.timeout_s = startup_timeout_s
        self.log_path = workdir / "server.log"
        self.server_args = llama_server_flags(params, n_parallel, n_ctx)
        self._proc: subprocess.Popen | None = None
        self._log = None

    def name_and_version(self) -> tuple[str, str | None]:
        try:
            return "xllamacpp wheel (llama.cpp server, embedded)", metadata.version("xllamacpp")
        except metadata.PackageNotFoundError:
            return "xllamacpp wheel (llama.cpp server, embedded)", None

    def start(self) -> None:
        params_path = self.workdir / ".embedded_params.json"
        ready_path = self.workdir / ".embedded_ready.json"
        ready_path.unlink(missing_ok=True)
        params_path.write_text(json.dumps({
            "model_path": self.model_path, "n_parallel": self.n_parallel, "n_ctx": self.n_ctx,
            "n_batch": self.params.n_batch, "n_ubatch": self.params.n_ubatch,
            "n_threads": self.params.n_threads, "n_gpu_layers": self.params.n_gpu_layers,
            "kv_unified": self.params.kv_unified,
        }))
        self._log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "satbench.runtimes.embedded_child", str(params_path), str(ready_path)],
            stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT,
        )
        self.pid = self._proc.pid
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if ready_path.exists():
                self.base_url = json.loads(ready_path.read_text())["base_url"].rstrip("/")
                ready_path.unlink(missing_ok=True)
                params_path.unlink(missing_ok=True)
                return
            code = self._proc.poll()
            if code is not None:
                self._close_log()
                reason = failure_reason_from_file(self.log_path) or f"exit code {code}"
                raise RuntimeStartError(
                    f"embedded llama.cpp server failed to start (exit {_describe_exit(code)}): {reason}"
                )
            time.sleep(0.05)
        self.stop()
        raise RuntimeStartError(f"embedded llama.cpp server did not start within {self.timeout_s:.0f} s "
                                f"(log: {self.log_path})")

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()  # type: ignore[union-attr]
            except OSError:
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _describe_exit(code: int) -> str:
    if code < 0:
        import signal

        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return str(code)
