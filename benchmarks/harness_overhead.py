"""How much does satbench's own load generator cost, and how exact are its stamps?

Drives the fake llama.cpp server (tests/fakes, its own process, pinned to the last CPU) with
satbench's real path — `StreamClient` + `run_level` + the JSONL event writer — from worker
processes pinned to the other CPUs (one worker by default: one satbench process, as `satbench
sweep` runs), and prints per row (N streams, fake decode iteration, client variant):

- streamed tok/s: "tok/s" as satbench computes it for results.json (per stream from a whole
  request's start, so reconnects and prefill count), "wire tok/s" (tokens stamped in the steady
  window ÷ its length), next to "sched", the rate the fake's script allows (N ÷ decode iteration);
- client CPU: the workers' CPU time ÷ the run's wall time, in % of one core (summed over workers),
  and the fake's CPU the same way;
- TTFT error: satbench's TTFT − the true one, (fake's write of the first token − satbench's
  send stamp) on the clock both processes share (CLOCK_MONOTONIC); p50/p99 of |error|. The
  send stamp is taken right after the request is handed to the socket; the fake's own delay
  in reading it ("fake read" column: fake arrival stamp − send stamp) is server latency, which any
  client sees, so it belongs to the true TTFT;
- ITL error: each gap satbench saw − the same gap between the fake's writes; p50/p99 of |error|;
- issue lag (send − the moment the stream became free: connecting, and waiting for the
  one-connect-at-a-time gate), and the fake's overruns (iterations it could not keep); a row with
  many overruns is a fake that fell behind, not a harness figure.

Variants (`--variants`, each row in fresh processes, rounds alternating them; `+` joins parts):
- `default`: satbench as shipped (the event loop the CLI installs: satbench.load.eventloop);
- `asyncio` / `uvloop`: that event loop;
- `old-parse`: the per-chunk path before the one-match reads (the chunk decoder's whole-chunk
  check, then the SSE splitter's one-event check, then an update per event);
- `httptools`: the HTTP framing (head, chunked body) parsed by httptools (llhttp, C) instead of
  satbench's framing module; SSE and events as satbench's;
- `batched-writer`: the event writer flushes every 64 records instead of every record;
- `plain-protocol`: the transport as an asyncio.Protocol (data_received) instead of a
  BufferedProtocol (the loop hands it a bytes object per read).

Targets (issue 35): at 64 streams, ≤ 20 % of a core and p99 TTFT error ≤ 1 ms; one satbench process
driving ≥ 512 streams at ≥ 50,000 tok/s with p99 TTFT error ≤ 2 ms.

    python benchmarks/harness_overhead.py [--streams 64,512] [--decode-ms 3,8] [--output-tokens 128]
        [--seconds 10] [--variants default,asyncio] [--repeat 1] [--workers 1] [--out FILE|-]
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from satbench.config.limits import too_large
from satbench.errors import ParseError
from satbench.http.transport import HttpStream

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"

PROMPT_TOKENS = 16
FAKE_LOOP: str | None = None  # --fake-loop
BATCH_LINES = 64  # the batched-writer variant's flush period, in records


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_fake(tmp: Path, script: dict, loop: str | None = None) -> tuple[subprocess.Popen, str]:
    (tmp / "script.json").write_text(json.dumps(script))
    ready = tmp / "ready.json"
    ncpu = os.cpu_count() or 1
    pin = (lambda: os.sched_setaffinity(0, {ncpu - 1})) if ncpu > 1 else None
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0", "--script", str(tmp / "script.json"),
                             "--ready-file", str(ready), *(["--loop", loop] if loop else [])],
                            stderr=subprocess.PIPE, preexec_fn=pin)
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


# -- the worker: one process driving its share of the streams with one variant ------------------

def _old_parse() -> None:
    """The per-chunk path before the one-match reads (what the `old-parse` variant runs)."""
    from satbench.errors import ParseError
    from satbench.http import client, transport

    def _bytes_at(self, t, buf, nbytes):
        data = bytes(buf[:nbytes])
        self.last_data_ns = t
        streaming = self._streaming
        if streaming is not None:
            body = streaming.whole_chunk(data)
            if body is not None:
                payload = self._sse.one_event(body)
                if payload is not None and self._received + len(data) <= self._cap_bytes:
                    self._received += len(data)
                    self._body_bytes += len(body)
                    self.result.n_payloads += 1
                    try:
                        self.on_payload(t, payload)
                    except ParseError as exc:
                        self._finish(t, exc)
                    return
        self._general_read_at(t, data)

    transport.HttpStream._bytes_at = _bytes_at
    init = client._PayloadReader.__init__

    def reader_init(self, *a, **k):
        init(self, *a, **k)
        self.so_far = None  # every event through interpret_native and an update

    client._PayloadReader.__init__ = reader_init


class HttptoolsStream(HttpStream):
    """HttpStream with httptools (llhttp, C) parsing the HTTP framing (the `httptools` variant): its
    body callbacks hand the decoded bytes to satbench's SSE splitter and events."""

    def __init__(self, *a, **k) -> None:
        import httptools

        super().__init__(*a, **k)
        self._errors = (httptools.HttpParserError, ParseError)
        self._parser = httptools.HttpResponseParser(self)
        self._t = 0

    def _bytes_at(self, t, buf, nbytes):
        self.last_data_ns = self._t = t
        r = self.result
        if r.first_byte_ns is None:
            r.first_byte_ns = t
        if self.done.done():
            return
        self._received += nbytes
        try:
            if self._received > self._cap_bytes:
                raise too_large(self.where, self._cap_bytes)
            self._parser.feed_data(buf[:nbytes])
        except self._errors as exc:
            failure = exc if isinstance(exc, ParseError) else ParseError(f"{type(exc).__name__}: {exc}")
            self._finish(t, failure)

    def on_headers_complete(self) -> None:
        self.result.status, self.result.headers_ns = self._parser.get_status_code(), self._t

    def on_body(self, body: bytes) -> None:
        self._take(self._t, body)

    def on_message_complete(self) -> None:
        self.result.complete = True
        self._finish(self._t, None)


