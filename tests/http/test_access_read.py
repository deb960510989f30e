"""access.read / read_sync: one bounded HTTP path, and only satbench's RequestFailed escapes it.

Each answer is (status, body) whatever the status; past the byte limit TooLarge, past the deadline
TimedOut (the whole exchange, a trickle included), no connection Unreachable naming the system's
phrase: the same texts the limits and the preflight messages have always used."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time

import aiohttp
import pytest

from satbench.config import limits
from satbench.config.limits import too_large, too_slow
from satbench.http.access import Answer, EndpointSession, read, read_sync
from satbench.http.endpoint import Endpoint
from satbench.http.errors import (
    BadAnswer,
    RequestFailed,
    TimedOut,
    TlsRefused,
    TooLarge,
    Unreachable,
    request_failed,
)
from tests.fakes.fault_server import Endless, FaultServer, Json, Silent, Trickle
from tests.fakes.raw_server import RawServer

SOCKET_SLACK = 24 * limits.MIB  # kernel send + receive buffers on loopback, both sides


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Canned(RawServer):
    """Answers every request with `answer`, then closes the connection."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    async def handle(self, reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(self.answer)
        await writer.drain()
        writer.close()


def test_read_answers_status_and_body_whatever_the_status():
    async def go():
        async with Canned(b'HTTP/1.1 503 Service Unavailable\r\nContent-Length: 17\r\nConnection: close\r\n'
                          b'\r\n{"total_slots":4}') as srv:
            return srv.url, await read(Endpoint.of(srv.url), "/props", timeout_s=5, limit_bytes=100)

    url, answer = asyncio.run(go())
    assert answer == Answer(503, b'{"total_slots":4}', url + "/props") and answer.json() == {"total_slots": 4}


def test_read_sync_reads_from_synchronous_code():
    with FaultServer({"/props": Json({"total_slots": 4})}) as srv:
        answer = read_sync(Endpoint.of(srv.base_url), "/props", timeout_s=5, limit_bytes=1000)
    assert answer.status == 200 and answer.json() == {"total_slots": 4}


def test_read_sync_works_while_the_calling_thread_runs_an_event_loop():
    async def inside_a_loop(url: str) -> Answer:
        return read_sync(Endpoint.of(url), "/health", timeout_s=5, limit_bytes=limits.MAX_HEALTH_BYTES)

    with FaultServer({}) as srv:
        assert asyncio.run(inside_a_loop(srv.base_url)).status == 200


def test_an_endless_body_is_too_large_with_bounded_bytes_and_the_limits_text():
    with FaultServer({"/props": Endless()}) as srv:
        with pytest.raises(TooLarge) as exc:
            read_sync(Endpoint.of(srv.base_url), "/props", timeout_s=10, limit_bytes=limits.MAX_PROPS_BYTES)
        time.sleep(0.2)
        assert limits.MAX_PROPS_BYTES < srv.sent["/props"] < limits.MAX_PROPS_BYTES + SOCKET_SLACK
    url = srv.base_url + "/props"
    assert str(exc.value) == str(too_large(url, limits.MAX_PROPS_BYTES)) and exc.value.url == url
    assert exc.value.detail == f"AnswerTooLarge: {too_large(url, limits.MAX_PROPS_BYTES)}"


@pytest.mark.parametrize("fault", [Silent(), Trickle(interval_s=0.05)], ids=["silent", "trickle"])
def test_the_deadline_bounds_the_whole_exchange(fault):
    with FaultServer({"/props": fault}) as srv, pytest.raises(TimedOut) as exc:
        read_sync(Endpoint.of(srv.base_url), "/props", timeout_s=0.5, limit_bytes=limits.MAX_PROPS_BYTES)
    assert str(exc.value) == str(too_slow(srv.base_url + "/props", 0.5))
    assert exc.value.reason == "no answer within 0.5 s"


def test_a_refused_connection_is_unreachable_with_the_systems_phrase():
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(Unreachable) as exc:
        read_sync(Endpoint.of(url), "/health", timeout_s=5, limit_bytes=limits.MAX_HEALTH_BYTES)
    assert exc.value.url == url + "/health" and exc.value.reason == "Connection refused"
    assert exc.value.detail.startswith("ClientConnectorError: ")  # what the sampler records


def test_a_pooled_session_reads_too_and_maps_its_errors():
    async def go(url: str) -> tuple[Answer, RequestFailed]:
        async with EndpointSession(Endpoint.of(url)) as session:
            answer = await read(session, "/health", timeout_s=5, limit_bytes=limits.MAX_HEALTH_BYTES)
            try:
                await read(session, "/props", timeout_s=5, limit_bytes=10)
            except RequestFailed as exc:
                return answer, exc
        raise AssertionError("a body past its limit must fail")

    with FaultServer({}) as srv:
        answer, failed = asyncio.run(go(srv.base_url))
    assert answer.status == 200 and isinstance(failed, TooLarge)


def test_a_redirect_is_not_followed():
    async def go():
        async with Canned(b"HTTP/1.1 302 Found\r\nLocation: http://example.invalid/\r\nContent-Length: 0\r\n"
                          b"Connection: close\r\n\r\n") as srv:
            return await read(Endpoint.of(srv.url, {"Authorization": "Bearer k"}), "/health", timeout_s=5,
                              limit_bytes=100)

    assert asyncio.run(go()).status == 302


def test_a_malformed_answer_is_a_bad_answer():
    async def go():
        async with Canned(b"NOT HTTP AT ALL\r\n\r\n") as srv:
            return await read(Endpoint.of(srv.url), "/health", timeout_s=5, limit_bytes=100)

    with pytest.raises(BadAnswer):
        asyncio.run(go())


def test_the_map_names_each_failure_once():
    url = "https://h/props"
    cert = ssl.SSLCertVerificationError(1, "x")
    cert.verify_message = "self-signed certificate"
    tls = request_failed(url, cert)
    assert isinstance(tls, TlsRefused) and str(tls).startswith(
        "https://h/props: certificate verify failed: self-signed certificate; pass --ca-cert")
    assert isinstance(request_failed(url, ConnectionResetError(104, "reset")), Unreachable)
    assert request_failed(url, aiohttp.ServerDisconnectedError()).stale
    assert request_failed(url, TimeoutError()).reason == "no answer (timed out)"
    for kind in (Unreachable, TimedOut, TooLarge, TlsRefused, BadAnswer):
        assert issubclass(kind, RequestFailed) and not issubclass(kind, OSError)
