"""`satbench compare`: B ÷ A ratios, the significance rule, refusals, loading and printing."""

from __future__ import annotations

import random
import re

import pytest
from rich.console import Console

from satbench.analysis.results import (
    RESULTS_FILE,
    RESULTS_SCHEMA_VERSION,
    LaneResult,
    ResultsFile,
    write_results,
)
from satbench.config.schema import LaneConfig, RunConfig, RuntimeConfig, ServerParams, WorkloadConfig
from satbench.errors import RunDirError, UserError
from satbench.metrics.flags import Flag, FlagKind
from satbench.metrics.interference import Ratio
from satbench.metrics.level_result import (
    Counts,
    Latency,
    LevelResult,
    Memory,
    Occupancy,
    RepetitionResult,
    Throughput,
)
from satbench.metrics.stats import Distribution, Estimate, Interval, distribution, mean_estimate
from satbench.records.manifest import GpuInfo, HostInfo, ModelInfo, NetworkInfo, Provenance, RuntimeInfo
from satbench.report.compare import (
    Comparison,
    MetricComparison,
    compare_results,
    compare_runs,
    is_significant,
    load_results,
    print_comparison,
    ratio_cell,
)
from tests.builders import replaced

SHA_A = "a" * 12 + "0" * 52
SHA_B = "b" * 12 + "0" * 52


# ------------------------------------------------------------------------------------ builders

def _dist(rng: random.Random, n: int, median_ms: float) -> Distribution:
    return distribution([median_ms * rng.uniform(0.8, 1.3) for _ in range(n)])


def level(n: int, seed: int = 0, tok_per_s: float = 100.0) -> LevelResult:
    """A realistic level: three repetitions of throughput and of p95s (±3 %), 200 latency samples per
    metric."""
    rng = random.Random(seed + n)
    ttft, itl = 20.0 * n, 5.0 + n
    lat = Latency(ttft_ms=_dist(rng, 200, ttft), itl_ms=_dist(rng, 3000, itl),
                  tpot_ms=_dist(rng, 200, itl), e2e_ms=_dist(rng, 200, ttft + 31 * itl),
                  queue_time_ms=_dist(rng, 200, 1.0))
    reps = [RepetitionResult(repetition=i, status="complete", p95_ttft_ms=lat.ttft_ms.p95 * f,
                             p95_itl_ms=lat.itl_ms.p95 * f, p95_e2e_ms=lat.e2e_ms.p95 * f)
            for i, f in enumerate((0.97, 1.0, 1.03), 1)]
    return LevelResult(
        concurrency=n, repetitions=reps,
        throughput=Throughput(
            output_tok_per_s=mean_estimate([tok_per_s * n * f for f in (0.98, 1.0, 1.02)], floor=0.0),
            total_tok_per_s=mean_estimate([3 * tok_per_s * n * f for f in (0.98, 1.0, 1.02)], floor=0.0),
            req_per_s=mean_estimate([n * f for f in (0.98, 1.0, 1.02)], floor=0.0)),
        latency=lat,
        occupancy=Occupancy(slots=4), memory=Memory(),
        counts=Counts(requests_measured=200, requests_ok=200, requests_in_window=200, warmup_requests=n,
                      retries=0),
    )


def host(gpu: str = "NVIDIA H200") -> HostInfo:
    h = HostInfo(cpu_model="Xeon", cores_logical=16, ram_bytes=128 * 2**30, os="Linux", python="3.12",
                 gpus=[GpuInfo(name=gpu, memory_total_bytes=141 * 2**30)])
    return h.model_copy(update={"fingerprint_sha256": h.fingerprint()})


def lane(name: str = "dense", levels=(1, 2, 4), together=(), build: int = 11549,
         prompt: int = 64, sha: str | None = SHA_A) -> LaneResult:
    return LaneResult(
        lane=name, model=ModelInfo(path=f"/m/{name}.gguf", sha256=sha),
        runtime=RuntimeInfo(kind="embedded", name="xllamacpp", llamacpp=True, build_number=build,
                            backend="CUDA0", base_url="http://127.0.0.1:1"),
        network=NetworkInfo(path="loopback"), hardware=host(),
        workload=WorkloadConfig(prompt_tokens=prompt, output_tokens=32), server_params=ServerParams(),
        levels=[level(n) for n in levels], together_levels=[level(n, seed=99) for n in together],
    )