def _sink(path: Path, batched: bool):
    from satbench.records.writer import JsonlWriter

    class BatchedWriter(JsonlWriter):
        """Flushes every BATCH_LINES records (and at close) instead of every record."""

        def write(self, record) -> None:
            self._fh.write(record.model_dump_json(exclude_defaults=False) + "\n")
            self.lines += 1
            if self.lines % BATCH_LINES == 0:
                self._fh.flush()

    return (BatchedWriter if batched else JsonlWriter)(path)


def worker(spec: dict) -> None:
    """Drive spec["n"] streams (warmup then spec["requests"] measured requests) at spec["start_at"]
    (time.monotonic), write events to spec["dir"], print {"cpu_s", "wall_s", "loop"} as JSON."""
    import asyncio

    parts = set(spec["variant"].split("+"))
    if "old-parse" in parts:
        _old_parse()
    if "plain-protocol" in parts:
        import asyncio as aio

        from satbench.http import client

        body = {k: v for k, v in HttpStream.__dict__.items()
                if k not in ("get_buffer", "buffer_updated", "__dict__", "__weakref__")}
        client.HttpStream = type("PlainStream", (aio.Protocol,), body)  # type: ignore[misc]
    if "httptools" in parts:
        from satbench.http import client

        client.HttpStream = HttptoolsStream  # type: ignore[misc]
    from satbench.http.client import CompletionRequest, StreamClient
    from satbench.http.endpoint import Endpoint
    from satbench.load.eventloop import event_loop_runner, running_loop_name
    from satbench.load.loadgen import LevelPlan, run_level

    n, n_out, first = spec["n"], spec["output_tokens"], spec["first_stream"]

    def mk(i: int, phase: str) -> CompletionRequest:
        prompt = [1000 + (i + k) % 500 for k in range(PROMPT_TOKENS)]
        return CompletionRequest(request_id=f"{phase}{first}.{i}", prompt_tokens=PROMPT_TOKENS,
                                 max_tokens=n_out, prompt=prompt)

    plan = LevelPlan(lane="bench", level=n, repetition=1, warmup=[mk(i, "w") for i in range(n)],
                     measured=[mk(i, "m") for i in range(spec["requests"])])
    sink = _sink(Path(spec["dir"]) / "events.jsonl", "batched-writer" in parts)
    loop = "uvloop" if "uvloop" in parts else "asyncio" if "asyncio" in parts else None

    async def drive() -> tuple[float, float, str]:
        await asyncio.sleep(max(0.0, spec["start_at"] - time.monotonic()))
        cpu0, wall0 = time.process_time(), time.perf_counter()
        async with StreamClient(Endpoint.of(spec["url"])) as client:
            await run_level(client, plan, sink)
        sink.close()
        return time.process_time() - cpu0, time.perf_counter() - wall0, running_loop_name()

    cpu, wall, name = event_loop_runner(loop)(drive())
    print(json.dumps({"cpu_s": cpu, "wall_s": wall, "loop": name}))


