"""How satbench reaches a server: its `Endpoint` (URL, API key, TLS policy) and the bounded reads.

The key comes from an environment variable (`api_key_env`), a file (`api_key_file`) or the
URL's password. It lives only in the Authorization header of requests to that lane's server
(the Endpoint's headers); config, run.json, logs and reports carry the variable's name or the
file's path, never the key.

TLS: verification is on with the system's CAs, plus `ca_cert` when given; it is off only when
the user says `insecure` (a warning line, and run.json records it). Every connection to the
server (probe, sampler, request client, `satbench capability`) takes its SSL context from the
lane's Endpoint, made by `tls_context_for`.

Reads: `read` (one bounded request: (status, body) within a byte limit and a deadline, errors
mapped once to http.errors.RequestFailed), over an `EndpointSession` (one pooled aiohttp session
per user: kept-alive connections) or a connection of its own; `read_sync` for synchronous code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from satbench.config.limits import (
    KIB,
    MAX_API_KEY_FILE_BYTES,
    MAX_CA_CERT_BYTES,
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


READ_CHUNK_BYTES = 64 * KIB  # one read of a body; a refused answer is read to its limit + 1 byte, no further


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
