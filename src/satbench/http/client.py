"""Streaming client: send one completion, stamp every chunk, never raise.

`StreamClient.run()` returns a `StreamOutcome` whatever happens; failures are data
(`error_type`, `error_message`), because a benchmark that loses its failed requests
lies about the server. An answer larger than limits.stream_limit of its request (prompt +
output tokens) is cut there and recorded as `answer_too_large`; one that counts more than
max_tokens + limits.MAX_EXTRA_TOKENS output tokens is cut there as `wrong_token_count`. The bytes travel over
satbench's own HTTP/1.1 transport (transport.py), which stamps chunks as they leave
`recv`; see that module for why.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from satbench.config.limits import MAX_EXTRA_TOKENS, AnswerTooLarge, stream_limit
from satbench.config.schema import Strict
from satbench.errors import ParseError, UserError
from satbench.http.endpoint import Endpoint
from satbench.http.errors import NETWORK_ERRORS, error_body_message
from satbench.http.sse import (
    StreamUpdate,
    interpret_native,
    interpret_openai,
    interpret_openai_chat,
    native_partial_so_far,
)
from satbench.http.transport import HttpResult, HttpStream, ReadBuffer, StreamTimeout, Watchdog, request_bytes

Api = Literal["native", "openai", "chat"]  # /completion, /v1/completions, /v1/chat/completions
Clock = Callable[[], int]
ANSWER_TOO_LARGE = "answer_too_large"  # error type of an answer cut at limits.stream_limit
NO_TEXT = "no_text"  # error type of an answer whose chunks held tool calls, content arrays or a role only
COMPRESSED = "compressed_stream"  # error type of an answer sent with a Content-Encoding


class ChatMessage(Strict):
    """One message of a conversation's history, as /v1/chat/completions takes it."""

    role: Literal["system", "user", "assistant"]
    content: str


class CompletionRequest(Strict):
    """One request as the workload built it; `prompt` is token ids when the server can tokenize
    (text for the chat endpoint, which sends it as one user message). A chat workload's turn carries
    the whole conversation in `messages` (the last one its new user message; `prompt` is then that
    message's text), its `conversation` and 1-based `turn`, and `think_s`, the seconds its user
    waits after the previous turn's answer before sending it."""

    request_id: str
    prompt: str | list[int]
    prompt_tokens: int
    max_tokens: int
    cache_prompt: bool = False
    messages: tuple[ChatMessage, ...] | None = None
    conversation: int | None = None
    turn: int | None = None
    think_s: float = 0.0


@dataclass(slots=True)
class StreamOutcome:
    """Raw timing of one request (all `*_ns` from the client's clock).

    `sent_ns` is when the request was handed to the connected socket, so the client's own
    connect and scheduling delays stay out of TTFT and E2E; they show as
    `sent_ns − targeted_ns` in the event instead.
    """

    sent_ns: int = 0
    headers_ns: int | None = None
    end_ns: int = 0
    chunks: list[tuple[int, int]] = field(default_factory=list)
    output_tokens: int = 0
    token_count_exact: bool = True
    http_status: int | None = None
    slot_id: int | None = None
    timings: dict | None = None
    server_prompt_tokens: int | None = None  # usage.prompt_tokens (OpenAI) / tokens_evaluated (llama.cpp)
    retries: int = 0
    retry_reasons: list[str] = field(default_factory=list)
    finished: bool = False
    saw_final: bool = False  # a chunk said the answer was over (finish_reason, usage, llama.cpp stop)
    # (usage.completion_tokens, chunks then) of the last usage event of an inexact count, not yet spread
    pending_usage: tuple[int, int] | None = None
    error_type: str | None = None
    error_message: str | None = None
    textless: list[str] = field(default_factory=list)  # what chunks held in place of text (textless_kind)
    # the exchange under way (its bytes and SSE payloads so far, for the liveness watchdog); None after
    wire: HttpStream | None = None