def results(*lanes: LaneResult, run_id: str = "run-a", h: HostInfo | None = None) -> ResultsFile:
    lanes = lanes or (lane(),)
    cfg = RunConfig(lanes=[LaneConfig(name=ln.lane, levels=[lv.concurrency for lv in ln.levels],
                                      workload=ln.workload, runtime=RuntimeConfig())
                           for ln in lanes])
    return ResultsFile(run_id=run_id, status="complete", started_at="2026-01-01T00:00:00+00:00",
                       command_line=["satbench", "run"], config=cfg,
                       provenance=Provenance(satbench_version="0.0", host=h or lanes[0].hardware),
                       lanes=list(lanes))


def scale_estimate(e: Estimate, k: float) -> Estimate:
    return e.model_copy(update={"value": e.value * k, "ci_low": e.ci_low * k, "ci_high": e.ci_high * k})


def scale_p95(lv: LevelResult, metric: str, k: float) -> LevelResult:
    """The level with its pooled p95 of `metric` ("ttft_ms", ...), its CI and every repetition's p95
    scaled by k."""
    d = getattr(lv.latency, metric)
    ci = d.ci["p95"]
    d = d.model_copy(update={"p95": d.p95 * k,
                             "ci": {**d.ci, "p95": Interval(low=ci.low * k, high=ci.high * k)}})
    name = f"p95_{metric}"
    reps = [r.model_copy(update={name: getattr(r, name) * k}) for r in lv.repetitions]
    return lv.model_copy(update={"latency": lv.latency.model_copy(update={metric: d}), "repetitions": reps})


def metric(cmp: Comparison, name: str, n: int, lane_i: int = 0, scenario: str = "solo"):
    lv = next(lv for lv in cmp.lanes[lane_i].levels if lv.concurrency == n and lv.scenario == scenario)
    return next(m for m in lv.metrics if m.metric == name)


@pytest.fixture
def a() -> ResultsFile:
    return results()


def derive(a: ResultsFile) -> ResultsFile:
    return a.model_copy(deep=True, update={"run_id": "run-b"})


# -------------------------------------------------------------------------------------- ratios

def test_a_run_compared_with_itself_has_every_ratio_one_and_nothing_significant(a):
    cmp = compare_results(a, a, "A", "B")
    assert [lv.concurrency for lv in cmp.lanes[0].levels] == [1, 2, 4]
    for lv in cmp.lanes[0].levels:
        assert [m.metric for m in lv.metrics] == ["output_tok_per_s", "p95_ttft_ms", "p95_itl_ms",
                                                  "p95_e2e_ms"]
        for m in lv.metrics:
            assert m.ratio.value == pytest.approx(1.0)
            assert m.ratio.ci_low < 1.0 < m.ratio.ci_high
            assert not m.significant and m.direction == "same"
    assert cmp.lanes[0].only_in_a == [] and cmp.lanes[0].only_in_b == []


def test_throughput_half_as_much_again_is_significantly_better(a):
    b = derive(a)
    faster = scale_estimate(b.lanes[0].levels[1].throughput.output_tok_per_s, 1.5)
    b = replaced(b, {"lanes.0.levels.1.throughput.output_tok_per_s": faster})
    m = metric(compare_results(a, b, "A", "B"), "output_tok_per_s", 2)
    assert m.ratio.value == pytest.approx(1.5) and m.ratio.ci_low > 1.0
    assert m.a == pytest.approx(200.0) and m.b == pytest.approx(300.0)
    assert m.significant and m.direction == "better"
    assert metric(compare_results(b, a, "B", "A"), "output_tok_per_s", 2).direction == "worse"


def test_two_percent_is_not_significant_even_when_the_ci_excludes_one(a):
    tight = Estimate(value=100.0, ci_low=99.9, ci_high=100.1, n=3, ci_method="t over repetitions")
    a = replaced(a, {"lanes.0.levels.0.throughput.output_tok_per_s": tight})
    b = replaced(derive(a), {"lanes.0.levels.0.throughput.output_tok_per_s": scale_estimate(tight, 1.02)})
    m = metric(compare_results(a, b, "A", "B"), "output_tok_per_s", 1)
    assert m.ratio.ci_low > 1.0
    assert not m.significant and m.direction == "same"
    big = metric(compare_results(a, b, "A", "B", min_effect=0.01), "output_tok_per_s", 1)
    assert big.significant and big.direction == "better"


