"""read_events checks a request's chunks in bulk: the same events, and the same refusals, as the
model's own validation of every number."""

import json

import pytest
from pydantic import ValidationError

from satbench.errors import RunDirError
from satbench.records.events import _EVENT_ADAPTER, EVENTS_FILE, read_events
from satbench.records.manifest import first_error

REQUEST = {"kind": "request", "lane": "a", "scenario": "solo", "level": 2, "repetition": 1, "stream": 0,
           "seq": 3, "phase": "measured", "request_id": "m3", "prompt_tokens": 16, "max_tokens": 4,
           "targeted_ns": 100, "sent_ns": 110, "headers_ns": 150, "end_ns": 400,
           "chunks": [[150, 1], [200, 2], [300, 0], [390, 1]], "output_tokens": 4}
MARK = {"kind": "level_end", "lane": "a", "level": 2, "repetition": 1, "t_ns": 500, "status": "complete"}


def _read(tmp_path, *records):
    (tmp_path / EVENTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    return read_events(tmp_path)


def test_the_events_read_are_the_models_own(tmp_path):
    no_chunks = {k: v for k, v in REQUEST.items() if k != "chunks"}
    records = [REQUEST, MARK, {**REQUEST, "chunks": []}, no_chunks,
               {**REQUEST, "chunks": [[-(2**63), 0], [2**63 - 1, 7]]}]
    got = _read(tmp_path, *records)
    want = [_EVENT_ADAPTER.validate_python(r) for r in records]
    assert got == want
    assert [e.model_fields_set for e in got] == [e.model_fields_set for e in want]
    assert got[0].chunks == [(150, 1), (200, 2), (300, 0), (390, 1)]
    assert all(type(c) is tuple for c in got[0].chunks)


@pytest.mark.parametrize("chunks", [[[1, True]], [[1.0, 2]], [[1, 2.5]], [[2**63, 1]], [[1, -1]],
                                    [[1, 2**40]], [[1, 2, 3]], [[1]], ["ab"], [{"a": 1, "b": 2}], [7],
                                    {"a": [1, 2]}, "12", None])
def test_a_bad_chunk_is_refused_as_the_model_refuses_it(tmp_path, chunks):
    bad = {**REQUEST, "chunks": chunks}
    with pytest.raises(ValidationError) as model:
        _EVENT_ADAPTER.validate_python(bad)
    assert first_error(model.value).startswith("request.chunks")
    with pytest.raises(RunDirError) as read:
        _read(tmp_path, MARK, bad)
    assert str(read.value).endswith(f"events.jsonl:2: not a valid record ({first_error(model.value)})")


def test_a_bad_field_beside_good_chunks_is_named(tmp_path):
    with pytest.raises(RunDirError, match=r"events.jsonl:1: not a valid record \(request.level: "):
        _read(tmp_path, {**REQUEST, "level": 0})
    with pytest.raises(RunDirError, match="end_ns 100 is before sent_ns 110"):
        _read(tmp_path, {**REQUEST, "end_ns": 100, "headers_ns": None})
