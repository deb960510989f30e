"""The run directory: its default name, its creation, who owns it while a sweep writes it, and
how satbench opens the files it writes there.

One sweep at a time writes a run directory. `run_lock` holds an advisory lock (`flock`) on
`RUN_DIR/.lock` for the whole sweep; a second `sweep --resume` of a run that is still being
measured is refused before it writes anything (two sessions would measure at once and race
on run.json). The kernel drops the lock when its process dies, however it dies, so a run
killed with SIGKILL stays resumable.

A run directory may come from elsewhere (copied, unpacked, shared), so nothing satbench writes
there may lead out of it. The one rule (`RUN_FILE_RULE`): satbench writes only regular files of
its own in a run directory: each file it writes or appends to is opened without following a
symbolic link (O_NOFOLLOW) and must then be a regular file with one link (no hard link to a file
elsewhere) owned by this user; each subdirectory it writes into must be a real directory. Anything
else stops the command with a RunDirError naming the file. `open_run_file` / `open_run_fd` open
by that rule, `check_writable_file` / `check_run_subdir` check a path by it (for atomic writes,
which rename over the name), and `check_run_dir` checks a whole run directory before a sweep or
a report starts writing, so a refusal comes before anything is written. The checks are against
links placed before satbench runs; a file opened by the rule is the file checked (fstat of the
open descriptor), and an atomic write replaces a name, never writing through what it names.

What satbench reads back (`read_regular_file`, `iter_lines`, `read_tail`) is opened without
blocking and must be a regular file (in a run directory, not a link either: RUN_FILE_RULE; a file the
user names may be a link: READ_RULE), read with a size cap, so a named pipe, a device or a huge file
is a one-line RunDirError, never a hang.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

from satbench.config.limits import size_text
from satbench.errors import RunDirError, SatbenchError, UserError

LOCK_FILE = ".lock"  # hidden: never hashed into SHA256SUMS nor listed in the bundle
ROOM_FILE = ".room"  # hidden too: space held while a sweep runs, freed to record how it ended
RUN_FILE_RULE = "satbench writes only regular files of its own in a run directory"
RUN_SUBDIR_RULE = "satbench writes only into real directories of its own in a run directory"
READ_RULE = "satbench reads back only regular files"
OUTPUT_FILE_RULE = "satbench replaces only a regular file of this user's with one link"  # outside a run dir
RUN_SUBDIRS = ("plots",)  # the subdirectories satbench writes into
FILE_MODE = 0o644  # what satbench creates: results are meant to be shared

OpenMode = Literal["a", "ab", "r+b", "w", "wb"]
# open(2) flags of each mode; "w"/"wb" truncate only once the opened file has passed the rule
_APPEND, _WRITE = os.O_WRONLY | os.O_APPEND | os.O_CREAT, os.O_WRONLY | os.O_CREAT
_FLAGS: dict[str, int] = {"a": _APPEND, "ab": _APPEND, "r+b": os.O_RDWR, "w": _WRITE, "wb": _WRITE}
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _refusal(path: Path, why: str, remedy: str, rule: str = RUN_FILE_RULE) -> RunDirError:
    return RunDirError(f"{path} {why}; {rule} ({remedy})")


def _check_stat(path: Path, st: os.stat_result, fix: str | None = None) -> None:
    """RunDirError unless `st` is a regular file with one link, owned by this user. With `fix` the
    file is outside any run directory (a file the user named): the refusal states OUTPUT_FILE_RULE
    and `fix` (e.g. "choose another -o") instead of run-directory advice."""
    def refuse(why: str, remedy: str) -> RunDirError:
        return _refusal(path, why, fix or remedy, OUTPUT_FILE_RULE if fix else RUN_FILE_RULE)

    if stat.S_ISLNK(st.st_mode):
        raise refuse("is a symbolic link", "remove the link")
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise refuse(f"is {kind}, not a regular file", "remove it")
    if st.st_nlink != 1:
        raise refuse(f"has {st.st_nlink} hard links (it is also a file elsewhere)",
                     "remove it, or replace it with a copy of its own")
    if st.st_uid != os.geteuid():
        raise refuse(f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})",
                     "replace it with a copy of your own")


def open_readable(path: Path, follow_links: bool, error: type[SatbenchError] = RunDirError) -> int:
    """A read-only descriptor of the regular file `path`: O_NOFOLLOW unless `follow_links` (a file of a
    run directory holds to RUN_FILE_RULE; one the user names, to READ_RULE), and O_NONBLOCK so a named
    pipe or a device never blocks the open (fstat then refuses it). Reading needs no one-link or owner
    rule. `error` (RunDirError) naming the file otherwise."""
    nofollow, rule = (0, READ_RULE) if follow_links else (os.O_NOFOLLOW, RUN_FILE_RULE)
    try:
        fd = os.open(path, os.O_RDONLY | nofollow | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise _refusal(path, "is a symbolic link", "remove the link") from exc
        raise error(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
            raise error(str(_refusal(path, f"is {kind}, not a regular file", "remove it", rule)))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular_file(path: Path, max_bytes: int, *, follow_links: bool = False,
                      error: type[SatbenchError] = RunDirError) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes`. The one reader of the files
    satbench reads back (run directory; with `follow_links`, a lane file or a recommendations file
    the user names, which may be a link): a symbolic link (unless followed), a directory, a named pipe
    or a device is refused without blocking, and so is a file larger than `max_bytes`; every refusal,
    and every OSError, is one `error` line (RunDirError; UserError for a file the user names) naming
    the file."""
    fd = open_readable(path, follow_links, error)
    try:
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise error(f"cannot read {path}: larger than {max_bytes:,} bytes, the most satbench reads of it")
    return data


