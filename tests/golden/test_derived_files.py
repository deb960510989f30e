"""Golden: `analyze`, `recommend`, `report` and `capability` give byte-identical derived files on a
fixed recorded run (the committed dense + V4 CPU bundle), and every command's `--help` is unchanged.

The expected bytes are the bundle's own committed derived files; the capability report and the help
texts are pinned in `tests/golden/expected/`. Regenerate those with `SATBENCH_GOLDEN_WRITE=1` only
when a change of output is intended, and say so in the commit."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.bundles import unpacked_copy

from satbench.capability.identity import NodeBlock
from satbench.capability.node import NodeLane
from satbench.capability.report import capability_report, render_json
from satbench.cli.main import main
from satbench.config.schema import RunConfig
from satbench.records.manifest import HostInfo
from satbench.saturation import recommend as recommend_module

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "evidence" / "cpu-2core-2026-12-01" / "run"
EXPECTED = Path(__file__).parent / "expected"
WRITE = os.environ.get("SATBENCH_GOLDEN_WRITE") == "1"
DERIVED = ["results.json", "recommendations.json", "results.csv", "EVIDENCE.md", "report.html"]
COMMANDS = [[], ["sweep"], ["fairness"], ["analyze"], ["schema"], ["recommend"], ["capability"], ["report"],
            ["verify"], ["compare"], ["models"], ["models", "make"], ["fleet"], ["fleet", "run"],
            ["fleet", "merge"], ["completion"]]


class _FrozenClock:
    """`datetime` whose now() is the committed recommendations' `created_at`, the one clock read."""

    def __init__(self, at: dt.datetime) -> None:
        self.at = at

    def now(self, tz=None):
        return self.at


@pytest.fixture(scope="module")
def rederived(tmp_path_factory) -> Path:
    """The bundle's raw files alone, then `analyze`, `recommend` and `report` run on them, with the
    clock at the committed recommendations' `created_at`."""
    created = json.loads((BUNDLE / "recommendations.json").read_text())["created_at"]
    patch = pytest.MonkeyPatch()
    clock = _FrozenClock(dt.datetime.fromisoformat(created))
    patch.setattr(recommend_module, "dt", SimpleNamespace(datetime=clock, timezone=dt.timezone))
    run = unpacked_copy(BUNDLE, tmp_path_factory.mktemp("golden") / "run")
    for name in DERIVED + ["SHA256SUMS"]:
        (run / name).unlink()
    shutil.rmtree(run / "plots")
    try:
        for command in ("analyze", "recommend", "report"):
            assert main([command, str(run)]) == 0, command
    finally:
        patch.undo()
    return run


@pytest.mark.parametrize("name", DERIVED + ["SHA256SUMS"])
def test_a_derived_file_is_byte_identical_to_the_committed_one(rederived, name):
    assert (rederived / name).read_bytes() == (BUNDLE / name).read_bytes(), name


def test_the_plots_are_byte_identical_to_the_committed_ones(rederived):
    names = sorted(p.name for p in (BUNDLE / "plots").iterdir())
    assert names == sorted(p.name for p in (rederived / "plots").iterdir())
    for name in names:
        assert (rederived / "plots" / name).read_bytes() == (BUNDLE / "plots" / name).read_bytes(), name


def _golden(name: str, text: str) -> None:
    path = EXPECTED / name
    if WRITE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), name


def test_the_capability_report_is_byte_identical(rederived):
    """Run on the measuring machine as recorded, at a fixed time, both lanes measured."""
    run = json.loads((rederived / "run.json").read_text())
    cfg = RunConfig.model_validate(run["config"])
    recs = json.loads((rederived / "recommendations.json").read_text())
    host = HostInfo.model_validate(run["provenance"]["host"])
    nodes = [NodeLane(lane=r["lane"], model_path=r["model"]["path"], model_sha256=r["model"]["sha256"],
                      runtime_kind=r["runtime"]["kind"], runtime_build=str(r["runtime"]["build_number"]))
             for r in recs["lanes"]]
    now = dt.datetime(2026, 12, 2, tzinfo=dt.timezone.utc)
    block = NodeBlock(node_id="node-a", hostname="node-a", addresses=["192.0.2.10"],
                      api_base={"dense": "http://node-a:8080/v1"})
    report = capability_report(cfg, rederived / "recommendations.json", dt.timedelta(days=30),
                               nodes=nodes, host=host, now=now, block=block)
    assert [lane.status for lane in report.lanes] == ["measured", "measured"]
    text = render_json(report).replace(str(rederived), "RUN")
    _golden("capability.json", text)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c) or "satbench")
def test_every_commands_help_is_unchanged(command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main(command + ["--help"])
    assert exit_.value.code == 0
    _golden(f"help/{'-'.join(command) or 'satbench'}.txt", out.getvalue())


USER_ERRORS = [["analyze", "MISSING"], ["recommend", "MISSING"], ["report", "MISSING"], ["verify", "MISSING"],
               ["compare", "MISSING", "MISSING"], ["schema", "nope"], ["sweep", "--concurrency", "0"],
               ["sweep", "--lanes", "MISSING.toml"], ["capability", "--recommendations", "MISSING"],
               ["models", "make", "--arch", "nope", "-o", "x.gguf"], ["fairness", "--checks", "Q9"]]


def test_the_exit_codes_and_first_lines_of_user_errors_are_unchanged(tmp_path, monkeypatch, capsys):
    """A user error: one line on stderr and the same exit status as before the rebuild."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "100")
    seen = []
    for argv in USER_ERRORS:
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
        err = capsys.readouterr().err.strip().splitlines()
        seen.append(f"{' '.join(argv)} -> {code}: {err[-1] if err else ''}")
    _golden("user-errors.txt", "\n".join(seen).replace(str(tmp_path), "TMP") + "\n")
