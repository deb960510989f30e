"""The trace reader (workload/trace_file.py) and its prompts (workload/trace.py): a Mooncake JSONL
trace parsed, each bad field refused in one line, its prefix blocks made into equal tokens, its
arrivals, the shipped example, and --trace."""

from __future__ import annotations

import hashlib
import json

import pytest

from satbench.cli.args import build_parser, lane_config
from satbench.config.workload import WorkloadConfig
from satbench.errors import UserError
from satbench.workload.example_trace import EXAMPLE_PATH, example_text
from satbench.workload.trace import TracePrompts, block_marker
from satbench.workload.trace_file import (
    BLOCK_TOKENS,
    TraceRecord,
    offsets_ns,
    parse_trace,
    rate_rps,
    read_trace,
)

GOLDEN = (b'{"timestamp": 0, "input_length": 1100, "output_length": 20, "hash_ids": [0, 1, 2], '
          b'"note": "ignored"}\n'
          b"\n"
          b'{"timestamp": 250, "input_length": 1200, "output_length": 8, "hash_ids": [0, 1, 3]}\r\n'
          b'{"timestamp": 250, "input_length": 300, "output_length": 1, "hash_ids": []}\n'
          b'{"timestamp": 2000, "input_length": 600, "output_length": 5, "hash_ids": [7]}')


def line(**fields) -> str:
    item = {"timestamp": 5, "input_length": 100, "output_length": 10, "hash_ids": [1]} | fields
    return json.dumps({k: v for k, v in item.items() if v is not ...})


def test_a_trace_parses_into_its_records_in_order(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOLDEN)
    trace = read_trace(str(path))
    assert trace.records == (TraceRecord(0, 1100, 20, (0, 1, 2)), TraceRecord(250, 1200, 8, (0, 1, 3)),
                             TraceRecord(250, 300, 1, ()), TraceRecord(2000, 600, 5, (7,)))
    t = trace.config(speed=4.0)
    assert (t.path, t.sha256, t.requests, t.duration_s, t.speed) == (
        str(path), hashlib.sha256(GOLDEN).hexdigest(), 4, 2.0, 4.0)
    assert rate_rps(t) == 4 / 2.0 * 4.0
    assert trace.longest() == (1200, 1208)


GOOD = line()
BAD = [
    ("", "trace T: no requests (the file is empty)"),
    ("\n\n", "trace T: no requests (the file is empty)"),
    ('{"timestamp": 1,', "trace T line 1: not JSON (Expecting property name enclosed in double quotes)"),
    ("[1, 2]", "trace T line 1: not a JSON object (got list)"),
    (line(input_length=...), "trace T line 1: input_length: missing"),
    (line(hash_ids=...), "trace T line 1: hash_ids: missing"),
    (GOOD + "\n" + line(output_length=3.5), "trace T line 2: output_length: not an integer (3.5)"),
    (line(timestamp="7"), "trace T line 1: timestamp: not an integer ('7')"),
    (line(input_length=True), "trace T line 1: input_length: not an integer (True)"),
    (line(timestamp=-1), "trace T line 1: timestamp: negative (-1)"),
    (line(output_length=0), "trace T line 1: output_length: less than 1 (0)"),
    (line(input_length=-5), "trace T line 1: input_length: negative (-5)"),
    (line(input_length=4000, output_length=200),
     "trace T line 1: input_length: 4000 + output_length 200 = 4200 tokens, more than the context of 4096"),
    (GOOD + "\n" + line(timestamp=4),
     "trace T line 2: timestamp: 4 is before the line before's 5 (a trace's times never decrease)"),
    (line(hash_ids=5), "trace T line 1: hash_ids: not a list of integers (5)"),
    (line(hash_ids=[1, -2]), "trace T line 1: hash_ids: item 1 is not an integer ≥ 0 (-2)"),
    (line(input_length=513, hash_ids=[1, 2, 3]),
     "trace T line 1: hash_ids: 3 blocks, but input_length 513 makes at most 2 of 512 tokens"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m.split(": ", 1)[-1][:40] for _, m in BAD])
def test_every_bad_field_gets_its_one_line(text, message):
    with pytest.raises(UserError) as exc:
        parse_trace(text.encode(), "T", max_ctx_tokens=4096)
    assert str(exc.value) == message and "\n" not in str(exc.value)