def iter_lines(path: Path, max_line_bytes: int) -> Iterator[tuple[int, bytes]]:
    """(line number, line with its newline, if it has one) of the regular file `path`, opened as
    read_regular_file opens it; a line longer than `max_line_bytes` is one RunDirError naming the
    file, the line and the limit (never read whole into memory)."""
    fd = open_readable(path, False)
    try:
        with os.fdopen(fd, "rb") as fh:
            for lineno, line in enumerate(iter(lambda: fh.readline(max_line_bytes + 1), b""), 1):
                if len(line) > max_line_bytes:
                    raise RunDirError(f"cannot read {path}: line {lineno} is longer than "
                                      f"{size_text(max_line_bytes)}; not a record satbench wrote")
                yield lineno, line
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_tail(path: Path, n_bytes: int) -> tuple[int, bytes]:
    """(size of the regular file `path`, its last `n_bytes` at most), opened as read_regular_file opens it."""
    fd = open_readable(path, False)
    try:
        size = os.fstat(fd).st_size
        return size, os.pread(fd, n_bytes, max(0, size - n_bytes))
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def require_dir(path: Path) -> None:
    """RunDirError unless `path` is a directory (a name the system refuses, such as one too long,
    is named with its reason)."""
    try:
        if path.is_dir():
            return
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from exc
    raise RunDirError(f"{path} is not a directory")


def check_writable_file(path: Path, fix: str | None = None) -> None:
    """RunDirError unless `path` is absent (satbench will create it) or a regular file with one
    link owned by this user; a symbolic link is refused, never followed. `fix`: the path is outside
    any run directory and the refusal ends with this advice (see `_check_stat`)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RunDirError(f"cannot write {path}: {exc.strerror or exc}") from exc
    _check_stat(path, st, fix)


def check_run_subdir(path: Path) -> None:
    """RunDirError unless `path` is absent or a real directory (not a link to one) of this user."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RunDirError(f"cannot write {path}: {exc.strerror or exc}") from exc
    if stat.S_ISLNK(st.st_mode):
        raise _refusal(path, "is a symbolic link", "remove the link", RUN_SUBDIR_RULE)
    if not stat.S_ISDIR(st.st_mode):
        raise _refusal(path, "is not a directory", "remove it", RUN_SUBDIR_RULE)
    if st.st_uid != os.geteuid():
        raise _refusal(path, f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})",
                       "remove it", RUN_SUBDIR_RULE)


def check_parents(run_dir: Path, path: Path) -> None:
    """Every directory between `run_dir` (itself as named, a link or not) and `path` is a real one."""
    try:
        rel = path.parent.relative_to(run_dir)
    except ValueError as exc:
        raise RunDirError(f"{path} is not inside the run directory {run_dir}") from exc
    below = run_dir
    for part in rel.parts:
        below = below / part
        check_run_subdir(below)