# -- the parent: the fake, the workers, the figures ----------------------------------------------

def measure(n: int, decode_ms: float, n_out: int, seconds: float, variant: str, workers: int) -> dict:
    """One row: the fake with n slots, `workers` processes driving its n streams with `variant`."""
    from satbench.records.events import RequestEvent, read_events

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        log = tmp / "schedule.jsonl"
        script = dict(n_slots=n, decode_iteration_ms=decode_ms, prefill_ms_per_token=0.01,
                      n_batch=4096, schedule_log=str(log))
        proc, url = start_fake(tmp, script, FAKE_LOOP)
        sched_tok_s = n * 1000.0 / decode_ms
        n_requests = max(4 * n, int(sched_tok_s * seconds / n_out))
        ncpu = os.cpu_count() or 1
        cpus = sorted(range(max(1, ncpu - 1)))  # all but the fake's
        shares = [n // workers + (w < n % workers) for w in range(workers)]
        start_at = time.monotonic() + 1.5 + 0.3 * workers
        procs = []
        try:
            fake_c0 = cpu_s(proc.pid)
            t0 = time.monotonic()
            for w, share in enumerate(shares):
                wdir = tmp / f"w{w}"
                wdir.mkdir()
                spec = dict(n=share, requests=n_requests * share // n, output_tokens=n_out, url=url,
                            dir=str(wdir), variant=variant, start_at=start_at, first_stream=sum(shares[:w]))
                cpu = {cpus[w % len(cpus)]}
                procs.append(subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)],
                                              stdout=subprocess.PIPE,
                                              preexec_fn=lambda c=cpu: os.sched_setaffinity(0, c)))
            outs = [json.loads(p.communicate(timeout=seconds * 10 + 120)[0].decode().splitlines()[-1])
                    for p in procs]
            fake_cpu = (cpu_s(proc.pid) - fake_c0) / (time.monotonic() - max(t0, start_at))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            stats = stop_fake(proc)
        events: list[RequestEvent] = []
        for w, first in enumerate(sum(shares[:k]) for k in range(workers)):
            events += [e.model_copy(update={"stream": e.stream + first})
                       for e in read_events(tmp / f"w{w}") if isinstance(e, RequestEvent)]
        truth = {}
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            truth[rec["id"]] = rec
    return dict(n=n, decode=decode_ms, variant=variant, loop=outs[0]["loop"], workers=workers,
                sched=sched_tok_s, overruns=stats.get("overruns", "?"), fake_cpu=100.0 * fake_cpu,
                cpu=100.0 * sum(o["cpu_s"] for o in outs) / max(o["wall_s"] for o in outs),
                **figures(events, truth, n))


def figures(events: list, truth: dict, n: int) -> dict:
    """Throughput and stamp errors of `events` (all workers') against the fake's schedule `truth`."""
    from satbench.metrics.latency import first_token_ns
    from satbench.metrics.throughput import output_tok_per_s
    from satbench.metrics.window import steady_window

    measured = [e for e in events if e.phase == "measured"]
    win, why = steady_window(events, n)
    if win is None:
        raise SystemExit(f"no steady window: {why}")
    ttft_err, itl_err, send_lag, issue_lag = [], [], [], []
    wire_tokens = 0
    for e in measured:
        wire_tokens += sum(k for t, k in e.chunks if win.contains(t))
        rec = truth[e.request_id]
        send_lag.append((rec["arrival_ns"] - e.sent_ns) / 1e6)
        issue_lag.append((e.sent_ns - e.targeted_ns) / 1e6)
        first_ns = first_token_ns(e)
        if first_ns is None:
            continue
        client_ttft = first_ns - e.sent_ns
        true_ttft = rec["chunk_ns"][0] - e.sent_ns  # first token written, on the shared clock
        ttft_err.append(abs(client_ttft - true_ttft) / 1e6)
        c, s = [t for t, _ in e.chunks], rec["chunk_ns"]
        itl_err += [abs((c[k] - c[k - 1]) - (s[k] - s[k - 1])) / 1e6 for k in range(1, min(len(c), len(s)))]
    return dict(tok_s=output_tok_per_s(events, win, n), wire=wire_tokens / win.duration_s,
                ttft50=pct(ttft_err, 0.5), ttft99=pct(ttft_err, 0.99), itl50=pct(itl_err, 0.5),
                itl99=pct(itl_err, 0.99), send50=pct(send_lag, 0.5), send99=pct(send_lag, 0.99),
                issue99=pct(issue_lag, 0.99), requests=len(measured),
                errors=sum(1 for e in measured if not e.ok))


