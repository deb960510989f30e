"""The run directory: its default name, its creation, and who owns it while a sweep writes it.

One sweep at a time writes a run directory. `run_lock` holds an advisory lock (`flock`) on
`RUN_DIR/.lock` for the whole sweep; a second `sweep --resume` of a run that is still being
measured is refused before it writes anything (two sessions would measure at once and race
on run.json). The kernel drops the lock when its process dies, however it dies, so a run
killed with SIGKILL stays resumable.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import secrets
from pathlib import Path
from typing import Iterator

from satbench.errors import RunDirError, UserError

LOCK_FILE = ".lock"  # hidden: never hashed into SHA256SUMS nor listed in the bundle


def default_run_dir(root: Path = Path("runs")) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return root / f"{stamp}-{secrets.token_hex(2)}"


def check_new_run_dir(path: Path) -> None:
    """Refuse, without creating anything, a path that is a file or a directory holding something."""
    if path.exists() and not path.is_dir():
        raise UserError(f"-o {path}: a file of that name exists; a run directory is a directory")
    if path.exists() and any(path.iterdir()):
        raise UserError(f"run directory {path} is not empty; choose another with -o")


def prepare_run_dir(path: Path) -> Path:
    """Create the run directory; refuse one that already holds a run."""
    check_new_run_dir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"cannot create run directory {path}: {exc.strerror or exc}") from exc
    return path


def _holder_if_locked(fd: int, mode: int) -> str | None:
    """Take `mode` (LOCK_SH or LOCK_EX) without waiting: None when taken, else the holder's pid."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
    return None


def refuse_if_in_use(run_dir: Path) -> None:
    """For analyze, recommend and report: refuse a run directory a sweep is still writing (its
    derived files would be stale the moment the sweep wrote on). Creates nothing: a directory
    without a lock file was never held."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return
    try:
        holder = _holder_if_locked(fd, fcntl.LOCK_SH)
    except OSError:  # a file system without locks (some NFS): nothing can be told, nothing refused
        holder = None
    finally:
        os.close(fd)
    if holder is not None:
        raise UserError(f"{run_dir} is still being measured by satbench (pid {holder}); "
                        "its sweep writes the results, recommendations and report when it ends")


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run directory for one sweep; UserError when another process holds it."""
    path = run_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise RunDirError(f"cannot open {path}: {exc.strerror or exc}") from exc
    try:
        try:
            holder = _holder_if_locked(fd, fcntl.LOCK_EX)
        except OSError as exc:
            raise RunDirError(f"cannot lock {path}: {exc.strerror or exc}") from exc
        if holder is not None:
            raise UserError(f"{run_dir} is being written by another satbench process (pid {holder}); "
                            "wait for it to end, or stop it, before resuming")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing drops the lock
