"""Native runtime: a `llama-server` binary started and stopped by satbench, on loopback."""

from __future__ import annotations

import hashlib
import os
import re
import selectors
import subprocess
import time
from pathlib import Path

from satbench.config.limits import MAX_DEVICES, MAX_HEALTH_BYTES, MAX_SERVER_TEXT_CHARS, MAX_TOOL_OUTPUT_BYTES
from satbench.config.schema import ServerParams
from satbench.errors import RuntimeStartError, UserError
from satbench.gguf.files import sha256_file
from satbench.server.base import ProcessRuntime, die_with_parent, llama_server_flags, server_port


class NativeRuntime(ProcessRuntime):
    kind = "native"
    label = "llama-server"

    def __init__(self, server_bin: str, model_path: str, params: ServerParams, n_parallel: int,
                 n_ctx: int, log_path: Path, startup_timeout_s: float = 180.0,
                 verbosity: int | None = None) -> None:
        super().__init__()
        self.server_bin, self.model_path, self.params = server_bin, model_path, params
        self.timeout_s = startup_timeout_s
        self.log_path: Path = log_path
        self.server_args = llama_server_flags(params, n_parallel, n_ctx, verbosity) + ["--metrics", "--slots"]
        self._version: str | None = None
        self._binary_sha256: str | None = None

    def name_and_version(self) -> tuple[str, str | None]:
        if self._version is None:
            self._version = version_line(capped_output([self.server_bin, "--version"], timeout_s=20))
        return f"llama-server binary ({self.server_bin})", self._version

    def backend(self) -> str | None:
        """From `llama-server --list-devices`, asked once per binary in this process (each call
        initialises CUDA; a run makes a runtime per lane, scenario and restart): see list_devices_backend."""
        return cached_backend(self.server_bin)

    def binary_sha256(self) -> str | None:
        if self._binary_sha256 is None:
            self._binary_sha256 = server_binary_sha256(self.server_bin)
        return self._binary_sha256

    def command(self, port: int) -> list[str]:
        """The server's argv: it listens on 127.0.0.1 only (no lane knob can change --host)."""
        return [self.server_bin, "--model", self.model_path, "--host", "127.0.0.1",
                "--port", str(port), *self.server_args]

    def start(self) -> None:
        self._launch()
        self._wait_ready(lambda: _healthy(self.base_url), poll_s=0.1)

    async def start_async(self) -> None:
        self._launch()
        await self._wait_ready_async(lambda: _healthy(self.base_url), poll_s=0.1)

    def _launch(self) -> None:
        """Start the process (from the calling thread: see die_with_parent); RuntimeStartError when
        the binary or the port is no longer usable (both were checked before the run began)."""
        why = server_bin_problem(self.server_bin)
        if why is not None:
            raise RuntimeStartError(f"{self.server_bin}: {why}")
        port = server_port(self.params.port)
        cmd = self.command(port)
        self._mark_log_start()
        from satbench.records.rundir import open_run_file  # the run directory's rule: never through a link

        with open_run_file(self.log_path, "ab") as log:
            try:
                self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True,
                                              preexec_fn=die_with_parent())
            except OSError as exc:  # e.g. ENOEXEC: a script without #! line, a binary for another machine
                raise RuntimeStartError(f"cannot run {self.server_bin}: {exc.strerror or exc}") from exc
        self.pid = self._proc.pid
        self.base_url = f"http://127.0.0.1:{port}"


# " (143156 MiB, 140173 MiB free)": changes run to run
DEVICE_MEMORY = re.compile(r"\s*\([^()]*MiB free\)\s*$")


_BACKENDS: dict[tuple[str, int | None], str | None] = {}


def cached_backend(server_bin: str) -> str | None:
    """list_devices_backend(server_bin), remembered per binary (path and modification time)."""
    try:
        key: tuple[str, int | None] = (os.path.realpath(server_bin), os.stat(server_bin).st_mtime_ns)
    except OSError:
        key = (server_bin, None)
    if key not in _BACKENDS:
        _BACKENDS[key] = list_devices_backend(server_bin)
    return _BACKENDS[key]


def list_devices_backend(server_bin: str) -> str | None:
    """The devices `server_bin --list-devices` prints ("CUDA0: NVIDIA H200"), "; "-joined, each without
    its memory figures (free memory changes between calls: the same node must read the same); "CPU"
    when none is listed; None when the binary cannot be asked."""
    text = capped_output([server_bin, "--list-devices"], timeout_s=30)
    if text is None:
        return None
    devices = [DEVICE_MEMORY.sub("", ln.strip())[:MAX_SERVER_TEXT_CHARS] for ln in text.splitlines()
               if ln.startswith("  ") and ":" in ln][:MAX_DEVICES]
    return "; ".join(devices)[:MAX_SERVER_TEXT_CHARS] if devices else "CPU"


_BUILD_IN_VERSION = re.compile(r"version: (\d{1,12}) \(|\(build (\d{1,12})\b")


