"""The run directory's file names, raw and derived, and the one operation that clears the derived
ones before a new derivation.

Invariant: every raw file is written by the measuring side only; every derived file can be written
again from the raw files alone (`satbench analyze`, `recommend`, `report`)."""

from __future__ import annotations

from pathlib import Path

from satbench.errors import RunDirError

RESULTS_FILE = "results.json"
VERDICTS_FILE = "verdicts.json"
RECOMMENDATIONS_FILE = "recommendations.json"
SUMS_FILE = "SHA256SUMS"
CSV_FILE = "results.csv"
PLOTS_DIR = "plots"
EVIDENCE_FILE = "EVIDENCE.md"
HTML_FILE = "report.html"


def clear_derived(run_dir: Path) -> None:
    """Remove the derived files that a new derivation replaces and `satbench report` would otherwise
    reuse (results.json, verdicts.json, recommendations.json) and SHA256SUMS, the bundle's last
    file: a derivation cut short (Ctrl-C) then leaves nothing stale, and no SHA256SUMS ("report
    missing": `report`, or `sweep --resume`, derives it all from the raw files)."""
    for name in (SUMS_FILE, RECOMMENDATIONS_FILE, VERDICTS_FILE, RESULTS_FILE):
        try:
            (run_dir / name).unlink(missing_ok=True)
        except OSError as exc:
            raise RunDirError(f"cannot remove {run_dir / name} before deriving it anew: "
                              f"{exc.strerror or exc}") from exc
