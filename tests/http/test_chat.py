"""The chat endpoint: its request body, its chunk interpreter (odd and damaged chunks included) and
the client against the fake's /v1/chat/completions, counts settled by `usage`."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from satbench.errors import ParseError, UserError
from satbench.http.client import CompletionRequest, StreamClient, build_body
from satbench.http.endpoint import Endpoint
from satbench.http.sse import interpret_openai_chat
from tests.fakes.fake_llama_server import CHAT_TEMPLATE_TOKENS, FakeLlamaServer
from tests.fakes.fake_scheduler import FakeScript


def chat_req(text="[r1] the river ran past", n_out=6, rid="r1", cache=False):
    return CompletionRequest(request_id=rid, prompt=text, prompt_tokens=5, max_tokens=n_out,
                             cache_prompt=cache)


def chunk(delta=None, finish=None, **top):
    choices = [] if delta is None else [{"finish_reason": finish, "index": 0, "delta": delta}]
    return json.dumps({"choices": choices, "object": "chat.completion.chunk", **top}).encode()


def test_the_chat_body_is_one_user_message_asking_for_exactly_max_tokens():
    body = build_body(chat_req(), "chat", "gemma")
    assert body == {"messages": [{"role": "user", "content": "[r1] the river ran past"}], "max_tokens": 6,
                    "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
                    "cache_prompt": False, "model": "gemma"}
    assert "model" not in build_body(chat_req(cache=True), "chat", None)
    assert build_body(chat_req(cache=True), "chat", None)["cache_prompt"] is True


def test_the_completions_bodies_are_unchanged():
    ids = CompletionRequest(request_id="r", prompt=[1, 2], prompt_tokens=2, max_tokens=3)
    assert list(build_body(ids, "openai", "m")) == ["prompt", "max_tokens", "ignore_eos", "stream",
                                                    "stream_options", "cache_prompt", "model"]
    assert build_body(ids, "native", None) == {"prompt": [1, 2], "n_predict": 3, "ignore_eos": True,
                                               "stream": True, "cache_prompt": False}


def test_a_chat_request_with_token_ids_is_refused():
    with pytest.raises(UserError, match="text prompt"):
        build_body(CompletionRequest(request_id="r", prompt=[1, 2], prompt_tokens=2, max_tokens=3), "chat",
                   None)


def test_content_deltas_are_tokens_and_the_role_delta_is_not():
    role = interpret_openai_chat(chunk({"role": "assistant", "content": None}))
    assert role.n_tokens == 0 and not role.final and not role.exact
    assert interpret_openai_chat(chunk({"content": " the"})).n_tokens == 1
    assert interpret_openai_chat(chunk({"reasoning_content": "hmm"})).n_tokens == 1  # a thinking model's
    assert interpret_openai_chat(chunk({"content": ""})).n_tokens == 0
    assert interpret_openai_chat(chunk({})).n_tokens == 0
    assert interpret_openai_chat(chunk({"content": 7})).n_tokens == 0  # not text: no token
    assert interpret_openai_chat(chunk({"role": "assistant"})).n_tokens == 0
    # /v1/completions' `text` is no chat content
    assert interpret_openai_chat(b'{"choices":[{"text":"a","index":0}]}').n_tokens == 0


def test_finish_reason_usage_timings_and_done():
    fin = interpret_openai_chat(chunk({}, "length"))
    assert fin.final and fin.n_tokens == 0 and fin.usage_completion_tokens is None
    usage = interpret_openai_chat(chunk(None, usage={"completion_tokens": 16, "prompt_tokens": 73},
                                        timings={"prompt_n": 73, "prompt_ms": 12.5, "predicted_n": 16}))
    assert usage.final and usage.n_tokens == 0
    assert (usage.usage_completion_tokens, usage.usage_prompt_tokens) == (16, 73)
    assert usage.timings == {"prompt_n": 73, "prompt_ms": 12.5, "predicted_n": 16}
    assert interpret_openai_chat(b"[DONE]").done_marker
    assert interpret_openai_chat(b" [DONE] ").done_marker


def test_odd_chunks_say_nothing_and_damaged_ones_are_parse_errors():
    for odd in (b'{"choices":[]}', b'{"choices":null}', b'{"choices":["x"]}', b'{"choices":[{"delta":"x"}]}',
                b'{"object":"chat.completion.chunk"}', chunk(None, usage="many")):
        upd = interpret_openai_chat(odd)
        assert upd.n_tokens == 0 and not upd.final and upd.usage_completion_tokens is None
    err = interpret_openai_chat(b'{"error":{"code":500,"message":"boom"}}')
    assert err.error == "boom"
    for bad in (b"{", b"[1,2]", b"\xff\xfe", chunk(None, usage={"completion_tokens": -1}),
                chunk(None, usage={"prompt_tokens": "x"})):
        with pytest.raises(ParseError):
            interpret_openai_chat(bad)


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
                        st.sampled_from(["choices", "delta", "content", "role", "reasoning_content",
                                         "finish_reason", "usage", "completion_tokens", "prompt_tokens",
                                         "timings", "error"]), kids, max_size=4),
                    max_leaves=12))
def test_fuzz_chat_shapes_raise_only_parse_error(obj):
    with contextlib.suppress(ParseError):
        interpret_openai_chat(json.dumps(obj).encode())


@pytest.mark.parametrize("llamacpp", [True, False])
async def test_the_client_counts_a_chat_stream_from_usage(llamacpp):
    """The fake streams the role chunk, one content chunk per token (two with tokens_per_chunk=2),
    finish_reason, usage (+ timings on llama.cpp) and [DONE]: TTFT is the first content chunk, the
    output count is usage's, and the prompt count includes the template's tokens."""
    script = FakeScript(n_slots=1, llamacpp=llamacpp, tokens_per_chunk=2, decode_iteration_ms=1.0)
    async with FakeLlamaServer(script) as srv:
        client = StreamClient(Endpoint.of(srv.base_url), "chat", model_name="fake-model")
        out = await client.run(chat_req(n_out=7))
        record = srv.schedule()[0]
    assert out.error_type is None and out.http_status == 200
    assert out.output_tokens == 7 and sum(n for _, n in out.chunks) == 7 and out.token_count_exact
    assert len(out.chunks) == len(record["chunk_ns"]) == 4  # 2 + 2 + 2 + 1: the role chunk is no chunk
    assert out.server_prompt_tokens == 5 + CHAT_TEMPLATE_TOKENS
    assert record["endpoint"] == "/v1/chat/completions"
    assert record["prompt_tokens"] == 5 + CHAT_TEMPLATE_TOKENS
    assert (out.timings is not None) == llamacpp
    if llamacpp:
        assert out.timings["prompt_n"] == 5 + CHAT_TEMPLATE_TOKENS


async def test_a_short_chat_answer_is_a_wrong_token_count():
    async with FakeLlamaServer(FakeScript(n_slots=1, completion_fault="wrong_token_count",
                                          decode_iteration_ms=1.0)) as srv:
        out = await StreamClient(Endpoint.of(srv.base_url), "chat").run(chat_req(n_out=6))
    assert out.error_type == "wrong_token_count" and out.output_tokens == 5
