"""Derived files are written atomically: a failure mid-write leaves the previous file intact
and no temporary file behind."""

from __future__ import annotations

import os

import pytest

from satbench.errors import RunDirError
from satbench.records.manifest import write_text_atomic


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    write_text_atomic(path, '{"old": true}\n')

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(RunDirError, match=r"cannot write .*results\.json: No space left on device"):
        write_text_atomic(path, '{"new": true, "half": ')
    assert path.read_text() == '{"old": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_a_crash_before_the_rename_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "recommendations.json"
    write_text_atomic(path, "v1\n")
    monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    with pytest.raises(RunDirError):
        write_text_atomic(path, "v2\n")
    assert path.read_text() == "v1\n" and len(list(tmp_path.iterdir())) == 1


def test_bytes_and_permissions(tmp_path):
    path = tmp_path / "a.png"
    write_text_atomic(path, b"\x89PNG\r\n")
    assert path.read_bytes() == b"\x89PNG\r\n"
    assert oct(path.stat().st_mode & 0o777) == "0o644"