def build_body(req: CompletionRequest, api: Api, model_name: str | None) -> dict:
    """Request body asking for exactly `max_tokens` tokens (`ignore_eos`), with the prompt cache as
    the request says; for "chat", the request's `messages` (else its text prompt as one user message),
    which the server's chat template wraps."""
    if api == "chat" and not isinstance(req.prompt, str):
        raise UserError(f"request {req.request_id}: the chat endpoint takes a text prompt, not token ids")
    if api == "native":
        return {
            "prompt": req.prompt,
            "n_predict": req.max_tokens,
            "ignore_eos": True,
            "stream": True,
            "cache_prompt": req.cache_prompt,
        }
    body: dict = {"prompt": req.prompt}
    if api == "chat":
        messages = req.messages or (ChatMessage(role="user", content=str(req.prompt)),)
        body = {"messages": [{"role": m.role, "content": m.content} for m in messages]}
    body.update({
        "max_tokens": req.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "cache_prompt": req.cache_prompt,
    })
    if model_name:
        body["model"] = model_name
    return body


class _Dropped(Exception):
    """Connection closed or refused before any byte of the answer arrived (retry once)."""


class StreamClient:
    """Streams completions to `endpoint` (its headers, its TLS policy) over satbench's own HTTP/1.1
    transport (one connection per request)."""

    def __init__(
        self,
        endpoint: Endpoint,
        api: Api = "native",
        *,
        model_name: str | None = None,
        request_timeout_s: float = 300.0,
        read_timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
        clock: Clock = time.perf_counter_ns,
    ) -> None:
        self.endpoint = endpoint
        self.base_url = endpoint.base_url
        self.api = api
        self.model_name = model_name
        self._url = endpoint.parts
        host = self._url.hostname
        if self._url.scheme not in ("http", "https") or not host:
            raise UserError(f"not an http(s) URL: {self.base_url}")
        self._host = host
        self._port = endpoint.port
        self._ssl = endpoint.ssl_context
        self._headers = endpoint.headers
        self._request_timeout_ns = int(request_timeout_s * 1e9)
        self._read_timeout_ns = int(read_timeout_s * 1e9)
        self._connect_timeout_s = connect_timeout_s
        self._clock = clock
        self._path = {"native": "/completion", "openai": "/v1/completions",
                      "chat": "/v1/chat/completions"}[api]
        self._interpret = {"native": interpret_native, "openai": interpret_openai,
                           "chat": interpret_openai_chat}[api]
        self._connect_gate: asyncio.Lock | None = None
        self._read_buffer = ReadBuffer()  # one for all streams: a client runs on one event loop

    async def __aenter__(self) -> StreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def run(self, req: CompletionRequest, out: StreamOutcome | None = None) -> StreamOutcome:
        """Send `req` and read its stream; one retry if the connection drops before any byte.

        Pass your own (empty) `out` to watch its `chunks` grow while the request streams.
        """
        out = out if out is not None else StreamOutcome()
        body = json.dumps(build_body(req, self.api, self.model_name)).encode()
        for attempt in (0, 1):
            try:
                result = await self._exchange(req, body, out)
            except _Dropped as exc:
                if attempt == 0:
                    out.retries += 1
                    out.retry_reasons.append(str(exc)[:200])
                    continue
                self._fail(out, "connection_dropped", str(exc))
                break
            except StreamTimeout as exc:
                self._fail(out, "timeout", str(exc))
                break
            self._read_result(req, result, out)
            break
        if not out.end_ns:
            out.end_ns = self._clock()
        return out

    async def _exchange(self, req: CompletionRequest, body: bytes, out: StreamOutcome) -> HttpResult:
        loop = asyncio.get_running_loop()
        reader = _PayloadReader(self, out, max_tokens=req.max_tokens)
        proto = HttpStream(self._clock, reader.feed, where=self.base_url + self._path,
                           max_body_bytes=stream_limit(req.prompt_tokens, req.max_tokens),
                           read_buffer=self._read_buffer)
        reader.stop = proto.abort
        headers = {"X-Request-Id": req.request_id, **self._headers}
        out.sent_ns = self._clock()
        if self._connect_gate is None:
            self._connect_gate = asyncio.Lock()
        # One connect at a time: when many streams finish together, their reconnects (~0.1 ms
        # of CPU each) are spread over loop iterations, so chunks arriving meanwhile are read
        # and stamped between them instead of after the whole storm.
        async with self._connect_gate:
            try:
                async with asyncio.timeout(self._connect_timeout_s):  # no task per connect, as wait_for makes
                    await loop.create_connection(lambda: proto, self._host, self._port, ssl=self._ssl,
                                                 server_hostname=self._host if self._ssl else None)
            except NETWORK_ERRORS as exc:
                raise _Dropped(f"cannot connect to {self._host}:{self._port}: "
                               f"{exc.__class__.__name__}: {exc}") from exc
            assert proto.transport is not None
            proto.transport.write(request_bytes(self._url, self._path, body, headers))
            out.sent_ns = self._clock()
        watchdog = Watchdog(loop, proto, out.sent_ns, self._read_timeout_ns, self._request_timeout_ns)
        out.wire = proto
        try:
            result = await proto.done
        finally:
            out.wire = None
            watchdog.cancel()
            if not proto.done.done():  # cancelled (Ctrl-C): do not leave the socket open
                proto.transport.abort()
        if isinstance(result.failure, StreamTimeout):
            # what the head said, if it came
            out.headers_ns, out.http_status = result.headers_ns, result.status
            raise result.failure
        if result.status is None and result.first_byte_ns is None:
            raise _Dropped("connection closed before any byte of the answer arrived")
        out.finished = reader.finished
        return result

    def _read_result(self, req: CompletionRequest, r: HttpResult, out: StreamOutcome) -> None:
        out.headers_ns, out.http_status, out.end_ns = r.headers_ns, r.status, r.end_ns or self._clock()
        settle_usage(out)
        if r.status == 200 and r.content_encoding is not None:  # no Accept-Encoding was sent: not SSE
            self._fail(out, COMPRESSED, f"the answer came compressed (Content-Encoding: "
                                        f"{r.content_encoding[:40]}); satbench asks for none and reads "
                                        "plain SSE")
            return
        if isinstance(r.failure, AnswerTooLarge):
            self._fail(out, ANSWER_TOO_LARGE, str(r.failure))
            return
        if isinstance(r.failure, ParseError):
            self._fail(out, "malformed_stream", str(r.failure))
            return
        if r.status is None:
            self._fail(out, "stream_broken", "connection closed inside the response head")
            return
        if r.status != 200:
            self._fail(out, f"http_{r.status}", error_body_message(r.error_body.decode("utf-8", "replace")))
            return
        if out.error_type is not None:  # set by a payload as it arrived
            return
        if not r.complete:
            why = f"{r.failure.__class__.__name__}: {r.failure}" if r.failure else "closed early"
            self._fail(out, "stream_broken", f"connection lost mid-stream ({why})")
        elif not out.finished and not (self.api != "native" and out.saw_final):
            # an OpenAI-style body that ended cleanly after its final chunk lost nothing: a
            # server that omits `data: [DONE]` is not cut short
            self._fail(out, "truncated_stream", "stream ended without its final event"
                       + (" (no finish_reason, usage or data: [DONE])" if self.api != "native" else ""))
        elif not out.chunks and out.textless:
            self._fail(out, NO_TEXT, f"the answer carried no text (its chunks held {', '.join(out.textless)})"
                       + (f" ({out.output_tokens} tokens by its usage)" if out.output_tokens else "")
                       + ": satbench counts the tokens of text (content or reasoning_content)")
        else:
            self._check_count(req, out)

    def _fail(self, out: StreamOutcome, kind: str, message: str) -> None:
        if not out.end_ns:
            out.end_ns = self._clock()
        out.error_type = kind
        out.error_message = message[:500]

    def _apply(self, upd: StreamUpdate, t_ns: int, out: StreamOutcome) -> bool:
        if upd.error is not None:
            self._fail(out, "server_error_event", upd.error)
            return False
        # llama.cpp's running count (tokens_so_far) covers held-back tokens
        n = upd.n_tokens if upd.tokens_so_far is None else upd.tokens_so_far - out.output_tokens
        add_tokens(out, t_ns, n, upd.exact)
        out.saw_final = out.saw_final or upd.final
        if upd.textless is not None and upd.textless not in out.textless:
            out.textless.append(upd.textless)
        if upd.slot_id is not None:
            out.slot_id = upd.slot_id
        if upd.timings is not None:
            out.timings = upd.timings
        if upd.usage_prompt_tokens is not None:
            out.server_prompt_tokens = upd.usage_prompt_tokens
        if upd.usage_completion_tokens is not None and not upd.exact:
            out.pending_usage = (upd.usage_completion_tokens, len(out.chunks))  # spread when the answer ends
        if self.api == "native":
            return upd.final
        if upd.done_marker:
            settle_usage(out)
        return upd.done_marker

    def _check_count(self, req: CompletionRequest, out: StreamOutcome) -> None:
        if out.token_count_exact and out.output_tokens != req.max_tokens:
            self._fail(
                out,
                "wrong_token_count",
                f"asked for {req.max_tokens} tokens, received {out.output_tokens}",
            )