def test_a_wide_ci_overlapping_one_is_not_significant(a):
    b = derive(a)
    e = b.lanes[0].levels[2].throughput.output_tok_per_s
    b = replaced(b, {"lanes.0.levels.2.throughput.output_tok_per_s": e.model_copy(
        update={"value": e.value * 1.3, "ci_low": e.value * 0.5, "ci_high": e.value * 2.1})})
    m = metric(compare_results(a, b, "A", "B"), "output_tok_per_s", 4)
    assert m.ratio.value == pytest.approx(1.3) and m.ratio.ci_low < 1.0
    assert not m.significant and m.direction == "same"


def test_halved_p95_latency_is_better_and_doubled_is_worse(a):
    b = derive(a)
    b = replaced(b, {"lanes.0.levels.0": scale_p95(b.lanes[0].levels[0], "ttft_ms", 0.5)})
    b = replaced(b, {"lanes.0.levels.0": scale_p95(b.lanes[0].levels[0], "e2e_ms", 2.0)})
    cmp = compare_results(a, b, "A", "B")
    ttft, e2e, itl = (metric(cmp, k, 1) for k in ("p95_ttft_ms", "p95_e2e_ms", "p95_itl_ms"))
    assert ttft.ratio.value == pytest.approx(0.5) and ttft.significant and ttft.direction == "better"
    assert e2e.ratio.value == pytest.approx(2.0) and e2e.significant and e2e.direction == "worse"
    assert not itl.significant


def test_an_open_ci_end_cannot_exclude_one(a):
    """A with one repetition: its p95 has no CI over repetitions, however tight its pooled CI."""
    b = derive(a)
    a = replaced(a, {"lanes.0.levels.0.repetitions": a.lanes[0].levels[0].repetitions[:1]})
    b = replaced(b, {"lanes.0.levels.0": scale_p95(b.lanes[0].levels[0], "ttft_ms", 2.0)})
    m = metric(compare_results(a, b, "A", "B"), "p95_ttft_ms", 1)
    assert m.ratio.value == pytest.approx(2.0) and m.ratio.ci_low is None and m.ratio.ci_high is None
    assert not m.significant and m.direction == "same"


def test_a_results_file_without_repetition_p95s_gets_a_note(a):
    b = derive(a)
    bare = [RepetitionResult(repetition=i, status="complete", window_s=1.0) for i in (1, 2, 3)]
    a = replaced(a, {"lanes.0.levels": [lv.model_copy(update={"repetitions": bare})
                                        for lv in a.lanes[0].levels]})
    cmp = compare_results(a, b, "A", "B")
    assert any(n.startswith("A has no per-repetition p95s") for n in cmp.lanes[0].notes)
    assert not any(n.startswith("B has no") for n in cmp.lanes[0].notes)
    assert metric(cmp, "p95_ttft_ms", 1).ratio.ci_low is None


def test_significance_rule_on_bare_ratios():
    assert is_significant(Ratio(value=1.05, ci_low=1.01, ci_high=1.1))
    assert is_significant(Ratio(value=0.9, ci_low=None, ci_high=0.95))
    assert not is_significant(Ratio(value=0.9, ci_low=0.85, ci_high=None))
    assert not is_significant(Ratio(value=None))
    assert not is_significant(Ratio(value=1.04, ci_low=1.01, ci_high=1.1))


def test_no_throughput_ci_gives_a_ratio_without_significance(a):
    a = replaced(a, {"lanes.0.levels.0.throughput.output_tok_per_s": Estimate(value=100.0, n=1)})
    b = replaced(derive(a), {"lanes.0.levels.0.throughput.output_tok_per_s": Estimate(value=300.0, n=1)})
    m = metric(compare_results(a, b, "A", "B"), "output_tok_per_s", 1)
    assert m.ratio == Ratio(value=3.0) and not m.significant


# ------------------------------------------------------------------------------------ refusals

def test_a_different_prompt_length_is_refused_naming_lane_and_field():
    with pytest.raises(UserError) as exc:
        compare_results(results(lane()), results(lane(prompt=128)), "A", "B")
    assert str(exc.value) == "cannot compare: lane dense: prompt_tokens 64 in A, 128 in B"


def test_a_lane_only_in_one_run_is_refused():
    with pytest.raises(UserError, match="lane moe only in B"):
        compare_results(results(lane()), results(lane(), lane("moe")), "A", "B")
    with pytest.raises(UserError, match="lane moe only in A"):
        compare_results(results(lane(), lane("moe")), results(lane()), "A", "B")


