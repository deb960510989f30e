"""A fake llama.cpp server: real HTTP/1.1 on 127.0.0.1, scripted timing (see fake_scheduler).

Raw asyncio Protocol (no web framework) so one core streams ~20k chunks/s. Wire format as
llama-server (cpp-httplib): sorted headers, ``Server: llama.cpp``, ``Keep-Alive: timeout=5,
max=100`` and ``Connection: close`` on the 100th response of a connection, idle connections
closed after 5 s, SSE in chunked transfer encoding with the status line sent together with
the first token (llama.cpp answers errors of a stream as plain HTTP errors, PR 16486).

    async with FakeLlamaServer(FakeScript(n_slots=2)) as srv:
        srv.base_url; srv.schedule(); srv.stats()

CLI: ``python tests/fakes/fake_llama_server.py --port 0 --script s.json --ready-file r.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import sys
import time
from collections import deque
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

try:
    from .fake_scheduler import (
        VOCAB,
        Engine,
        FakeRequest,
        FakeScript,
        models_json,
        props_json,
        tokenize,
        usage_json,
    )
    from .prompt_cache import CHAT_TEMPLATE_TOKENS, chat_template
except ImportError:  # run as a script
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fake_scheduler import (
        VOCAB,
        Engine,
        FakeRequest,
        FakeScript,
        models_json,
        props_json,
        tokenize,
        usage_json,
    )
    from prompt_cache import CHAT_TEMPLATE_TOKENS, chat_template  # type: ignore[no-redef]

__all__ = ["CHAT_TEMPLATE_TOKENS", "FakeLlamaServer", "FakeScript", "main"]

_perf_ns = time.perf_counter_ns
_REASON = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 500: "Internal Server Error",
           501: "Not Implemented", 503: "Service Unavailable"}
_JSON = "application/json; charset=utf-8"
_ERR_TYPE = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
             500: "server_error", 501: "not_supported_error", 503: "unavailable_error"}


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class _HttpError(Exception):
    def __init__(self, code: int, message: str, type_: str | None = None, **extra):
        super().__init__(message)
        self.body = {"error": {"code": code, "message": message, "type": type_ or _ERR_TYPE[code], **extra}}
        self.code = code


class _Conn(asyncio.Protocol):
    """One client connection; serves one request at a time (keep-alive, no pipelining overlap)."""

    def __init__(self, srv: FakeLlamaServer):
        self.srv, self.s = srv, srv.script
        self.t: asyncio.Transport | None = None
        self.buf = bytearray()
        self.req: FakeRequest | None = None
        self.busy = False
        self.n_served = 0
        self.close_after = False
        self.queued = False
        self.last_active = time.monotonic()

    # -- transport callbacks ----------------------------------------------
    def connection_made(self, transport):
        self.t = transport
        self.srv._conns.add(self)
        self.srv._n_connections += 1
        if self.s.http_threads is not None and len(self.srv._conns) > self.s.http_threads:
            self.queued = True  # no free HTTP thread: the request is not even read
            transport.pause_reading()
            self.srv._backlog.append(self)

    def connection_lost(self, exc):
        self.srv._conns.discard(self)
        if self.queued:
            self.srv._backlog.remove(self)
        elif self.srv._backlog:
            nxt = self.srv._backlog.popleft()
            nxt.queued = False
            nxt.last_active = time.monotonic()
            nxt.t.resume_reading()
        if self.req is not None and not self.req.done:  # client went away: llama.cpp cancels the task
            self.srv.engine.cancel(self.req)
            self._finish(self.req, "cancelled")
        self.t = None

    def data_received(self, data):
        self.buf += data
        self.last_active = time.monotonic()
        if not self.busy:
            self._parse()

    # -- request parsing ----------------------------------------------------
    def _parse(self):
        while not self.busy and self.t is not None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            try:
                method, target, version = lines[0].split(" ", 2)
            except ValueError:
                self.t.close()
                return
            headers = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            try:
                n = int(headers.get("content-length") or 0)
            except ValueError:
                self.t.close()
                return
            if len(self.buf) < end + 4 + n:
                return
            body = bytes(self.buf[end + 4:end + 4 + n])
            del self.buf[:end + 4 + n]
            arrival = _perf_ns()
            self.busy = True
            self.n_served += 1
            conn_hdr = headers.get("connection", "").lower()
            self.close_after = (self.n_served >= self.s.keep_alive_max or conn_hdr == "close"
                                or (version == "HTTP/1.0" and conn_hdr != "keep-alive"))
            try:
                self.srv._dispatch(self, method, target, headers, body, arrival)
            except _HttpError as e:
                self.respond(e.code, _dumps(e.body))
                if method == "POST" and "completion" in target:  # errored requests are data
                    self.srv._record_error(headers, arrival, e.code)

    def _head(self, status: int, ctype: str, length: int | None) -> bytes:
        h = [f"HTTP/1.1 {status} {_REASON[status]}"]
        if self.s.llamacpp:
            h.append("Access-Control-Allow-Origin: ")
        h.append(f"Content-Length: {length}" if length is not None else None)
        h.append(f"Content-Type: {ctype}")
        h.append("Connection: close" if self.close_after
                 else f"Keep-Alive: timeout={self.s.keep_alive_timeout_s:g}, max={self.s.keep_alive_max}")
        h.append("Server: llama.cpp" if self.s.llamacpp else "Server: fake-openai")
        if length is None:
            h.append("Transfer-Encoding: chunked")
        return ("\r\n".join(x for x in h if x) + "\r\n\r\n").encode()

    def respond(self, status: int, body: bytes, ctype: str = _JSON):
        if self.t is not None:
            self.t.write(self._head(status, ctype, len(body)) + body)
        self._done()

    def _done(self):
        self.busy = False
        self.req = None
        self.last_active = time.monotonic()
        if self.t is None:
            return
        if self.close_after:
            self.t.close()
        elif self.buf:
            asyncio.get_running_loop().call_soon(self._parse)

    # -- completion streaming (called by the engine) ------------------------
    def begin_stream(self, req: FakeRequest):
        self.t.write(self._head(200, "text/event-stream", None))
        req.headers_ns = _perf_ns()

    def tokens(self, req: FakeRequest, ids: list[int], done: bool, deadline_ns: int):
        x = req.extra
        text = "".join(VOCAB[i] for i in ids)
        if not x["stream"]:
            x["text"].append(text)
            if done:
                self._finish(req, "ok")
                self.respond(200, _dumps(self.srv._final(req, "".join(x["text"]), x["oai"], False)))
            return
        if self._inject(req, ids, done):
            return
        if x["oai"]:
            ev = f'data: {x["pre"]}{text}{x["post"]}\n\n'
            if x.get("chat") and req.n_decoded == len(ids):  # llama.cpp opens with the role, no content
                ev = f'data: {x["role"]}\n\n{ev}'
        else:
            ev = (f'data: {{"index":0,"content":"{text}","tokens":[{",".join(map(str, ids))}],'
                  f'"stop":false,"id_slot":-1,"tokens_predicted":{req.n_decoded},'
                  f'"tokens_evaluated":{req.prompt_n}}}\n\n')
        out = f"{len(ev):x}\r\n{ev}\r\n"
        if done:
            for obj in [] if x.get("skip_final") else self.srv._final_events(req):
                ev = f"data: {obj if isinstance(obj, str) else json.dumps(obj, separators=(',', ':'))}\n\n"
                out += f"{len(ev):x}\r\n{ev}\r\n"
            out += "0\r\n\r\n"
        data = out.encode()
        if self.t is None:
            return
        if req.headers_ns == 0:
            data = self._head(200, "text/event-stream", None) + data
        self.t.write(data)
        now = _perf_ns()
        if req.headers_ns == 0:
            req.headers_ns = now
        req.chunk_ns.append(now)
        req.chunk_deadline_ns.append(deadline_ns)
        req.late_ns_max = max(req.late_ns_max, now - deadline_ns)
        if done:
            self._finish(req, "ok")
            self._done()

    def _finish(self, req: FakeRequest, status: str):
        req.end_ns = _perf_ns()
        self.srv._record(req, req.extra.get("fault_status") or status)  # a faulted request is never "ok"

    def _inject(self, req: FakeRequest, ids: list[int], done: bool) -> bool:
        """The script's mid-stream fault for this token event, if due; True = the event is handled."""
        x, f = req.extra, req.extra.get("fault")
        if f in (None, "wrong_token_count"):
            return False
        if f != "no_final_event" and len(req.chunk_ns) < self.s.fault_after_tokens:
            return False
        if f == "no_final_event":
            if not done:
                return False
            x["skip_final"] = True  # the last tokens go out below, without the stop event
            self.close_after = True
            return False
        bad = {"bad_chunk": b"zz\r\nnot a chunk\r\n",
               "invalid_json": b'data: {"content":" cut","tokens":[10\n\n',
               "malformed_sse": b"data: [1,2,3]\n\n",
               "error_event": b'data: {"error":{"code":500,"message":"fake: the model crashed mid-stream",'
                              b'"type":"server_error"}}\n\n'}.get(f)
        if bad is not None and f != "bad_chunk":
            bad = f"{len(bad):x}\r\n".encode() + bad + b"\r\n0\r\n\r\n"
        self.srv.engine.cancel(req)  # llama.cpp stops the task; nothing more is sent for it
        self._finish(req, "fault")
        req.done = True
        if self.t is not None:  # the status line went out with the first token event
            if bad is not None:
                self.t.write(bad)
            self.close_after = True
            if f == "drop":
                self.t.abort()
        self._done()
        return True


