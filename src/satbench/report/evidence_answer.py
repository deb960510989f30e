"""The report's opening section, the answer: per lane the recommended concurrency, what binds it, the
fairness and starvation verdicts, and every warning that makes the number doubtful.

Built from the derived files alone (results.json, recommendations.json), before any provenance. Each
warning is a rule stated once elsewhere and gathered here: table.doubts (undetermined, contended,
confidence), evidence_findings.lane_caveats (SYNTHETIC weights, not llama.cpp, a server on another
machine), the flags of the recommended level (few samples, CPU contention, …) and table.status_line
(a run that did not complete). The sections after it hold the evidence in full.
"""

from __future__ import annotations

from satbench.analysis.results import LaneResult, ResultsFile
from satbench.report.document import Block, Bullets, Heading, Para, TableBlock
from satbench.report.evidence_findings import lane_caveats
from satbench.report.table import binding_cell, doubts, recommended_cell, status_line
from satbench.saturation.recommendations_file import LaneRecommendation, RecommendationsFile

ANSWER_HEADERS = ("lane", "recommended concurrency", "binding", "fairness and starvation")
_NAMED = (("fail", "failed"), ("marginal", "marginal (does not bind)"), ("inconclusive", "inconclusive"))


def verdict_summary(lane: LaneResult) -> str:
    """The lane's fairness and starvation checks counted by verdict, the failed, marginal and
    inconclusive ones named with the requests in flight while they ran; "not run" without --with-fairness."""
    if not lane.fairness:
        return "not run (--with-fairness runs them)"
    count = {kind: sum(v.verdict == kind for v in lane.fairness)
             for kind in ("pass", "fail", "marginal", "inconclusive")}
    text = (f"{len(lane.fairness)} checks: {count['pass']} pass, {count['fail']} fail, "
            + (f"{count['marginal']} marginal, " if count["marginal"] else "")
            + f"{count['inconclusive']} inconclusive")
    for kind, label in _NAMED:
        named = [f"{v.check} {v.name}" + (f" at {v.concurrency} in flight" if v.concurrency else "")
                 for v in lane.fairness if v.verdict == kind]
        if named:
            text += f"; {label}: " + ", ".join(named)
    return text


def lane_warnings(lane: LaneResult, r: LaneRecommendation) -> list[str]:
    """Every warning on the lane's recommendation: its doubts, the lane's caveats and the flags of the
    level it recommends."""
    flagged = [f"flag at N={lv.concurrency} — {flag}" for lv in lane.levels
               if lv.concurrency == r.recommended_concurrency for flag in lv.flags]
    return doubts(r) + lane_caveats(lane) + flagged


def _row_and_lines(lane: LaneResult, recs: RecommendationsFile | None) -> tuple[list[str], list[str]]:
    r = next((x for x in recs.lanes if x.lane == lane.lane), None) if recs is not None else None
    verdicts = verdict_summary(lane)
    if r is None:
        why = ("not computed: `satbench recommend .` inside the run directory writes recommendations.json"
               if recs is None else "none: no measured level has a throughput to recommend from")
        return [lane.lane, "none", "n/a", verdicts], [f"{lane.lane}: {why}"] + [
            f"{lane.lane}: {caveat}" for caveat in lane_caveats(lane)]
    lines = [f"{lane.lane}: binding — {r.binding.detail}"]
    lines += [f"{lane.lane}: {w}" for w in lane_warnings(lane, r)]
    return [lane.lane, recommended_cell(r), binding_cell(r), verdicts], lines


def answer(results: ResultsFile, recs: RecommendationsFile | None) -> list[Block]:
    rows, lines = [], [status] if (status := status_line(results, ".")) is not None else []
    for lane in results.lanes:
        row, more = _row_and_lines(lane, recs)
        rows.append(row)
        lines += more
    blocks: list[Block] = [
        Heading(level=2, text="Answer"),
        Para(text="Per lane: the concurrency to run it at (`recommendations.json`), the limit that binds it, "
                  "the fairness and starvation verdicts, and what makes the number doubtful. The evidence "
                  "follows: what was run and on what, every figure with its 95% CI, the flags and the "
                  "limitations."),
        TableBlock(headers=list(ANSWER_HEADERS), rows=rows)]
    if lines:
        blocks += [Para(text="Why each number, and every warning on it:"), Bullets(items=lines)]
    return blocks
