"""The fake's deliberately unfair / starving schedulers: each knob shows its effect against the
default (fair) script in the same scenario, so the fairness checks have something to fail on.

Times come from the fake's schedule records (``chunk_ns`` = when a token event was written,
``admit_ns`` = when the request got its slot, ``chunk_deadline_ns`` = the scripted deadline of the
iteration that carried each token); margins are wide for a noisy 2-core box, but every
assertion with the knob on fails with it off and vice versa.
"""

from __future__ import annotations

import asyncio
from itertools import pairwise

import httpx
import pytest

from tests.fakes.fake_llama_server import FakeLlamaServer, FakeScript
from tests.fakes.test_fake_llama_server import metrics, stream

MS = 1e6


def gaps_ms(rec: dict, t0_ns: int = 0, t1_ns: int | None = None, key: str = "chunk_ns") -> list[float]:
    """Inter-token gaps of a record whose later token lies in [t0_ns, t1_ns]; `key` names the times
    (``chunk_ns``: when written, ``chunk_deadline_ns``: the iteration's scripted deadline)."""
    t = rec[key]
    return [(b - a) / MS for a, b in pairwise(t) if t0_ns <= b and (t1_ns is None or b <= t1_ns)]


def go(c: httpx.AsyncClient, rid: str, prompt_n: int, n_predict: int) -> asyncio.Task:
    body = {"prompt": list(range(prompt_n)), "n_predict": n_predict}
    return asyncio.create_task(stream(c, "/completion", body, rid=rid))


async def _decode_stall(prefill_first: bool) -> tuple[float, float, float]:
    """Two decoders at 5 ms/iteration, then a 2000-token prompt (0.1 ms/token, n_batch 512).
    Returns (decoders' max gap while the prompt is pending, median gap before it, prompt prefill ms),
    all on the fake's scripted deadlines: which iteration carried a token is the scheduler's choice,
    and how late the host let the fake write it is not (deadlines chain; an overrun only re-bases)."""
    script = FakeScript(n_slots=3, n_batch=512, decode_iteration_ms=5.0, prefill_ms_per_token=0.1,
                        prefill_first=prefill_first)
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        await c.get("/health")
        decoders = [go(c, f"d{i}", 4, 100) for i in range(2)]
        await asyncio.sleep(0.06)
        await go(c, "long", 2000, 2)
        await asyncio.gather(*decoders)
        recs = {r["id"]: r for r in srv.schedule()}
    long = recs["long"]
    t0, t1 = long["prompt_start_ns"], long["chunk_deadline_ns"][0]
    on = "chunk_deadline_ns"
    during = [g for i in range(2) for g in gaps_ms(recs[f"d{i}"], t0, t1 + 20 * MS, on)]
    before = sorted(g for i in range(2) for g in gaps_ms(recs[f"d{i}"], 0, t0, on))
    assert all(recs[f"d{i}"]["n_decoded"] == 100 for i in range(2))
    return max(during), before[len(before) // 2], (t1 - t0) / MS


@pytest.mark.alone  # wall-clock ITLs of the fake: the default run's other workers skew them (12 ms for 5)
async def test_prefill_first_freezes_decoders_for_the_whole_prompt():
    fair_gap, fair_base, fair_prefill = await _decode_stall(False)
    gap, base, prefill = await _decode_stall(True)
    # default (llama.cpp): decode tokens first, prompt fills the rest -> one 510-token chunk + an iteration
    assert fair_base == pytest.approx(5.0, abs=2.0) and base == pytest.approx(5.0, abs=2.0)
    assert fair_gap <= 120.0, fair_gap  # scripted 56 ms (a busy host re-bases a late tick); unfair >= 150
    assert 180.0 <= fair_prefill <= 260.0, fair_prefill  # 4 iterations: 3 x 56 + 52 ms
    # prefill_first: the decoders emit nothing until the whole prompt (200 ms) is in
    assert gap >= 150.0 and gap >= 0.8 * prefill, (gap, prefill)  # scripted 205 ms
    assert 180.0 <= prefill <= 240.0, prefill  # scripted 200 ms


async def _late_short_request(admit_when_idle: bool, **knobs) -> tuple[dict, dict, dict, list]:
    script = FakeScript(n_slots=2, decode_iteration_ms=5.0, admit_when_idle=admit_when_idle, **knobs)
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        await c.get("/health")
        long = go(c, "long", 4, 40)
        await asyncio.sleep(0.04)
        short = go(c, "short", 4, 10)
        await asyncio.sleep(0.03)
        m = metrics((await c.get("/metrics")).text)
        slots = (await c.get("/slots")).json()
        await asyncio.gather(long, short)
        recs = {r["id"]: r for r in srv.schedule()}
    return recs["long"], recs["short"], m, slots


async def test_admit_when_idle_keeps_a_free_slot_empty_while_others_decode():
    long, short, m, slots = await _late_short_request(False)
    ttft = (short["chunk_ns"][0] - short["arrival_ns"]) / MS
    assert ttft <= 40.0 and short["end_ns"] < long["end_ns"], ttft  # admitted into the free slot at once
    assert m["llamacpp:requests_deferred"] == 0 and [s["is_processing"] for s in slots] == [True, True]

    long, short, m, slots = await _late_short_request(True)
    ttft = (short["chunk_ns"][0] - short["arrival_ns"]) / MS
    assert short["admit_ns"] >= long["chunk_ns"][-1] and short["chunk_ns"][0] > long["end_ns"]
    assert ttft >= 100.0, ttft  # waits out the long decode (~200 ms in all, 40 ms of it before the arrival)
    assert m["llamacpp:requests_deferred"] == 1 and m["llamacpp:requests_processing"] == 1
    assert [s["is_processing"] for s in slots] == [True, False]  # the free slot stays empty


async def test_hold_while_decoding_holds_the_free_slot_until_a_completion():
    long, short, m, slots = await _late_short_request(False, hold_while_decoding=True)
    ttft = (short["chunk_ns"][0] - short["arrival_ns"]) / MS
    assert short["chunk_ns"][0] > long["end_ns"] and ttft >= 100.0, ttft
    assert m["llamacpp:requests_deferred"] == 1 and [s["is_processing"] for s in slots] == [True, False]


async def test_hold_while_decoding_admits_requests_that_arrive_during_a_prefill():
    script = FakeScript(n_slots=2, decode_iteration_ms=5.0, prefill_ms_per_token=1.0,
                        hold_while_decoding=True)
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        await c.get("/health")
        a = go(c, "a", 40, 5)  # 40 ms of prefill: nobody is generating yet
        await asyncio.sleep(0.01)
        b = go(c, "b", 4, 5)
        await asyncio.gather(a, b)
        recs = {r["id"]: r for r in srv.schedule()}
    assert recs["b"]["chunk_ns"][0] < recs["a"]["end_ns"]  # b ran beside a, not after it


async def test_admit_when_idle_admits_the_waiters_together():
    script = FakeScript(n_slots=2, decode_iteration_ms=3.0, admit_when_idle=True)
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        first = go(c, "first", 2, 20)
        await asyncio.sleep(0.02)
        waiters = [go(c, f"w{i}", 2, 5) for i in range(3)]
        await asyncio.gather(first, *waiters)
        recs = {r["id"]: r for r in srv.schedule()}
        stats = srv.stats()
    assert stats["deferred_total"] == 3
    w = sorted((recs[f"w{i}"] for i in range(3)), key=lambda r: r["admit_ns"])
    assert w[0]["admit_ns"] == w[1]["admit_ns"] >= recs["first"]["end_ns"] - 5 * MS  # two at once, when idle
    assert w[2]["admit_ns"] >= max(w[0]["chunk_ns"][-1], w[1]["chunk_ns"][-1])  # the third after both


async def _two_equal(slow_slots: list[int]) -> tuple[float, float]:
    script = FakeScript(n_slots=2, decode_iteration_ms=5.0, slow_slots=slow_slots)
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        await c.get("/health")
        await asyncio.gather(go(c, "a", 4, 30), go(c, "b", 4, 30))
        by_slot = {r["slot"]: r for r in srv.schedule()}
    dur = [(by_slot[i]["chunk_ns"][-1] - by_slot[i]["chunk_ns"][0]) / MS for i in (0, 1)]
    return dur[0], dur[1]


async def test_slow_slot_decodes_at_half_rate():
    d0, d1 = await _two_equal([])
    assert d1 / d0 == pytest.approx(1.0, abs=0.15), (d0, d1)  # 29 gaps x 5 ms each
    d0, d1 = await _two_equal([1])
    assert d0 == pytest.approx(145.0, rel=0.2) and d1 == pytest.approx(290.0, rel=0.2), (d0, d1)
    assert 1.7 <= d1 / d0 <= 2.3, (d0, d1)


async def _admission_order(queue_order: str) -> list[str]:
    script = FakeScript(n_slots=1, decode_iteration_ms=5.0, queue_order=queue_order)
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        tasks = [go(c, "run", 2, 20)]
        await asyncio.sleep(0.02)
        for rid in "ABC":
            tasks.append(go(c, rid, 2, 3))
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)
        recs = srv.schedule()
    assert sorted(recs, key=lambda r: r["arrival_ns"])[1:] == sorted(recs, key=lambda r: r["task_id"])[1:]
    return [r["id"] for r in sorted(recs, key=lambda r: r["admit_ns"])]


