"""Which HTTP client can the load generator afford? satbench's own transport vs aiohttp vs httpx.

Result that shaped satbench (see the README): httpx collapses to ~50 req/s at 128 streams;
aiohttp keeps the schedule but stamps chunks when its task next runs, so its p99 TTFT error
is ~10 ms; satbench's transport (asyncio.Protocol, stamps in data_received) keeps it near 1 ms.

The fake llama.cpp server (tests/fakes) runs in its own process, pinned to the last CPU;
this process (the client) is pinned to the first. For each client and each concurrency N
it runs a closed loop of N streams (zero think time) for --duration seconds against a fake
with N slots and a fixed decode iteration, then prints:

- req/s and streamed tok/s in the window [start + warmup, stop issuing], next to "sched", the
  req/s the fake's script allows at that N (a client that keeps up reaches it);
- client CPU % (process_time / wall over that window) and the fake's CPU %;
- chunk lag p50/p99: client arrival of a token chunk − the fake's write of it (schedule log),
  i.e. loopback + client parsing delay; and TTFT error p50/p99: client TTFT − the fake's own
  first-write − arrival, i.e. what the client adds to TTFT;
- send p50/p99: the fake's arrival stamp − the client's send stamp (client-side queueing
  before the request reaches the socket; part of the TTFT error);
- the fake's p99 write lateness, mean iteration length and overruns (ticks re-based because it fell
  behind), so a row whose server did not keep its schedule can be discarded.

Both clients read raw body bytes and share one SSE splitter + json.loads per event
(--mode raw), or use their line iterators (--mode lines: aiohttp StreamReader line
iteration, httpx aiter_lines), so the comparison is about the HTTP stack itself.

Every client opens one connection per request, as satbench's transport does: a pooled aiohttp
session reuses a connection that llama.cpp's server closed after its stream, and every other request
then fails (ServerDisconnectedError), which a fake that keeps connections open would not show. So
aiohttp runs with `force_close=True` and httpx without keep-alive.

`satbench-uvloop` is satbench's transport on uvloop's event loop, as `satbench sweep` runs it where
uvloop is installed (satbench.load.eventloop); `satbench` is the same on asyncio's own loop.

The printed table is also written, dated, to benchmarks/results/client_choice-YYYY-MM-DD.txt
(--out to choose the file, --out - for none).

    python benchmarks/client_choice.py --duration 10 --levels 64,128
"""

from __future__ import annotations

import argparse
import asyncio
import builtins
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"
_ns = time.perf_counter_ns
PREFILL_MS_PER_TOKEN = 0.02


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def _events(buf: bytes) -> tuple[list[bytes], bytes]:
    *done, rest = buf.split(b"\n\n")
    return [e[6:] for e in done if e.startswith(b"data: ")], rest


class Trace:
    """Per-request client timing; `chunks` = arrival ns of each token-carrying event."""

    __slots__ = ("rid", "sent_ns", "chunks", "end_ns", "tokens", "error")

    def __init__(self, rid: str):
        self.rid, self.sent_ns, self.chunks, self.end_ns, self.tokens, self.error = rid, _ns(), [], 0, 0, None

    def feed(self, payloads: list[bytes], t: int) -> None:
        for p in payloads:
            ev = json.loads(p)
            if not ev.get("stop"):
                self.chunks.append(t)
                self.tokens += len(ev["tokens"])


async def one_aiohttp(session: aiohttp.ClientSession, url: str, body: dict, tr: Trace, mode: str) -> None:
    async with session.post(url, json=body, headers={"X-Request-Id": tr.rid}) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}")
        if mode == "raw":
            buf = b""
            async for data in r.content.iter_any():
                payloads, buf = _events(buf + data)
                tr.feed(payloads, _ns())
        else:
            async for line in r.content:
                if line.startswith(b"data: "):
                    tr.feed([line[6:]], _ns())


async def one_httpx(client: httpx.AsyncClient, url: str, body: dict, tr: Trace, mode: str) -> None:
    async with client.stream("POST", url, json=body, headers={"X-Request-Id": tr.rid}) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}")
        if mode == "raw":
            buf = b""
            async for data in r.aiter_raw():
                payloads, buf = _events(buf + data)
                tr.feed(payloads, _ns())
        else:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    tr.feed([line[6:].encode()], _ns())


async def one_satbench(client, body: dict, tr: Trace) -> None:
    """satbench's own transport (src/satbench/http/transport.py), through its real StreamClient."""
    from satbench.http.client import CompletionRequest

    req = CompletionRequest(request_id=tr.rid, prompt=body["prompt"], prompt_tokens=len(body["prompt"]),
                            max_tokens=body["n_predict"])
    out = await client.run(req)
    tr.sent_ns = out.sent_ns
    tr.chunks = [t for t, _ in out.chunks]
    tr.tokens = out.output_tokens
    if out.error_type:
        raise RuntimeError(f"{out.error_type}: {out.error_message}")


