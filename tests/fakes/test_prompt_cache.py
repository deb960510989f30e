"""The fake's per-slot prompt cache (prompt_cache.py): prefix reuse and cache_n, cache_prompt false,
slot choice by prompt similarity or LRU, prefill charged only for the new tokens; on the virtual
clock of `scripted_time.Sim` (exact figures) and over HTTP (every endpoint's final timings)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.fakes.fake_llama_server import FakeLlamaServer
from tests.fakes.fake_script import FakeScript, tokenize
from tests.fakes.prompt_cache import (
    CHAT_MESSAGE_TOKENS,
    CHAT_REPLY_TOKENS,
    CHAT_TEMPLATE_TOKENS,
    LLAMACPP_SLOT_PROMPT_SIMILARITY,
    PromptCache,
    chat_template,
    common_prefix,
)
from tests.fakes.scripted_time import Sim, ttft_ms

P_MS = 1.0  # prefill ms per token of SCRIPT
SCRIPT = dict(n_slots=2, prefill_ms_per_token=P_MS, decode_iteration_ms=10.0)
A = list(range(100, 120))  # 20 tokens
B = list(range(200, 220))


def send(sim: Sim, rid: str, ids: list[int], n_out: int = 1, cache_prompt: bool = True):
    """A request of prompt `ids` arriving now on `sim`'s clock, run to its end."""
    req = sim.send(sim.now_ms, rid, len(ids), n_out)
    req.prompt_ids = ids
    req.params["cache_prompt"] = cache_prompt
    sim.run()
    return req


def test_a_resent_prefix_is_cached_and_only_the_new_tokens_are_prefilled():
    sim = Sim(FakeScript(**SCRIPT))
    first = send(sim, "a1", A)
    again = send(sim, "a2", A + list(range(300, 310)))
    assert (first.cache_n, first.timings()["prompt_n"]) == (0, 20)
    assert ttft_ms(first) == pytest.approx(20 * P_MS)
    t = again.timings()
    assert (t["cache_n"], t["prompt_n"]) == (20, 10) and again.prompt_n == 30
    assert ttft_ms(again) == pytest.approx(10 * P_MS)  # only the 10 new tokens cost prefill
    assert t["prompt_ms"] == pytest.approx(10 * P_MS)
    same = send(sim, "a3", A + list(range(300, 310)))  # the whole prompt held: one token is re-evaluated
    assert (same.cache_n, same.timings()["prompt_n"]) == (29, 1)
    assert ttft_ms(same) == pytest.approx(P_MS)


def test_cache_prompt_false_prefills_everything():
    sim = Sim(FakeScript(**SCRIPT))
    send(sim, "a1", A)
    off = send(sim, "a2", A + [7, 8], cache_prompt=False)
    assert off.cache_n == 0 and off.timings()["prompt_n"] == 22 and ttft_ms(off) == pytest.approx(22 * P_MS)
    on = send(sim, "a3", A + [7, 8, 9])  # the slot now holds a2's prompt: 22 tokens of it
    assert on.cache_n == 22


def test_the_slot_keeps_its_decoded_tokens_but_the_last():
    sim = Sim(FakeScript(**SCRIPT))
    send(sim, "a1", A, n_out=4)
    held = sim.engine.cache.tokens[0]
    assert held[:20] == A and len(held) == 20 + 3


def test_similarity_sends_a_continuation_to_its_own_slot_and_lru_does_not():
    """a → slot 1 (fresh: LRU ties go to the highest index), b → slot 0 (never used); b's continuation:
    by similarity back to slot 0 (cache hit), by LRU (threshold 0) to slot 1, a's (no common prefix)."""
    chosen = {}
    for threshold in (LLAMACPP_SLOT_PROMPT_SIMILARITY, 0.0):
        sim = Sim(FakeScript(**SCRIPT, slot_prompt_similarity=threshold))
        a, b = send(sim, "a", A), send(sim, "b", B)
        b2 = send(sim, "b2", B + [1, 2, 3])
        chosen[threshold] = (a.slot, b.slot, b2.slot, b2.cache_n)
    assert chosen[LLAMACPP_SLOT_PROMPT_SIMILARITY] == (1, 0, 0, 20)
    assert chosen[0.0] == (1, 0, 1, 0)