def peak_in_flight(schedule: list[dict]) -> int:
    """The most requests the fake held at once, from its schedule (arrival to end of each)."""
    edges = sorted([(r["arrival_ns"], 1) for r in schedule] + [(r["end_ns"], -1) for r in schedule])
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


class FakeLlamaServer:
    """``async with FakeLlamaServer(script) as srv`` — a listening fake; see module doc."""

    def __init__(self, script: FakeScript | None = None, host: str = "127.0.0.1", port: int = 0):
        self.script = script or FakeScript()
        self.host, self.port = host, port
        self.engine = Engine(self.script)
        self.base_url = ""
        self._conns: set[_Conn] = set()
        self._backlog: deque[_Conn] = deque()
        self._n_connections = 0
        self._n_completions = 0  # completion requests so far (the fault knobs count them)
        self.stalling = False  # FakeScript.stall in force (SIGUSR1 or stall_from_completion)
        # path → requests (api_key)
        self._auth: dict[str, dict[str, int]] = {"authorized": {}, "refused": {}}
        self._records: list[dict] = []
        self._words: dict[int, str] = {}  # token id → the word /tokenize made it from (for /detokenize)
        self._log = None
        self._server: asyncio.AbstractServer | None = None
        self._sweeper: asyncio.Task | None = None
        self._stalls: set[asyncio.Future] = set()  # the running `_stall` writers

    async def __aenter__(self) -> FakeLlamaServer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.script.schedule_log is not None:
            self._log = open(self.script.schedule_log, "a", encoding="utf-8")
            self.engine.before_death = self._log.flush
        tls = None
        if self.script.tls_cert is not None:
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.load_cert_chain(self.script.tls_cert, self.script.tls_key)
        self._server = await loop.create_server(lambda: _Conn(self), self.host, self.port, backlog=2048,
                                                ssl=tls)
        self.port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"{'https' if tls else 'http'}://{self.host}:{self.port}"
        self._sweeper = asyncio.create_task(self._sweep())

    async def stop(self) -> None:
        self.engine.stop()
        if self._sweeper:
            self._sweeper.cancel()
        if self._server:
            self._server.close()
        for c in list(self._conns):
            if c.t is not None:
                c.t.abort()
        if self._server:
            await self._server.wait_closed()
        await asyncio.sleep(0)
        if self._log:
            self._log.close()
            self._log = None

    def schedule(self) -> list[dict]:
        """One record per finished request (same fields as the schedule log lines)."""
        return list(self._records)

    def stats(self) -> dict:
        """Engine health: iterations, chunks, overruns (ticks re-based because the fake fell behind),
        late_ns_max (worst tick wake-up), deferred_total, connections (accepted so far), auth (with
        api_key: requests per path that carried the key / were refused)."""
        return {**self.engine.stats, "connections": self._n_connections, "auth": self._auth}

    async def _sweep(self):
        while True:  # cpp-httplib closes keep-alive connections idle for keep_alive_timeout
            await asyncio.sleep(0.25)
            limit = time.monotonic() - self.script.keep_alive_timeout_s
            for c in list(self._conns):
                if not c.busy and not c.queued and c.last_active < limit and c.t is not None:
                    c.t.close()
            if self._log:
                self._log.flush()

    # -- records --------------------------------------------------------
    def _record(self, req: FakeRequest, status: str):
        rec = {"id": req.rid, "task_id": req.task_id, "slot": req.slot, "status": status,
               "endpoint": req.extra.get("endpoint"), "prompt_tokens": req.prompt_n, "cache_n": req.cache_n,
               "n_predict": req.n_predict, "n_decoded": req.n_decoded, "truncated": req.truncated,
               "arrival_ns": req.arrival_ns, "admit_ns": req.admit_ns, "prompt_start_ns": req.prompt_start_ns,
               "headers_ns": req.headers_ns, "chunk_ns": req.chunk_ns,
               "chunk_deadline_ns": req.chunk_deadline_ns, "end_ns": req.end_ns,
               "late_ns_max": req.late_ns_max}
        if req.gen_start_ns:
            t = req.timings()
            rec.update(prompt_ms=t["prompt_ms"], predicted_ms=t["predicted_ms"])
        self._write(rec)

    def _record_error(self, headers: dict, arrival: int, code: int):
        self._write({"id": headers.get("x-request-id"), "status": f"http_{code}", "arrival_ns": arrival,
                     "end_ns": _perf_ns(), "chunk_ns": []})

    def _write(self, rec: dict):
        self._records.append(rec)
        if self._log:
            self._log.write(json.dumps(rec, separators=(",", ":")) + "\n")

    # -- routing --------------------------------------------------------
    def _dispatch(self, conn: _Conn, method: str, target: str, headers: dict, body: bytes, arrival: int):
        s, url = self.script, urlsplit(target)
        path, query = url.path, parse_qs(url.query)
        route = (method, path)
        if route in (("GET", "/health"), ("GET", "/v1/health")):
            return conn.respond(200, b'{"status":"ok"}')
        if s.api_key is not None:  # llama-server --api-key: everything else needs the key
            ok = headers.get("authorization") == f"Bearer {s.api_key}"
            counts = self._auth["authorized" if ok else "refused"]
            counts[path] = counts.get(path, 0) + 1
            if not ok:
                raise _HttpError(401, "Invalid API Key")
        if route in (("GET", "/v1/models"), ("GET", "/models")):
            return conn.respond(200, _dumps(models_json(s)))
        if route in (("POST", "/v1/completions"), ("POST", "/completions")):
            return self._completion(conn, headers, body, arrival, oai=True)
        if route in (("POST", "/v1/chat/completions"), ("POST", "/chat/completions")):
            return self._completion(conn, headers, body, arrival, oai=True, chat=True)
        if not s.llamacpp:
            raise _HttpError(404, "File Not Found")
        if route == ("POST", "/completion"):
            return self._completion(conn, headers, body, arrival, oai=False)
        if route == ("GET", "/props"):
            return conn.respond(200, _dumps(props_json(s)))
        if route == ("POST", "/tokenize"):
            text = str(self._json(body).get("content", ""))
            for word in text.split():  # remembered for /detokenize
                self._words.update((i, word) for i in tokenize(word, s.tokenize_chars_per_token))
            return conn.respond(200, _dumps({"tokens": tokenize(text, s.tokenize_chars_per_token)}))
        if route == ("POST", "/detokenize"):
            ids = self._json(body).get("tokens", [])
            words = [VOCAB[i].strip() if i in VOCAB else self._words.get(i, "?") for i in ids
                     if isinstance(i, int)]
            return conn.respond(200, _dumps({"content": " ".join(words)}))
        if route == ("GET", "/slots"):
            if not s.endpoint_slots:
                raise _HttpError(501, "This server does not support slots endpoint. Start it with `--slots`")
            if query.get("fail_on_no_slot", ["0"])[0] == "1" and self.engine.n_processing == s.n_slots:
                raise _HttpError(503, "no slot available")
            if s.slots_fail:
                raise _HttpError(500, "fake: /slots failed")
            return self._later(s.slots_delay_s, lambda: conn.respond(200, _dumps(self.engine.slots_json())))
        if route == ("GET", "/metrics"):
            if not s.endpoint_metrics:
                raise _HttpError(501, "This server does not support metrics endpoint. "
                                      "Start it with `--metrics`")
            if s.metrics_fail:
                raise _HttpError(500, "fake: /metrics failed")
            return self._later(s.metrics_delay_s, lambda: conn.respond(
                200, self.engine.metrics_text().encode(), "text/plain; version=0.0.4"))
        raise _HttpError(404, "File Not Found")

    @staticmethod
    def _later(delay_s: float, answer) -> None:
        """Answer now, or `delay_s` late (a slow endpoint: the connection stays busy, nothing blocks)."""
        if delay_s:
            asyncio.get_running_loop().call_later(delay_s, answer)
        else:
            answer()

    @staticmethod
    def _json(body: bytes) -> dict:
        try:
            data = json.loads(body or b"{}")
        except ValueError as exc:
            raise _HttpError(400, f"Invalid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise _HttpError(400, "request body must be a JSON object")
        return data

    def _completion(self, conn: _Conn, headers: dict, body: bytes, arrival: int, oai: bool,
                    chat: bool = False):
        s, data = self.script, self._json(body)
        prompt = self._chat_prompt(data) if chat else data.get("prompt", "")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            ids = list(prompt)
        elif isinstance(prompt, str):
            ids = tokenize(prompt)
        else:
            raise _HttpError(400, "\"prompt\" must be a string or a list of token ids")
        prompt_n = len(ids)
        n_predict = data.get("max_tokens" if oai else "n_predict", data.get("n_predict"))
        if not isinstance(n_predict, int) or n_predict < 1:
            raise _HttpError(400, "the fake server needs n_predict / max_tokens >= 1 (it never emits EOS)")
        if prompt_n >= s.n_ctx_slot:  # llama.cpp checks the prompt alone; a longer answer is cut (truncated)
            raise _HttpError(400, f"request ({prompt_n} tokens) exceeds the available context size "
                                  f"({s.n_ctx_slot} tokens), try increasing it", "exceed_context_size_error",
                             n_prompt_tokens=prompt_n, n_ctx=s.n_ctx_slot)
        fault = self._fault_for_next_completion(prompt_n)
        stream = bool(data.get("stream", False))
        params = {"n_predict": n_predict, "ignore_eos": bool(data.get("ignore_eos", False)), "stream": stream,
                  "cache_prompt": bool(data.get("cache_prompt", True))}
        req = FakeRequest(headers.get("x-request-id"), prompt_n, n_predict, params, conn, arrival, ids)
        x = req.extra
        endpoint = "/v1/chat/completions" if chat else "/v1/completions" if oai else "/completion"
        x.update(stream=stream, oai=oai, chat=chat, text=[], endpoint=endpoint,
                 prompt=prompt if isinstance(prompt, str) else "",
                 usage=bool((data.get("stream_options") or {}).get("include_usage")))
        if chat:  # llama.cpp's chunk, key for key (to_json_oaicompat_chat_stream)
            x["id"] = f"chatcmpl-fake{arrival}"
            x["created"] = int(time.time())
            x["pre"], x["post"] = _dumps(self._chat_chunk(x, {"content": "\x00"})).decode().split("\\u0000")
            x["role"] = _dumps(self._chat_chunk(x, {"role": "assistant", "content": None})).decode()
        elif oai:
            x["id"] = f"cmpl-fake{arrival}"
            x["created"] = int(time.time())
            head = {"choices": [{"text": "\x00", "index": 0, "logprobs": None, "finish_reason": None}],
                    "created": x["created"], "model": s.model_alias, "system_fingerprint": s.build_info,
                    "object": "text_completion", "id": x["id"]}
            x["pre"], x["post"] = json.dumps(head, separators=(",", ":")).split("\\u0000")
        conn.req = req
        if fault is not None:
            x.update(fault=fault, fault_status="hung" if fault == "hang" else f"fault_{fault}")
            if fault == "hang":
                return  # read, never answered: the connection stays busy until the client gives up
            if fault == "stall":
                if s.stall == "nohead":
                    return  # read, never answered, while /health and /slots answer
                conn.begin_stream(req)
                stall = asyncio.ensure_future(self._stall(conn))
                self._stalls.add(stall)  # held until done: the loop keeps only a weak reference
                stall.add_done_callback(self._stalls.discard)
                return  # a head, then comments or single bytes, never a token; the engine never sees it
        hdr_late = s.llamacpp if s.headers_at_first_token is None else s.headers_at_first_token
        if stream and not hdr_late:
            conn.begin_stream(req)
        self.engine.submit(req)
        if fault == "wrong_token_count":
            req.n_stop = max(1, req.n_stop - 1)

    @staticmethod
    def _chat_prompt(data: dict) -> str:
        """A chat request's prompt: its messages (system, user, assistant) through the fake's chat
        template (prompt_cache.chat_template)."""
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role", "user"), str)
                and isinstance(m.get("content"), str) for m in messages):
            raise _HttpError(400, "\"messages\" must be a non-empty list of {role, content} objects")
        return chat_template([{"role": m.get("role", "user"), "content": m["content"]} for m in messages])

    def _chat_chunk(self, x: dict, delta: dict, finish_reason: str | None = None) -> dict:
        choice = {"finish_reason": finish_reason, "index": 0, "delta": delta}
        return {"choices": [choice], "created": x["created"], "id": x["id"], "model": self.script.model_alias,
                "system_fingerprint": self.script.build_info, "object": "chat.completion.chunk"}

    def _chat_final_events(self, req: FakeRequest) -> list:
        """llama.cpp's end of a chat stream: finish_reason with an empty delta, then (include_usage)
        a chunk with empty choices and usage; timings on the last of them (llama.cpp only); [DONE]."""
        x = req.extra
        events = [self._chat_chunk(x, {}, "length")]
        if x["usage"]:
            events.append({**{k: v for k, v in events[0].items() if k != "choices"}, "choices": [],
                           "usage": usage_json(req)})
        if self.script.llamacpp:
            events[-1]["timings"] = req.timings()
        return [*events, "[DONE]"]

    async def _stall(self, conn) -> None:
        """Write the script's stall (`FakeScript.stall`) on `conn` until its client goes away."""
        s = self.script
        piece = b": keepalive\n\n" if s.stall == "keepalive" else b":"
        while conn.t is not None and not conn.t.is_closing():
            await asyncio.sleep(s.stall_every_s)
            if conn.t is None or conn.t.is_closing():
                return
            conn.t.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")

    def _fault_for_next_completion(self, prompt_n: int) -> str | None:
        """Count this completion; die, or raise its HTTP error, or name its fault (see FakeScript)."""
        s = self.script
        self._n_completions += 1
        k = self._n_completions
        if s.die_at_completion == k:
            if self._log:
                self._log.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        if s.hang_from_completion is not None and k >= s.hang_from_completion:
            return "hang"
        if s.stall is not None and (self.stalling or (s.stall_from_completion is not None
                                                      and k >= s.stall_from_completion)):
            return "stall"
        if s.completion_fault is None or k % s.fault_every:
            return None
        # llama.cpp's answer to a prompt longer than the slot context
        if s.completion_fault == "http_400_ctx":
            raise _HttpError(400, f"request ({prompt_n} tokens) exceeds the available context size "
                                  f"({prompt_n - 1} tokens), try increasing it", "exceed_context_size_error",
                             n_prompt_tokens=prompt_n, n_ctx=prompt_n - 1)
        if s.completion_fault == "http_500":
            raise _HttpError(500, "fake: internal server error")
        if s.completion_fault == "http_503":
            raise _HttpError(503, "Loading model")
        return s.completion_fault

    def _final(self, req: FakeRequest, text: str, oai: bool, stream: bool) -> dict:
        s, x = self.script, req.extra
        if x.get("chat"):  # not streamed: one chat.completion
            res = {"choices": [{"finish_reason": "length", "index": 0,
                                "message": {"role": "assistant", "content": text}}],
                   "created": x["created"], "model": s.model_alias, "system_fingerprint": s.build_info,
                   "object": "chat.completion", "usage": usage_json(req), "id": x["id"]}
            if s.llamacpp:
                res["timings"] = req.timings()
            return res
        if oai:
            res = {"choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": "length"}],
                   "created": x["created"], "model": s.model_alias, "system_fingerprint": s.build_info,
                   "object": "text_completion", "id": x["id"]}
            if s.llamacpp:
                res["timings"] = req.timings()
            if not stream or s.llamacpp:
                res["usage"] = usage_json(req)
            return res
        return {"index": 0, "content": text, "tokens": [], "id_slot": req.slot, "stop": True,
                "model": s.model_alias, "tokens_predicted": req.n_decoded, "tokens_evaluated": req.prompt_n,
                "generation_settings": {"n_predict": req.n_predict, **req.params}, "prompt": x["prompt"],
                "has_new_line": False, "truncated": req.truncated, "stop_type": "limit", "stopping_word": "",
                "tokens_cached": req.prompt_n + req.n_decoded, "timings": req.timings()}

    def _final_events(self, req: FakeRequest) -> list:
        x = req.extra
        if x.get("chat"):
            return self._chat_final_events(req)
        events: list = [self._final(req, "", x["oai"], True)]
        if x["oai"]:
            if x["usage"] and not self.script.llamacpp:  # OpenAI: trailing chunk with empty choices
                events.append({**{k: v for k, v in events[0].items() if k != "choices"}, "choices": [],
                               "usage": usage_json(req)})
            events.append("[DONE]")
        return events


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="fake llama.cpp server (scripted timing)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--script", help="JSON file with FakeScript fields")
    ap.add_argument("--ready-file", help="write {\"base_url\": ...} here once listening")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                    help="event loop (the same bytes either way; uvloop's accepts connections sooner)")
    args = ap.parse_args(argv)
    script = FakeScript.model_validate_json(Path(args.script).read_text()) if args.script else FakeScript()

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with FakeLlamaServer(script, args.host, args.port) as srv:
            loop.add_signal_handler(signal.SIGUSR1, lambda: setattr(srv, "stalling", True))
            if args.ready_file:
                tmp = args.ready_file + ".tmp"
                with open(tmp, "w") as f:
                    json.dump({"base_url": srv.base_url, "pid": os.getpid()}, f)
                os.replace(tmp, args.ready_file)
            await stop.wait()
            print(json.dumps({"stats": srv.stats()}), file=sys.stderr)

    factory = None
    if args.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
