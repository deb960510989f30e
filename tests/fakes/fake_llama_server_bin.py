#!/usr/bin/env python3
"""A stand-in `llama-server` executable for testing the native runtime without a C++ build.

Accepts llama-server's flags, records its argv to $FAKE_BIN_ARGV, and serves the fake
llama.cpp server on --host/--port with --parallel slots and --ctx-size context. With
$FAKE_BIN_FAIL set it prints a llama.cpp-style load error and exits 1, as llama-server does;
with $FAKE_BIN_DIE_AT_STARTUP it SIGKILLs itself before it listens; with $FAKE_BIN_MAX_CTX it
fails like a GPU out of memory when --ctx-size exceeds it; $FAKE_BIN_SCRIPT (a JSON object) adds
FakeScript fields, e.g. the fault knobs; $FAKE_BIN_UNKNOWN_BUILD makes it report build 0, "unknown",
as llama.cpp compiled outside a git checkout does. At --verbosity 4 it prints llama.cpp's buffer
lines (a KV cache of 1 KiB per context token).
"""

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fakes.fake_llama_server import FakeLlamaServer
from tests.fakes.fake_scheduler import FakeScript


def main() -> int:
    if os.environ.get("FAKE_BIN_ARGV"):
        Path(os.environ["FAKE_BIN_ARGV"]).write_text(json.dumps(sys.argv[1:]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--ctx-size", type=int, default=4096)
    ap.add_argument("--version", action="store_true")
    ap.add_argument("--list-devices", action="store_true")
    ap.add_argument("--verbosity", type=int, default=3)
    for short, long in (("-fa", "--flash-attn"), ("-ctk", "--cache-type-k"), ("-ctv", "--cache-type-v"),
                        ("-md", "--model-draft"), ("-sm", "--split-mode")):  # accepted, listed in --help
        ap.add_argument(short, long)
    args, _ = ap.parse_known_args()
    unknown = os.environ.get("FAKE_BIN_UNKNOWN_BUILD")  # as llama.cpp compiled outside git reports itself
    if args.version:
        print("version: 0 (unknown)" if unknown else "version: 99999 (fakebin)")
        return 0
    if args.list_devices:
        print("Available devices:\n  (none)")
        return 0
    if os.environ.get("FAKE_BIN_FAIL"):
        print("0.00.001.000 I main: loading model", flush=True)
        print(f"0.00.002.000 E llama_model_load: error loading model: fake failure for {args.model}",
              flush=True)
        print("0.00.002.100 E main: exiting due to model loading error", flush=True)
        return 1
    if os.environ.get("FAKE_BIN_MAX_CTX") and args.ctx_size > int(os.environ["FAKE_BIN_MAX_CTX"]):
        print("0.00.001.000 I main: loading model", flush=True)
        print(f"0.00.002.000 E llama_init_from_model: failed to allocate KV cache of {args.ctx_size} cells "
              "(cudaMalloc failed: out of memory)", flush=True)
        return 1
    if os.environ.get("FAKE_BIN_DIE_AT_STARTUP"):  # killed (OOM killer, kill -9) while loading the model
        print("0.00.001.000 I main: loading model", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if args.verbosity >= 4:  # llama.cpp's buffer lines: a 1 KiB-per-token KV cache, 2 MiB of weights
        print("0.00.001.100 I load_tensors:   CPU_Mapped model buffer size =     2.00 MiB", flush=True)
        print(f"0.00.001.200 I llama_context: n_seq_max             = {args.parallel}", flush=True)
        print(f"0.00.001.201 I llama_context: n_ctx                 = {args.ctx_size}", flush=True)
        print(f"0.00.001.300 I llama_kv_cache:        CPU KV buffer size = {args.ctx_size / 1024:8.2f} MiB",
              flush=True)

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        extra = json.loads(os.environ.get("FAKE_BIN_SCRIPT") or "{}")  # more FakeScript fields (fault knobs)
        if unknown:
            extra["build_info"] = "b0-unknown"
        served = {"model_path": args.model} if args.model else {}  # /props names it, as llama-server does
        script = FakeScript(**{"decode_iteration_ms": 2.0, **served, **extra, "n_slots": args.parallel,
                               "n_ctx": args.ctx_size})
        async with FakeLlamaServer(script, host=args.host, port=args.port):
            await stop.wait()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