async def test_queue_order_lifo_serves_the_newest_waiter_first():
    assert await _admission_order("fifo") == ["run", "A", "B", "C"]
    assert await _admission_order("lifo") == ["run", "C", "B", "A"]


async def _big_and_small(serial: bool) -> tuple[dict, dict]:
    script = FakeScript(n_slots=2, decode_iteration_ms=5.0, prefill_ms_per_token=0.05, serial=serial)
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        await c.get("/health")
        big = go(c, "big", 200, 40)
        await asyncio.sleep(0.003)
        await asyncio.gather(big, go(c, "small", 4, 5))
        recs = {r["id"]: r for r in srv.schedule()}
    assert recs["big"]["slot"] == 0 and recs["small"]["slot"] == 1
    return recs["big"], recs["small"]


async def test_serial_small_request_waits_for_the_big_one_ahead():
    big, small = await _big_and_small(False)
    e2e = (small["end_ns"] - small["arrival_ns"]) / MS
    assert small["end_ns"] < big["end_ns"] and e2e <= 80.0, e2e  # scripted ~35 ms (10 ms prefill + 5 x 5 ms)
    big, small = await _big_and_small(True)
    e2e = (small["end_ns"] - small["arrival_ns"]) / MS
    assert small["chunk_ns"][0] > big["end_ns"] and e2e >= 180.0, e2e  # scripted ~230 ms (big: 10 + 40 x 5)


def test_knobs_validate():
    s = FakeScript.model_validate({"prefill_first": True, "admit_when_idle": True, "slow_slots": [1, 3],
                                   "queue_order": "lifo", "serial": True})
    assert s.slow_slots == [1, 3] and s.queue_order == "lifo"
    d = FakeScript()
    assert (d.prefill_first, d.admit_when_idle, d.slow_slots, d.queue_order, d.serial) == (
        False, False, [], "fifo", False)
    with pytest.raises(ValueError):
        FakeScript(queue_order="random")
