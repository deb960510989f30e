"""Why the probe, the sampler and liveness keep aiohttp: they need kept-alive connections.

satbench's own transport (satbench.http.transport) sends `Connection: close` and opens a connection
per request, which suits the load generator (llama.cpp closes a connection after a streamed answer).
The short GETs that measure the network path (/health RTT) and poll /metrics and /slots every
100 ms would then each carry a TCP connect. This script measures what that costs on loopback: the
same aiohttp GET /health against the fake llama.cpp server (tests/fakes, its own process), once on
a kept-alive connection and once with a new connection per request (`force_close`), and prints
p50/p99 of each and the ratio, plus the connections the server accepted.

    python benchmarks/http_keepalive.py --requests 400
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client_choice import start_fake  # the fake's start, written once


async def round_trips_ms(base: str, n: int, keep_alive: bool) -> list[float]:
    connector = aiohttp.TCPConnector(force_close=not keep_alive, limit=1)
    out: list[float] = []
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(n + 10):  # the first 10 warm up
            t0 = time.perf_counter_ns()
            async with session.get(f"{base}/health") as r:
                await r.read()
            out.append((time.perf_counter_ns() - t0) / 1e6)
    return out[10:]


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, base = start_fake({"n_slots": 1}, Path(tmp))
        try:
            kept = asyncio.run(round_trips_ms(base, args.requests, True))
            fresh = asyncio.run(round_trips_ms(base, args.requests, False))
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"GET /health on loopback, {args.requests} requests each (fake server pinned to the last CPU)")
    for name, v in (("kept-alive", kept), ("new connection each", fresh)):
        print(f"  {name:<20} p50 {p(v, 50):6.3f} ms  p99 {p(v, 99):6.3f} ms")
    print(f"  ratio new/kept       p50 {p(fresh, 50) / p(kept, 50):5.2f}x  "
          f"p99 {p(fresh, 99) / p(kept, 99):5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