def test_without_the_knob_a_request_takes_the_lowest_idle_slot():
    sim = Sim(FakeScript(**SCRIPT))
    a, b = send(sim, "a", A), send(sim, "b", B)
    assert (a.slot, b.slot) == (0, 0)
    assert send(sim, "a2", A + [1]).cache_n == 0  # b overwrote a's tokens in slot 0


@pytest.mark.parametrize("ram_tokens", [None, 10_000])
def test_the_host_cache_gives_a_conversation_its_prefix_back_in_another_slot(ram_tokens):
    """The sequence llama.cpp b11549 (xllamacpp, 2 slots, default similarity) was seen to run: a1, b1,
    c1 (c1 evicts a1 from slot 1), then a2 and b2, each 60 tokens resent with 15 new. With
    --cache-ram 8192 the server answered cache_n 60 for both (restored from host memory into the other
    slot), with --cache-ram 0 it answered 0; slots 1, 0, 1, 0, 1 either way."""
    sim = Sim(FakeScript(**SCRIPT, slot_prompt_similarity=LLAMACPP_SLOT_PROMPT_SIMILARITY,
                         cache_ram_tokens=ram_tokens))
    a, b, c = (list(range(k, k + 60)) for k in (1000, 2000, 3000))
    reqs = [send(sim, "a1", a, 4), send(sim, "b1", b, 4), send(sim, "c1", c, 4),
            send(sim, "a2", a + [7, 8, 9] * 5, 4), send(sim, "b2", b + [7, 8, 9] * 5, 4)]
    assert [r.slot for r in reqs] == [1, 0, 1, 0, 1]
    hit = 60 if ram_tokens else 0
    assert [(r.cache_n, r.timings()["prompt_n"]) for r in reqs[3:]] == [(hit, 75 - hit)] * 2
    assert ttft_ms(reqs[3]) == pytest.approx((75 - hit) * P_MS)


def test_the_host_cache_saves_each_sequence_once_and_drops_the_oldest_past_its_size():
    cache = PromptCache(1, 0.0, ram_tokens=10)
    cache.release(0, [1, 2, 3, 4])
    assert cache.take([9], [0]) == 0 and cache.saved == [[1, 2, 3, 4]]
    cache.release(0, [1, 2, 3, 4, 5])  # contains the saved one, which goes
    cache.take([9], [0])
    assert cache.saved == [[1, 2, 3, 4, 5]]
    cache.release(0, [6, 7, 8, 9])
    cache.take([1, 2, 3, 4, 5, 6], [0])  # saves 6..9, restores 1..5 (keep 5/5, sim 5/6)
    assert cache.tokens[0] == [1, 2, 3, 4, 5] and cache.saved == [[6, 7, 8, 9]]
    cache.release(0, [20] * 8)
    cache.take([30], [0])  # 4 + 8 tokens > 10: the oldest goes
    assert cache.saved == [[20] * 8]


def test_choice_needs_a_similarity_above_the_threshold():
    cache = PromptCache(3, 0.5)
    cache.release(0, [1, 2, 3, 4, 5])
    cache.release(1, [1, 2, 9])
    cache.release(2, [1, 2, 3, 9])
    assert cache.choose([1, 2, 3, 4, 5, 6], [0, 1, 2]) == 0  # 5/6
    assert cache.choose([1, 2, 3, 8, 8, 8, 8, 8], [1, 2]) == 1  # 3/8 ≤ 0.5: LRU, slot 1 released first
    assert cache.choose([1, 2, 3, 8], [1, 2]) == 2  # 3/4
    assert cache.choose(None, [1, 2]) == 1  # no tokens known: LRU
    assert PromptCache(3, None).choose([1, 2, 3, 4, 5], [1, 2]) == 1
    assert (cache.reuse(0, [1, 2, 3, 4, 5], True), cache.reuse(0, [1, 2, 3, 4, 5], False)) == (4, 0)
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and common_prefix([], [1]) == 0


def test_the_chat_template_counts_and_shares_its_prefix_between_turns():
    one = [{"role": "user", "content": "the river ran past"}]
    two = [*one, {"role": "assistant", "content": "a b c"}, {"role": "user", "content": "and then"}]
    t1, t2 = tokenize(chat_template(one)), tokenize(chat_template(two))
    assert CHAT_TEMPLATE_TOKENS == CHAT_MESSAGE_TOKENS + CHAT_REPLY_TOKENS
    assert len(t1) == 4 + CHAT_TEMPLATE_TOKENS
    assert len(t2) == 4 + 3 + 2 + 3 * CHAT_MESSAGE_TOKENS + CHAT_REPLY_TOKENS
    assert t2[:len(t1)] == t1  # turn 1's prompt, generation prompt included, starts turn 2


