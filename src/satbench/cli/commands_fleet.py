"""`satbench fleet merge` (per-node capability reports → one router configuration) and `satbench
fleet run` (the same lanes on every node of a Ray cluster)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from satbench.errors import UserError

MERGE_REFUSED = 8


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
    return 0


def cmd_fleet(a: argparse.Namespace) -> int:
    if a.fleet_command == "merge":
        return cmd_fleet_merge(a)
    raise UserError(f"fleet {a.fleet_command}: not available")