def make_run_subdir(path: Path) -> Path:
    """Create the subdirectory `path` of a run directory, or take the real directory already there."""
    check_run_subdir(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"cannot write {path}: {exc.strerror or exc}") from exc
    check_run_subdir(path)
    return path


def open_run_fd(path: Path, flags: int) -> int:
    """os.open(`path`, `flags`) by the rule: O_NOFOLLOW and O_CLOEXEC added (and O_NONBLOCK while
    opening, so a named pipe does not block), then fstat: a regular file, one link, this user's.
    Returns the descriptor (blocking); RunDirError names the file otherwise."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refusal(path, "is a symbolic link", "remove the link") from exc
        raise RunDirError(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        _check_stat(path, os.fstat(fd))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_run_file(path: Path, mode: OpenMode) -> IO:
    """A file of the run directory opened by the rule (see open_run_fd): "a"/"ab" append, "r+b"
    read and write an existing file, "w"/"wb" write from empty. Text modes are UTF-8."""
    fd = open_run_fd(path, _FLAGS[mode])
    try:
        if mode in ("w", "wb"):
            os.ftruncate(fd, 0)
        return os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8")
    except BaseException:
        os.close(fd)
        raise


def _entries(directory: Path) -> list[os.DirEntry]:
    try:
        return sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RunDirError(f"cannot read {directory}: {exc.strerror or exc}") from exc


def check_run_subdir_files(path: Path) -> None:
    """The subdirectory `path` (absent, or a real directory) and every file in it hold to the rule."""
    check_run_subdir(path)
    for entry in _entries(path):
        check_writable_file(path / entry.name)


def check_run_dir(run_dir: Path) -> None:
    """Before writing into an existing run directory: every entry satbench may write (the files at
    its top level, the subdirectories in RUN_SUBDIRS and the files in them) holds to the rule."""
    for entry in _entries(run_dir):
        if entry.name in RUN_SUBDIRS:
            check_run_subdir_files(run_dir / entry.name)
        elif not entry.is_dir(follow_symlinks=False):
            check_writable_file(run_dir / entry.name)


def default_run_dir(root: Path = Path("runs")) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return root / f"{stamp}-{secrets.token_hex(2)}"


def check_new_run_dir(path: Path) -> None:
    """Refuse, without creating anything, a path that is a file or a directory holding something."""
    try:
        if path.exists() and not path.is_dir():
            raise UserError(f"-o {path}: a file of that name exists; a run directory is a directory")
        if path.exists() and any(path.iterdir()):
            raise UserError(f"run directory {path} is not empty; choose another with -o")
    except OSError as exc:
        raise UserError(f"-o {path}: {exc.strerror or exc}") from exc


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
    without a lock file was never held, and a lock file that is a link is not followed (the
    command's own writes refuse the run directory then)."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
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
    """Hold the run directory for one sweep; UserError when another process holds it. The run
    directory is checked by the rule (check_run_dir) first, so a link in it refuses the sweep
    before anything is written."""
    path = run_dir / LOCK_FILE
    check_run_dir(run_dir)
    fd = open_run_fd(path, os.O_RDWR | os.O_CREAT)
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


def hold_room(run_dir: Path, sizes: list[int]) -> None:
    """Hold space of the run directory's file system in ROOM_FILE while a sweep runs, so that a disk
    that fills during the run still has room for run.json's last write (`free_room` first): the
    first of `sizes` (bytes, largest first) the disk can give. A disk too full to hold even the last
    is no error: the run's own writes will say so."""
    try:
        fd = open_run_fd(run_dir / ROOM_FILE, os.O_RDWR | os.O_CREAT)
    except RunDirError:
        return
    try:
        for nbytes in sizes:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.posix_fallocate(fd, 0, nbytes)
                return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)


def free_room(run_dir: Path) -> None:
    """Give back the space `hold_room` held (nothing if none is held or the directory refuses: the
    write that follows says why)."""
    with contextlib.suppress(OSError):
        os.unlink(run_dir / ROOM_FILE)
