"""The graded unfairness knobs and the plateau table (fake_scheduler's docstring), on the virtual
clock of `scripted_time.Sim`: every figure is the script's arithmetic, so each assertion is exact
(to the ns rounding of a deadline) and holds on any host; each fails with its knob at the fair
degree or at another one.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import httpx
import pytest

from tests.fakes.fake_scheduler import Engine
from tests.fakes.fake_script import PLATEAU_ITERATION_MS, FakeScript
from tests.fakes.scripted_time import MS, Sim, f2_slowdowns, ttft_ms

FAKE_PATH = Path(__file__).with_name("fake_llama_server.py")
# a prefill chunk (256 tok × 0.5 ms) far above a decode iteration (6 ms + 1 ms per generating slot)
BASE = dict(n_slots=4, n_batch=256, n_ctx=4 * 2048, prefill_ms_per_token=0.5, decode_iteration_ms=6.0,
            decode_ms_per_busy_slot=1.0)
NS = 1e-6  # ms: one ns of deadline rounding


def t_ms(k: int) -> float:
    """BASE's decode ms with k generating slots."""
    return 6.0 + k


def test_knobs_default_to_fair_and_validate():
    d = FakeScript()
    fair = (d.slow_slot_rate, d.lifo_share, d.prefill_chunk_factor, d.admit_delay_iterations,
            d.second_prompt_delay_iterations, d.decode_iteration_ms_by_batch)
    assert fair == (0.5, 0.0, 1.0, 0.0, 0.0, None)
    for bad in ({"slow_slot_rate": 0}, {"slow_slot_rate": 1.01}, {"lifo_share": 1.5}, {"lifo_share": -0.1},
                {"prefill_chunk_factor": 0.9}, {"admit_delay_iterations": -1},
                {"second_prompt_delay_iterations": -0.5}, {"decode_iteration_ms_by_batch": []},
                {"decode_iteration_ms_by_batch": [10, -1]}):
        with pytest.raises(ValueError):
            FakeScript(**bad)


# -- F1 / F2: slow_slot_rate ---------------------------------------------------------------------
@pytest.mark.parametrize("rate", [0.5, 11 / 12, 0.7, 1.0])
def test_slow_slot_emits_floor_n_rate_tokens_in_n_iterations(rate):
    sim = Sim(FakeScript(n_slots=2, decode_iteration_ms=5.0, slow_slots=[1], slow_slot_rate=rate))
    fast, slow = sim.send(0, "fast", 4, 500), sim.send(0, "slow", 4, 500)
    sim.run(until_ms=1500)
    assert (fast.slot, slow.slot) == (0, 1)
    assert fast.n_decoded - 1 == fast.n_decode_iters  # first token from the prefill, then one per iteration
    assert slow.n_decoded - 1 == math.floor(slow.n_decode_iters * rate + 1e-9)
    ratio = fast.n_decode_iters / (slow.n_decoded - 1)
    assert ratio == pytest.approx(1 / rate, rel=0.01)


def test_default_slow_rate_is_every_second_iteration():
    sim = Sim(FakeScript(n_slots=1, decode_iteration_ms=5.0, slow_slots=[0]))
    req = sim.send(0, "r", 4, 6)
    sim.run()
    gaps = [round((b - a) / MS, 6) for a, b in pairwise(req.chunk_ns)]
    assert gaps == [10.0] * 5  # each decode token after two 5 ms iterations


def test_closed_loop_streams_keep_their_slots():
    """F1's premise: a stream's next request takes the slot its last one freed, so a slow slot is a
    slow stream (per-stream rate ratio 1/r)."""
    sim = Sim(FakeScript(n_slots=3, decode_iteration_ms=5.0, slow_slots=[2], slow_slot_rate=11 / 12))
    left = {i: 6 for i in range(3)}

    def again(req, sim):
        stream = int(req.rid[1])
        left[stream] -= 1
        if left[stream]:
            sim.send(sim.now_ms + 1.0, f"s{stream}-{left[stream]}", 16, 40, then=again)

    for i in range(3):
        sim.send(i * 0.5, f"s{i}-x", 16, 40, then=again)
    reqs = sim.run()
    assert len(reqs) == 18
    assert all(r.slot == int(r.rid[1]) for r in reqs.values())


def test_f2_slows_only_the_smallest_size_together():
    sizes = [(16, 8), (32, 16), (64, 32), (128, 64)]
    sim = Sim(FakeScript(**BASE, slow_slots=[3], slow_slot_rate=0.5))
    together = {i: sim.send(k * 1.0, f"t{i}", *sizes[i]) for k, i in enumerate((3, 2, 1, 0))}
    sim.run()
    assert [together[i].slot for i in range(4)] == [3, 2, 1, 0]  # biggest first, lowest free slot
    assert together[0].n_decode_iters == math.ceil((8 - 1) / 0.5)  # 7 decode tokens at half rate
    fair = f2_slowdowns(FakeScript(**BASE), sizes)
    slowed = [f2_slowdowns(FakeScript(**BASE, slow_slots=[3], slow_slot_rate=r), sizes)
              for r in (0.75, 0.5, 0.3)]
    smallest = [fair[0]] + [s[0] for s in slowed]
    assert smallest == sorted(smallest) and smallest[-1] > 1.1 * 4 > smallest[0]  # graded, across 1.1·N
    # alone every size runs in slot 0, unslowed: the others' slowdowns move only by the batch they share
    assert all(s[i] == pytest.approx(fair[i], rel=0.05) for s in slowed for i in (1, 2, 3))