def test_a_different_model_file_is_refused_with_both_short_hashes():
    with pytest.raises(UserError) as exc:
        compare_results(results(lane()), results(lane(sha=SHA_B)), "A", "B")
    assert "lane dense: model aaaaaaaaaaaa in A, bbbbbbbbbbbb in B" in str(exc.value)


def test_every_difference_is_named_on_one_line(a):
    b = replaced(results(lane(prompt=128), lane("moe")),
                 {"lanes.0.runtime.kind": "native", "lanes.0.workload.shared_prefix": True})
    with pytest.raises(UserError) as exc:
        compare_results(a, b, "A", "B")
    msg = str(exc.value)
    assert "\n" not in msg
    for part in ("lane moe only in B", "prompt_tokens 64 in A, 128 in B",
                 "shared_prefix False in A, True in B", "runtime embedded in A, native in B"):
        assert part in msg


def test_an_unknown_model_hash_is_not_a_refusal_but_a_note():
    cmp = compare_results(results(lane()), results(lane(sha=None)), "A", "B")
    assert "model identity not checked: no sha256 in B" in cmp.lanes[0].notes


# --------------------------------------------------------------------- builds, machines, levels

def test_a_different_build_and_machine_is_compared_and_named_in_the_header(a):
    other = host("NVIDIA L4")
    b = results(lane(build=11600), run_id="run-b", h=other)
    cmp = compare_results(a, b, "runs/a", "runs/b")
    fa, fb = a.provenance.host.fingerprint_sha256[:12], other.fingerprint_sha256[:12]
    assert fa != fb
    assert f"A: build b11549 on {fa} · B: build b11600 on {fb}" in cmp.header
    assert any(line.startswith("machines differ:") and "NVIDIA L4" in line for line in cmp.header)
    assert cmp.header[0] == "A = runs/a (run run-a) · B = runs/b (run run-b)"


def test_levels_in_one_run_only_are_listed_not_refused():
    cmp = compare_results(results(lane(levels=(1, 2, 4))), results(lane(levels=(2, 4, 16))), "A", "B")
    ln = cmp.lanes[0]
    assert [lv.concurrency for lv in ln.levels] == [2, 4]
    assert ln.only_in_a == [1] and ln.only_in_b == [16]


def test_a_lane_without_a_common_level_gets_a_note():
    cmp = compare_results(results(lane(levels=(1, 2))), results(lane(levels=(4, 8))), "A", "B")
    ln = cmp.lanes[0]
    assert ln.levels == [] and ln.only_in_a == [1, 2] and ln.only_in_b == [4, 8]
    assert "no solo level in common (A: 1, 2; B: 4, 8)" in ln.notes


def test_together_levels_are_compared_when_both_runs_have_them():
    a = results(lane(together=(1, 2)), lane("moe", sha=SHA_B, together=(1, 2)))
    b = results(lane(together=(1, 2, 4)), lane("moe", sha=SHA_B, together=(1, 2)))
    b = replaced(b, {"lanes.1.together_levels.0.throughput.output_tok_per_s": scale_estimate(
        b.lanes[1].together_levels[0].throughput.output_tok_per_s, 0.5)})
    cmp = compare_results(a, b, "A", "B")
    assert [(lv.scenario, lv.concurrency) for lv in cmp.lanes[0].levels] == [
        ("solo", 1), ("solo", 2), ("solo", 4), ("together", 1), ("together", 2)]
    assert "together levels only in A: none; only in B: 4" in cmp.lanes[0].notes
    assert metric(cmp, "output_tok_per_s", 1, lane_i=1, scenario="together").direction == "worse"
    assert metric(cmp, "output_tok_per_s", 1, lane_i=1, scenario="solo").direction == "same"


def test_together_in_one_run_only_is_noted():
    cmp = compare_results(results(lane(together=(1,))), results(lane()), "A", "B")
    assert all(lv.scenario == "solo" for lv in cmp.lanes[0].levels)
    assert "together scenario only in A; not compared" in cmp.lanes[0].notes


def test_flags_of_compared_levels_travel_as_notes(a):
    b = derive(a)
    b = replaced(b, {"lanes.0.levels.2.flags": [Flag.of(FlagKind.QUEUE_BOUND, "4 streams but 2 slots"),
                                                Flag.of(FlagKind.FEW_SAMPLES, "p95 from 40 requests")]})
    cmp = compare_results(a, b, "A", "B")
    assert "solo N=4 flags: A none · B queue_bound, few_samples" in cmp.lanes[0].notes
    few = [Flag.of(FlagKind.FEW_SAMPLES, "p95 from 40 requests")]
    b = replaced(b, {"lanes.0.levels.0.flags": few, "lanes.0.levels.1.flags": few})
    notes = compare_results(a, b, "A", "B").lanes[0].notes
    assert "solo N=1, 2 flags: A none · B few_samples" in notes


