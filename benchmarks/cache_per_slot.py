"""How does a lane's cache per slot grow with its per-slot context? (dense, DeepSeek V4, deepseek2)

Starts the embedded llama.cpp server (the xllamacpp wheel) once per model and per-slot context,
at log verbosity 4, with 2 slots, and reads the buffer sizes it prints as it starts — the same
lines, parsed by the same code (runtimes/memlog.py), as a sweep's memory probe. Prints the cache
(KV plus recurrent or compressor state) per slot in MiB, one row per model, and writes nothing
but the synthetic models (into --dir) and the servers' logs (a temporary directory).

    python benchmarks/cache_per_slot.py [--contexts 256,1024,4096,16384,65536]
                                        [--models gemma3-270m,deepseek4-small,deepseek2-small]
                                        [--dir .satbench/models]

A model is `gemma3-270m` (the built-in Gemma 3 270M, assembled into --dir) or ARCH-SIZE of a
synthetic model (written into --dir, seed 0, as `synthetic:ARCH-SIZE` in a lane file would be).
No measurement of speed: the sizes are what llama.cpp allocates, the same on a busy machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import satbench  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

from satbench.config.schema import ServerParams  # noqa: E402
from satbench.errors import SatbenchError  # noqa: E402
from satbench.gguf.builtin import resolve_builtin  # noqa: E402
from satbench.gguf.resolve import resolve_synthetic  # noqa: E402
from satbench.server.embedded import EmbeddedRuntime  # noqa: E402
from satbench.server.memlog import LOG_VERBOSITY, startup_buffers  # noqa: E402

SLOTS = 2


def model_path(name: str, model_dir: Path) -> Path:
    if name == "gemma3-270m":
        return resolve_builtin(name, model_dir)
    return resolve_synthetic(f"synthetic:{name}", model_dir)


def cache_per_slot_bytes(model: Path, per_slot_ctx: int, logs: Path) -> int:
    """KV + state bytes ÷ slots, as the server printed them at this per-slot context."""
    log = logs / f"{model.stem}-{per_slot_ctx}.log"
    rt = EmbeddedRuntime(str(model), ServerParams(n_threads=1), SLOTS, SLOTS * per_slot_ctx, log,
                         verbosity=LOG_VERBOSITY)
    rt.start()
    try:
        found = startup_buffers(rt.log_path, rt.log_offset)
    finally:
        rt.stop()
    return sum(b.bytes for b in found.buffers if b.kind in ("kv", "state")) // SLOTS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", default="256,1024,4096,16384,65536")
    ap.add_argument("--models", default="gemma3-270m,deepseek4-small,deepseek2-small")
    ap.add_argument("--dir", default=str(ROOT / ".satbench" / "models"))
    a = ap.parse_args()
    contexts = [int(c) for c in a.contexts.split(",")]
    model_dir = Path(a.dir)
    try:
        models = {name: model_path(name, model_dir) for name in a.models.split(",")}
    except SatbenchError as exc:
        print(f"cache_per_slot: {exc}", file=sys.stderr)
        return 1
    print(f"cache per slot (MiB), {SLOTS} slots, by per-slot context (tokens)")
    print(f"{'model':18s}" + "".join(f"{c:>10,}" for c in contexts))
    with tempfile.TemporaryDirectory() as logs:
        for name, path in models.items():
            row = [cache_per_slot_bytes(path, c, Path(logs)) / 2**20 for c in contexts]
            print(f"{name:18s}" + "".join(f"{x:10.2f}" for x in row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