def test_a_trace_of_one_instant_has_no_rate(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(line() + "\n" + line() + "\n")
    with pytest.raises(UserError, match=r"^trace .*t\.jsonl: every request arrives at timestamp 5; a replay "
                       r"needs a duration \(its rate is requests ÷ duration\)$"):
        read_trace(str(path))


def test_the_arrivals_are_the_timestamps_from_the_first_divided_by_speed():
    records = parse_trace(GOLDEN, "T")
    assert offsets_ns(records, 1.0) == [0, 250_000_000, 250_000_000, 2_000_000_000]
    assert offsets_ns(records, 4.0) == [0, 62_500_000, 62_500_000, 500_000_000]


async def fake_tokenize(text: str, add_special: bool) -> list[int]:
    return ([1] if add_special else []) + [ord(c) + 10 for c in text]  # one token a character


async def prompts(tmp_path, data: bytes, nonce: str = "abc", endpoint: str = "completions") -> TracePrompts:
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    cfg = WorkloadConfig(trace=read_trace(str(path)).config(), endpoint=endpoint)
    p = TracePrompts(cfg, fake_tokenize, nonce)
    await p.prepare()
    return p


async def test_equal_hash_ids_give_equal_tokens_and_a_new_one_differs_at_once(tmp_path):
    p = await prompts(tmp_path, GOLDEN)
    a, b, c, d = await p.build_open("lane", 1, 1)
    assert [len(r.prompt) for r in (a, b, c, d)] == [1100, 1200, 300, 600]
    assert [(r.prompt_tokens, r.max_tokens, r.cache_prompt) for r in (a, d)] == [(1100, 20, True),
                                                                                 (600, 5, True)]
    assert a.prompt[:2 * BLOCK_TOKENS] == b.prompt[:2 * BLOCK_TOKENS]  # blocks 0 and 1: hash ids 0, 1
    assert block_marker("abc-lane-q1-r1-o", "2").startswith("[#2 ")  # the hash id first
    assert a.prompt[1024:1026] == b.prompt[1024:1026] and a.prompt[1026] != b.prompt[1026]  # 2, 3: at once
    assert a.prompt[0] == 1 and a.prompt[BLOCK_TOKENS] != 1  # BOS begins block 0 only
    assert c.prompt[:30] != a.prompt[:30] != d.prompt[:30]  # a block past hash_ids is the request's own
    assert len({r.request_id for r in (a, b, c, d)}) == 4


async def test_no_run_level_or_pass_shares_a_block_with_another(tmp_path):
    p, q = await prompts(tmp_path, GOLDEN, "abc"), await prompts(tmp_path, GOLDEN, "xyz")
    first = (await p.build_open("lane", 1, 1))[0].prompt
    n = BLOCK_TOKENS
    assert (await q.build_open("lane", 1, 1))[0].prompt[:n] != first[:n]  # another run's nonce
    level = await p.build("lane", 2, 1, "measured", 9)  # 4 records, cycled: passes 0, 1, 2
    assert [r.prompt_tokens for r in level] == [1100, 1200, 300, 600] * 2 + [1100]
    assert level[0].prompt[:1024] == level[1].prompt[:1024]  # inside one pass, the trace's sharing
    assert level[0].prompt[:n] != level[4].prompt[:n] != first[:n]  # another pass, another scope
    other = await p.build("lane", 2, 2, "measured", 1)
    assert other[0].prompt[:n] != level[0].prompt[:n]  # another repetition


async def test_without_a_tokenizer_the_blocks_are_words(tmp_path):
    p = await prompts(tmp_path, GOLDEN, endpoint="chat")
    a, b, *_ = await p.build_open("lane", 1, 1)
    assert isinstance(a.prompt, str) and len(a.prompt.split()) == 1100
    assert a.prompt.split()[:1024] == b.prompt.split()[:1024] and a.prompt != b.prompt


async def test_a_changed_trace_is_refused(tmp_path):
    p = await prompts(tmp_path, GOLDEN)
    (tmp_path / "t.jsonl").write_bytes(GOLDEN + b"\n")
    with pytest.raises(UserError, match="the file changed since the run was configured"):
        TracePrompts(WorkloadConfig(trace=p.trace.config()), fake_tokenize, "abc")


def test_the_shipped_example_is_the_generators_and_reads_as_a_trace():
    assert EXAMPLE_PATH.read_text(encoding="utf-8") == example_text()
    trace = read_trace(str(EXAMPLE_PATH))
    first = json.loads(EXAMPLE_PATH.read_text(encoding="utf-8").splitlines()[0])
    assert "synthetic" in first and "not recorded traffic" in first["synthetic"]
    # the generator's seeded timestamps (ms), not a clock: the last arrival is 53,853 ms after the first
    records = trace.records
    assert len(records) == 200 and records[-1].timestamp_ms - records[0].timestamp_ms == 53_853
    firsts = [r.hash_ids[0] for r in trace.records]
    assert max(firsts.count(h) for h in set(firsts)) >= 20  # shared system prompts


def sweep_lane(*flags: str):
    return lane_config(build_parser().parse_args(["sweep", *flags]))


def test_trace_flags_make_a_lane_with_one_replayed_rate():
    lane = sweep_lane("--trace", str(EXAMPLE_PATH), "--trace-speed", "2", "--max-concurrency", "4")
    t = lane.workload.trace
    assert t is not None and t.speed == 2.0 and t.requests == 200
    assert t.sha256 == hashlib.sha256(EXAMPLE_PATH.read_bytes()).hexdigest()
    assert lane.rates == [pytest.approx(200 / t.duration_s * 2)] and lane.rate_requests == 200
    longest_in, longest = read_trace(str(EXAMPLE_PATH)).longest()
    assert lane.workload.prompt_tokens == longest_in and lane.workload.longest_request() == longest
    assert lane.open_loop is not None and lane.open_loop.cap(2) == 4
    assert lane.workload.kind_text == f"trace:{t.sha256[:12]},speed=2"
    from satbench.config.schema import RunConfig
    from satbench.run.preflight import _needs_check

    assert not _needs_check(RunConfig(lanes=[lane]), lane)  # a trace's blocks carry no request prefix


@pytest.mark.parametrize(("flags", "message"), [
    (("--trace", str(EXAMPLE_PATH), "--rate", "1"), "--trace: a trace gives its own lengths, prefixes and "
                                                    "arrivals: it excludes --rate"),
    (("--trace", str(EXAMPLE_PATH), "--prompt-tokens", "64"), "it excludes --prompt-tokens"),
    (("--trace", str(EXAMPLE_PATH), "--workload", "chat:2"), "it excludes --workload chat"),
    (("--trace-speed", "2",), "--trace-speed: it acts on a replayed trace only"),
    (("--trace", str(EXAMPLE_PATH), "--trace-speed", "0"), "--trace-speed: must be above 0"),
    (("--trace", str(EXAMPLE_PATH), "-c", "2048", "-np", "1"), "more than the context of 2048"),
])
def test_trace_flags_refused_in_one_line(flags, message):
    with pytest.raises(UserError) as exc:
        sweep_lane(*flags)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_trace_lane_replays_its_arrivals_and_its_prefixes_reach_the_cache(tmp_path):
    """A 2-slot fake, one closed-loop level cycling the trace, then the replay at speed 2: the arrivals
    are the trace's, the rate is filed as an open-loop rate, and shared blocks are served from cache."""
    from satbench.config.schema import RunConfig
    from satbench.pipeline import new_sweep as Sweep
    from satbench.records.events import RequestEvent, read_events
    from tests.conftest import FakeProcess

    rows = [{"timestamp": 100 + 60 * i, "input_length": 1100 + 7 * i, "output_length": 4,
             "hash_ids": [i % 2, 10 + i % 2, 100 + i]} for i in range(10)]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fake = FakeProcess(tmp_path, dict(n_slots=2, prefill_ms_per_token=0.01, decode_iteration_ms=2.0,
                                      slot_prompt_similarity=0.1))  # llama.cpp's slot choice
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    try:
        lane = sweep_lane("--url", fake.base_url, "--trace", str(path), "--trace-speed", "2",
                          "--concurrency", "1", "--requests-per-level", "12", "--repetitions", "1")
        results = Sweep(RunConfig(lanes=[lane]), run_dir, ["satbench", "test"]).run()
    finally:
        fake.stop()
    events = [e for e in read_events(run_dir) if isinstance(e, RequestEvent)]
    replay = sorted((e for e in events if e.scenario == "open"), key=lambda e: e.seq)
    assert len(replay) == 10 and all(e.ok for e in replay)
    start = replay[0].targeted_ns
    assert [e.targeted_ns - start for e in replay] == [30_000_000 * i for i in range(10)]
    assert [e.prompt_tokens for e in replay] == [r["input_length"] for r in rows]
    cached = [e.timings.cache_n or 0 if e.timings else 0 for e in replay]
    assert max(cached[2:]) >= 2 * BLOCK_TOKENS  # blocks i % 2 and 10 + i % 2 are shared
    closed = [e for e in events if e.scenario == "solo" and e.phase == "measured"]
    cycled = [r["input_length"] for r in rows + rows[:2]]  # 12 requests: the 10 records, then 2 again
    assert sorted(e.prompt_tokens for e in closed) == sorted(cycled)
    (rate,) = results.lanes[0].rates
    assert rate.rate_rps == pytest.approx(10 / 0.54 * 2) and rate.requests == 10
