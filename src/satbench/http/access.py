"""How satbench reaches a server: its `Endpoint` (URL, API key, TLS policy) and the bounded reads.

The key comes from an environment variable (`api_key_env`), a file (`api_key_file`) or the
URL's password. It lives only in the Authorization header of requests to that lane's server
(the Endpoint's headers); config, run.json, logs and reports carry the variable's name or the
file's path, never the key.

TLS: verification is on with the system's CAs, plus `ca_cert` when given; it is off only when
the user says `insecure` (a warning line, and run.json records it). Every connection to the
server (probe, sampler, request client, `satbench capability`) takes its SSL context from the
lane's Endpoint, made by `tls_context_for`.

Reads: `get_bytes` (urllib, one bounded GET from synchronous code) and `EndpointSession` (one
pooled aiohttp session per user: bounded requests from the event loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import http.client
import io
import os
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from satbench.config.limits import (
    KIB,
    MAX_API_KEY_FILE_BYTES,
    MAX_CA_CERT_BYTES,
    MAX_ERROR_BODY_BYTES,
    json_answer,
    too_large,
    too_slow,
)
from satbench.config.schema import LaneConfig, RunConfig, RuntimeConfig
from satbench.errors import ParseError, UserError
from satbench.http.endpoint import Endpoint, redact_url, split_credentials, tls_context
from satbench.http.errors import NETWORK_ERRORS, request_failed
from satbench.records.rundir import read_regular_file


def _checked_key(key: str, where: str) -> str:
    """A key goes into an HTTP header verbatim: refuse anything that could break out of it."""
    if not key.isascii() or any(c.isspace() or not c.isprintable() for c in key):
        raise UserError(f"{where}: the API key contains whitespace or control characters")
    return key


def _read_named(path: str, cap: int, what: str) -> str:
    """The text of a file the user names, read as records.rundir.read_regular_file reads it (a regular
    file, at most `cap` bytes: a FIFO, a device or a huge file is refused without blocking or reading
    it whole); UserError naming the file, never its content."""
    try:
        return read_regular_file(Path(path), cap, follow_links=True, error=UserError).decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{what} {path}: not readable as UTF-8 text") from None
    except UserError as exc:
        raise UserError(f"{what} {path}: {str(exc).removeprefix(f'cannot read {path}: ')}") from None


def read_key_file(path: str) -> str:
    """The file's content stripped of surrounding whitespace (at most MAX_API_KEY_FILE_BYTES);
    UserError naming the file (never its content)."""
    key = _read_named(path, MAX_API_KEY_FILE_BYTES, "API key file").strip()
    if not key:
        raise UserError(f"API key file {path} is empty")
    return _checked_key(key, f"API key file {path}")


def api_key(rc: RuntimeConfig, lane: str, url_secret: str | None = None) -> str | None:
    """The key for this lane's server: from api_key_env, api_key_file, else the URL's password."""
    if rc.api_key_env:
        key = os.environ.get(rc.api_key_env, "").strip()
        if not key:
            raise UserError(f"lane {lane}: environment variable {rc.api_key_env} (the API key) is empty "
                            "or unset")
        return _checked_key(key, f"lane {lane}: environment variable {rc.api_key_env}")
    if rc.api_key_file:
        return read_key_file(rc.api_key_file)
    return url_secret or None


def auth_headers(rc: RuntimeConfig, lane: str, url_secret: str | None = None) -> dict[str, str]:
    key = api_key(rc, lane, url_secret)
    return {"Authorization": f"Bearer {key}"} if key else {}


def tls_context_for(rc: RuntimeConfig) -> ssl.SSLContext:
    """Verification on with the system CAs (+ ca_cert); off only with insecure."""
    ctx = tls_context(verify=not rc.insecure)
    if rc.ca_cert:
        pem = _read_named(rc.ca_cert, MAX_CA_CERT_BYTES, "--ca-cert")  # at most MAX_CA_CERT_BYTES
        try:
            ctx.load_verify_locations(cadata=pem)
        except (ssl.SSLError, ValueError) as exc:
            why = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else exc
            raise UserError(f"--ca-cert {rc.ca_cert}: not a PEM certificate ({why})") from exc
    return ctx


def lane_endpoint(rc: RuntimeConfig, lane: str, base_url: str, url_secret: str | None = None) -> Endpoint:
    """The Endpoint of a lane's server at the credential-free `base_url`: its key (api_key: from
    api_key_env, api_key_file, else `url_secret`) and its TLS policy (tls_context_for)."""
    return Endpoint.of(base_url, auth_headers(rc, lane, url_secret), tls_context_for(rc))


def remote_endpoint(lane: LaneConfig) -> Endpoint:
    """A url lane's Endpoint: its --url without credentials (the URL's password is a key source)."""
    url, secret = split_credentials(lane.runtime.url or "")
    return lane_endpoint(lane.runtime, lane.name, url, secret)


def insecure_warning(rc: RuntimeConfig, url: str) -> str | None:
    return f"satbench: warning: TLS verification is OFF for {url} (--insecure)" if rc.insecure else None


def check_remote_access(cfg: RunConfig) -> list[str]:
    """Before anything starts: every url lane's key and CA file are readable. Returns warning lines."""
    warnings = []
    for lane in cfg.lanes:
        rc = lane.runtime
        if rc.starts_server:  # keys and TLS options are a running server's
            continue
        api_key(rc, lane.name)
        tls_context_for(rc)
        line = insecure_warning(rc, redact_url(rc.url or ""))
        if line:
            warnings.append(line)
    return warnings


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # the key would follow a redirect to any host
        return None


