"""Streaming HTTP client: send one completion, stamp every chunk, never raise.

`StreamClient.run()` returns a `StreamOutcome` whatever happens; failures are data
(`error_type`, `error_message`), because a benchmark that loses its failed requests
lies about the server. aiohttp was chosen after measuring (see benchmarks/client_choice.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Callable, Literal

import aiohttp

from satbench.config import Strict
from satbench.errors import ParseError
from satbench.sse import SseSplitter, StreamUpdate, interpret_native, interpret_openai

Api = Literal["native", "openai"]
Clock = Callable[[], int]


class CompletionRequest(Strict):
    """One request as the workload built it; `prompt` is token ids when the server can tokenize."""

    request_id: str
    prompt: str | list[int]
    prompt_tokens: int
    max_tokens: int
    cache_prompt: bool = False


@dataclass(slots=True)
class StreamOutcome:
    """Raw timing of one request (all `*_ns` from the client's clock)."""

    sent_ns: int = 0
    headers_ns: int | None = None
    end_ns: int = 0
    chunks: list[tuple[int, int]] = field(default_factory=list)
    output_tokens: int = 0
    token_count_exact: bool = True
    http_status: int | None = None
    slot_id: int | None = None
    timings: dict | None = None
    retries: int = 0
    error_type: str | None = None
    error_message: str | None = None


def build_body(req: CompletionRequest, api: Api, model_name: str | None) -> dict:
    """Request body asking for exactly `max_tokens` tokens (`ignore_eos`) and no cache reuse."""
    if api == "native":
        return {
            "prompt": req.prompt,
            "n_predict": req.max_tokens,
            "ignore_eos": True,
            "stream": True,
            "cache_prompt": req.cache_prompt,
        }
    body = {
        "prompt": req.prompt,
        "max_tokens": req.max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "cache_prompt": req.cache_prompt,
    }
    if model_name:
        body["model"] = model_name
    return body


class _Dropped(Exception):
    """Connection closed before any byte of the answer arrived (retry once)."""


class StreamClient:
    """One aiohttp session shared by every stream of a run."""

    def __init__(
        self,
        base_url: str,
        api: Api = "native",
        *,
        model_name: str | None = None,
        headers: dict[str, str] | None = None,
        request_timeout_s: float = 300.0,
        read_timeout_s: float = 60.0,
        verify_tls: bool = True,
        clock: Clock = time.perf_counter_ns,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api = api
        self.model_name = model_name
        self._headers = dict(headers or {})
        self._timeout = aiohttp.ClientTimeout(
            total=request_timeout_s, sock_connect=10.0, sock_read=read_timeout_s
        )
        self._verify_tls = verify_tls
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        path = "/completion" if api == "native" else "/v1/completions"
        self._url = self.base_url + path
        self._interpret = interpret_native if api == "native" else interpret_openai

    async def __aenter__(self) -> StreamClient:
        # One connection per request: llama.cpp's server closes a connection after a streamed
        # answer, and reusing it fails with "Can not write request body" on every second request
        # (measured: 8 of 16). A loopback connect costs ~0.1 ms; a broken reuse costs a request.
        connector = aiohttp.TCPConnector(
            limit=0, force_close=True, ssl=None if self._verify_tls else False
        )
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=self._timeout, headers=self._headers
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def run(self, req: CompletionRequest) -> StreamOutcome:
        """Send `req` and read its stream; one retry if the connection drops before any byte."""
        out = StreamOutcome()
        body = json.dumps(build_body(req, self.api, self.model_name)).encode()
        for attempt in (0, 1):
            out.sent_ns = self._clock()
            try:
                await self._attempt(req, body, out)
                break
            except _Dropped as exc:
                if attempt == 0:
                    out.retries += 1
                    continue
                self._fail(out, "connection_dropped", str(exc.__cause__ or exc))
            except asyncio.TimeoutError:
                self._fail(out, "timeout", "no answer within the request or read timeout")
            except ParseError as exc:
                self._fail(out, "malformed_stream", str(exc))
            except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError) as exc:
                self._fail(out, "stream_broken", str(exc) or exc.__class__.__name__)
            except aiohttp.ClientError as exc:
                self._fail(out, "client_error", f"{exc.__class__.__name__}: {exc}")
            except OSError as exc:
                self._fail(out, "os_error", f"{exc.__class__.__name__}: {exc}")
            break
        if not out.end_ns:
            out.end_ns = self._clock()
        if out.error_type is None:
            self._check_count(req, out)
        return out

    def _fail(self, out: StreamOutcome, kind: str, message: str) -> None:
        if not out.end_ns:
            out.end_ns = self._clock()
        out.error_type = kind
        out.error_message = message[:500]

    async def _attempt(self, req: CompletionRequest, body: bytes, out: StreamOutcome) -> None:
        assert self._session is not None, "StreamClient used outside 'async with'"
        headers = {"Content-Type": "application/json", "X-Request-Id": req.request_id}
        try:
            resp_cm = self._session.post(self._url, data=body, headers=headers)
            resp = await resp_cm.__aenter__()
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            # refused, reset or closed before the answer's first byte (ClientConnectorError and
            # "Can not write request body" are both ClientOSError)
            raise _Dropped("connection dropped before any byte arrived") from exc
        try:
            out.headers_ns = self._clock()
            out.http_status = resp.status
            if resp.status != 200:
                text = (await resp.content.read(4096)).decode("utf-8", "replace")
                self._fail(out, f"http_{resp.status}", _error_message(text))
                return
            await self._read_stream(resp, out)
        finally:
            await resp_cm.__aexit__(None, None, None)

    async def _read_stream(self, resp: aiohttp.ClientResponse, out: StreamOutcome) -> None:
        splitter = SseSplitter()
        clock, interpret, chunks = self._clock, self._interpret, out.chunks
        finished = False
        async for data in resp.content.iter_any():
            t_ns = clock()
            for payload in splitter.feed(data):
                finished = self._apply(interpret(payload), t_ns, out) or finished
                if out.error_type is not None:
                    return
        for payload in splitter.finish():
            finished = self._apply(interpret(payload), clock(), out) or finished
        out.end_ns = clock()
        if out.error_type is None and not finished:
            self._fail(out, "truncated_stream", "stream ended without its final event")

    def _apply(self, upd: StreamUpdate, t_ns: int, out: StreamOutcome) -> bool:
        if upd.error is not None:
            self._fail(out, "server_error_event", upd.error)
            return False
        if upd.n_tokens:
            out.chunks.append((t_ns, upd.n_tokens))
            out.output_tokens += upd.n_tokens
            out.token_count_exact = out.token_count_exact and upd.exact
        if upd.slot_id is not None:
            out.slot_id = upd.slot_id
        if upd.timings is not None:
            out.timings = upd.timings
        if upd.usage_completion_tokens is not None and not upd.exact:
            out.output_tokens = upd.usage_completion_tokens
            out.token_count_exact = True
        if self.api == "native":
            return upd.final
        return upd.done_marker

    def _check_count(self, req: CompletionRequest, out: StreamOutcome) -> None:
        if out.token_count_exact and out.output_tokens != req.max_tokens:
            self._fail(
                out,
                "wrong_token_count",
                f"asked for {req.max_tokens} tokens, received {out.output_tokens}",
            )


def _error_message(text: str) -> str:
    """The `error.message` of a JSON error body, else the body itself (first line)."""
    try:
        obj = json.loads(text)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    except ValueError:
        pass
    return text.strip().splitlines()[0][:300] if text.strip() else "(empty body)"
