"""The event loop the load generator runs on: uvloop's where it is installed, else asyncio's own.

uvloop (libuv) runs the loop's own work per read (the ready callbacks, the read callback into the
transport) in C, where asyncio's loop runs it in Python: at 64 streams against the fake server the
load generator takes 20 % of a core on it against 24 % on asyncio's, with the same stamp accuracy
(docs/metrics.md#how-exact-the-stamps-are-benchmarksharness_overheadpy). It is a dependency
wherever it builds (not on Windows); where it is not importable, asyncio's loop runs, and nothing
else changes (the transport is an asyncio.BufferedProtocol on either).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal, TypeVar

T = TypeVar("T")
LoopName = Literal["uvloop", "asyncio"]


def loop_factory(name: LoopName | None = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of `name`'s loop; with None, uvloop's when it is importable, else asyncio's. None
    stands for asyncio's own (what asyncio.Runner makes without a factory)."""
    if name == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if name == "uvloop":
            raise
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], name: LoopName | None = None) -> T:
    """`asyncio.run(main)` on `name`'s loop (loop_factory: uvloop's when importable)."""
    with asyncio.Runner(loop_factory=loop_factory(name)) as runner:
        return runner.run(main)


def event_loop_runner(name: LoopName | None = None) -> Callable[[Coroutine[Any, Any, T]], T]:
    """`run` bound to `name`'s loop."""
    return lambda main: run(main, name)


async def sleep_until(clock: Callable[[], int], deadline_ns: int,
                      sleep: Callable[[float], Awaitable[None]] | None = None) -> None:
    """Return once `clock()` ≥ `deadline_ns`, never before: uvloop's timers count whole milliseconds
    from the time its loop cached at the start of an iteration, so one sleep can end up to ~1.3 ms
    early (asyncio's never does); the rest is slept again. `sleep(seconds)` sleeps (None:
    asyncio.sleep as it is when called; one that raises ends the wait early)."""
    while (left_ns := deadline_ns - clock()) > 0:
        await (sleep or asyncio.sleep)(left_ns / 1e9)


def running_loop_name() -> LoopName:
    """Which loop runs the caller: "uvloop" or "asyncio"."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
