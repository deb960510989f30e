"""analyze counts as 'together' only what every lane ran together: a run recorded before --together
kept to that had lane a run its N=4 and its second repetition alone in the together scenario."""

from __future__ import annotations

from satbench.analysis.analyze import _levels
from satbench.config.schema import LaneConfig, RunConfig, RuntimeConfig, together_shape
from satbench.records.manifest import LaneProvenance, ModelInfo, NetworkInfo, RuntimeInfo
from satbench.records.samples import sample_set
from tests.builders import ev, mark

A = LaneConfig(name="a", levels=[1, 2, 4], repetitions=2, runtime=RuntimeConfig())
B = LaneConfig(name="b", levels=[1, 2], repetitions=1, runtime=RuntimeConfig())
PROV = LaneProvenance(model=ModelInfo(), network=NetworkInfo(path="loopback"),
                      runtime=RuntimeInfo(kind="embedded", name="x", llamacpp=True,
                                          base_url="http://127.0.0.1:1"))


def _together_records(levels, reps) -> list:
    out, t = [], 0.0
    for n in levels:
        for rep in range(1, reps + 1):
            out.append(mark("level_start", t, level=n, repetition=rep))
            for s in range(n):
                for j in range(4):
                    e = ev(stream=s, seq=j, sent_ms=t + 40 * j,
                           chunks_ms=[t + 40 * j + 10 + k for k in range(20)], level=n, repetition=rep)
                    out.append(e)
            t += 200
            out.append(mark("level_end", t, level=n, repetition=rep))
    return [r.model_copy(update={"lane": "a", "scenario": "together"}) for r in out]


def test_together_keeps_only_the_levels_and_repetitions_every_lane_had():
    cfg = RunConfig(lanes=[A, B], together=True)
    assert together_shape(cfg) == (2, 1)
    records = _together_records([1, 2, 4], 2)
    levels = _levels(A, PROV, "together", records, sample_set([]), None, together_shape(cfg))
    assert [lv.concurrency for lv in levels] == [1, 2]
    assert all(len(lv.repetitions) == 1 for lv in levels)
    assert not any(f.startswith("missing_repetitions") for lv in levels for f in lv.flags), \
        [lv.flags for lv in levels]
    solo = _levels(A, PROV, "together", records, sample_set([]), None)  # without a shape: everything recorded
    assert [lv.concurrency for lv in solo] == [1, 2, 4] and len(solo[0].repetitions) == 2
