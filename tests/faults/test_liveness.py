"""Liveness during a level: a server that stops answering with its sockets open (SIGSTOP) or whose decode
loop is wedged (/health answers, /slots does not) fails the level within the liveness bound, not after
the requests' read timeouts; a server that is slow but streams, or prefills long while /slots answers
(or /health, where /slots is off), is not failed."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.errors import ServerGoneError
from satbench.http.client import StreamOutcome
from satbench.load.liveness import (
    DECLARED_WITHIN_S,
    LIVENESS_TIMEOUT_S,
    SERVER_UNRESPONSIVE,
    StreamActivity,
    run_watched,
    watch,
)
from satbench.pipeline import new_sweep as Sweep
from satbench.records.events import LevelMark, RequestEvent, read_events
from satbench.records.manifest import read_manifest
from satbench.run.lane_session import LaneSession
from tests.conftest import url_lane_config
from tests.faults.common import analyzable, requests, status_of, table_row

BOUND_S = 1.0  # the tests' liveness bound (the default is LIVENESS_TIMEOUT_S)


def test_the_default_bound_is_at_most_30_s():
    assert LIVENESS_TIMEOUT_S <= 30
    assert DECLARED_WITHIN_S <= 30  # the bound, plus one look and one /health probe at most


# -- the watchdog alone ------------------------------------------------------------------------

def _run(coro_fn, seconds: float):
    """Run the watchdog for at most `seconds`: (its reason or None, seconds it took)."""
    async def go():
        t0 = time.monotonic()
        try:
            why = await asyncio.wait_for(coro_fn(), seconds)
        except TimeoutError:
            why = None
        return why, time.monotonic() - t0
    return asyncio.run(go())


def _in_flight(activity: StreamActivity, n: int = 2) -> list[StreamOutcome]:
    outs = [StreamOutcome() for _ in range(n)]
    for o in outs:
        activity.opened(o)
    return outs


async def _silent(_timeout_s: float) -> bool:
    await asyncio.sleep(_timeout_s)  # asked, never answered
    return False


async def _answering(_timeout_s: float) -> bool:
    return True


def test_silence_past_the_bound_is_declared():
    activity = StreamActivity()
    _in_flight(activity, 3)
    why, took = _run(lambda: watch(activity, lambda: True, _silent, timeout_s=0.4), 10)
    assert why == ("the server stopped answering: nothing arrived on any of 3 streams and /health was silent "
                   "for 0.4 s")
    assert took >= 0.4


def test_a_gone_process_is_declared_at_the_next_look():
    activity = StreamActivity()
    _in_flight(activity)
    why, _ = _run(lambda: watch(activity, lambda: False, _answering, timeout_s=0.4), 10)
    assert why == "the server process ended"


def test_a_slow_stream_is_alive_though_health_is_silent():
    activity = StreamActivity()
    outs = _in_flight(activity)

    async def stream_then_watch():
        async def tokens():
            while True:
                await asyncio.sleep(0.05)
                outs[0].chunks.append((time.perf_counter_ns(), 1))
        feeder = asyncio.ensure_future(tokens())
        try:
            return await watch(activity, lambda: True, _silent, timeout_s=0.3)
        finally:
            feeder.cancel()
    why, _ = _run(stream_then_watch, 2.0)  # > 6 bounds
    assert why is None


def test_a_long_prefill_is_alive_while_health_answers():
    activity = StreamActivity()
    _in_flight(activity)  # nothing arrives on them
    why, _ = _run(lambda: watch(activity, lambda: True, _answering, timeout_s=0.3), 2.0)
    assert why is None


def test_nothing_in_flight_is_nothing_to_wait_for():
    why, _ = _run(lambda: watch(StreamActivity(), lambda: True, _silent, timeout_s=0.3), 2.0)
    assert why is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["open", "chunk", "head", "close"]), st.integers(0, 3)),
                max_size=40))
def test_received_changes_exactly_when_something_arrives(steps):
    """A request ending is no change (its share moves from open to finished); a chunk or a head is."""
    activity, outs, opened = StreamActivity(), [StreamOutcome() for _ in range(4)], set()
    for what, i in steps:
        before = activity.received()
        if what == "open" and i not in opened:
            outs[i] = StreamOutcome()  # each request has its own outcome
            activity.opened(outs[i])
            opened.add(i)
        elif what == "close" and i in opened:
            activity.closed(outs[i])
            opened.discard(i)
        elif what == "chunk" and i in opened:
            outs[i].chunks.append((0, 1))
            assert activity.received() == before + 1
            continue
        elif what == "head" and i in opened and outs[i].headers_ns is None:
            outs[i].headers_ns = 1
            assert activity.received() == before + 1
            continue
        assert activity.received() == before
    assert activity.in_flight == len(opened)


def test_run_watched_stops_the_work_and_says_why():
    activity = StreamActivity()

    async def work():
        out = StreamOutcome()
        activity.opened(out)
        await asyncio.sleep(30)

    async def go():
        with pytest.raises(Exception) as info:
            await run_watched(work(), activity, lambda a: watch(a, lambda: True, _silent, timeout_s=0.3))
        return info.value
    exc = asyncio.run(asyncio.wait_for(go(), 10))
    assert type(exc).__name__ == "ServerUnresponsive" and "stopped answering" in str(exc)
    assert activity.verdict == str(exc)


# -- a real (fake) server, SIGSTOPped mid-level ---------------------------------------------------

def _sweep(url: str, tmp_path, levels: list[int], requests_per_level: int, output: int,
           bound_s: float = BOUND_S) -> Sweep:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = url_lane_config(url, levels, requests=requests_per_level, reps=1, prompt=16, output=output)
    return Sweep(cfg, run_dir, ["satbench", "test"], liveness_timeout_s=bound_s)


def _stop_when(run_dir, pid: int, measured: int, stopped: dict) -> threading.Thread:
    """SIGSTOP `pid` once `measured` measured requests are on disk (in a thread beside the sweep)."""
    def go():
        events = run_dir / "events.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if events.exists() and events.read_text().count('"phase":"measured"') >= measured:
                os.kill(pid, signal.SIGSTOP)
                stopped["at"] = time.monotonic()
                return
            time.sleep(0.01)
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("n", [1, 8])
def test_a_server_sigstopped_mid_level_fails_it_within_the_bound(fake_server, tmp_path, n):
    fake = fake_server(n_slots=8, decode_iteration_ms=5.0)
    sweep = _sweep(fake.base_url, tmp_path, [n], 400, 16)
    stopped: dict = {}
    watcher = _stop_when(sweep.run_dir, fake.proc.pid, 3, stopped)
    try:
        with pytest.raises(ServerGoneError) as info:
            sweep.run()
    finally:
        watcher.join(5)
        os.kill(fake.proc.pid, signal.SIGCONT)
    assert "at" in stopped, "the fake was never stopped: the test proves nothing"
    # the watchdog's reason, not a read timeout's (60 s): how long it took is benchmarks/liveness_bound.py's
    why = f"nothing arrived on any of {n} stream{'s' if n > 1 else ''} and /slots was silent for 1 s"
    assert f"level {n} (repetition 1) failed: the server stopped answering: {why}" in str(info.value)
    run_dir = sweep.run_dir
    assert status_of(run_dir) == "failed"
    failure = read_manifest(run_dir).server_failures[0]
    assert failure.level == n and "stopped answering" in failure.reason
    end = next(m for m in read_events(run_dir) if isinstance(m, LevelMark) and m.kind == "level_end")
    assert end.status == "failed" and why in (end.reason or "")
    # the requests in flight were stopped and recorded as the server's failure, not as `cancelled`
    cut = [e for e in requests(run_dir) if not e.ok]
    assert len(cut) == n and {e.error.type for e in cut} == {SERVER_UNRESPONSIVE}
    assert all(why in e.error.message for e in cut)
    assert sum(e.ok for e in requests(run_dir)) >= 3
    results = analyzable(run_dir)
    rep = results["lanes"][0]["levels"][0]["repetitions"][0]
    assert rep["status"] == "failed" and why in rep["status_reason"]
    table_row(f"server SIGSTOPped mid-level, N={n}", f"SIGSTOP, liveness bound {BOUND_S:g} s", 4,
              str(info.value)[:80], "failed", len(requests(run_dir)) - n, "-")


async def _never(self, timeout_s: float = 5.0) -> bool:
    """LaneSession._answers patched: /health asked, never answered."""
    await asyncio.sleep(timeout_s)
    return False


def test_a_slow_but_streaming_server_is_not_failed_even_with_probes_silent(fake_server, tmp_path,
                                                                           monkeypatch):
    """Tokens arrive every 0.15 s, /health never answers (patched) nor /slots (late): the bound is 0.6 s,
    the level runs out."""
    monkeypatch.setattr(LaneSession, "_answers", _never)
    fake = fake_server(n_slots=2, decode_iteration_ms=150.0, slots_delay_s=3600.0)
    sweep = _sweep(fake.base_url, tmp_path, [2], 2, 10, bound_s=0.6)
    sweep.run()
    run_dir = sweep.run_dir
    assert status_of(run_dir) == "complete" and not read_manifest(run_dir).server_failures
    events = [e for e in read_events(run_dir) if isinstance(e, RequestEvent)]
    assert events and all(e.ok for e in events)
    # each request streamed for longer than the bound: the watchdog had every chance to fire
    assert all((e.end_ns - e.sent_ns) / 1e9 > 0.6 * 2 for e in events)


def _long_prefill(fake_server, tmp_path, bound_s: float, **script) -> Sweep:
    fake = fake_server(n_slots=1, decode_iteration_ms=2.0, first_token_extra_ms=1500.0, **script)
    return _sweep(fake.base_url, tmp_path, [1], 1, 4, bound_s=bound_s)


def test_a_long_prefill_is_not_failed_while_slots_answers(fake_server, tmp_path, monkeypatch):
    """/health silent (patched): /slots, answered between decode iterations, is the evidence."""
    monkeypatch.setattr(LaneSession, "_answers", _never)
    sweep = _long_prefill(fake_server, tmp_path, 0.5)
    sweep.run()
    assert status_of(sweep.run_dir) == "complete" and not read_manifest(sweep.run_dir).server_failures
    events = requests(sweep.run_dir)
    assert events and all(e.ok and (e.chunks[0][0] - e.sent_ns) / 1e9 > 1.0 for e in events)


def test_a_wedged_decode_loop_is_failed_though_health_answers(fake_server, tmp_path):
    """The streams stall (hung completions) and /slots never answers, while /health does (it comes
    from llama-server's HTTP threads, not its task queue): declared failed within the bound."""
    sweep = _sweep(fake_server(n_slots=2, decode_iteration_ms=5.0, hang_from_completion=1,
                               slots_delay_s=3600.0).base_url, tmp_path, [2], 4, 4, bound_s=BOUND_S)
    with pytest.raises(ServerGoneError) as info:
        sweep.run()
    assert "the server stopped answering: nothing arrived on any of 2 streams and /slots was silent for 1 s" \
        in str(info.value)
    cut = [e for e in requests(sweep.run_dir) if not e.ok]
    assert len(cut) == 2 and {e.error.type for e in cut} == {SERVER_UNRESPONSIVE}


def test_with_slots_disabled_the_probe_falls_back_to_health(fake_server, tmp_path):
    """/slots answers 501 (--no-slots): /health keeps the long prefill alive."""
    sweep = _long_prefill(fake_server, tmp_path, 0.5, endpoint_slots=False)
    sweep.run()
    assert status_of(sweep.run_dir) == "complete" and not read_manifest(sweep.run_dir).server_failures


def test_with_slots_disabled_and_health_silent_the_prefill_is_failed(fake_server, tmp_path, monkeypatch):
    """The counterpart of the test above: there /health (the fallback) is what kept the level alive."""
    monkeypatch.setattr(LaneSession, "_answers", _never)
    sweep = _long_prefill(fake_server, tmp_path, 0.5, endpoint_slots=False)
    with pytest.raises(ServerGoneError, match="the server stopped answering: nothing arrived on any of "
                                              "1 stream and /health was silent"):
        sweep.run()


def test_a_probe_slower_than_one_look_still_counts():
    """One probe at a time, awaited across looks: an answer after several looks (a long decode
    iteration) is evidence, so the bound is not failed."""
    activity = StreamActivity()
    _in_flight(activity)
    asked: list[float] = []

    async def slow(deadline_s: float) -> bool:
        asked.append(deadline_s)
        await asyncio.sleep(0.25)  # several looks of 0.075 s wait, well within the 0.6 s bound
        return True
    why, _ = _run(lambda: watch(activity, lambda: True, slow, timeout_s=0.6), 2.0)
    assert why is None
    assert asked and all(d == 0.6 for d in asked)  # each probe's deadline is the bound itself
    assert len(asked) < 2.0 / 0.25 + 2  # never more than one in flight


def test_a_fairness_check_whose_server_is_sigstopped_fails_within_the_bound(fake_server, tmp_path):
    """The checks run their own requests (decoders sent beside each other): the watchdog covers them."""
    from satbench.cli.args import build_parser, run_config
    from tests.fakes.fairness_harness import FAIR

    fake = fake_server(**FAIR)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    argv = ["fairness", "--url", fake.base_url, "--batch-size", "256", "--prompt-tokens", "32",
            "--output-tokens", "16", "--checks", "S1", "-o", str(run_dir)]
    sweep = Sweep(run_config(build_parser().parse_args(argv)), run_dir, ["satbench", *argv],
                  liveness_timeout_s=BOUND_S)
    stopped: dict = {}

    def stop_in_s1():
        events = run_dir / "events.jsonl"
        if _when_text(events, lambda text: text.count('"check":"S1"') >= 3):  # S1's lone requests done
            time.sleep(0.05)
            os.kill(fake.proc.pid, signal.SIGSTOP)
            stopped["at"] = time.monotonic()
    thread = threading.Thread(target=stop_in_s1, daemon=True)
    thread.start()
    try:
        with pytest.raises(ServerGoneError) as info:
            sweep.run()
    finally:
        thread.join(5)
        os.kill(fake.proc.pid, signal.SIGCONT)
    assert "at" in stopped, "the fake was never stopped: the test proves nothing"
    assert "fairness S1" in str(info.value) and "the server stopped answering: nothing arrived on any of" \
        in str(info.value)
    cut = [e for e in requests(run_dir) if e.check == "S1" and not e.ok]
    assert cut and {e.error.type for e in cut} == {SERVER_UNRESPONSIVE}  # the decoders, stopped and recorded


def _when_text(path, predicate, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and predicate(path.read_text()):
            return True
        time.sleep(0.005)
    return False


# -- progress: tokens or /slots work, not just bytes or answers --------------------------------

class _Wire:
    """What an exchange under way shows the watchdog: raw bytes and SSE payloads so far."""

    def __init__(self) -> None:
        self.received_bytes = 0
        self.uncommented_bytes = 0  # bytes outside SSE comment lines
        self.result = type("R", (), {"n_payloads": 0})()


def _progress_run(feed, slots=lambda: None, seconds: float = 2.0):
    """The watchdog (liveness bound 0.3 s, progress bound 0.6 s, probe always answering) over two
    requests in flight, while `feed(outs)` runs every 0.05 s."""
    activity = StreamActivity()
    outs = _in_flight(activity)
    for o in outs:
        o.wire = _Wire()

    async def go():
        async def feeder():
            while True:
                await asyncio.sleep(0.05)
                feed(outs)
        task = asyncio.ensure_future(feeder())
        try:
            return await watch(activity, lambda: True, _answering, timeout_s=0.3, probed=lambda: "/slots",
                               progress_timeout_s=0.6, slots_progress=slots)
        finally:
            task.cancel()
    return _run(go, seconds)


def test_a_server_that_streams_only_sse_comments_is_failed_at_the_progress_bound():
    def comments(outs):
        outs[0].wire.received_bytes += 14  # ": keepalive\n\n"
    why, took = _progress_run(comments)
    assert why == ("the server made no progress: no token on any of 2 streams and no decode or prompt "
                   "progress in /slots for 0.6 s (SSE comments only)")
    assert took >= 0.6


def test_events_without_tokens_are_named_as_such():
    def empty_events(outs):
        outs[1].wire.received_bytes += 40
        outs[1].wire.result.n_payloads += 1
    why, _ = _progress_run(empty_events)
    assert why is not None and why.endswith("(bytes without a token)")


def test_a_line_that_never_ends_or_blank_lines_are_bytes_without_a_token():
    def partial(outs):
        outs[0].wire.received_bytes += 1  # `data: {"content":"` growing a byte at a time
        outs[0].wire.uncommented_bytes += 1
    why, _ = _progress_run(partial)
    assert why is not None and why.endswith("(bytes without a token)")


def test_requests_that_fail_without_a_token_are_no_progress():
    """A server that never sends a response head: each request ends at its read timeout, and a new
    one takes its place; that is not progress, so the level fails at the progress bound."""
    def time_out_and_resend(outs):
        old = outs.pop(0)
        old.error_type = "timeout"
        activity.closed(old)
        new = StreamOutcome()
        new.wire = _Wire()
        activity.opened(new)
        outs.append(new)
    activity = StreamActivity()
    outs = _in_flight(activity)

    async def go():
        async def feeder():
            while True:
                await asyncio.sleep(0.05)
                time_out_and_resend(outs)
        task = asyncio.ensure_future(feeder())
        try:
            return await watch(activity, lambda: True, _answering, timeout_s=0.3, probed=lambda: "/slots",
                               progress_timeout_s=0.6)
        finally:
            task.cancel()
    why, took = _run(go, 2.0)
    assert why is not None and why.endswith("(nothing arrived)") and took >= 0.6


def test_sse_comment_bytes_are_told_from_the_rest():
    from satbench.http.sse import SseSplitter

    sse = SseSplitter()
    sse.feed(b": keepalive\n\n: again\n\n\r\n")
    assert sse.uncommented() == 0  # comments and blank lines: a keepalive stream
    sse.feed(b"event: ping\n")
    assert sse.uncommented() == 12
    sse.feed(b'data: {"content":"')
    assert sse.uncommented() == 12 + 18  # an unfinished line that is not a comment
    other = SseSplitter()
    other.feed(b":" * 10)
    assert other.uncommented() == 0  # a comment that never ends is still a comment


def test_tokens_or_slots_progress_keep_a_level_going():
    def tokens(outs):
        outs[0].output_tokens += 1
    assert _progress_run(tokens)[0] is None
    work = iter(range(10**6))
    assert _progress_run(lambda outs: None, slots=lambda: next(work))[0] is None  # a long prefill
    why, _ = _progress_run(lambda outs: None, slots=lambda: 7)  # /slots answers, its work stands still
    assert why is not None and why.endswith("(nothing arrived)")


def test_slots_progress_is_tokens_decoded_and_prompt_tokens_processed():
    from satbench.load.liveness import slots_progress

    body = (b'[{"id": 0, "is_processing": true, "n_prompt_tokens_processed": 512, '
            b'"next_token": [{"n_decoded": 7}]}, {"id": 1, "is_processing": false}]')
    assert slots_progress(body) == 519
    assert slots_progress(b'[{"id": 0}]') is None and slots_progress(b"nonsense") is None
    assert slots_progress(b"[" * 100_000) is None


@pytest.mark.parametrize("stall,named", [("keepalive", "SSE comments only"), ("drip", "SSE comments only"),
                                         ("nohead", "nothing arrived")])
def test_a_server_that_answers_health_but_streams_no_token_fails_its_level(stall, named, fake_server,
                                                                          tmp_path, monkeypatch):
    """The fake answers /health and /slots (idle) while each new request gets only `: keepalive`
    comments, or one byte at a time: the level fails at the progress bound (2 s here), long before
    --request-timeout × (N + 3) would, and the reason names what still arrived."""
    import json

    import satbench.run.lane_session as lane_session

    monkeypatch.setattr(lane_session, "PROGRESS_TIMEOUT_S", 2.0)
    fake = fake_server(n_slots=4, decode_iteration_ms=2.0, stall=stall, stall_every_s=0.2,
                       stall_from_completion=5)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    t0 = time.monotonic()
    with pytest.raises(ServerGoneError) as info:
        Sweep(url_lane_config(fake.base_url, [2], requests=12, reps=1, prompt=16, output=4), run_dir,
              ["satbench", "test"]).run()
    assert time.monotonic() - t0 < 60
    assert "the server made no progress" in str(info.value) and f"({named})" in str(info.value)
    failure, = json.loads((run_dir / "run.json").read_text())["server_failures"]
    assert failure["level"] == 2


def test_the_progress_bound_grows_to_three_batches_at_the_slowest_prefill_seen():
    from satbench.load.liveness import PROGRESS_TIMEOUT_S, prefill_ms_per_token, progress_bound_s
    from satbench.records.events import ServerTimings
    from tests.builders import ev

    assert progress_bound_s(PROGRESS_TIMEOUT_S, None, 2048) == PROGRESS_TIMEOUT_S
    assert progress_bound_s(PROGRESS_TIMEOUT_S, 1.0, 2048) == PROGRESS_TIMEOUT_S  # 6.1 s of prefill
    assert progress_bound_s(PROGRESS_TIMEOUT_S, 20.0, 2048) == pytest.approx(3 * 2048 * 0.020)  # 122.9 s
    slow = ev(sent_ms=0, chunks_ms=[1100, 1110]).model_copy(
        update={"timings": ServerTimings(prompt_n=512, prompt_ms=1024.0)})
    short = slow.model_copy(update={"timings": ServerTimings(prompt_n=8, prompt_ms=400.0)})
    assert prefill_ms_per_token(slow) == 2.0
    assert prefill_ms_per_token(short) is None  # 8 tokens: fixed costs, not the rate
    assert prefill_ms_per_token(slow.model_copy(update={"timings": None})) is None