async def closed_loop(client_name: str, mode: str, base_url: str, n: int, duration_s: float, body: dict):
    traces: list[Trace] = []
    stop_at = time.monotonic() + duration_s
    url = base_url + "/completion"
    if client_name.startswith("satbench"):
        from satbench.http.client import StreamClient
        from satbench.http.endpoint import Endpoint

        session = StreamClient(Endpoint.of(base_url))
        one = lambda tr: one_satbench(session, body, tr)  # noqa: E731
    elif client_name == "aiohttp":
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True),
                                        timeout=aiohttp.ClientTimeout(total=None))
        one = lambda tr: one_aiohttp(session, url, body, tr, mode)  # noqa: E731
    else:
        session = httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=n + 8,
                                                                      max_keepalive_connections=0))
        one = lambda tr: one_httpx(session, url, body, tr, mode)  # noqa: E731

    async def worker(w: int) -> None:
        k = 0
        while time.monotonic() < stop_at:
            tr = Trace(f"{client_name}-{w}-{k}")
            k += 1
            try:
                await one(tr)
            except Exception as exc:  # errors are data
                tr.error = f"{type(exc).__name__}: {exc}"
            tr.end_ns = _ns()
            traces.append(tr)

    t0, c0 = _ns(), time.process_time()
    await asyncio.gather(*(worker(w) for w in range(n)))
    t1, c1 = _ns(), time.process_time()
    if client_name == "aiohttp":
        await session.close()
    elif client_name == "httpx":
        await session.aclose()
    return traces, t0, t1, (c1 - c0) / ((t1 - t0) / 1e9)


def start_fake(script: dict, tmp: Path) -> tuple[subprocess.Popen, str]:
    (tmp / "script.json").write_text(json.dumps(script))
    ready = tmp / "ready.json"
    ncpu = os.cpu_count() or 1
    pin = (lambda: os.sched_setaffinity(0, {ncpu - 1})) if ncpu > 1 else None
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0", "--script", str(tmp / "script.json"),
                             "--ready-file", str(ready)], preexec_fn=pin, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not ready.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("fake server did not start: " + proc.stderr.read().decode()[-2000:])
        time.sleep(0.02)
    return proc, json.loads(ready.read_text())["base_url"]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_one(client_name: str, mode: str, n: int, args) -> dict:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        log = tmp / "schedule.jsonl"
        script = {"n_slots": n, "decode_iteration_ms": args.iteration_ms,
                  "prefill_ms_per_token": PREFILL_MS_PER_TOKEN, "schedule_log": str(log),
                  **json.loads(args.script_extra)}
        proc, base = start_fake(script, tmp)
        body = {"prompt": list(range(args.prompt_tokens)), "n_predict": args.n_predict, "ignore_eos": True,
                "stream": True, "cache_prompt": False}
        try:
            fake_c0 = cpu_s(proc.pid)
            from satbench.load.eventloop import run

            loop = "uvloop" if client_name.endswith("-uvloop") else "asyncio"
            traces, t0, t1, client_cpu = run(closed_loop(client_name, mode, base, n, args.duration, body),
                                             loop)
            fake_cpu = (cpu_s(proc.pid) - fake_c0) / ((t1 - t0) / 1e9)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        stats = json.loads(err.decode().strip().splitlines()[-1])["stats"]
        server = {r["id"]: r for r in map(json.loads, log.read_text().splitlines())}
    w0 = t0 + int(args.warmup * 1e9)
    w1 = max(tr.sent_ns for tr in traces)  # last request issued: closed loop ends after it
    window_s = (w1 - w0) / 1e9
    ok = [tr for tr in traces if tr.error is None]
    reqs = sum(w0 <= tr.end_ns <= w1 for tr in ok)
    toks = sum(w0 <= t <= w1 for tr in ok for t in tr.chunks)
    lag, ttft_err, late, send = [], [], [], []
    for tr in ok:
        rec = server.get(tr.rid)
        if rec is None or not tr.chunks or tr.sent_ns < w0 or tr.end_ns > w1:
            continue
        sc = rec["chunk_ns"]
        lag += [(a - s) / 1e6 for a, s in zip(tr.chunks, sc)]
        ttft_err.append(((tr.chunks[0] - tr.sent_ns) - (sc[0] - rec["arrival_ns"])) / 1e6)
        late.append(rec["late_ns_max"] / 1e6)
        send.append((rec["arrival_ns"] - tr.sent_ns) / 1e6)
    return {"client": client_name, "mode": mode, "n": n, "req_s": reqs / window_s, "tok_s": toks / window_s,
            "cpu": 100 * client_cpu, "fake_cpu": 100 * fake_cpu, "errors": len(traces) - len(ok),
            "lag50": pct(lag, 0.5), "lag99": pct(lag, 0.99), "ttft50": pct(ttft_err, 0.5),
            "ttft99": pct(ttft_err, 0.99), "send50": pct(send, 0.5), "send99": pct(send, 0.99),
            "late99": pct(late, 0.99), "overruns": stats["overruns"], "conns": stats["connections"],
            "iter_ms": (t1 - t0) / 1e6 / max(stats["iterations"], 1),
            # the fake's capacity: a request spends ~(n_predict + 1) iterations in its slot and adds
            # its prefill to the shared iteration time
            "ideal_req_s": 1e3 * n / ((args.n_predict + 1) * args.iteration_ms
                                      + n * args.prompt_tokens * PREFILL_MS_PER_TOKEN),
            "first_error": next((tr.error for tr in traces if tr.error), None)}