def add_tokens(out: StreamOutcome, t_ns: int, n: int, exact: bool) -> None:
    """`n` tokens read at `t_ns` (none when `n` ≤ 0) as one chunk; `exact` False: the count is inexact."""
    if n > 0:
        out.chunks.append((t_ns, n))
        out.output_tokens += n
        out.token_count_exact = out.token_count_exact and exact


def settle_usage(out: StreamOutcome) -> None:
    """Once the answer is over: the last `usage` total of an inexact (OpenAI-style) count is spread
    over the chunks that came before it (`spread_over_chunks`, once per answer, not once per usage
    event) and becomes the count; chunks after it add to the count and leave it inexact."""
    if out.pending_usage is None:
        return
    (total, k), out.pending_usage = out.pending_usage, None
    out.chunks[:k] = spread_over_chunks(out.chunks[:k], total)
    later = len(out.chunks) - k
    out.output_tokens = total + sum(n for _, n in out.chunks[k:])
    out.token_count_exact = later == 0


def spread_over_chunks(chunks: list[tuple[int, int]], total: int) -> list[tuple[int, int]]:
    """An OpenAI-style stream says how many tokens it sent only at the end (`usage`), and a server
    may pack several into one text chunk: spread `total` over the chunks, in order, as evenly as
    whole tokens allow, so that the tokens in a window and per gap add up to the real count.
    (Timing within a chunk stays unknown: such levels are flagged token_timing_approximate.)"""
    n = len(chunks)
    if not n or sum(k for _, k in chunks) == total:
        return list(chunks)
    return [(t, (i + 1) * total // n - i * total // n) for i, (t, _) in enumerate(chunks)]


class _TooManyTokens(Exception):
    """The answer counted more than max_tokens + MAX_EXTRA_TOKENS output tokens: reading stopped."""


class _PayloadReader:
    """Interprets each SSE payload the moment it arrives; after an error it ignores the rest.

    With `max_tokens`, an answer whose counted output tokens pass max_tokens + MAX_EXTRA_TOKENS is
    failed as `wrong_token_count` at once (keeping the chunks up to there) and `stop` (the
    exchange's abort) ends the read, so a server that never stops costs bounded memory. A llama.cpp
    partial event (`native_partial_so_far`) adds its tokens without an update: all `_apply` takes of one."""

    def __init__(self, client: StreamClient, out: StreamOutcome, max_tokens: int | None = None) -> None:
        self.client, self.out, self.finished = client, out, False
        self.cap_tokens = None if max_tokens is None else max(0, max_tokens) + MAX_EXTRA_TOKENS
        self.stop: Callable[[BaseException], None] | None = None
        self.so_far = native_partial_so_far if client.api == "native" else None
        out.chunks.clear()
        out.saw_final, out.pending_usage, out.output_tokens, out.token_count_exact = False, None, 0, True

    def feed(self, t_ns: int, payload: bytes) -> None:
        out = self.out
        if out.error_type is not None:
            return
        n_chunks = len(out.chunks)
        if self.so_far is not None and (so_far := self.so_far(payload)) is not None:
            add_tokens(out, t_ns, so_far - out.output_tokens, True)
        else:
            try:
                upd = self.client._interpret(payload)
            except ParseError as exc:
                self.client._fail(out, "malformed_stream", str(exc))
                out.end_ns = t_ns
                return
            self.finished = self.client._apply(upd, t_ns, out) or self.finished
        grew = len(out.chunks) > n_chunks  # the cap is on tokens streamed, not on a usage total
        cap = self.cap_tokens
        if grew and cap is not None and out.output_tokens > cap and out.error_type is None:
            asked = cap - MAX_EXTRA_TOKENS
            self.client._fail(out, "wrong_token_count",
                              f"asked for {asked} tokens, received {out.output_tokens} (more than "
                              f"{asked} + {MAX_EXTRA_TOKENS}); stopped reading the answer there")
            if self.stop is not None:
                self.stop(_TooManyTokens(out.error_message))
        if out.error_type is not None:
            out.end_ns = t_ns
