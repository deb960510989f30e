"""What every command pays before it runs: the parser's imports, and the API's that `analyze`,
`recommend` and `report` go through. Reading a run directory or printing --help must not import the
HTTP stack (aiohttp is ~0.1 s of CPU on this 2-core box); only a command that talks to a server
loads it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

BUNDLE = Path(__file__).resolve().parents[2] / "evidence" / "cpu-2core-2026-12-01" / "run"


def test_the_cli_and_the_api_do_not_import_the_http_stack():
    code = ("import sys; import satbench.cli.main, satbench.api; "
            "print(sorted(m for m in ('aiohttp', 'satbench.http.client', 'satbench.server.checks') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


LAZY = ("numpy", "scipy", "jsonschema", "matplotlib", "aiohttp", "satbench.analysis.analyze",
        "satbench.report.bundle", "satbench.saturation.planner", "satbench.cli.output")
"""What each stage imports where it is first used, not when the CLI, the API or the pipeline is
imported: numpy (the per-level metrics, the CIs, the USL fit), scipy (a fit), jsonschema (a document
written), matplotlib (the plots), the HTTP stack, the analysis, the report, the planner, --json's models."""


def _loaded_after(code: str) -> list[str]:
    """The modules of LAZY loaded once `code` has run in a fresh interpreter (its last stdout line)."""
    probe = f"{code}\nimport sys\nprint(sorted(m for m in {LAZY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


def test_importing_the_cli_the_api_and_the_pipeline_loads_no_stage():
    assert _loaded_after("import satbench.cli.main, satbench.api, satbench.pipeline") == []


def test_each_read_command_loads_what_it_uses_and_no_later_stage(tmp_path):
    """On the committed bundle's raw files: analyze computes (numpy) and writes (jsonschema) but
    neither fits (scipy) nor plots; recommend on its results.json fits the USL (numpy, scipy) and
    writes, without the per-level metrics or the report; report plots. None loads --json's models or
    the HTTP stack."""
    from tests.bundles import unpacked_copy

    run = unpacked_copy(BUNDLE, tmp_path / "run")
    loaded = {command: _loaded_after(f"from satbench.cli.main import main\n"
                                     f"assert main([{command!r}, {str(run)!r}]) == 0")
              for command in ("analyze", "recommend", "report")}
    assert loaded["analyze"] == ["jsonschema", "numpy", "satbench.analysis.analyze"]
    assert loaded["recommend"] == ["jsonschema", "numpy", "scipy"]
    assert "matplotlib" in loaded["report"]
    assert not {"aiohttp", "satbench.cli.output", "satbench.saturation.planner"} & set(loaded["report"])