def row(r: dict) -> str:
    return (f"{r['n']:>4} {r['sched']:>11.0f} {r['tok_s']:>7.0f} {r['wire']:>10.0f} {r['cpu']:>11.0f} "
            f"{r['fake_cpu']:>9.0f} {r['ttft50']:>10.2f}ms {r['ttft99']:>10.2f}ms {r['itl50']:>9.2f}ms "
            f"{r['itl99']:>9.2f}ms {r['send50']:>7.2f}/{r['send99']:<6.2f}ms {r['issue99']:>7.2f}ms "
            f"{r['requests']:>8} {r['errors']:>6} {r['overruns']!s:>8} {r['decode']:>3g}ms  "
            f"{r['variant']:<22} {r['loop']}")


def host_cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} CPUs"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(json.loads(sys.argv[2]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="64", help="comma-separated concurrencies")
    ap.add_argument("--decode-ms", default="3", help="fake decode iteration (all slots), one per --streams "
                                                      "entry or one for all")
    ap.add_argument("--output-tokens", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--variants", default="default", help="comma-separated (see the module docstring)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds, each running every variant in turn")
    ap.add_argument("--workers", type=int, default=1, help="processes sharing the streams (1: one process)")
    ap.add_argument("--out", default="-", help="also write the output here ('-': nowhere; 'dated': "
                                              "benchmarks/results/harness_overhead-YYYY-MM-DD.txt)")
    ap.add_argument("--fake-loop", choices=("asyncio", "uvloop"), default=None,
                    help="the fake's event loop (default: the fake's own, asyncio's)")
    a = ap.parse_args()
    global FAKE_LOOP
    FAKE_LOOP = a.fake_loop
    streams = [int(x) for x in a.streams.split(",")]
    decodes = [float(x) for x in a.decode_ms.split(",")]
    decodes = decodes * len(streams) if len(decodes) == 1 else decodes
    if len(decodes) != len(streams):
        raise SystemExit("--decode-ms: one value, or one per --streams entry")
    lines: list[str] = []

    def print(text: str) -> None:  # the table goes to stdout and to --out
        lines.append(text)
        builtins.print(text, flush=True)

    print(f"satbench harness overhead · prompt {PROMPT_TOKENS} / output {a.output_tokens} tokens · "
          f"{a.seconds:g} s of requests per row · {a.workers} load-generator process(es) on CPU "
          f"0..{max(0, (os.cpu_count() or 1) - 2)}, fake on the last CPU · {host_cpu()} · "
          f"fake's loop: {a.fake_loop or 'asyncio'} · load avg {os.getloadavg()[0]:.2f}")
    head = (f"{'N':>4} {'sched tok/s':>11} {'tok/s':>7} {'wire tok/s':>10} {'client CPU%':>11} "
            f"{'fake CPU%':>9} {'TTFT err p50':>12} {'TTFT err p99':>12} {'ITL err p50':>11} "
            f"{'ITL err p99':>11} {'fake read p50/p99':>17} {'issue p99':>9} {'requests':>8} {'errors':>6} "
            f"{'overruns':>8} {'iter':>5}  {'variant':<22} loop")
    print(head)
    print("-" * len(head))
    for _ in range(a.repeat):
        for n, dec in zip(streams, decodes):
            for variant in a.variants.split(","):
                r = measure(n, dec, a.output_tokens, a.seconds, variant, a.workers)
                print(row(r))
    print(f"load avg after: {os.getloadavg()[0]:.2f}. TTFT err = |satbench TTFT − (fake first write − "
          "satbench send)|; ITL err = |satbench gap − fake write gap|; fake read = fake's arrival − "
          "satbench send "
          "(server-side delay, part of the true TTFT); issue = satbench send − the moment the stream was "
          "free (connect + waiting for the connect gate; outside TTFT); wire tok/s = tokens stamped in the "
          "steady window ÷ its length")
    if a.out != "-":
        out = Path(a.out) if a.out != "dated" else (
            ROOT / "benchmarks" / "results" / f"harness_overhead-{time.strftime('%Y-%m-%d')}.txt")
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as f:
            f.write(f"$ python benchmarks/harness_overhead.py {' '.join(sys.argv[1:])}\n"
                    f"# {time.strftime('%Y-%m-%d %H:%M %Z')}\n" + "\n".join(lines) + "\n\n")
        builtins.print(f"written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