def build_in_version(text: str | None) -> str | None:
    """The build number `llama-server --version` prints, in either form llama.cpp has used:
    "version: 11434 (1a2b3c4)" or "version: 0.6.0-dev (build 11434, commit unknown)". None when it
    names none, or build 0 (a build compiled outside git)."""
    m = _BUILD_IN_VERSION.search(text or "")
    number = (m[1] or m[2]) if m else None
    return number if number and number != "0" else None


def version_line(text: str | None, first_if_none: bool = True) -> str | None:
    """The line of `--version` output that starts with "version" (else, with `first_if_none`, its
    first line), cut to MAX_SERVER_TEXT_CHARS characters: it goes into run.json; None when none."""
    lines = text.strip().splitlines() if text is not None else []
    first = lines[0] if lines and first_if_none else None
    line = next((ln for ln in lines if ln.startswith("version")), first)
    return line[:MAX_SERVER_TEXT_CHARS] if line is not None else None


def server_bin_problem(server_bin: str) -> str | None:
    """None when `server_bin` is an executable file, else what is wrong with it."""
    if not os.path.exists(server_bin):
        return "no such file"
    if not (os.path.isfile(server_bin) and os.access(server_bin, os.X_OK)):
        return "not an executable file"
    return None


def check_server_bin(server_bin: str, where: str) -> None:
    """Before the run: UserError naming `where` (--server-bin, or the lane) when the binary cannot run."""
    why = server_bin_problem(server_bin)
    if why is not None:
        raise UserError(f"{where} {server_bin}: {why}")


SHARED_LIBRARY = re.compile(r"\.(so(\.\d+)*|dylib|dll)$")
LLAMA_LIBRARY = re.compile(r"^(lib)?(llama|ggml|mtmd)")


def server_binary_sha256(server_bin: str) -> str | None:
    """sha256 over "name  sha256" lines, sorted by name, of the `llama-server` executable and the
    shared libraries beside it or in its prefix's lib/ (libllama, libggml-*: where a build keeps
    most of its code).
    Symbolic links are followed and each file counted once. It identifies a build whose
    `--version` says only "0 (unknown)" (llama.cpp compiled outside git). None if unreadable."""
    exe = Path(server_bin).resolve()
    files = {exe}
    # beside the executable (a build tree's bin/), or in an installed prefix's lib/ or lib64/
    # (only llama.cpp's own libraries there: PREFIX may be /usr, whose lib64 holds the whole OS)
    prefix_libs = [d for d in (exe.parent.parent / "lib", exe.parent.parent / "lib64") if d.is_dir()]
    try:
        files |= {p.resolve() for p in exe.parent.iterdir() if SHARED_LIBRARY.search(p.name) and p.is_file()}
        files |= {p.resolve() for d in prefix_libs for p in d.iterdir()
                  if LLAMA_LIBRARY.match(p.name) and SHARED_LIBRARY.search(p.name) and p.is_file()}
        lines = [f"{p.name}  {sha256_file(p, cache=None)}\n" for p in sorted(files, key=lambda p: p.name)]
    except OSError:
        return None
    return hashlib.sha256("".join(lines).encode()).hexdigest()


HEALTH_POLL_S = 1.0  # one /health poll while the started server loads, connect to last byte


def _healthy(base_url: str) -> bool:
    """/health answers 2xx, whole, within HEALTH_POLL_S and MAX_HEALTH_BYTES."""
    from satbench.http.access import read_sync
    from satbench.http.endpoint import Endpoint
    from satbench.http.errors import RequestFailed

    try:
        answer = read_sync(Endpoint.of(base_url), "/health", timeout_s=HEALTH_POLL_S,
                           limit_bytes=MAX_HEALTH_BYTES)
    except RequestFailed:
        return False
    return 200 <= answer.status < 300


def capped_output(argv: list[str], timeout_s: float, limit_bytes: int = MAX_TOOL_OUTPUT_BYTES) -> str | None:
    """What `argv` prints (stdout, then stderr, as UTF-8 text) when it exits within `timeout_s` having
    printed at most `limit_bytes`; None when it cannot run, runs longer or prints more (it is killed)."""
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except OSError:
        return None
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    deadline = time.monotonic() + timeout_s
    ok = True
    try:
        with selectors.DefaultSelector() as sel:
            for f in (proc.stdout, proc.stderr):
                sel.register(f, selectors.EVENT_READ)
            while ok and sel.get_map():
                left = deadline - time.monotonic()
                events = sel.select(left) if left > 0 else []
                ok = bool(events)
                for key, _ in events:
                    chunk = os.read(key.fd, 64 * 1024)
                    if not chunk:
                        sel.unregister(key.fileobj)
                    bufs[key.fd] += chunk
                ok = ok and sum(map(len, bufs.values())) <= limit_bytes
        if ok:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        ok = False
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    if not ok:
        return None
    return bytes(bufs[out_fd] + bufs[err_fd]).decode("utf-8", "replace")