READ_CHUNK_BYTES = 64 * KIB  # one read of a body; a refused answer is read to its limit + 1 byte, no further


class _Sockets:
    """The sockets one urllib read opened, so that its deadline can cut them (a server trickling
    one byte at a time never trips a per-recv socket timeout)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self.expired = False

    def add(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._socks.append(sock)
            if self.expired:
                _cut(sock)
        return sock

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._socks:
                _cut(sock)


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _connection_class(base: type[http.client.HTTPConnection],
                      sockets: _Sockets) -> type[http.client.HTTPConnection]:
    class _Connection(base):  # type: ignore[misc, valid-type]  # a base chosen at run time
        _create_connection: Callable[..., socket.socket]  # set by http.client's __init__ (undocumented)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            create = self._create_connection
            self._create_connection = lambda *a, **k: sockets.add(create(*a, **k))

    return _Connection


class _HttpHandler(urllib.request.HTTPHandler):
    def __init__(self, sockets: _Sockets) -> None:
        super().__init__()
        self._connection = _connection_class(http.client.HTTPConnection, sockets)

    def http_open(self, req):
        return self.do_open(self._connection, req)


class _HttpsHandler(urllib.request.HTTPSHandler):
    def __init__(self, sockets: _Sockets, context: ssl.SSLContext | None) -> None:
        super().__init__(context=context)
        self._tls = context
        self._connection = _connection_class(http.client.HTTPSConnection, sockets)

    def https_open(self, req):
        return self.do_open(self._connection, req, context=self._tls)


def _read_sync(resp, limit_bytes: int, where: str, truncate: bool = False) -> bytes:
    """The body, read in chunks up to `limit_bytes` + 1: AnswerTooLarge past the limit, or (with
    `truncate`) its first `limit_bytes`."""
    buf = bytearray()
    while True:
        chunk = resp.read1(min(READ_CHUNK_BYTES, limit_bytes + 1 - len(buf)))
        if not chunk:
            return bytes(buf)
        buf += chunk
        if len(buf) > limit_bytes:
            if truncate:
                return bytes(buf[:limit_bytes])
            raise too_large(where, limit_bytes)


def _timed_out(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or isinstance(getattr(exc, "reason", None), TimeoutError)


def get_bytes(endpoint: Endpoint, path: str, timeout_s: float, *, limit_bytes: int) -> bytes:
    """One GET of `path` on the endpoint: its headers and TLS policy, no proxies, no redirects (urllib
    keeps the Authorization header across hosts). Errors name endpoint.url(path).

    Bounded: AnswerTooLarge past `limit_bytes`; AnswerTimeoutError when the whole exchange (connect,
    head, body) takes longer than `timeout_s`. A non-2xx answer raises urllib's HTTPError, its
    body read up to MAX_ERROR_BODY_BYTES; a failed connection URLError / OSError as urllib does."""
    url = endpoint.url(path)
    sockets = _Sockets()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _HttpHandler(sockets),
                                         _HttpsHandler(sockets, endpoint.tls), _NoRedirect())
    timer = threading.Timer(timeout_s, sockets.expire)
    timer.daemon = True
    timer.start()
    try:
        try:
            request = urllib.request.Request(url, headers=endpoint.headers)
            with opener.open(request, timeout=timeout_s) as resp:
                body = _read_sync(resp, limit_bytes, url)
        except urllib.error.HTTPError as exc:
            error_body = _read_sync(exc, MAX_ERROR_BODY_BYTES, url, truncate=True)
            exc.close()
            raise urllib.error.HTTPError(exc.url, exc.code, exc.msg, exc.hdrs,
                                         io.BytesIO(error_body)) from None
    except urllib.error.HTTPError:
        raise
    except NETWORK_ERRORS as exc:
        if sockets.expired or _timed_out(exc):
            raise too_slow(url, timeout_s) from exc
        raise
    finally:
        timer.cancel()
    if sockets.expired:  # cut at the deadline: what came is not the whole answer
        raise too_slow(url, timeout_s)
    return body


class EndpointSession:
    """Requests to one Endpoint over one aiohttp session (its headers and TLS policy; connections
    kept alive and reused). `timeout_s` bounds a request that names no deadline of its own."""

    def __init__(self, endpoint: Endpoint, timeout_s: float = 30.0) -> None:
        self.endpoint = endpoint
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s),
                                              headers=endpoint.headers,
                                              connector=aiohttp.TCPConnector(ssl=endpoint.tls or True))

    async def __aenter__(self) -> EndpointSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._session.close()

    async def read(self, path: str, *, limit_bytes: int, deadline_s: float, method: str = "GET",
                   json_body: object = None) -> tuple[int, bytes]:
        """(status, body) of one request for `path`, whatever the status: the body read in chunks up to
        `limit_bytes` + 1 (AnswerTooLarge past it, not decompressed), the whole exchange within
        `deadline_s` (AnswerTimeoutError). aiohttp's connection errors pass through."""
        url = self.endpoint.url(path)
        try:
            async with asyncio.timeout(deadline_s):
                return await self._exchange(url, limit_bytes, deadline_s, method, json_body)
        except TimeoutError as exc:  # asyncio's deadline, or aiohttp's own (ServerTimeoutError)
            raise too_slow(url, deadline_s) from exc

    async def _exchange(self, url: str, limit_bytes: int, deadline_s: float, method: str,
                        json_body: object) -> tuple[int, bytes]:
        """One request, no redirect followed (the key would follow it to any host); the body read in
        chunks up to `limit_bytes` + 1 (AnswerTooLarge past it, not decompressed)."""
        async with self._session.request(method, url, json=json_body, auto_decompress=False,
                                         allow_redirects=False, headers={"Accept-Encoding": "identity"},
                                         timeout=aiohttp.ClientTimeout(total=2 * deadline_s)) as resp:
            buf = bytearray()
            while True:
                chunk = await resp.content.read(min(READ_CHUNK_BYTES, limit_bytes + 1 - len(buf)))
                if not chunk:
                    return resp.status, bytes(buf)
                buf += chunk
                if len(buf) > limit_bytes:
                    raise too_large(url, limit_bytes)

    async def answers(self, path: str, timeout_s: float) -> bool:
        """Whether a GET of `path` gets a response head (any status) within `timeout_s`."""
        try:
            async with self._session.get(self.endpoint.url(path),
                                         timeout=aiohttp.ClientTimeout(total=timeout_s)):
                return True
        except NETWORK_ERRORS:
            return False


