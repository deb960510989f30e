"""The answer comes first: EVIDENCE.md and report.html open, right after the title, with each lane's
recommended concurrency, its binding reason, the fairness and starvation verdicts and every warning
that makes the number doubtful; the provenance (what was run, machine, models) follows."""

from __future__ import annotations

from pathlib import Path

from satbench.analysis.results import ResultsFile
from satbench.analysis.verdicts import inconclusive, make_verdict
from satbench.metrics.flags import Flag, FlagKind
from satbench.records.manifest import NetworkInfo, RuntimeInfo
from satbench.report.document import render_html, render_markdown
from satbench.report.evidence import evidence_blocks
from satbench.saturation.recommend import recommend_lane
from satbench.saturation.recommendations_file import Binding, RecommendationsFile
from tests.builders import replaced
from tests.report.test_compare import lane, results

PROVENANCE = ("What was run", "Machine", "Lanes: models and runtimes")


def _recs(res: ResultsFile) -> RecommendationsFile:
    return RecommendationsFile(created_at="2026-01-01T00:00:00+00:00", satbench_version="0.0",
                               satbench_commit=None, run_id=res.run_id, results_sha256="0" * 64,
                               lanes=[r for ln in res.lanes if (r := recommend_lane(ln, res)) is not None])


def _markdown(res: ResultsFile, recs: RecommendationsFile | None) -> str:
    return render_markdown(evidence_blocks(res, recs, "abc", [], []))


def _answer(res: ResultsFile, recs: RecommendationsFile | None = None) -> str:
    """EVIDENCE.md's Answer section alone: from its heading to the next section's."""
    text = _markdown(res, _recs(res) if recs is None else recs)
    return text.split("## Answer\n", 1)[1].split("\n## ", 1)[0]


def test_the_answer_comes_right_after_the_title_and_before_the_provenance_in_both_files(tmp_path: Path):
    res = results(lane("dense"), lane("moe"))
    blocks = evidence_blocks(res, _recs(res), "abc", [], [])
    md = render_markdown(blocks)
    assert md.startswith("# satbench evidence: run run-a\n\n## Answer\n\n")
    where = [md.index(f"\n## {s}\n") for s in ("Answer", *PROVENANCE, "Lane dense", "Recommendations")]
    assert where == sorted(where)
    assert md.index("Status: complete.") > md.index("\n## What was run\n")  # the status is provenance
    html = render_html(blocks, tmp_path, "satbench run run-a")
    anchors = [html.index(f'<h2 id="{a}">') for a in ("answer", "what-was-run", "machine",
                                                        "lanes-models-and-runtimes")]
    assert anchors == sorted(anchors)
    assert html.index("<h1 ") < anchors[0] and "<p>Status: complete." not in html[:anchors[1]]
    answer = html[anchors[0]:anchors[1]]
    assert "<th>recommended concurrency</th>" in answer
    assert "<td>dense</td>" in answer and "<td>moe</td>" in answer


def test_each_lane_has_its_number_binding_and_verdicts_in_the_answer():
    res = results(lane("dense", levels=(1, 2, 4, 8)))
    rec = _recs(res).lanes[0]
    answer = _answer(res)
    assert f"| dense | {rec.recommended_concurrency} | {rec.binding.reason}" in answer
    assert f"- dense: binding — {rec.binding.detail}\n" in answer
    assert "not run (--with-fairness runs them)" in answer


def test_a_failed_and_an_inconclusive_verdict_are_counted_and_named():
    ln = lane("dense", levels=(1, 2, 4, 8)).model_copy(update={"fairness": [
        make_verdict("F1", "fail", concurrency=4), make_verdict("S1", "pass", concurrency=3),
        inconclusive("S2", "too few probes")]})
    answer = _answer(results(ln))
    # nothing at or above 4; the curve still gains at 2 and N=3 was not measured: a range, its top set by F1
    assert ("| dense | 2 (2 to 3?) | undetermined | 3 checks: 1 pass, 1 fail, 1 inconclusive; failed: "
            "F1 equal requests at 4 in flight; inconclusive: S2 prompt admission while decoding |") in answer
    assert ("- dense: binding — between 2 and 3, not settled (undetermined says why); at most N=3: "
            "fairness: F1 (equal requests) failed at 4 in flight") in answer


def test_a_contended_lane_says_so_in_the_answer():
    ln = lane("dense", levels=(1, 2, 4))
    why = "other processes took 0.9 of 2 cores"
    ln = ln.model_copy(update={"levels": [lv.model_copy(update={"contended": why}) for lv in ln.levels]})
    answer = _answer(results(ln))
    assert "(contended) |" in answer
    assert "- dense: CONTENDED — levels 1, 2, 4 ran while other processes took CPU" in answer


def test_an_undetermined_lane_says_so_plainly_once():
    res = results(lane("dense"))
    recs = _recs(res)
    why = "N=4 may still gain ≥ 10% per doubling over N=2 (P = 0.40): between 2 and 4"
    recs.lanes[0] = recs.lanes[0].model_copy(update={
        "undetermined": why, "recommended_concurrency": 2, "recommended_range": (2, 4), "confidence": None,
        "binding": Binding(reason="undetermined", detail="between 2 and 4, not settled (undetermined says "
                                                         "why)")})
    answer = _answer(res, recs)
    assert "| dense | 2 (2 to 4?) | undetermined |" in answer
    assert answer.count(why) == 1 and f"- dense: UNDETERMINED — {why}" in answer
    assert "- dense: binding — between 2 and 4, not settled" in answer


def test_the_recommended_levels_flags_and_the_lanes_caveats_are_warnings():
    ln = replaced(lane("v4", levels=(1, 2, 4)), {"model.synthetic": True})
    rec = recommend_lane(ln, results(ln))
    assert rec is not None and rec.recommended_concurrency is not None
    at = next(k for k, lv in enumerate(ln.levels) if lv.concurrency == rec.recommended_concurrency)
    other = next(k for k, lv in enumerate(ln.levels) if lv.concurrency != rec.recommended_concurrency)
    few = Flag.of(FlagKind.FEW_SAMPLES, "p95 from 93 requests (< 100); read its CI")
    ln = replaced(ln, {f"levels.{at}.flags": [few],
                       f"levels.{other}.flags": [Flag("littles_law: not this one")]})
    at = ln.levels[at]
    answer = _answer(results(ln))
    assert f"- v4: flag at N={at.concurrency} — few_samples: p95 from 93 requests" in answer
    assert "littles_law" not in answer  # a flag of another level stays in "Flags raised"
    assert "- v4: SYNTHETIC random weights" in answer


def test_a_server_on_another_machine_and_an_unfinished_run_are_warnings():
    far = lane("remote").model_copy(update={
        "runtime": RuntimeInfo(kind="url", name="running server", llamacpp=True, build_number=1,
                               base_url="http://192.0.2.7:8080"),
        "network": NetworkInfo(path="remote", server_on_this_machine=False)})
    res = results(far).model_copy(update={"status": "interrupted", "status_reason": "SIGINT at level 4"})
    answer = _answer(res)
    assert "- run status: interrupted — SIGINT at level 4\n" in answer
    assert "- remote: a server on another machine (given by --url, remote network path)" in answer


def test_without_recommendations_the_answer_says_none_were_computed():
    empty = RecommendationsFile.model_construct(schema_version="x", lanes=[])
    answer = _answer(results(lane("dense")), empty)
    assert "| dense | none | n/a |" in answer and "no measured level has a throughput" in answer
    text = _markdown(results(lane("dense")), None)
    assert "| dense | none | n/a |" in text and "`satbench recommend .` inside the run directory" in text
