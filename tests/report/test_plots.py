"""Plots from a small sweep against the fake server, plus hand-made events for the timeline and
the starvation plot: the right files, of the right size, in a stable order, and no crash when
figures are missing."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from satbench.config.schema import SloConfig
from satbench.metrics.level_result import Occupancy
from satbench.metrics.stats import Interval
from satbench.records.events import RequestEvent, read_events
from satbench.report.plot_style import DPI, SIZE_IN
from satbench.report.plots import marker_lines, write_plots
from satbench.report.plots_requests import segments
from satbench.saturation.recommend import recommend
from tests.builders import ev, replaced

MS = 1_000_000


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from tests.conftest import sweep_fake

    results, run_dir, _ = sweep_fake(tmp_path_factory.mktemp("plots"),
                                     dict(n_slots=2, prefill_ms_per_token=0.05, decode_iteration_ms=3.0),
                                     [1, 2, 4],
                                     # >= 72 samples: an SLO can be met
                                     requests=40, reps=2, prompt=16, output=12,
                                     slo=SloConfig(p95_ttft_ms=500, p95_tpot_ms=50))
    events = [e for e in read_events(run_dir) if isinstance(e, RequestEvent)]
    return results, recommend(run_dir), events


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def expected_size(kind: str) -> tuple[int, int]:
    w, h = SIZE_IN[kind]
    return round(w * DPI), round(h * DPI)


def s1_events(lane: str = "default") -> list[RequestEvent]:
    """Three decoders at 10 ms per token, stalled for 300 ms by a 4096-token prompt sent at 100 ms."""
    out = []
    for i in range(3):
        ticks = [10.0 * k for k in range(1, 11)] + [400.0 + 10 * k for k in range(10)]
        out.append(ev(stream=i, seq=i, sent_ms=0, chunks_ms=ticks).model_copy(
            update=dict(lane=lane, scenario="fairness", check="S1", role="decoder")))
    out.append(ev(stream=3, seq=3, sent_ms=100, chunks_ms=[400, 410], prompt_n=4096).model_copy(
        update=dict(lane=lane, scenario="fairness", check="S1", role="injected")))
    return out


def test_every_plot_is_a_png_of_its_size_in_lane_then_kind_order(run, tmp_path):
    results, recs, events = run
    plots = write_plots(tmp_path, results, recs, events)
    assert [(p.lane, p.kind) for p in plots] == [("default", k) for k in
                                                 ("throughput", "latency", "occupancy", "timeline")]
    for p in plots:
        assert p.file == f"plots/default-{p.kind}.png"
        assert png_size(tmp_path / p.file) == expected_size(p.kind)
        assert "default" in p.title and p.caption
    assert "SYNTHETIC" not in plots[0].title
    assert "N=4, repetition 1" in plots[3].title and "all 40 measured requests" in plots[3].caption


def test_same_inputs_give_the_same_files(run, tmp_path):
    results, recs, events = run
    a = write_plots(tmp_path / "a", results, recs, events)
    b = write_plots(tmp_path / "b", results, recs, events)
    assert a == b
    for p in a:
        assert (tmp_path / "a" / p.file).read_bytes() == (tmp_path / "b" / p.file).read_bytes()
        assert b"matplotlib" not in (tmp_path / "a" / p.file).read_bytes()


def test_the_knee_and_the_recommendation_are_marked(run):
    _, recs, _ = run
    rec = recs.lanes[0]
    assert marker_lines(None) == []
    lines = marker_lines(rec.model_copy(update={"knee": None}))
    assert [(w, n) for w, n, _ in lines] == [("recommended", rec.recommended_concurrency)]
    assert rec.binding.reason in lines[0][2]
    lines = marker_lines(rec.model_copy(update={"knee": 2, "recommended_concurrency": 1}))
    assert [(w, n) for w, n, _ in lines] == [("knee", 2), ("recommended", 1)]


def test_starvation_plot_only_with_s1_events(run, tmp_path):
    results, recs, events = run
    other_lane = s1_events(lane="elsewhere")
    plots = write_plots(tmp_path / "a", results, recs, events + other_lane)
    assert "starvation" not in [p.kind for p in plots]
    plots = write_plots(tmp_path / "b", results, recs, events + s1_events())
    assert plots[-1].kind == "starvation" and plots[-1].file == "plots/default-starvation.png"
    assert png_size(tmp_path / "b" / plots[-1].file) == expected_size("starvation")
    assert "3 decoders" in plots[-1].caption


def test_the_timeline_draws_200_requests_and_says_so(run, tmp_path):
    results, _, _ = run
    many = [ev(stream=i % 4, seq=i, sent_ms=10.0 * i,
               chunks_ms=[10.0 * i + 5 + k for k in range(5)] + [10.0 * i + 60], level=4, prompt_ms=2.0)
            for i in range(250)]
    many[3] = ev(stream=3, seq=3, sent_ms=30, end_ms=40, level=4, error="http_500")
    plots = write_plots(tmp_path, results, None, many)
    timeline = next(p for p in plots if p.kind == "timeline")
    assert "the first 200 of 250 measured requests" in timeline.caption
    assert "Red: gaps between tokens over 3×" in timeline.caption and "failed" in timeline.caption
    assert png_size(tmp_path / timeline.file) == expected_size("timeline")


def test_queued_and_prefill_split_on_prompt_ms_clipped_at_sent():
    e = ev(sent_ms=0, chunks_ms=[10, 20], prompt_ms=4)
    assert segments(e) == {"queued": (0, 6 * MS), "prefill": (6 * MS, 10 * MS), "decode": (10 * MS, 20 * MS)}
    late = ev(sent_ms=0, chunks_ms=[10, 20], prompt_ms=50)  # prompt_ms over TTFT: no queue
    assert segments(late)["queued"] == (0, 0) and segments(late)["prefill"] == (0, 10 * MS)
    assert set(segments(ev(sent_ms=0, chunks_ms=[10, 20]))) == {"waiting", "decode"}
    assert segments(ev(sent_ms=0, end_ms=5, error="timeout")) == {"failed": (0, 5 * MS)}


def test_missing_figures_do_not_crash_and_skip_what_has_no_data(run, tmp_path):
    results, _, _ = run
    levels = [replaced(lv, {"throughput.output_tok_per_s.ci_low": None,
                            "throughput.output_tok_per_s.ci_high": None,
                            "latency.ttft_ms.ci.p95": Interval(low=None, high=None), "latency.itl_ms.ci": {},
                            "latency.tpot_ms.p95": None, "occupancy": Occupancy(slots=None)})
              for lv in results.lanes[0].levels]
    results = replaced(results, {"lanes.0.slo": None, "lanes.0.model.synthetic": True,
                                 "lanes.0.levels": levels})
    plots = write_plots(tmp_path, results, None, [])
    assert [p.kind for p in plots] == ["throughput", "latency"]
    assert all("SYNTHETIC weights" in p.title for p in plots)
    assert all(png_size(tmp_path / p.file) == expected_size(p.kind) for p in plots)
    results = replaced(results, {"lanes.0.levels": []})
    assert [p.kind for p in write_plots(tmp_path, results, None, s1_events())] == ["starvation"]