def host_cpu() -> str:
    models = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
              if ln.startswith("model name")] if Path("/proc/cpuinfo").exists() else []
    return f"{models[0] if models else 'CPU'}, {os.cpu_count()} CPUs"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--levels", default="64,128")
    ap.add_argument("--clients", default="satbench,satbench-uvloop,aiohttp,httpx")
    ap.add_argument("--modes", default="raw")
    ap.add_argument("--iteration-ms", type=float, default=3.0)
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--script-extra", default="{}",
                    help="more FakeScript fields as JSON (e.g. llamacpp: false)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" /
                                         f"client_choice-{time.strftime('%Y-%m-%d')}.txt"),
                    help="also write the output here ('-': nowhere)")
    args = ap.parse_args()
    lines: list[str] = []

    def print(*parts, **kw) -> None:  # noqa: A001  (the table goes to stdout and to --out)
        text = " ".join(str(p) for p in parts)
        lines.append(text)
        builtins.print(text, flush=True)

    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    print(f"fake: {args.iteration_ms} ms decode iteration, slots = N, prompt {args.prompt_tokens} tok, "
          f"n_predict {args.n_predict}; {args.duration:g} s per row, first {args.warmup:g} s discarded; "
          f"client pinned to CPU 0, fake to CPU {(os.cpu_count() or 1) - 1}; {host_cpu()}; "
          f"load avg {os.getloadavg()[0]:.2f}")
    head = (f"{'client':15} {'mode':5} {'N':>4} {'req/s':>7} {'sched':>6} {'tok/s':>8} {'cli CPU%':>8} "
            f"{'fake CPU%':>9} {'lag p50':>8} {'lag p99':>8} {'TTFTerr50':>9} {'TTFTerr99':>9} "
            f"{'send p50':>8} {'send p99':>8} "
            f"{'fake late p99':>13} {'iter ms':>7} {'overruns':>8} {'conns':>5} {'errors':>6}")
    print(head)
    print("-" * len(head))
    for n in (int(x) for x in args.levels.split(",")):
        for mode in args.modes.split(","):
            for client in args.clients.split(","):
                r = run_one(client, mode, n, args)
                print(f"{r['client']:15} {r['mode']:5} {r['n']:>4} {r['req_s']:>7.1f} "
                      f"{r['ideal_req_s']:>6.0f} {r['tok_s']:>8.0f} {r['cpu']:>8.0f} {r['fake_cpu']:>9.0f} "
                      f"{r['lag50']:>6.2f}ms {r['lag99']:>6.2f}ms {r['ttft50']:>7.2f}ms "
                      f"{r['ttft99']:>7.2f}ms {r['send50']:>6.2f}ms {r['send99']:>6.2f}ms "
                      f"{r['late99']:>11.2f}ms {r['iter_ms']:>7.2f} "
                      f"{r['overruns']:>8} {r['conns']:>5} {r['errors']:>6}", flush=True)
                if r["first_error"]:
                    print(f"   first error: {r['first_error']}")
    print(f"load avg after: {os.getloadavg()[0]:.2f}. lag = client chunk arrival - fake write; TTFTerr = "
          "client TTFT - (fake first write - fake arrival); send = fake arrival - client send stamp (part of "
          "TTFTerr)")
    if args.out != "-":
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"$ python benchmarks/client_choice.py {' '.join(sys.argv[1:])}\n"
                       f"# {time.strftime('%Y-%m-%d %H:%M %Z')}\n" + "\n".join(lines) + "\n")
        builtins.print(f"written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