# -- F3: lifo_share -------------------------------------------------------------------------------
def _newest_picks(lifo_share: float, seed: int = 0, waiters: int = 40) -> tuple[int, int, list[str]]:
    """One slot, a long request, then `waiters` short ones queued 1 ms apart: (picks of the newest,
    picks of the oldest) among the releases that had two or more waiting, and the admission order."""
    sim = Sim(FakeScript(n_slots=1, decode_iteration_ms=5.0, lifo_share=lifo_share, lifo_seed=seed))
    sim.send(0, "run", 2, 60)
    for i in range(waiters):
        sim.send(1.0 + i, f"w{i}", 2, 2)
    reqs = sim.run()
    order = [r.rid for r in sorted(reqs.values(), key=lambda r: r.admit_ns)][1:]
    queue, newest, oldest = [f"w{i}" for i in range(waiters)], 0, 0
    for rid in order:
        if len(queue) >= 2:
            newest += rid == queue[-1]
            oldest += rid == queue[0]
        queue.remove(rid)
    return newest, oldest, order


def test_lifo_share_takes_the_newest_waiter_with_its_probability():
    assert _newest_picks(0.0)[:2] == (0, 39)
    assert _newest_picks(1.0)[:2] == (39, 0)
    newest, oldest, order = _newest_picks(0.5)
    assert newest + oldest == 39 and 12 <= newest <= 27  # Binomial(39, 0.5): ±2.4 sd
    assert _newest_picks(0.5)[2] == order  # seeded: the same draws
    assert _newest_picks(0.5, seed=1)[2] != order
    low, high = _newest_picks(0.2)[0], _newest_picks(0.8)[0]
    assert low < newest < high


