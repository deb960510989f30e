"""Power of the fairness and starvation checks: each check against the fake llama.cpp server (its own
process) with graded unfairness, from clearly fair through the check's bound to gross, each degree run
`--runs` times (10 by default), with the checks' default configuration; then each check against a fair
scheduler with a CPU hog (one busy-loop process per core taken) beside it.

The fake (tests/fakes/fake_script.py) has one graded knob per check and its docstring gives the true
value of the check's statistic at each degree: F1 a slow slot's rate r (true service ratio 1/r), F2 the
same slot holding the smallest request together (true slowdown from tests/fakes/scripted_time), F3 the
share of releases that go to the newest waiter (drawn with the fake's fixed seed), S1 the prompt chunk
a decode iteration admits (in n_batch), S2 and S3 a delay in decode iterations.

Prints one row per check and degree: the true value where it has one, the bound, how many runs passed,
were marginal, failed or were inconclusive, the median estimate and the median rounds; then per check
the smallest degree failed in every run, whether the fair scheduler passed every run, whether any degree
got both a pass and a fail, and whether the CPU hog made the fair scheduler fail.

    python benchmarks/fairness_power.py [--checks F1,F2,F3,S1,S2,S3] [--runs 10] [--hog-cores 1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fake_proc import ROOT, cpu_hog, start_fake, stop_fake

sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.builders import ListSink  # noqa: E402
from tests.fakes.fairness_harness import FAIR, Quiet  # noqa: E402
from tests.fakes.fake_script import FakeScript  # noqa: E402
from tests.fakes.scripted_time import f2_slowdowns  # noqa: E402

from satbench.analysis.checks import lane_verdicts  # noqa: E402
from satbench.analysis.verdicts import Verdict  # noqa: E402
from satbench.config.schema import FairnessConfig, LaneConfig, RuntimeConfig, ServerParams, WorkloadConfig  # noqa: E402
from satbench.pipeline import FAIRNESS_JUDGE  # noqa: E402
from satbench.records.events import RequestEvent  # noqa: E402
from satbench.records.manifest import ModelInfo  # noqa: E402
from satbench.run.fairness import FairnessRunner  # noqa: E402
from satbench.run.lane_session import LaneSession  # noqa: E402
from satbench.server.remote import UrlRuntime  # noqa: E402
from satbench.workload.fairness_plan import make_plan  # noqa: E402

WORKLOAD = WorkloadConfig(prompt_tokens=32, output_tokens=16)
K = FAIR["n_slots"] - 1  # S1's and S2's decoders beside the probe or prompt


def degrees(check: str) -> list[tuple[str, dict, float | None]]:
    """(label, the fake's knobs, the true value of the check's statistic or None) per degree."""
    n_batch = FAIR["n_batch"]
    if check == "F1":
        return [(f"r={r:.3g}", {"slow_slots": [1], "slow_slot_rate": r} if r < 1 else {}, 1 / r)
                for r in (1.0, 11 / 12, 0.9, 7 / 8, 0.8, 0.5)]
    if check == "F2":
        plan = make_plan(LaneConfig(workload=WORKLOAD, server=ServerParams(n_batch=n_batch)), FAIR["n_slots"])
        out = []
        for r in (1.0, 0.85, 0.75, 0.65, 0.5, 0.3):
            knob = {"slow_slots": [len(plan.f2_sizes) - 1], "slow_slot_rate": r} if r < 1 else {}
            out.append((f"r={r:g}", knob, max(f2_slowdowns(FakeScript(**FAIR, **knob), plan.f2_sizes))))
        return out
    if check == "F3":
        return [(f"p={p:g}", {"lifo_share": p} if p else {}, None) for p in (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)]
    if check == "S1":
        return [(f"f={f:g}", {"prefill_chunk_factor": f} if f > 1 else {},
                 (int(f * n_batch) - K) / n_batch) for f in (1.0, 1.25, 1.4, 1.5, 1.6, 1.75)] + [
            ("prefill_first", {"prefill_first": True}, None)]
    if check == "S2":
        return [(f"d={d:g}", {"admit_delay_iterations": d} if d else {}, None)
                for d in (0.0, 0.5, 1.0, 1.5, 2.0, 4.0)] + [
            ("hold_while_decoding", {"hold_while_decoding": True}, None)]
    return [(f"d={d:g}", {"second_prompt_delay_iterations": d} if d else {}, None)
            for d in (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)]


async def judged(check: str, url: str, slots: int) -> Verdict:
    """The check's verdict on the fake at `url`, run as `satbench fairness` runs it (base rounds, then
    top-ups while marginal), with the default FairnessConfig."""
    fairness = FairnessConfig(checks=[check])
    lane = LaneConfig(workload=WORKLOAD, server=ServerParams(n_batch=FAIR["n_batch"]), fairness=fairness,
                      runtime=RuntimeConfig(kind="url", model=None, url=url))
    session = LaneSession(lane, "fairness", UrlRuntime(url), ModelInfo(), None, "p")
    events, samples = ListSink(), ListSink()
    await session.open(samples, None)
    try:
        plan = make_plan(lane, slots)
        runner = FairnessRunner(session, plan, events, Quiet(), "p", FAIRNESS_JUDGE)
        await runner.prepare()
        await runner.calibration()
        await getattr(runner, check.lower())()
    finally:
        await session.close()
    reqs = [r for r in events.records if isinstance(r, RequestEvent)]
    return next(v for v in lane_verdicts(reqs, plan, fairness, True) if v.check == check)


def one(check: str, knob: dict, seed: int, tmp: Path) -> Verdict:
    """One run of `check` on a fresh fake with `knob`. F3's LIFO draws keep the fake's fixed seed, so a
    degree is one scheduler run `--runs` times (runs differ by timing alone), not a new draw each run."""
    proc, url = start_fake({**FAIR, **knob}, tmp, f"{check}-{seed}")
    try:
        return asyncio.run(judged(check, url, FAIR["n_slots"]))
    finally:
        stop_fake(proc)


def row(check: str, label: str, true: float | None, got: list[Verdict]) -> tuple[str, dict[str, int]]:
    counts = {k: sum(v.verdict == k for v in got) for k in ("pass", "marginal", "fail", "inconclusive")}
    stats = [v.statistics for v in got if v.statistics]
    first = stats[0] if stats else []
    names = [s.name for s in first]
    medians = [statistics.median(s[i].estimate for s in stats) for i in range(len(names))]
    bounds = [statistics.median(s[i].bound for s in stats) for i in range(len(names))]
    shown = "; ".join(f"{n} {m:.3g} (bound {b:.3g})" for n, m, b in zip(names, medians, bounds)) or "-"
    rounds = statistics.median(v.rounds for v in got) if got else 0
    truth = "-" if true is None else f"{true:.3g}"
    return (f"| {check} | {label} | {truth} | {counts['pass']} | {counts['marginal']} | {counts['fail']} | "
            f"{counts['inconclusive']} | {shown} | {rounds:g} |"), counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checks", default="F1,F2,F3,S1,S2,S3")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--hog-cores", type=int, default=1, help="busy-loop processes beside the fair runs")
    a = ap.parse_args()
    t0 = time.monotonic()
    header = ("| check | degree | true value | pass | marginal | fail | inconclusive | median estimate "
              "(bound) | median rounds |\n|---|---|---|---|---|---|---|---|---|")
    print(header, flush=True)
    summary = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for check in a.checks.split(","):
            seen = []
            for label, knob, true in degrees(check):
                got = [one(check, knob, seed, tmp) for seed in range(a.runs)]
                text, counts = row(check, label, true, got)
                print(text, flush=True)
                seen.append((label, counts))
            with cpu_hog(a.hog_cores):
                got = [one(check, {}, seed, tmp) for seed in range(a.runs)]
            true = 1.0 if check == "F1" else None
            text, hog = row(check, f"fair + CPU hog ({a.hog_cores} core)", true, got)
            print(text, flush=True)
            always = next((label for label, c in seen if c["fail"] == a.runs), "none")
            fair = seen[0][1]
            both = [label for label, c in seen if c["pass"] and c["fail"]]
            summary.append(f"- {check}: smallest degree failed in {a.runs} of {a.runs} runs: {always}; fair "
                           f"scheduler passed {fair['pass']} of {a.runs}; degrees with both a pass and a "
                           f"fail: {', '.join(both) or 'none'}; fair + CPU hog failed {hog['fail']} of "
                           f"{a.runs} (passed {hog['pass']}, marginal {hog['marginal']}, inconclusive "
                           f"{hog['inconclusive']})")
    print("\n" + "\n".join(summary))
    print(f"\n{time.monotonic() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
