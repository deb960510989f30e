"""Writing a file whole or not at all: run.json, results, reports, plots, and -o outputs."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from pathlib import Path

from satbench.errors import RunDirError

STDOUT_NAMES = {"/dev/stdout": 1, "/dev/stderr": 2}  # -o names for the process's own output streams


def write_text_atomic(path: Path, text: str | bytes, *, run_dir: Path | None = None,
                      output_flag: str | None = None) -> None:
    """Write to a temporary file beside `path`, fsync it, then rename over `path`: a crash or a
    full disk leaves the old file (or none), never a half-written one, and no temporary file.

    The rename replaces the name `path`, so it never writes through a link; still, a `path` that
    exists and is not a regular file with one link owned by this user (a symbolic link, a hard
    link to a file elsewhere, a directory, a pipe) is refused, not replaced: RunDirError naming it
    (satbench.records.rundir.check_writable_file). That check applies to every target, in a run directory
    or not (capability -o). With `run_dir` (a file in a subdirectory of a run directory, such as
    plots/), every directory between `run_dir` and `path` must also be a real directory, not a
    link out of it; without it the parent directory is taken as the caller named it.

    `output_flag` (e.g. "-o"): `path` is a file the user named outside any run directory. A refusal
    then says "choose another -o"; /dev/stdout, /dev/stderr and a character device (/dev/null, a
    terminal) are streams, not files to replace: written directly, not atomically."""
    from satbench.records.rundir import check_parents, check_writable_file

    if run_dir is not None:
        check_parents(run_dir, path)
    data = text.encode("utf-8") if isinstance(text, str) else text
    if output_flag is not None and _write_stream(path, data):
        return
    check_writable_file(path, None if output_flag is None else f"choose another {output_flag}")
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are meant to be shared
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise RunDirError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _write_stream(path: Path, data: bytes) -> bool:
    """Write `data` to `path` when it names an output stream of this process or a character
    device; False (nothing written) for anything else."""
    fd = STDOUT_NAMES.get(os.fspath(path))
    try:
        if fd is None:
            if not stat.S_ISCHR(os.stat(path).st_mode):
                return False
            with open(path, "wb", buffering=0) as fh:
                fh.write(data)
            return True
        sys.stdout.flush()
        sys.stderr.flush()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise RunDirError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return True
