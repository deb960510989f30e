"""The figures' registry (metrics/specs.py) against what it describes: LevelResult's fields, the
families summarize_level fills, results.json's definitions and docs/metrics.md's table."""

from __future__ import annotations

import re
from pathlib import Path

from satbench.analysis.results import DEFINITIONS
from satbench.metrics.level_result import Latency, LevelResult, Throughput
from satbench.metrics.specs import LEVEL_METRICS, csv_columns, docs_table, family, figure, part_of
from satbench.report.compare import COMPARED
from satbench.report.table import LEVEL_HEADERS, level_ci_notes, level_row
from tests.report.test_compare import level

ROOT = Path(__file__).resolve().parents[2]


def test_every_figure_is_where_its_spec_says_and_every_column_reads():
    lv = level(4)
    assert len({s.name for s in LEVEL_METRICS}) == len(LEVEL_METRICS)
    for spec in LEVEL_METRICS:
        assert spec.path.split(".")[0] in LevelResult.model_fields, spec.name
        figure(lv, spec.path)
        assert all(r in {s.name for s in LEVEL_METRICS} for r in spec.reads), spec.name
    headers = [h for h, _, _ in csv_columns()]
    assert len(set(headers)) == len(headers)
    for _, spec, part in csv_columns():
        part_of(figure(lv, spec.path), part)  # no AttributeError: each part fits its figure


def test_the_latency_and_throughput_families_are_the_models_fields():
    assert [s.name for s in family("latency")] == list(Latency.model_fields)
    assert [s.name for s in family("throughput")] == list(Throughput.model_fields)
    assert all(s.path == f"{s.family}.{s.name}" for s in family("latency") + family("throughput"))


def test_results_json_defines_the_figures_with_their_formula():
    for spec in LEVEL_METRICS:
        if spec.defined:
            assert DEFINITIONS[spec.name] == spec.formula


def test_the_level_table_and_compare_are_built_from_the_specs():
    assert LEVEL_HEADERS == ("N", "out tok/s", "req/s", "TTFT p50/p95", "ITL p50/p95", "TPOT p50",
                             "E2E p50/p95", "queue p50", "slots t/d/c", "RSS MiB", "flags")
    assert len(level_row(level(2))) == len(LEVEL_HEADERS)
    assert [s.compare_name for s in COMPARED] == ["output_tok_per_s", "p95_ttft_ms", "p95_itl_ms",
                                                  "p95_e2e_ms", "cache_hit_ratio"]
    assert [s.compare_label for s in COMPARED] == ["out tok/s", "p95 TTFT", "p95 ITL", "p95 E2E", "cache hit"]
    few = level(1).model_copy(update={"latency": level(1).latency.model_copy(update={
        "ttft_ms": level(1).latency.ttft_ms.model_copy(update={"few_samples": True})})})
    assert all(n.startswith("TTFT p95") for n in level_ci_notes(few))


def test_docs_metrics_md_holds_the_generated_table():
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- figures: [^\n]*-->\n(.*?)<!-- end of figures -->", text, re.S)
    assert found is not None, "docs/metrics.md lost its figures table"
    assert found.group(1) == docs_table(), "regenerate it from satbench.metrics.specs.docs_table()"


def test_every_unavailable_figure_is_a_named_figure():
    """unavailable's keys name figures of the registry (and the GPU block, which has its own table)."""
    from satbench.metrics.level import summarize_level
    from tests.metrics.test_level import closed_loop_n1, ctx

    r = summarize_level(ctx(llamacpp=False), closed_loop_n1(), [], [])
    assert r.unavailable
    assert set(r.unavailable) <= {s.name for s in LEVEL_METRICS} | {"gpu", "gpu_util_pct"}, r.unavailable
