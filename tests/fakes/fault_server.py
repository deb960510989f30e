"""The fake llama.cpp server with hostile answers on chosen endpoints, running in a thread of its own
(so that blocking urllib reads and `satbench.cli.main.main`, which owns its loop, can talk to it).

    with FaultServer({"/props": Endless()}, n_slots=2) as srv:
        srv.base_url; srv.sent["/props"]  # bytes handed to the kernel for that endpoint, all connections

Faults: `Json(obj)` answers 200 with that JSON; `Endless(prefix, unit)` a body without end (no
Content-Length, written as fast as the client reads, under flow control so the fake's own memory
stays small); `Trickle(interval_s)` a head and then one byte every interval; `Silent()` nothing.
Every other endpoint is the ordinary fake's.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from .fake_llama_server import FakeLlamaServer
from .fake_scheduler import FakeScript

WRITE_AHEAD_BYTES = 256 * 1024  # what the fake lets wait in its transport's buffer


@dataclass
class Json:
    obj: object


@dataclass
class Endless:
    prefix: bytes = b'{"total_slots": 1, "x": "'
    unit: bytes = b"a" * 65536


@dataclass
class Trickle:
    interval_s: float = 0.05
    body: bytes = b'{"total_slots": 1}' + b" " * 100_000


@dataclass
class Silent:
    pass


class _Faulty(FakeLlamaServer):
    def __init__(self, faults: dict, script: FakeScript) -> None:
        super().__init__(script)
        self.faults = faults
        self.sent: dict[str, int] = {}
        self.connections: dict[str, int] = {}
        self._held: list = []  # transports of Silent answers: kept open

    def _dispatch(self, conn, method, target, headers, body, arrival):
        path = urlsplit(target).path
        fault = self.faults.get(path)
        if fault is None:
            return super()._dispatch(conn, method, target, headers, body, arrival)
        self.connections[path] = self.connections.get(path, 0) + 1
        t = conn.t
        if isinstance(fault, Json):
            return conn.respond(200, json.dumps(fault.obj).encode())
        if isinstance(fault, Silent):
            self._held.append(t)
            return None
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n"
        self._count(path, t, head)
        if isinstance(fault, Endless):
            self._count(path, t, fault.prefix)
            asyncio.get_running_loop().create_task(self._endless(path, t, fault.unit))
        else:
            asyncio.get_running_loop().create_task(self._trickle(path, t, fault))
        return None

    def _count(self, path: str, t, data: bytes) -> None:
        if t is not None and not t.is_closing():
            t.write(data)
            self.sent[path] = self.sent.get(path, 0) + len(data)

    async def _endless(self, path: str, t, unit: bytes) -> None:
        while t is not None and not t.is_closing():
            if t.get_write_buffer_size() < WRITE_AHEAD_BYTES:
                self._count(path, t, unit)
            await asyncio.sleep(0.001 if t.get_write_buffer_size() >= WRITE_AHEAD_BYTES else 0)

    async def _trickle(self, path: str, t, fault: Trickle) -> None:
        for i in range(len(fault.body)):
            if t is None or t.is_closing():
                return
            self._count(path, t, fault.body[i : i + 1])
            await asyncio.sleep(fault.interval_s)


class FaultServer:
    """`with FaultServer(faults, **script) as srv`: the faulty fake on its own loop and thread."""

    def __init__(self, faults: dict, **script) -> None:
        self._fake = _Faulty(faults, FakeScript(**script))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return self._fake.base_url

    @property
    def sent(self) -> dict[str, int]:
        return self._fake.sent

    @property
    def connections(self) -> dict[str, int]:
        return self._fake.connections

    def __enter__(self) -> FaultServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._fake.start(), self._loop).result(timeout=20)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._fake.stop(), self._loop).result(timeout=20)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=20)
