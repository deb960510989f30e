"""What analysis holds of a run's raw files: samples as columns, requests compacted, both capped."""

import json

import numpy as np
import pytest

from satbench.config import schema
from satbench.errors import RunDirError, UserError
from satbench.metrics import gpu, memory, occupancy, unavailable
from satbench.metrics.window import SteadyWindow
from satbench.records.compact import Chunks
from satbench.records.events import (
    EVENTS_FILE,
    SAMPLES_FILE,
    MetricsSample,
    ProcessSample,
    SlotsSample,
    read_events,
    read_samples,
)
from satbench.records.samples import lane_samples, read_sample_set, sample_set
from satbench.workload.budget import check_records_fit, fixed_records

REQUEST = {"kind": "request", "lane": "a", "scenario": "solo", "level": 2, "repetition": 1, "stream": 0,
           "seq": 3, "phase": "measured", "request_id": "m3", "prompt_tokens": 16, "max_tokens": 4,
           "targeted_ns": 100, "sent_ns": 110, "headers_ns": 150, "end_ns": 400,
           "chunks": [[150, 1], [200, 2], [300, 0], [390, 1]], "output_tokens": 4}


def _slots(t: int, busy: int, lane: str = "a", error: str | None = None) -> SlotsSample:
    return SlotsSample(lane=lane, sent_ns=t, t_ns=t, n_slots=4, busy_ids=list(range(busy)), error=error)


def _metrics(t: int, **values: float) -> MetricsSample:
    return MetricsSample(lane="a", sent_ns=t, t_ns=t, values=values)


def _proc(t: int, rss: int, cpu: float, pid: int = 7) -> ProcessSample:
    return ProcessSample(lane="a", t_ns=t, rss_bytes=rss, cpu_seconds=cpu, server_pid=pid, client_pid=1)


def _write(path, records) -> None:
    path.write_text("".join((r if isinstance(r, str) else r.model_dump_json()) + "\n" for r in records))


def test_columns_are_per_lane_and_kind_sorted_by_time_with_ties_in_file_order():
    s = sample_set([_slots(30, 3), _slots(10, 1), _slots(20, 2, lane="b"), _slots(10, 2, error="HTTP 500"),
                    _metrics(5, requests_processing=1.0)])
    a = s.lane("a", "solo")
    assert a.slots.t_ns.tolist() == [10, 10, 30]
    assert a.slots.column("n_busy").tolist() == [1, 2, 3]
    assert [a.slots.error_of(i) for i in range(3)] == [None, "HTTP 500", None]
    assert a.slots.in_spans([(30, 40), (0, 10)]).tolist() == [2, 0, 1]  # file order: rows 30, 10, 10
    assert len(a.metrics) == 1 and len(a.process) == 0
    assert s.lane("b", "solo").slots.t_ns.tolist() == [20] and len(s.lane("c", "open").slots) == 0


def test_a_figure_from_columns_is_the_figure_from_records():
    slots = [_slots(t, busy) for t, busy in ((0, 1), (100, 3), (200, 2), (300, 4), (400, 0))]
    w = SteadyWindow(start_ns=150, end_ns=350)
    # (150..200) 3, (200..300) 2, (300..350) 4 over 200 ns; the reading at 100 carries in (one interval old)
    want = (3 * 50 + 2 * 100 + 4 * 50) / 200
    assert occupancy.time_weighted_busy_slots(slots, w) == want
    assert occupancy.time_weighted_busy_slots(lane_samples(slots).slots, w) == want
    procs = [_proc(0, 10, 1.0), _proc(100, 30, 1.5), _proc(200, 20, 2.0), _proc(300, 50, 9.0, pid=8)]
    cols = lane_samples(procs).process
    assert memory.peak_rss_bytes(cols, 50, 150) == memory.peak_rss_bytes(procs, 50, 150) == 30
    assert memory.server_cpu_utilisation(cols, 50, 150) == pytest.approx((2.0 - 1.0) / 200e-9)
    assert "different processes" in memory.cpu_why(cols, 150, 300)
    assert gpu.gpu_use(cols, [(0, 300)], None) is None


def test_the_decode_weighted_figure_takes_the_first_of_equal_last_stamps():
    ms = [_metrics(0, n_decode_total=10.0, n_busy_slots_per_decode=1.0),
          _metrics(100, n_decode_total=20.0, n_busy_slots_per_decode=1.5),
          _metrics(100, n_decode_total=40.0, n_busy_slots_per_decode=2.0)]
    d, why = occupancy.decode_weighted(ms, SteadyWindow(start_ns=0, end_ns=100))
    assert why is None and d == pytest.approx((1.5 * 20 - 1.0 * 10) / 10)


