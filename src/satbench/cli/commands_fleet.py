"""`satbench fleet merge` (per-node capability reports → one router configuration) and `satbench
fleet run` (the same lanes on every node of a Ray cluster)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from satbench.cli.exits import FLEET_INCOMPLETE, MERGE_REFUSED, OK
from satbench.errors import UserError
from satbench.fleet.node_task import SweepFn


def write_out(text: str, output: str | None) -> None:
    if output:
        from satbench.records.manifest import write_text_atomic

        write_text_atomic(Path(output), text, output_flag="-o")
    else:
        sys.stdout.write(text)


def render_merged(merged, fmt: str, now: dt.datetime) -> str:
    from satbench.fleet.export import render_fleet_json, render_fleet_litellm, render_fleet_prometheus

    render = {"json": render_fleet_json, "litellm": render_fleet_litellm,
              "prometheus": render_fleet_prometheus}[fmt]
    return render(merged, now)


def cmd_fleet_merge(a: argparse.Namespace) -> int:
    """Every report checked (fleet.merge); one refused report refuses the merge: each refusal is one
    line on stderr, and nothing is written."""
    from satbench.fleet.merge import merge_reports

    now = dt.datetime.now(dt.timezone.utc)
    merged, refused = merge_reports([Path(p) for p in a.reports], now, dt.timedelta(days=a.max_age_days))
    for r in refused:
        print(f"satbench: refused {r.path}: {r.reason}", file=sys.stderr)
    if refused:
        print(f"satbench: error: fleet merge: {len(refused)} of {len(a.reports)} reports refused; nothing "
              "written", file=sys.stderr)
        return MERGE_REFUSED
    write_out(render_merged(merged, a.format, now), a.output)
    from satbench.cli.output import emit

    emit(a, render_merged(merged, "json", now))
    return OK


def cmd_fleet_run(a: argparse.Namespace, node_sweep: SweepFn) -> int:
    """The fleet run (fleet.run.run_fleet): each node's sweep is `node_sweep`, the one `satbench sweep`
    runs. Exit 0 when every node was measured, verified and merged; else FLEET_INCOMPLETE, each node
    that was not named with its reason."""
    try:
        import ray  # noqa: F401
    except ImportError as exc:
        raise UserError("satbench fleet run needs Ray: pip install 'satbench[fleet]'") from exc
    import os

    from satbench.cli.lanefile import load_lane_file
    from satbench.fleet.inventory import lane_file_of, load_inventory
    from satbench.fleet.run import run_fleet
    from satbench.records.rundir import check_new_run_dir, default_run_dir

    path = Path(a.inventory)
    inv = load_inventory(path)
    lane_file = lane_file_of(inv, path)
    cfg = load_lane_file(lane_file)
    out = Path(a.output) if a.output else default_run_dir(Path("fleet"))
    check_new_run_dir(out)
    record = run_fleet(inv, path, cfg, lane_file, out, node_sweep, address=a.address or os.environ.get(
        "RAY_ADDRESS"), per_class=a.per_class, show_progress=not (a.no_progress or a.quiet))
    for node in record.nodes:
        mode = f" ({node.mode})" if node.mode else ""
        why = f": {node.reason}" if node.reason else ""
        print(f"{node.node_id}: {node.state}{mode}{why}")
        for flag in node.flags:
            print(f"{node.node_id}: FLAGGED: {flag}")
    print(f"fleet directory: {out} ({len(record.merged)} of {len(record.nodes)} nodes merged: "
          f"capability.json, litellm.yaml, capability.prom; fleet.json)")
    code = OK if len(record.merged) == len(record.nodes) else FLEET_INCOMPLETE
    from satbench.cli.output import FleetRunOutput, emit

    emit(a, FleetRunOutput(fleet_dir=str(out), exit_code=code, record=record))
    return code


def cmd_fleet(a: argparse.Namespace, node_sweep: SweepFn) -> int:
    if a.fleet_command == "merge":
        return cmd_fleet_merge(a)
    return cmd_fleet_run(a, node_sweep)
