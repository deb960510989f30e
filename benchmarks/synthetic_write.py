"""How fast does `satbench models make` write a synthetic GGUF?

Writes one (arch, size) with `write_synthetic_gguf` — the same call the CLI and `synthetic:`
lanes make — into a directory (default /dev/shm, so the disk is not what is measured), then
prints its parameters, bytes, wall seconds (sha256 included: it is hashed in a second thread
while it is written), GB/s and the process's peak RSS, which stays near the largest tensor
however big the model is. The file is deleted afterwards unless --keep is given.

    python benchmarks/synthetic_write.py [--arch llama] [--size 1.5b] [--vocab N] [--seed 0]
                                         [--dir /dev/shm] [--keep]

Runs from a checkout without installing satbench (needs numpy, pydantic and gguf).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import satbench  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "src"))

from satbench.gguf.shapes import parameter_count, spec_for  # noqa: E402
from satbench.gguf.synthetic import write_synthetic_gguf  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="llama")
    p.add_argument("--size", default="1.5b")
    p.add_argument("--vocab", type=int, default=None, help="override the size's vocabulary")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dir", default="/dev/shm", help="where to write (default /dev/shm)")
    p.add_argument("--keep", action="store_true", help="keep the file and print its path")
    a = p.parse_args()

    _, dims = spec_for(a.arch, a.size, a.vocab)
    n_params = parameter_count(a.arch, a.size, a.vocab)
    need = 2 * n_params + (64 << 20)
    if not Path(a.dir).is_dir():
        print(f"{a.dir} is not a directory", file=sys.stderr)
        return 1
    free = shutil.disk_usage(a.dir).free
    if free < need:
        print(f"{a.dir} has {free / 1e9:.1f} GB free, the model needs about {need / 1e9:.1f} GB",
              file=sys.stderr)
        return 1
    path = Path(a.dir) / f"satbench-bench-{a.arch}-{a.size}-v{dims.n_vocab}-seed{a.seed}.gguf"
    start = time.perf_counter()
    try:
        info = write_synthetic_gguf(path, a.arch, a.size, a.seed, n_vocab=a.vocab)
        seconds = time.perf_counter() - start
    finally:
        if not a.keep:
            path.unlink(missing_ok=True)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{a.arch} {a.size} vocab {info.n_vocab:,} seed {a.seed}: {info.n_params:,} parameters, "
          f"{info.file_bytes:,} bytes, {seconds:.2f} s, {info.file_bytes / seconds / 1e9:.2f} GB/s, "
          f"peak RSS {rss_mb:,.0f} MB, sha256 {info.sha256}")
    print(f"kept {path}" if a.keep else f"deleted {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
