"""A sweep's SIGINT while it runs: the first Ctrl-C (or SIGTERM, which the CLI turns into one) stops
the run; a second one, while it stops its servers and writes its files, is ignored."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def sigint_handler_kept() -> Iterator[None]:
    """SIGINT's handler as it was once the run has ended (a Ctrl-C leaves it ignored meanwhile)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def ignore_second_interrupt() -> None:
    """Inside asyncio.run: the first Ctrl-C (or SIGTERM, which the CLI turns into one) cancels the
    sweep as asyncio's handler does; from then on SIGINT is ignored until the run has stopped its
    servers and written its files (a second one would raise KeyboardInterrupt wherever the cleanup
    is: a traceback, half-stopped servers). `sigint_handler_kept` puts the handler back."""
    handler = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(handler):
        return  # SIGINT ignored or default: nothing to wrap

    def first_interrupt(signum, frame) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        handler(signum, frame)

    signal.signal(signal.SIGINT, first_interrupt)
