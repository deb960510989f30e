"""Child process that hosts the embedded llama.cpp server (xllamacpp).

Runs as `python -m satbench.server.embedded_child PARAMS_JSON READY_FILE`. A GGML assert
during load aborts this process only. When the server listens, the child writes
{"base_url": ...} to READY_FILE; it exits when its stdin closes (the parent stopped or
died) or on SIGTERM. llama.cpp logs to this process's stderr, which the parent captures.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from pathlib import Path

from satbench.errors import RunDirError
from satbench.records.rundir import open_run_file
from satbench.server.server_args import apply_embedded

READY_TMP_SUFFIX = ".tmp"  # the ready file is written beside it under this suffix, then renamed


def build_params(cfg: dict):  # -> xllamacpp.CommonParams
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = cfg["model_path"]
    p.hostnames = ["127.0.0.1"]
    p.port = int(cfg.get("port", 0))
    p.n_parallel = int(cfg["n_parallel"])
    p.n_ctx = int(cfg["n_ctx"])
    p.n_batch = int(cfg["n_batch"])
    p.n_ubatch = int(cfg["n_ubatch"])
    p.cont_batching = True
    p.kv_unified = bool(cfg.get("kv_unified", False))
    if cfg.get("n_threads") is not None:
        p.cpuparams.n_threads = int(cfg["n_threads"])
        p.cpuparams_batch.n_threads = int(cfg["n_threads"])
    if cfg.get("n_gpu_layers") is not None:
        p.n_gpu_layers = int(cfg["n_gpu_layers"])
    p.endpoint_metrics = True
    p.endpoint_slots = True
    p.endpoint_props = True
    verbosity = cfg.get("verbosity")
    p.verbosity = 3 if verbosity is None else int(verbosity)  # 4: the buffer sizes reach the log (memlog.py)
    apply_embedded(p, list(cfg.get("extra_args") or []))  # checked in the parent before the run
    return p


def main(argv: list[str]) -> int:
    params_path, ready_path = argv[1], argv[2]
    with open(params_path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    import xllamacpp

    try:
        server = xllamacpp.Server(build_params(cfg))
    except Exception as exc:  # the parent reads the reason from the log
        print(f"satbench-embedded: server failed to start: {exc}", file=sys.stderr, flush=True)
        return 3
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    tmp = ready_path + READY_TMP_SUFFIX
    devices = []
    with contextlib.suppress(Exception):  # the backend is provenance, not a reason to fail
        devices = [f"{d.get('name')} ({d.get('description')})" for d in xllamacpp.get_device_info()]
    try:  # in the run directory: never written through a link (its rule)
        with open_run_file(Path(tmp), "w") as out:
            json.dump({"base_url": server.listening_address, "pid": os.getpid(), "devices": devices}, out)
    except RunDirError as exc:
        print(f"satbench-embedded: {exc}", file=sys.stderr, flush=True)
        return 3
    os.replace(tmp, ready_path)
    while not stop.wait(0.5):
        pass
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
