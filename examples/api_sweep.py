"""Script satbench: sweep a running llama.cpp server and read its answer, with satbench.api.

    python examples/api_sweep.py http://127.0.0.1:8080 [RUN_DIR]

Prints each level's throughput and p95 TTFT, the recommended concurrency with its binding reason,
and what this node's capability report would advertise. The run directory is the same as
`satbench sweep --url URL -o RUN_DIR` writes (EVIDENCE.md, report.html, every raw file).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from satbench import api
from satbench.config.schema import LaneConfig, RunConfig, RuntimeConfig, WorkloadConfig
from satbench.errors import SatbenchError


def main(url: str, run_dir: Path) -> int:
    cfg = RunConfig(lanes=[LaneConfig(name="server", levels=[1, 2, 4], repetitions=2, requests_per_level=16,
                                      runtime=RuntimeConfig(kind="url", url=url, model=None),
                                      workload=WorkloadConfig(prompt_tokens=32, output_tokens=16))])
    try:
        outcome = api.sweep(cfg, run_dir)
    except SatbenchError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return exc.exit_code
    for lane in outcome.results.lanes:
        for lv in lane.levels:
            tok_s, ttft = lv.throughput.output_tok_per_s.value, lv.latency.ttft_ms.p95
            print(f"{lane.lane} N={lv.concurrency}: {tok_s or 0:.0f} output tok/s, "
                  f"p95 TTFT {ttft or 0:.1f} ms")
    assert outcome.recommendations is not None
    for rec in outcome.recommendations.lanes:
        print(f"{rec.lane}: recommended {rec.recommended_concurrency} ({rec.binding.reason})")
    report = api.capability(cfg, run_dir / "recommendations.json")
    for lane in report.lanes:
        print(f"{lane.lane}: advertised {lane.status}, max_concurrency {lane.max_concurrency}")
    print(f"evidence: {outcome.report.evidence}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    default = Path(tempfile.mkdtemp(prefix="satbench-api-")) / "run"
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else default
    sys.exit(main(sys.argv[1], target))