def test_min_effect_out_of_range_is_a_user_error(a):
    with pytest.raises(UserError):
        compare_results(a, a, "A", "B", min_effect=-0.1)


# ------------------------------------------------------------------------------------- loading

def test_load_results_on_a_missing_dir_is_a_run_directory_error(tmp_path):
    with pytest.raises(RunDirError, match="no such run directory"):
        load_results(tmp_path / "nope")


def test_load_results_without_results_json_says_to_analyze(tmp_path):
    with pytest.raises(RunDirError, match=re.escape("no results.json; run `satbench analyze")):
        load_results(tmp_path)


def test_load_results_on_a_broken_file_is_a_run_directory_error(tmp_path):
    (tmp_path / RESULTS_FILE).write_text("{not json")
    with pytest.raises(RunDirError, match="cannot read it"):
        load_results(tmp_path)
    (tmp_path / RESULTS_FILE).write_text(f'{{"schema_version": "{RESULTS_SCHEMA_VERSION}", "run_id": 3}}')
    with pytest.raises(RunDirError, match=re.escape("not a valid results.json")):
        load_results(tmp_path)
    (tmp_path / RESULTS_FILE).write_text('{"schema_version": "1.0"}')
    with pytest.raises(RunDirError, match=f"results schema 1.0 is not {RESULTS_SCHEMA_VERSION}"):
        load_results(tmp_path)


def test_written_results_load_back_and_compare_end_to_end(a, tmp_path):
    b = derive(a)
    b = replaced(b, {"lanes.0.levels.1.throughput.output_tok_per_s": scale_estimate(
        b.lanes[0].levels[1].throughput.output_tok_per_s, 1.5)})
    for name, r in (("a", a), ("b", b)):
        (tmp_path / name).mkdir()
        write_results(tmp_path / name, r)  # validates the hand-built results against the schema
    assert load_results(tmp_path / "a") == a
    cmp = compare_runs(tmp_path / "a", tmp_path / "b")
    assert metric(cmp, "output_tok_per_s", 2).direction == "better"


# ------------------------------------------------------------------------------------ printing

def test_print_comparison_marks_the_significant_row_and_explains_the_marks(a):
    b = derive(a)
    b = replaced(b, {"lanes.0.levels.1.throughput.output_tok_per_s": scale_estimate(
        b.lanes[0].levels[1].throughput.output_tok_per_s, 1.5)})
    b = replaced(b, {"lanes.0.levels.2": scale_p95(b.lanes[0].levels[2], "ttft_ms", 2.0)})
    b = replaced(b, {"lanes.0.levels": b.lanes[0].levels + [level(8)]})
    console = Console(record=True, width=160)
    print_comparison(compare_results(a, b, "runs/a", "runs/b"), console)
    text = console.export_text()
    rows = {line.split("│")[1].strip(): line for line in text.splitlines()
            if line.startswith("│") and line.split("│")[1].strip().isdigit()}
    assert "×1.50 [" in rows["2"] and "▲" in rows["2"] and "▼" not in rows["2"]
    assert "▼" in rows["4"] and "▲" not in rows["4"]
    assert "▲" not in rows["1"] and "▼" not in rows["1"]
    assert "lane dense: B ÷ A (95% CI)" in text
    assert "dense: levels only in A: none; only in B: 8" in text
    assert "A: build b11549 on" in text
    assert "▲ better, ▼ worse" in text and "excludes 1" in text and "at least 5%" in text


def test_a_ratio_next_to_the_threshold_prints_three_decimals():
    def cell(v: float, direction: str = "same") -> str:
        ratio = Ratio(value=v, ci_low=v - 0.02, ci_high=None)
        return ratio_cell(MetricComparison(metric="p95_itl_ms", a=1.0, b=v, ratio=ratio,
                                           significant=direction != "same", direction=direction)).plain
    assert cell(1.0451) == "×1.045 [1.03–?]"
    assert cell(0.9468, "better") == "×0.947 [0.93–?] ▲"
    assert cell(1.2) == "×1.20 [1.18–?]"
