"""A disk that fills during a run still records how the run ended: the sweep holds room for run.json's
last write (RUN/.room), freed just before it; and a level stopped while its own write fails leaves no
task exception unretrieved."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging

from satbench.errors import RunDirError
from satbench.load.liveness import StreamActivity, run_watched
from satbench.records import ledger as ledger_module
from satbench.records.rundir import ROOM_FILE, free_room, hold_room
from tests.faults.common import small_sweep, status_of


def test_room_is_held_at_the_first_size_the_disk_gives_and_freed(tmp_path):
    hold_room(tmp_path, [1 << 20, 4096])
    assert (tmp_path / ROOM_FILE).stat().st_size == 1 << 20
    hold_room(tmp_path, [1 << 62, 4096])  # more than any disk: the next size is held
    assert (tmp_path / ROOM_FILE).stat().st_size == 4096
    free_room(tmp_path)
    assert not (tmp_path / ROOM_FILE).exists()
    free_room(tmp_path)  # nothing held: no error


def test_the_last_write_of_run_json_comes_after_the_room_is_freed(fake_server, tmp_path, monkeypatch):
    from satbench.cli.main import main

    seen: list[bool] = []
    real = ledger_module.write_manifest

    def write(run_dir, manifest):
        if manifest.status != "running":
            seen.append((run_dir / ROOM_FILE).exists())
        elif (run_dir / "run.json").exists():
            assert (run_dir / ROOM_FILE).exists()  # held while the run goes on
        real(run_dir, manifest)

    monkeypatch.setattr(ledger_module, "write_manifest", write)
    fake = fake_server(n_slots=2, decode_iteration_ms=2.0)
    run_dir = tmp_path / "run"
    assert main(small_sweep(fake.base_url, run_dir, levels="1", requests=4, output=4)) == 0
    assert seen and not any(seen) and status_of(run_dir) == "complete"
    assert not (run_dir / ROOM_FILE).exists()


def test_work_that_fails_while_cancelled_leaves_no_exception_unretrieved(caplog):
    async def work():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise RunDirError("cannot write RUN/events.jsonl: No space left on device") from None

    async def never(_activity):
        await asyncio.sleep(10)
        return "never"

    async def go():
        task = asyncio.ensure_future(run_watched(work(), StreamActivity(), never))
        await asyncio.sleep(0.05)
        task.cancel("stopped: lane b failed in the together scenario")
        with contextlib.suppress(asyncio.CancelledError):
            await task

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(go())
        gc.collect()
    assert "never retrieved" not in caplog.text
