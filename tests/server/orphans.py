"""Does a server process die with the satbench process that started it?"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def outlives_its_parent(script: str) -> int | None:
    """Run `script` (it starts a server and prints the server's pid) in a Python process, SIGKILL
    that process, and return the server's pid if it is still alive 10 s later (it is then
    killed here), else None."""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    server = int(parent.stdout.readline())
    os.kill(server, 0)  # running
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(server, 0)
        except ProcessLookupError:
            return None
        time.sleep(0.05)
    os.kill(server, signal.SIGKILL)
    return server
