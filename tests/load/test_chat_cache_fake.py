"""Chat conversations (workload/chat.py) through the real load generator and HTTP client against the
fake llama.cpp server's per-slot prompt cache (tests/fakes/prompt_cache.py, llama.cpp's slot choice
by prompt similarity): a conversation that finds its slot again reuses its whole history, while more
conversations than slots take each other's slots and keep only the prefix they all share (the
system prompt), as the events' `timings.cache_n` show, unless llama-server's host-memory cache
(--cache-ram, on by default there) gives each its history back."""

from __future__ import annotations

from satbench.config.workload import ChatWorkload, WorkloadConfig
from satbench.http.client import CompletionRequest, StreamClient
from satbench.http.endpoint import Endpoint
from satbench.load.loadgen import LevelPlan, run_level
from satbench.records.events import RequestEvent
from satbench.workload.builder import WorkloadBuilder
from tests.builders import ListSink
from tests.fakes.fake_llama_server import FakeLlamaServer
from tests.fakes.fake_script import FakeScript, tokenize
from tests.fakes.prompt_cache import LLAMACPP_SLOT_PROMPT_SIMILARITY, chat_template, common_prefix

SLOTS = 2


async def conversations(n: int, turns: int) -> list[CompletionRequest]:
    """`n` conversations of `turns` turns (a 16-token system prompt, 24-token messages, 6-token
    answers), turn order within each, as the lead's chat workload builds them."""
    cfg = WorkloadConfig(endpoint="chat", chat=ChatWorkload(turns=turns), system_prompt_tokens=16,
                         prompt_tokens=24, output_tokens=6)
    builder = WorkloadBuilder(cfg, None, "abc")
    await builder.prepare()
    return await builder.build("a", n, 1, "measured", n * turns)


async def run(reqs: list[CompletionRequest], streams: int, decode_ms: float,
              ram_tokens: int | None = None) -> dict[tuple[int, int], RequestEvent]:
    """One closed-loop level of `streams` against a fake of SLOTS slots with llama.cpp's slot choice
    (and host-memory cache of `ram_tokens`); its measured events by (conversation, turn)."""
    script = FakeScript(n_slots=SLOTS, decode_iteration_ms=decode_ms, cache_ram_tokens=ram_tokens,
                        slot_prompt_similarity=LLAMACPP_SLOT_PROMPT_SIMILARITY)
    sink = ListSink()
    async with FakeLlamaServer(script) as srv:
        plan = LevelPlan(lane="a", level=streams, repetition=1, warmup=[], measured=reqs)
        end = await run_level(StreamClient(Endpoint.of(srv.base_url), "chat"), plan, sink)
    assert end.status == "complete"
    events = [r for r in sink.records if isinstance(r, RequestEvent)]
    assert all(e.ok and e.timings is not None for e in events) and len(events) == len(reqs)
    for e in events:  # llama.cpp's split: cached + prefilled = the whole templated prompt
        assert e.timings.cache_n is not None and e.timings.prompt_n is not None
        assert e.timings.cache_n + e.timings.prompt_n == e.server_prompt_tokens
    return {(e.conversation, e.turn): e for e in events if e.conversation is not None and e.turn is not None}


def cached(e: RequestEvent) -> int:
    assert e.timings is not None and e.timings.cache_n is not None
    return e.timings.cache_n


async def test_a_conversation_that_keeps_its_slot_reuses_its_whole_history():
    reqs = await conversations(SLOTS, turns=3)
    events = await run(reqs, streams=SLOTS, decode_ms=2.0)
    assert len(events) == 3 * SLOTS
    for c in range(SLOTS):
        assert cached(events[c, 1]) == 0  # a fresh server's slots hold nothing
        for t in (2, 3):
            before = events[c, t - 1].server_prompt_tokens
            assert before is not None and cached(events[c, t]) >= before  # turn t − 1's whole prompt


async def test_more_conversations_than_slots_lose_their_history_but_keep_the_system_prompt():
    """4 conversations on 4 streams, 2 slots, no host-memory cache (llama-server --cache-ram 0): a
    finished turn's slot goes at once to a request already waiting (FIFO), so every returning turn
    finds its slot held by another conversation; llama.cpp's similarity choice still finds a slot
    with the shared system prompt."""
    n = 2 * SLOTS
    reqs = await conversations(n, turns=2)
    firsts = [r for r in reqs if r.turn == 1]
    shared = common_prefix(*(tokenize(chat_template([m.model_dump() for m in r.messages or ()]))
                             for r in firsts[:2]))
    assert shared > 16  # the system message and the template's tokens before the first user message
    events = await run(reqs, streams=n, decode_ms=30.0)
    assert len(events) == 2 * n
    for c in range(n):
        first, second = events[c, 1], events[c, 2]
        assert first.server_prompt_tokens is not None
        assert cached(second) == shared < first.server_prompt_tokens  # turn 1's history is gone
        assert second.timings.prompt_n == second.server_prompt_tokens - shared


async def test_with_the_host_cache_returning_turns_get_their_history_back():
    """The same traffic with llama-server's default host-memory cache: the sequence another
    conversation evicted from a slot was saved, and comes back into whichever slot the turn takes."""
    n = 2 * SLOTS
    events = await run(await conversations(n, turns=2), streams=n, decode_ms=30.0, ram_tokens=100_000)
    for c in range(n):
        before = events[c, 1].server_prompt_tokens
        assert before is not None and cached(events[c, 2]) >= before