def test_an_endpoint_that_failed_is_named_from_columns_and_records():
    slots = [_slots(10, 1, error="HTTP 500"), _slots(20, 1, error="HTTP 500"), _slots(30, 1)]
    why = " (/slots failed: HTTP 500, 2 of 3 polls in this level)"
    assert unavailable.endpoint_failures(slots, [(0, 40)]) == why
    assert unavailable.endpoint_failures(lane_samples(slots).slots, [(0, 40)]) == why


def test_the_samples_file_is_read_as_the_records_say(tmp_path):
    records = [_slots(10, 1), _metrics(12, requests_processing=2.0, requests_deferred=1.0), _proc(14, 5, 0.5)]
    _write(tmp_path / SAMPLES_FILE, records)
    a = read_sample_set(tmp_path).lane("a", "solo")
    assert a.metrics.column("requests_deferred").tolist() == [1.0]
    assert np.isnan(a.metrics.column("n_decode_total")).all()  # absent, not 0
    assert a.process.column("gpu_mem_used_bytes").tolist() == [-1] and a.process.column("rss_bytes")[0] == 5
    assert read_samples(tmp_path) == records


def test_the_samples_cap_stops_before_the_rest_is_read(tmp_path):
    _write(tmp_path / SAMPLES_FILE, [_slots(10, 1), _slots(20, 1), _slots(30, 1), ""])
    assert len(read_sample_set(tmp_path, cap=3).lane("a", "solo").slots) == 3
    _write(tmp_path / SAMPLES_FILE, [_slots(10, 1), _slots(20, 1), _slots(30, 1), "not json"])
    with pytest.raises(RunDirError, match=r"more than 3 samples, the most satbench reads of one run"):
        read_sample_set(tmp_path, cap=3)


def test_the_events_cap_stops_before_the_rest_is_read(tmp_path):
    _write(tmp_path / EVENTS_FILE, [json.dumps(REQUEST)] * 3 + ["not json"])
    with pytest.raises(RunDirError, match=r"events.jsonl: more than 2 records"):
        read_events(tmp_path, cap=2)


def test_chunks_read_back_behave_as_the_list_they_replace(tmp_path):
    _write(tmp_path / EVENTS_FILE, [json.dumps(REQUEST)])
    ev = read_events(tmp_path)[0]
    want = [(150, 1), (200, 2), (300, 0), (390, 1)]
    assert isinstance(ev.chunks, Chunks)
    assert ev.chunks == want and want == ev.chunks and list(ev.chunks) == want and len(ev.chunks) == 4
    assert ev.chunks[0] == (150, 1) and ev.chunks[-1] == (390, 1) and ev.chunks[1:3] == want[1:3]
    with pytest.raises(IndexError):
        ev.chunks[4]
    assert json.loads(ev.model_dump_json())["chunks"] == [list(p) for p in want]
    assert ev.model_copy(update={"role": "x"}).chunks == want


def _lane(**kw) -> schema.LaneConfig:
    return schema.LaneConfig(name="a", levels=[1, 2], **kw)


def test_a_run_whose_fixed_levels_outgrow_the_events_cap_is_refused_before_it_starts():
    small = schema.RunConfig(lanes=[_lane()])
    assert 0 < fixed_records(small) < 1000
    check_records_fit(small)
    big = schema.RunConfig(lanes=[_lane(requests_per_level=30_000)])
    assert fixed_records(big) > 50_000
    with pytest.raises(UserError, match=r"at least [\d,]+ requests and level marks, more than the 50,000"):
        check_records_fit(big)


def test_the_records_pre_check_counts_the_fairness_checks_that_certainly_run():
    fixed = schema.RunConfig(lanes=[_lane()])
    checked = schema.RunConfig(lanes=[_lane()], with_fairness=True)
    assert fixed_records(checked) > fixed_records(fixed) + 10  # calibration, references, first rounds
    adaptive = schema.RunConfig(lanes=[_lane(adaptive=schema.AdaptiveConfig())], with_fairness=True)
    assert fixed_records(adaptive) == 0  # its climb and its checks (they stop at the first that fails)
    url = schema.LaneConfig(name="u", levels=[1], runtime=schema.RuntimeConfig(kind="url", model=None,
                                                                             url="http://127.0.0.1:9"))
    assert fixed_records(schema.RunConfig(lanes=[url], fairness_only=True)) == 0  # its slots are a guess