async def test_every_endpoint_reports_cache_n_in_its_final_timings():
    script = FakeScript(n_slots=1, decode_iteration_ms=1.0)
    ids = list(range(50, 80))
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        first = (await c.post("/completion", json={"prompt": ids, "n_predict": 2})).json()
        native = (await c.post("/completion", json={"prompt": ids + [1, 2], "n_predict": 2})).json()
        oai = (await c.post("/v1/completions", json={"prompt": ids + [1, 2, 3], "max_tokens": 2})).json()
        off = (await c.post("/v1/completions", json={"prompt": ids + [1, 2, 3], "max_tokens": 2,
                                                     "cache_prompt": False})).json()
        metrics = (await c.get("/metrics")).text
        logged = [r["cache_n"] for r in srv.schedule()]
    assert first["timings"]["cache_n"] == 0 and first["timings"]["prompt_n"] == 30
    assert native["timings"]["cache_n"] == 30 and native["timings"]["prompt_n"] == 2
    assert native["tokens_evaluated"] == 32
    assert oai["timings"]["cache_n"] == 32 and oai["timings"]["prompt_n"] == 1
    assert oai["usage"]["prompt_tokens"] == 33
    assert oai["usage"]["prompt_tokens_details"]["cached_tokens"] == 32
    assert off["timings"]["cache_n"] == 0 and off["timings"]["prompt_n"] == 33
    assert logged == [0, 30, 32, 0]
    assert "llamacpp:prompt_tokens_cached_total 62" in metrics  # 0 + 30 + 32 + 0
    assert "llamacpp:prompt_tokens_total 66" in metrics  # 30 + 2 + 1 + 33


async def test_a_chat_history_resent_with_its_answer_hits_the_cache_through_the_answer():
    script = FakeScript(n_slots=2, decode_iteration_ms=1.0,
                        slot_prompt_similarity=LLAMACPP_SLOT_PROMPT_SIMILARITY)
    turn1 = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "tell me about rivers"}]
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        r1 = (await c.post("/v1/chat/completions", json={"messages": turn1, "max_tokens": 4})).json()
        answer = r1["choices"][0]["message"]["content"]
        turn2 = [*turn1, {"role": "assistant", "content": answer}, {"role": "user", "content": "and lakes"}]
        r2 = (await c.post("/v1/chat/completions", json={"messages": turn2, "max_tokens": 4,
                                                         "stream": True,
                                                         "stream_options": {"include_usage": True}}))
        events = [ln[6:] for ln in r2.text.splitlines() if ln.startswith("data: ")]
    n1 = r1["usage"]["prompt_tokens"]
    assert n1 == 2 + 4 + 2 * CHAT_MESSAGE_TOKENS + CHAT_REPLY_TOKENS
    assert r1["timings"]["cache_n"] == 0
    final = json.loads(events[-2])  # the usage chunk, before [DONE]
    assert final["timings"]["cache_n"] == n1 + 3  # turn 1's prompt and its decoded answer (4 − 1)
    assert final["usage"]["prompt_tokens"] == n1 + 4 + 2 + 2 * CHAT_MESSAGE_TOKENS
    assert final["timings"]["cache_n"] + final["timings"]["prompt_n"] == final["usage"]["prompt_tokens"]


async def test_slots_show_a_busy_slots_cached_and_processed_prompt_tokens():
    script = FakeScript(n_slots=1, decode_iteration_ms=5.0)
    ids = list(range(50, 80))
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        await c.post("/completion", json={"prompt": ids, "n_predict": 1})
        task = asyncio.create_task(c.post("/completion", json={"prompt": ids + [1, 2], "n_predict": 40}))
        busy: dict = {}
        for _ in range(400):
            busy = (await c.get("/slots")).json()[0]
            if busy["is_processing"] and busy["next_token"][0]["n_decoded"] >= 1:
                break
            await asyncio.sleep(0.005)
        await task
    assert busy["n_prompt_tokens"] == 32 and busy["n_prompt_tokens_cache"] == 30
    assert busy["n_prompt_tokens_processed"] == 2
