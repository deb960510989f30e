"""How much does satbench's own load generator cost, and how exact are its stamps?

Drives the fake llama.cpp server (tests/fakes, its own process, pinned to the last CPU) with
satbench's real path — `StreamClient` + `run_level` + the JSONL event writer — from this
process pinned to CPU 0 (one core), and prints per concurrency:

- streamed tok/s in the steady window as satbench computes it, next to the rate the fake's
  script allows (a harness that keeps up reaches it), and the client's CPU use;
- TTFT error: satbench's TTFT − the true one, (fake's write of the first token − satbench's
  send stamp) on the clock both processes share (CLOCK_MONOTONIC); p50/p99 of |error|. The
  send stamp is taken right after the request is handed to the socket; the fake's own delay
  in reading it ("send" column: fake arrival stamp − send stamp) is server latency, which any
  client sees, so it belongs to the true TTFT;
- ITL error: each gap satbench saw − the same gap between the fake's writes; p50/p99 of |error|;
- fake read delay (the fake's arrival stamp − satbench's send stamp) and issue lag (send − the
  moment the stream became free: connecting, and waiting for the one-connect-at-a-time gate);
- the fake's overruns (iterations it could not keep); a row with many is not a harness figure.

Target (issue 2): ≥ 20,000 tok/s with p99 TTFT error < 2 ms at 64 concurrent streams; issue 22:
at 64 streams, ≤ 20 % of a core and p99 TTFT error ≤ 1 ms on a quiet host.

    python benchmarks/harness_overhead.py [--streams 64] [--decode-ms 3] [--output-tokens 128] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"

from satbench.http.client import CompletionRequest, StreamClient  # noqa: E402
from satbench.http.endpoint import Endpoint
from satbench.load.loadgen import LevelPlan, run_level  # noqa: E402
from satbench.metrics.latency import first_token_ns  # noqa: E402
from satbench.metrics.throughput import output_tok_per_s  # noqa: E402
from satbench.metrics.window import steady_window  # noqa: E402
from satbench.records.events import RequestEvent, read_events  # noqa: E402
from satbench.records.writer import JsonlWriter  # noqa: E402

PROMPT_TOKENS = 16


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def start_fake(tmp: Path, script: dict) -> tuple[subprocess.Popen, str]:
    (tmp / "script.json").write_text(json.dumps(script))
    ready = tmp / "ready.json"
    ncpu = os.cpu_count() or 1
    pin = (lambda: os.sched_setaffinity(0, {ncpu - 1})) if ncpu > 1 else None
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0", "--script", str(tmp / "script.json"),
                             "--ready-file", str(ready)], stderr=subprocess.PIPE, preexec_fn=pin)
    while not ready.exists():
        if proc.poll() is not None:
            raise SystemExit(f"fake server failed: {proc.stderr.read().decode()[-400:]}")
        time.sleep(0.02)
    return proc, json.loads(ready.read_text())["base_url"]


def stop_fake(proc: subprocess.Popen) -> dict:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    for line in err.decode().splitlines():
        if line.startswith('{"stats"'):
            return json.loads(line)["stats"]
    return {}


async def drive(base_url: str, n: int, n_requests: int, n_out: int, events_path: Path) -> tuple[float, float]:
    def mk(i: int, phase: str) -> CompletionRequest:
        return CompletionRequest(request_id=f"{phase}{i}", prompt=[1000 + (i + k) % 500 for k in range(PROMPT_TOKENS)],
                                 prompt_tokens=PROMPT_TOKENS, max_tokens=n_out)

    plan = LevelPlan(lane="bench", level=n, repetition=1, warmup=[mk(i, "w") for i in range(n)],
                     measured=[mk(i, "m") for i in range(n_requests)])
    sink = JsonlWriter(events_path)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    async with StreamClient(Endpoint.of(base_url)) as client:
        await run_level(client, plan, sink)
    sink.close()
    return time.process_time() - cpu0, time.perf_counter() - wall0


def measure(n: int, decode_ms: float, n_out: int, seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        log = tmp / "schedule.jsonl"
        script = dict(n_slots=n, decode_iteration_ms=decode_ms, prefill_ms_per_token=0.01,
                      n_batch=4096, schedule_log=str(log))
        proc, url = start_fake(tmp, script)
        sched_tok_s = n * 1000.0 / decode_ms
        n_requests = max(4 * n, int(sched_tok_s * seconds / n_out))
        try:
            cpu_s, wall_s = asyncio.run(drive(url, n, n_requests, n_out, tmp / "events.jsonl"))
        finally:
            stats = stop_fake(proc)
        events = [e for e in read_events(tmp) if isinstance(e, RequestEvent)]
        truth = {}
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            truth[rec["id"]] = rec
    measured = [e for e in events if e.phase == "measured"]
    win, why = steady_window(events, n)
    if win is None:
        raise SystemExit(f"no steady window: {why}")
    ttft_err, itl_err, send_lag, issue_lag = [], [], [], []
    for e in measured:
        rec = truth[e.request_id]
        send_lag.append((rec["arrival_ns"] - e.sent_ns) / 1e6)
        issue_lag.append((e.sent_ns - e.targeted_ns) / 1e6)
        client_ttft = first_token_ns(e) - e.sent_ns
        true_ttft = rec["chunk_ns"][0] - e.sent_ns  # first token written, on the shared clock
        ttft_err.append(abs(client_ttft - true_ttft) / 1e6)
        c, s = [t for t, _ in e.chunks], rec["chunk_ns"]
        itl_err += [abs((c[k] - c[k - 1]) - (s[k] - s[k - 1])) / 1e6 for k in range(1, min(len(c), len(s)))]
    return dict(
        n=n, sched=sched_tok_s, tok_s=output_tok_per_s(events, win, n), cpu=100.0 * cpu_s / wall_s,
        ttft50=pct(ttft_err, 0.5), ttft99=pct(ttft_err, 0.99), itl50=pct(itl_err, 0.5), itl99=pct(itl_err, 0.99),
        send50=pct(send_lag, 0.5), send99=pct(send_lag, 0.99), issue99=pct(issue_lag, 0.99),
        requests=len(measured), errors=sum(1 for e in measured if not e.ok), overruns=stats.get("overruns", "?"),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="64", help="comma-separated concurrencies")
    ap.add_argument("--decode-ms", type=float, default=3.0, help="fake decode iteration (all slots)")
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {0})
    print(f"satbench harness overhead · fake decode iteration {a.decode_ms} ms · prompt {PROMPT_TOKENS} / "
          f"output {a.output_tokens} tokens · load generator pinned to CPU 0, fake to the last CPU · "
          f"load avg {os.getloadavg()[0]:.2f}")
    head = (f"{'N':>4} {'sched tok/s':>11} {'tok/s':>9} {'client CPU%':>11} {'TTFT err p50':>12} "
            f"{'TTFT err p99':>12} {'ITL err p50':>11} {'ITL err p99':>11} {'fake read p50/p99':>17} {'issue p99':>9} {'requests':>8} {'errors':>6} {'fake overruns':>13}")
    print(head)
    print("-" * len(head))
    for n in [int(x) for x in a.streams.split(",")]:
        r = measure(n, a.decode_ms, a.output_tokens, a.seconds)
        print(f"{r['n']:>4} {r['sched']:>11.0f} {r['tok_s']:>9.0f} {r['cpu']:>11.0f} {r['ttft50']:>10.2f}ms "
              f"{r['ttft99']:>10.2f}ms {r['itl50']:>9.2f}ms {r['itl99']:>9.2f}ms "
              f"{r['send50']:>7.2f}/{r['send99']:<6.2f}ms {r['issue99']:>7.2f}ms {r['requests']:>8} "
              f"{r['errors']:>6} {r['overruns']!s:>13}")
    print(f"load avg after: {os.getloadavg()[0]:.2f}. TTFT err = |satbench TTFT − (fake first write − satbench send)|; "
          "ITL err = |satbench gap − fake write gap|; fake read = fake's arrival stamp − satbench send "
          "(server-side delay, part of the true TTFT); issue = satbench send − the moment the stream was "
          "free (connect + waiting for the connect gate; outside TTFT)")


if __name__ == "__main__":
    main()
