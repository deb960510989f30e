"""A raw TCP server on 127.0.0.1 for client tests: a subclass's `handle(reader, writer)` answers
each connection byte for byte (a dropped connection, a cut stream, a canned SSE body)."""

from __future__ import annotations

import asyncio


class RawServer:
    """Subclasses define `async def handle(self, reader, writer)`."""

    url: str

    async def __aenter__(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()
