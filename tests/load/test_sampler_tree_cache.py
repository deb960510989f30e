"""process_tree_usage lists a server's descendants once per CHILDREN_REFRESH_S (on a clock the tests
set) and reads the listed ones in between: a child started after a listing is counted from the next
one on, and a listed child that is gone makes the tree listed again at once."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from satbench.load import sampler
from satbench.load.sampler import CHILDREN_REFRESH_S, process_tree_usage

# a stand-in server: "+" starts a `sleep` child and prints its pid; "-" kills its oldest child and reaps it
_SPAWNER = ("import subprocess, sys\n"
            "kids = []\n"
            "for line in sys.stdin:\n"
            "    if line.strip() == '+':\n"
            "        kids.append(subprocess.Popen(['sleep', '60']))\n"
            "        print(kids[-1].pid, flush=True)\n"
            "    else:\n"
            "        kids[0].kill(); kids.pop(0).wait()\n"
            "        print(0, flush=True)\n")


@pytest.fixture
def clock(monkeypatch) -> list[float]:
    """The sampler's clock, in seconds: set now[0]."""
    now = [1000.0]
    monkeypatch.setattr(sampler, "_clock", lambda: now[0])
    monkeypatch.setattr(sampler, "_trees", {})
    return now


@pytest.fixture
def read_pids(monkeypatch) -> list[int]:
    """The pids whose memory was read, in order."""
    seen: list[int] = []
    real = psutil.Process.memory_info

    def memory_info(self):
        seen.append(self.pid)
        return real(self)

    monkeypatch.setattr(psutil.Process, "memory_info", memory_info)
    return seen


@pytest.fixture
def server():
    proc = subprocess.Popen([sys.executable, "-c", _SPAWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    yield proc
    for child in psutil.Process(proc.pid).children(recursive=True):
        child.kill()
    proc.kill()
    proc.wait()


def _ask(server, line: str) -> int:
    server.stdin.write(line + "\n")
    server.stdin.flush()
    return int(server.stdout.readline())


def test_a_child_started_after_a_listing_is_counted_from_the_next_listing_on(clock, read_pids, server):
    rss, _ = process_tree_usage(server.pid)
    assert rss > 0 and read_pids == [server.pid]
    child = _ask(server, "+")
    read_pids.clear()
    clock[0] += CHILDREN_REFRESH_S / 2  # the listing is still fresh: the child is not read yet
    process_tree_usage(server.pid)
    assert read_pids == [server.pid]
    read_pids.clear()
    clock[0] += CHILDREN_REFRESH_S / 2  # due: listed again, the child with it
    rss, cpu = process_tree_usage(server.pid)
    assert read_pids == [server.pid, child]
    # the figures of a tree that does not change (sleeping processes): those of reading each anew
    procs = [psutil.Process(p) for p in (server.pid, child)]
    assert rss == sum(p.memory_info().rss for p in procs)
    assert cpu == sum(t.user + t.system for t in (p.cpu_times() for p in procs))


def test_a_listed_child_that_is_gone_makes_the_tree_listed_again_at_once(clock, read_pids, server):
    first = _ask(server, "+")
    process_tree_usage(server.pid)
    assert read_pids == [server.pid, first]
    _ask(server, "-")  # first killed and reaped
    second = _ask(server, "+")
    read_pids.clear()
    clock[0] += CHILDREN_REFRESH_S / 10
    process_tree_usage(server.pid)
    assert read_pids == [server.pid, first, server.pid, second]
