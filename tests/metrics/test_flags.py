"""A level's flags are typed (kind + detail), written and read back as the same text."""

from __future__ import annotations

import copy
import json
import pickle

from satbench.metrics.flags import Flag, FlagKind, has_flag


def test_a_flag_is_its_kind_and_detail_as_one_text():
    f = Flag.of(FlagKind.QUEUE_BOUND, "4 streams but 2 slots")
    assert f == "queue_bound: 4 streams but 2 slots"
    assert f.kind is FlagKind.QUEUE_BOUND and f.detail == "4 streams but 2 slots" and f.tag == "queue_bound"
    assert Flag(str(f)).kind is FlagKind.QUEUE_BOUND  # read back from results.json
    for again in (copy.deepcopy(f), pickle.loads(pickle.dumps(f))):
        assert again == f and again.kind is FlagKind.QUEUE_BOUND


def test_a_repetition_flag_takes_its_kind_from_the_status():
    assert Flag.repetition("failed", "r1 server died").kind is FlagKind.REPETITION_FAILED
    assert Flag.repetition("incomplete", "r2").kind is FlagKind.REPETITION_INCOMPLETE
    assert Flag.repetition("failed", "r1") == "repetition_failed: r1"


def test_a_text_of_an_unknown_kind_loads_as_other_unchanged():
    for text in ("littles_law: an older tag", "no colon at all"):
        f = Flag(text)
        assert f == text and f.kind is FlagKind.OTHER and f.detail == text
    assert Flag("littles_law: an older tag").tag == "littles_law"


def test_a_levels_flags_serialise_as_plain_strings():
    from tests.report.test_compare import level

    lv = level(2).model_copy(update={"flags": [Flag.of(FlagKind.ERRORS, "http_500×2")]})
    data = json.loads(lv.model_dump_json())
    assert data["flags"] == ["errors: http_500×2"]
    back = type(lv).model_validate(data)
    assert has_flag(back.flags, FlagKind.ERRORS) and not has_flag(back.flags, FlagKind.RETRIES)
    assert type(lv).model_json_schema()["properties"]["flags"]["items"] == {"type": "string"}
