"""The chat workload: conversations resend their history in order, seeded, and parse from --workload."""

import pytest

from satbench.cli.lanekeys import LaneValueError, build_lane
from satbench.config.workload import ChatWorkload, LengthDistribution, WorkloadConfig, parse_workload
from satbench.load.loadgen import chains
from satbench.workload.builder import WorkloadBuilder


async def fake_tokenize(text: str, add_special: bool) -> list[int]:
    return ([1] if add_special else []) + [ord(c) + 10 for c in text]  # one token per character


async def fake_detokenize(ids: list[int]) -> str:
    return "".join(chr(i - 10) for i in ids)


def chat(turns: int = 3, think_s: float = 0.0, system: int = 40, **lengths) -> WorkloadConfig:
    return WorkloadConfig(endpoint="chat", chat=ChatWorkload(turns=turns, think_s=think_s),
                          system_prompt_tokens=system, **{"prompt_tokens": 48, "output_tokens": 8, **lengths})


async def built(cfg: WorkloadConfig, nonce: str = "abc", count: int = 5, phase="measured"):
    b = WorkloadBuilder(cfg, fake_tokenize, nonce, fake_detokenize)
    await b.prepare()
    return await b.build("default", 2, 1, phase, count)


async def test_each_turn_resends_the_conversation_so_far_and_a_new_message():
    reqs = await built(chat(turns=3, think_s=1.5))
    assert len(reqs) == 6  # ⌈5 ÷ 3⌉ whole conversations
    assert [(r.conversation, r.turn) for r in reqs] == [(0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3)]
    first, second, third = reqs[:3]
    assert [m.role for m in third.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert second.messages[:2] == first.messages and third.messages[:4] == second.messages
    assert third.messages[-1].content == third.prompt and third.prompt.startswith(f"[{third.request_id}] ")
    assert [r.prompt_tokens for r in reqs[:3]] == [40 + 48, 40 + 48 + 8 + 48, 40 + 2 * (48 + 8) + 48]
    assert all(r.cache_prompt and r.max_tokens == 8 for r in reqs)
    assert [r.think_s for r in reqs[:3]] == [0.0, 1.5, 1.5]
    # every conversation starts with the run's one system prompt, then its own unique message
    assert reqs[3].messages[0] == first.messages[0] and reqs[3].messages[1] != first.messages[1]
    assert first.messages[0].content.startswith("[abc system] ")


async def test_warmup_and_background_are_first_turns_only():
    reqs = await built(chat(turns=4), count=3, phase="warmup")
    assert [(r.conversation, r.turn) for r in reqs] == [(0, 1), (1, 1), (2, 1)]
    assert all(len(r.messages) == 2 for r in reqs)


async def test_the_same_seed_and_nonce_send_the_same_conversations():
    drawn = LengthDistribution(spec="uniform:30-90", kind="uniform", min_tokens=30, max_tokens=90,
                               mean_tokens=60)
    a = await built(chat(prompt_lengths=drawn, seed=7))
    assert a == await built(chat(prompt_lengths=drawn, seed=7))
    other = await built(chat(prompt_lengths=drawn, seed=8))
    assert [r.prompt_tokens for r in other] != [r.prompt_tokens for r in a]
    assert [m.content for m in (await built(chat(), nonce="xyz"))[0].messages] != \
        [m.content for m in (await built(chat()))[0].messages]


async def test_without_a_system_prompt_a_conversation_starts_with_its_user():
    reqs = await built(chat(turns=2, system=0), count=2)
    assert [m.role for m in reqs[1].messages] == ["user", "assistant", "user"]


async def test_the_load_generator_keeps_a_conversation_on_one_chain_in_order():
    reqs = await built(chat(turns=3), count=6)
    grouped = chains(reqs)
    assert [[seq for seq, _ in c] for c in grouped] == [[0, 1, 2], [3, 4, 5]]
    random_prompts = await built(WorkloadConfig(prompt_tokens=48, output_tokens=8), count=3)
    assert [len(c) for c in chains(random_prompts)] == [1, 1, 1]


def test_the_longest_turn_bounds_the_context_a_slot_needs():
    w = chat(turns=4, system=256, prompt_tokens=64, output_tokens=32)
    assert w.prompt_bounds() == (64, 256 + 4 * 64 + 3 * 32 + 9 * 16)
    assert w.kind_text == "chat:4,system=256"
    assert chat(turns=2, think_s=2, system=0).kind_text == "chat:2,think=2"
    assert WorkloadConfig().kind_text == "random"


@pytest.mark.parametrize(("text", "expected"), [
    ("random", None), ("chat:4", {"turns": 4}), ("Chat:2,think=0.5", {"turns": 2, "think_s": 0.5})])
def test_workload_text_parses(text, expected):
    assert parse_workload(text) == expected


@pytest.mark.parametrize(("text", "says"), [
    ("chat", "expected random or chat"), ("chat:x", "whole number"), ("chat:2,wait=1", "think=SECONDS"),
    ("chat:2,think=soon", "number of seconds"), ("trace", "expected random or chat")])
def test_bad_workload_text_is_one_clear_complaint(text, says):
    with pytest.raises(ValueError, match=says):
        parse_workload(text)


def test_the_flag_makes_a_chat_lane_on_the_chat_endpoint():
    lane = build_lane({"workload.chat": "chat:3,think=2", "workload.system_prompt_tokens": 128})
    assert lane.workload.chat == ChatWorkload(turns=3, think_s=2.0) and lane.workload.endpoint == "chat"
    assert build_lane({"workload.chat": "random"}).workload.chat is None
    with pytest.raises(LaneValueError, match="drop the rates"):
        build_lane({"workload.chat": "chat:2", "rates": [1.0]})
    with pytest.raises(LaneValueError, match="chat endpoint"):
        build_lane({"workload.chat": "chat:2", "workload.endpoint": "completions"})