@dataclass(frozen=True)
class Answer:
    """One HTTP answer, whatever its status: `status`, `body` (raw bytes, not decompressed, within the
    read's limit) and the credential-free `url` asked."""

    status: int
    body: bytes
    url: str = ""

    def json(self) -> object:
        """The body's JSON value; ParseError naming the URL when it is not JSON."""
        return json_answer(self.body, self.url)


async def read(endpoint: Endpoint | EndpointSession, path: str, *, timeout_s: float, limit_bytes: int,
               method: str = "GET", json_body: object = None) -> Answer:
    """One request for `path` on `endpoint` (its headers and TLS policy; an EndpointSession's kept-alive
    connections, else a connection of its own): the answer whatever its status, its body at most
    `limit_bytes`, the whole exchange (connect, head, body) within `timeout_s`. No proxy, no redirect
    followed. Only a RequestFailed escapes: TooLarge, TimedOut, TlsRefused, Unreachable, BadAnswer
    (errors.request_failed, naming endpoint.url(path))."""
    url = (endpoint.endpoint if isinstance(endpoint, EndpointSession) else endpoint).url(path)
    try:
        async with asyncio.timeout(timeout_s):
            if isinstance(endpoint, EndpointSession):
                status, body = await endpoint._exchange(url, limit_bytes, timeout_s, method, json_body)
            else:
                async with EndpointSession(endpoint, timeout_s) as own:
                    status, body = await own._exchange(url, limit_bytes, timeout_s, method, json_body)
    except TimeoutError as exc:  # asyncio's deadline, or aiohttp's own (ServerTimeoutError)
        raise request_failed(url, too_slow(url, timeout_s)) from exc
    except (*NETWORK_ERRORS, ParseError, ValueError) as exc:
        raise request_failed(url, exc) from exc
    return Answer(status, body, url)


def read_sync(endpoint: Endpoint, path: str, *, timeout_s: float, limit_bytes: int, method: str = "GET",
              json_body: object = None) -> Answer:
    """`read` from synchronous code, on an event loop of its own: in this thread, or in a worker
    thread when this one already runs a loop (which then waits, at most `timeout_s`, as for any
    blocking call)."""
    def run() -> Answer:
        return asyncio.run(read(endpoint, path, timeout_s=timeout_s, limit_bytes=limit_bytes, method=method,
                                json_body=json_body))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()
