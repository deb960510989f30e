"""/tokenize on a pooled connection the server has closed meanwhile is sent again on a new one
(a reviewer's sweep stopped with '/tokenize failed: ServerDisconnectedError'); a server that keeps
dropping it is still a failure."""

from __future__ import annotations

import json

import pytest

from satbench.errors import RuntimeStartError
from satbench.http.access import EndpointSession
from satbench.http.endpoint import Endpoint
from satbench.server.probe import llamacpp_tokenizer
from tests.fakes.raw_server import RawServer


class DroppingServer(RawServer):
    """Closes the first `drops` connections without answering, then answers /tokenize."""

    def __init__(self, drops: int) -> None:
        self.drops, self.connections = drops, 0

    async def handle(self, reader, writer):
        self.connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n")
                          if ln.lower().startswith(b"content-length")))
        await reader.readexactly(length)
        if self.connections <= self.drops:
            writer.close()
            return
        body = json.dumps({"tokens": [1, 2, 3]}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()


async def test_a_dropped_connection_is_tried_once_more():
    async with DroppingServer(drops=1) as srv, EndpointSession(Endpoint.of(srv.url)) as session:
        assert await llamacpp_tokenizer(session)("hi", True) == [1, 2, 3]
    assert srv.connections == 2


async def test_a_server_that_keeps_dropping_is_a_failure():
    async with DroppingServer(drops=5) as srv, EndpointSession(Endpoint.of(srv.url)) as session:
        with pytest.raises(RuntimeStartError, match="/tokenize failed: ServerDisconnectedError"):
            await llamacpp_tokenizer(session)("hi", True)
    assert srv.connections == 2
