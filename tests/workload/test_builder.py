"""Prompts have exactly the requested length and a unique prefix per request."""

import pytest

from satbench.config.schema import WorkloadConfig
from satbench.errors import UserError
from satbench.workload.builder import WorkloadBuilder


async def fake_tokenize(text: str, add_special: bool) -> list[int]:
    ids = [ord(c) + 10 for c in text]  # one token per character
    return ([1] if add_special else []) + ids


async def test_token_prompts_are_exact_unique_and_uncached():
    b = WorkloadBuilder(WorkloadConfig(prompt_tokens=64, output_tokens=16), fake_tokenize, "abc")
    await b.prepare()
    reqs = await b.build("default", 4, 1, "measured", 20)
    assert all(len(r.prompt) == 64 and r.prompt_tokens == 64 and r.max_tokens == 16 for r in reqs)
    assert all(r.prompt[0] == 1 for r in reqs)  # BOS from the prefix
    assert len({tuple(r.prompt[:24]) for r in reqs}) == 20  # unique prefixes
    assert not any(r.cache_prompt for r in reqs)
    assert len({r.request_id for r in reqs}) == 20


async def test_shared_prefix_mode_repeats_the_prompt_and_allows_the_cache():
    b = WorkloadBuilder(WorkloadConfig(prompt_tokens=32, output_tokens=8, shared_prefix=True), fake_tokenize,
                        "n")
    await b.prepare()
    reqs = await b.build("default", 2, 1, "measured", 3)
    assert len({tuple(r.prompt) for r in reqs}) == 1 and all(r.cache_prompt for r in reqs)


async def test_prompt_too_short_for_the_prefix_is_a_user_error():
    b = WorkloadBuilder(WorkloadConfig(prompt_tokens=16, output_tokens=8), fake_tokenize, "x" * 40)
    await b.prepare()
    with pytest.raises(UserError, match="too small"):
        await b.build("default", 1, 1, "measured", 1)


async def test_a_prompt_that_fits_level_1_but_not_the_runs_longest_id_is_refused_before_anything_runs():
    """The id grows with level and sequence number: '[abc-default-n1-r1-m0] ' is 23 characters
    (+ BOS), the run's longest ('[abc-default-n64-r3-b999999] ', a six-digit background seq) 29.
    A 28-token prompt fits the first requests and would have failed the run midway; it is
    refused up front."""
    b = WorkloadBuilder(WorkloadConfig(prompt_tokens=28, output_tokens=8), fake_tokenize, "abc")
    await b.prepare()
    assert len(await b.build("default", 1, 1, "measured", 1)) == 1  # level 1 alone would start
    with pytest.raises(UserError, match=r"up to 30 tokens in this run\); use at least 38"):
        await b.check_prefix_fits("default", 64, 3)
    fits = WorkloadBuilder(WorkloadConfig(prompt_tokens=31, output_tokens=8), fake_tokenize, "abc")
    await fits.prepare()
    await fits.check_prefix_fits("default", 64, 3)
    longest = await fits.one(fits.request_id("default", 64, 3, "background", 999_999), 31, 8)
    assert len(longest.prompt) == 31


async def test_text_prompts_without_a_tokenizer():
    b = WorkloadBuilder(WorkloadConfig(prompt_tokens=50, output_tokens=8), None, "n")
    await b.prepare()
    (r,) = await b.build("default", 1, 1, "warmup", 1)
    assert isinstance(r.prompt, str) and len(r.prompt.split()) == 50 and not b.exact_prompt_length


async def fake_detokenize(ids: list[int]) -> str:
    return "".join(chr(i - 10) for i in ids)


async def test_chat_prompts_are_text_of_about_the_requested_tokens_with_the_unique_prefix():
    calls: list[int] = []

    async def detokenize(ids: list[int]) -> str:
        calls.append(len(ids))
        return await fake_detokenize(ids)

    cfg = WorkloadConfig(prompt_tokens=64, output_tokens=16, endpoint="chat")
    b = WorkloadBuilder(cfg, fake_tokenize, "abc", detokenize)
    await b.prepare()
    reqs = await b.build("default", 4, 1, "measured", 12)
    assert all(isinstance(r.prompt, str) and r.prompt_tokens == 64 and r.max_tokens == 16 for r in reqs)
    assert all(r.prompt.startswith(f"[{r.request_id}] ") for r in reqs)  # unique, as with token ids
    assert [len(await fake_tokenize(r.prompt, False)) for r in reqs] == [64] * 12  # no BOS: the template's
    assert len(set(calls)) == len(calls) < 12  # one /detokenize per filler length
    assert not any(r.cache_prompt for r in reqs)
    derived = b.derive(WorkloadConfig(prompt_tokens=40, output_tokens=4, endpoint="chat"), "abc")
    await derived.prepare()
    assert isinstance((await derived.one("x", 40, 4)).prompt, str)


async def test_chat_prompts_without_a_tokenizer_are_words_as_for_completions():
    chat = WorkloadBuilder(WorkloadConfig(prompt_tokens=50, output_tokens=8, endpoint="chat"), None, "n")
    plain = WorkloadBuilder(WorkloadConfig(prompt_tokens=50, output_tokens=8), None, "n")
    assert (await chat.one("r", 50, 8)).prompt == (await plain.one("r", 50, 8)).prompt


async def test_a_chat_prompt_too_short_for_its_prefix_is_refused_or_grown():
    cfg = WorkloadConfig(prompt_tokens=8, output_tokens=4, endpoint="chat")
    b = WorkloadBuilder(cfg, fake_tokenize, "abc", fake_detokenize)
    await b.prepare()
    with pytest.raises(UserError, match="too small for the unique request prefix"):
        await b.one("a-long-request-id", 8, 4)
    grown = await b.one("a-long-request-id", 8, 4, grow=True)
    assert grown.prompt_tokens == len("[a-long-request-id] ") + 8