# -- S1: prefill_chunk_factor ---------------------------------------------------------------------
def _decode_stall(factor: float, k: int = 3) -> tuple[float, float, float]:
    """K decoders, then a 3 × n_batch prompt injected mid-iteration: (decoders' max ITL during its
    prefill, their median ITL before it, its TTFT), ms."""
    sim = Sim(FakeScript(**BASE, prefill_chunk_factor=factor))
    decoders = [sim.send(0, f"d{i}", 32, 200) for i in range(k)]
    injected = sim.send(300.5, "injected", 3 * 256, 4)
    sim.run()
    t0, t1 = injected.arrival_ns, injected.chunk_ns[0]
    during = [(b - a) / MS for d in decoders for a, b in pairwise(d.chunk_ns) if b > t0 and a < t1]
    before = sorted((b - a) / MS for d in decoders for a, b in pairwise(d.chunk_ns) if b <= t0)
    return max(during), before[len(before) // 2], ttft_ms(injected)


@pytest.mark.parametrize("factor", [1.0, 1.25, 1.5, 2.0])
def test_prefill_chunk_factor_stretches_the_decode_stall(factor):
    max_itl, baseline, ttft = _decode_stall(factor)
    assert baseline == pytest.approx(t_ms(3), abs=NS)
    assert max_itl == pytest.approx((math.floor(factor * 256) - 3) * 0.5 + t_ms(3), abs=NS)
    assert ttft <= _decode_stall(1.0)[2] + NS  # the injected prefill takes no longer


def test_prefill_chunk_factor_leaves_a_lone_prefill_alone():
    ttfts = []
    for factor in (1.0, 2.0):
        sim = Sim(FakeScript(**BASE, prefill_chunk_factor=factor))
        solo = sim.send(0, "solo", 3 * 256, 2)
        sim.run()
        ttfts.append(ttft_ms(solo))
    assert ttfts == [pytest.approx(3 * 256 * 0.5)] * 2


# -- S2: admit_delay_iterations -------------------------------------------------------------------
def _probe_ttft(delay: float, at_ms: float, decoder_tokens: int = 200) -> tuple[float, Sim]:
    sim = Sim(FakeScript(**BASE, admit_delay_iterations=delay))
    for i in range(3):
        sim.send(0, f"d{i}", 32, decoder_tokens)
    probe = sim.send(at_ms, "probe", 32, 4)
    sim.run()
    return ttft_ms(probe), sim


@pytest.mark.parametrize("at_ms", [300.5, 303.7])  # two phases within a 9 ms iteration
@pytest.mark.parametrize("delay", [0.5, 1.0, 2.5])
def test_admit_delay_adds_exactly_d_iterations_to_the_probe(delay, at_ms):
    fair, _ = _probe_ttft(0.0, at_ms)
    held, sim = _probe_ttft(delay, at_ms)
    assert held - fair == pytest.approx(delay * t_ms(3), abs=NS)
    assert sim.engine.stats["deferred_total"] == (1 if delay >= 1 else 0)


def test_admit_delay_holds_in_the_queue_and_never_on_an_idle_server():
    sim = Sim(FakeScript(**BASE, admit_delay_iterations=3.0))
    for i in range(2):
        sim.send(0, f"d{i}", 32, 200)
    probe = sim.send(300.5, "probe", 32, 4)
    sim.run(until_ms=300.5 + 2 * t_ms(2))
    assert list(sim.engine.waiting) == [probe] and None in sim.engine.slots  # a free slot, held
    solo = Sim(FakeScript(**BASE, admit_delay_iterations=3.0))
    req = solo.send(0, "solo", 32, 4)
    solo.run()
    assert ttft_ms(req) == pytest.approx(32 * 0.5, abs=NS) and solo.engine.stats["deferred_total"] == 0


def test_admit_delay_releases_a_request_when_the_server_goes_idle():
    ttft, sim = _probe_ttft(50.0, 20.5, decoder_tokens=8)  # the decoders end long before 50 iterations
    assert sim.requests["probe"].n_decoded == 4
    assert ttft < 50 * t_ms(3)


# -- S3: second_prompt_delay_iterations -----------------------------------------------------------
def _pair(delay: float, first_output: int = 16) -> tuple[float, float]:
    sim = Sim(FakeScript(**BASE, second_prompt_delay_iterations=delay))
    first, second = sim.send(0, "first", 256, first_output), sim.send(10.0, "second", 256, 16)
    sim.run()
    return ttft_ms(first), ttft_ms(second)


@pytest.mark.parametrize("delay", [0.5, 1.0, 2.5, 4.0])
def test_second_prompt_delay_adds_exactly_d_lone_iterations(delay):
    first_fair, second_fair = _pair(0.0)
    first, second = _pair(delay)
    assert first == first_fair == pytest.approx(256 * 0.5)
    assert second - second_fair == pytest.approx(delay * t_ms(1), abs=NS)


def test_second_prompt_delay_holds_nobody_when_nothing_else_runs():
    assert _pair(3.0, first_output=1) == _pair(0.0, first_output=1)  # the first ends with its prefill


# -- the plateau ----------------------------------------------------------------------------------
def test_iteration_table_sets_the_decode_ms_per_batch_width():
    engine = Engine(FakeScript(n_slots=8, decode_iteration_ms=99.0, decode_ms_per_busy_slot=9.0,
                               decode_iteration_ms_by_batch=[10.0, 20.0, 25.0]))
    assert [engine.decode_ms(k) for k in range(9)] == [0.0, 10.0, 20.0, 25.0, 25.0, 25.0, 25.0, 25.0, 25.0]


def _throughput(streams: int, rounds: int = 6) -> float:
    """Tokens per virtual second of `streams` closed loops (prompt 128, output 32) on the plateau."""
    sim = Sim(FakeScript(n_slots=8, decode_iteration_ms_by_batch=list(PLATEAU_ITERATION_MS)))
    left = {i: rounds for i in range(streams)}

    def again(req, sim):
        stream = int(req.rid.split("-")[0])
        left[stream] -= 1
        if left[stream]:
            sim.send(sim.now_ms, f"{stream}-{left[stream]}", 128, 32, then=again)

    for i in range(streams):
        sim.send(0, f"{i}-x", 128, 32, then=again)
    reqs = sim.run()
    return sum(r.n_decoded for r in reqs.values()) / (max(r.end_ns for r in reqs.values()) / 1e9)


def test_plateau_is_flat_to_two_then_rises_to_the_slots():
    x = {n: _throughput(n) / _throughput(1) for n in (2, 4, 8)}
    assert x[2] == pytest.approx(1.0, abs=0.005)
    assert 1.33 <= x[4] <= 1.4 and 1.53 <= x[8] <= 1.6, x  # 1.4 and 1.6 less the prefill's share
    assert x[8] / x[4] >= 1.1  # 8 beats 4 by more than the knee's 10 % per doubling


def test_cli_serves_a_script_with_every_graded_knob(tmp_path):
    knobs = {"n_slots": 4, "decode_iteration_ms": 2.0, "slow_slots": [3], "slow_slot_rate": 11 / 12,
             "lifo_share": 0.3, "lifo_seed": 7, "prefill_chunk_factor": 1.5, "admit_delay_iterations": 1.5,
             "second_prompt_delay_iterations": 0.5,
             "decode_iteration_ms_by_batch": list(PLATEAU_ITERATION_MS)}
    script, ready = tmp_path / "s.json", tmp_path / "ready.json"
    script.write_text(json.dumps(knobs))
    proc = subprocess.Popen([sys.executable, str(FAKE_PATH), "--port", "0", "--script", str(script),
                             "--ready-file", str(ready)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        base = json.loads(ready.read_text())["base_url"]
        out = httpx.post(base + "/completion", json={"prompt": "a b c", "n_predict": 3}, timeout=10).json()
        assert out["tokens_predicted"] == 3 and out["timings"]["prompt_n"] == 3
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
