"""Request lengths as seeded distributions: the forms, their errors, the seed rule, the clip, a jsonl
file, what the config records, and the checks that must hold the longest (or shortest) draw."""

from __future__ import annotations

import hashlib
import json

import pytest

from satbench.config.schema import LaneConfig, LengthDistribution, WorkloadConfig
from satbench.errors import UserError
from satbench.workload.budget import workload_bytes
from satbench.workload.builder import WorkloadBuilder, check_prompt_room
from satbench.workload.lengths import Lengths, parse_lengths


def workload(prompt: object = 64, output: object = 32, seed: int = 0) -> WorkloadConfig:
    p, pd = parse_lengths(prompt, "prompt")
    o, od = parse_lengths(output, "output")
    return WorkloadConfig(prompt_tokens=p, output_tokens=o, prompt_lengths=pd, output_lengths=od, seed=seed)


def draws(w: WorkloadConfig, n: int = 400, phase: str = "measured", rep: int = 1) -> list[tuple[int, int]]:
    lengths = Lengths(w)
    return [lengths.of(phase, rep, seq) for seq in range(n)]


def test_an_integer_is_a_fixed_length_with_no_distribution():
    assert parse_lengths(512, "prompt") == (512, None)
    assert parse_lengths("512", "prompt") == (512, None)
    assert parse_lengths(" 7 ", "output") == (7, None)  # the schema's range check refuses it later
    w = workload(100, 20)
    assert set(draws(w, 20)) == {(100, 20)}
    assert w.prompt_bounds() == (100, 100) and w.output_bounds() == (20, 20)


def test_a_fixed_workload_records_exactly_what_it_did_before():
    assert WorkloadConfig(prompt_tokens=64, output_tokens=32).model_dump(mode="json") == {
        "prompt_tokens": 64, "output_tokens": 32, "shared_prefix": False}


@pytest.mark.parametrize("text, spec, lo, hi, mean", [
    ("normal:512,128", "normal:512,128", 128, 896, 512),
    ("NORMAL: 512 , 128", "normal:512,128", 128, 896, 512),
    ("normal:100,50", "normal:100,50", 8, 250, 100),  # clipped at the prompt floor, 8
    ("normal:64,0", "normal:64,0", 64, 64, 64),
    ("normal:96.5,10.25", "normal:96.5,10.25", 66, 127, 96),  # round(96.5) = 96 (to even)
    ("uniform:64-1024", "uniform:64-1024", 64, 1024, 544),
    ("uniform: 8 - 8", "uniform:8-8", 8, 8, 8),
])
def test_each_form_parses_to_its_canonical_text_bounds_and_mean(text, spec, lo, hi, mean):
    value, d = parse_lengths(text, "prompt")
    assert d is not None and value == mean
    assert (d.spec, d.min_tokens, d.max_tokens) == (spec, lo, hi)
    assert parse_lengths(d.spec, "prompt") == (value, d)  # the canonical text reads back the same


@pytest.mark.parametrize("text, what, needle", [
    ("abc", "prompt", "expected an integer, normal:MEAN,SD, uniform:LO-HI or jsonl:PATH, got 'abc'"),
    ("normal:512", "prompt", "normal:MEAN,SD takes two numbers"),
    ("normal:nan,5", "prompt", "the MEAN 'nan' is not a decimal number"),
    ("normal:64,5e-324", "prompt", "the SD '5e-324' is not a decimal number"),
    ("normal:64,,5", "prompt", "takes two numbers (normal:512,128), got 3"),
    ("normal:-5,1", "prompt", "the mean must be from 8 to 1,048,576, got -5"),
    ("normal:64,-5", "prompt", "normal:MEAN,SD: the SD must be at least 0, got -5"),
    ("normal:4,1", "prompt", "the mean must be from 8 to 1,048,576, got 4"),
    ("normal:1,1", "output", "the mean must be from 2 to 1,048,576, got 1"),
    ("uniform:64", "prompt", "expected uniform:LO-HI with integers"),
    ("uniform:1.5-9", "prompt", "expected uniform:LO-HI with integers"),
    ("uniform:100-50", "prompt", "LO 100 is above HI 50"),
    ("uniform:4-64", "prompt", "each prompt length must be from 8 to 1,048,576, got uniform:4-64"),
    ("uniform:1-64", "output", "each output length must be from 2 to 1,048,576"),
    ("uniform:8-9999999", "prompt", "from 8 to 1,048,576"),
    ("jsonl:", "prompt", "expected jsonl:PATH"),
    ("poisson:5", "prompt", "expected an integer, normal:MEAN,SD"),
])
def test_each_bad_form_is_one_clear_line(text, what, needle):
    with pytest.raises(ValueError) as exc:
        parse_lengths(text, what)  # type: ignore[arg-type]
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_the_same_seed_gives_the_same_lengths_and_another_seed_others():
    a = draws(workload("normal:200,50", "uniform:8-64", seed=7))
    assert a == draws(workload("normal:200,50", "uniform:8-64", seed=7))
    assert a != draws(workload("normal:200,50", "uniform:8-64", seed=8))
    assert len(set(a)) > 100  # lengths vary from request to request


def test_a_draw_depends_on_phase_repetition_and_sequence_only():
    w = workload("uniform:8-4096", "uniform:2-4096", seed=3)
    first = draws(w, 50)
    assert draws(w, 50, rep=2) != first and draws(w, 50, phase="warmup") != first
    # the same request sequence of another lane, level or run (nonce) gets the same lengths
    b1 = WorkloadBuilder(w, None, "aaaaaa")
    b2 = WorkloadBuilder(w, None, "bbbbbb")
    assert b1._lengths.of("measured", 1, 9) == b2._lengths.of("measured", 1, 9) == first[9]
    # prompt and output are drawn apart: their draws are not the same numbers
    assert [p for p, _ in first] != [o for _, o in first]


def test_normal_draws_are_clipped_to_mean_plus_minus_three_sd_and_the_floor():
    w = workload("normal:20,30", "normal:10,100")
    got = draws(w, 2000)
    prompts, outputs = [p for p, _ in got], [o for _, o in got]
    assert w.prompt_bounds() == (8, 110) and w.output_bounds() == (2, 310)
    assert min(prompts) == 8 and max(prompts) <= 110  # many draws fall below the floor: clipped to it
    assert min(outputs) == 2 and max(outputs) <= 310
    assert all(type(x) is int for x in prompts + outputs)


def test_uniform_draws_cover_their_inclusive_range():
    got = {p for p, _ in draws(workload("uniform:10-14"), 300)}
    assert got == {10, 11, 12, 13, 14}


def test_a_jsonl_file_of_lengths(tmp_path):
    path = tmp_path / "lengths.jsonl"
    lines = ['100', '{"prompt_tokens": 300, "output_tokens": 40, "other": "x"}', '', '  ', '50']
    path.write_text("\n".join(lines) + "\n")
    value, d = parse_lengths(f"jsonl:{path}", "prompt")
    assert d is not None and value == 150
    assert (d.kind, d.count, d.min_tokens, d.max_tokens) == ("jsonl", 3, 50, 300)
    assert d.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and d.spec == f"jsonl:{path}"
    w = workload(f"jsonl:{path}", f"jsonl:{path}", seed=1)
    assert w.output_lengths is not None and w.output_lengths.max_tokens == 100
    got = draws(w, 300)
    # one line per request, the same line for its prompt and its output
    assert set(got) == {(100, 100), (300, 40), (50, 50)}


@pytest.mark.parametrize("body, needle", [
    ("100\nabc\n", ":2: not JSON"),
    ('{"output_tokens": 4}\n', ':1: the object has no "prompt_tokens" key'),
    ("100\n4\n", ":2: a prompt length must be an integer from 8 to 1,048,576, got 4"),
    ("100\n12.5\n", ":2: a prompt length must be an integer"),
    ("true\n", ":1: a prompt length must be an integer"),
    ("\n\n", "no lengths in the file"),
    ("[" * 100_000 + "1" + "]" * 100_000 + "\n", ":1: nested deeper than 8 levels"),
    ('{"prompt_tokens": ' + "[" * 100_000 + "\n", ":1: not JSON (nested too deep)"),
])
def test_a_bad_jsonl_file_is_refused_naming_its_line(tmp_path, body, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text(body)
    with pytest.raises(ValueError, match="^" + str(path)) as exc:
        parse_lengths(f"jsonl:{path}", "prompt")
    assert needle in str(exc.value)


def test_a_jsonl_file_with_a_byte_order_mark_is_read_as_a_lane_file_is(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf100\n200\n")
    value, d = parse_lengths(f"jsonl:{path}", "prompt")
    assert value == 150 and d is not None and d.count == 2


def test_a_missing_jsonl_file_is_one_line(tmp_path):
    with pytest.raises(ValueError) as exc:
        parse_lengths(f"jsonl:{tmp_path / 'nope.jsonl'}", "prompt")
    assert "nope.jsonl" in str(exc.value) and "\n" not in str(exc.value)


def test_a_jsonl_file_changed_since_it_was_recorded_is_refused(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text("100\n200\n")
    w = workload(f"jsonl:{path}")
    path.write_text("100\n201\n")
    with pytest.raises(UserError, match="the file changed since the run was configured"):
        Lengths(w)


def test_the_config_records_the_spec_seed_and_file_and_reads_them_back(tmp_path):
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps({"output_tokens": 20}) + "\n" + json.dumps({"output_tokens": 30}) + "\n")
    w = workload("uniform:64-128", f"jsonl:{path}", seed=42)
    doc = w.model_dump(mode="json")
    assert doc["seed"] == 42 and (doc["prompt_tokens"], doc["output_tokens"]) == (96, 25)
    assert doc["prompt_lengths"]["spec"] == "uniform:64-128"
    assert doc["output_lengths"]["count"] == 2 and len(doc["output_lengths"]["sha256"]) == 64
    assert WorkloadConfig.model_validate(doc) == w


def test_a_seed_is_recorded_only_when_set():
    # the seed also draws the open-loop arrivals, so the config takes it alone; the CLI and lane file
    # refuse one that nothing draws from (tests/cli/test_lengths_flags.py)
    assert WorkloadConfig(seed=3).model_dump()["seed"] == 3
    assert "seed" not in WorkloadConfig().model_dump()


def test_a_recorded_distribution_must_be_consistent():
    with pytest.raises(ValueError, match="min_tokens 9 > max_tokens 8"):
        LengthDistribution(spec="uniform:9-8", kind="uniform", min_tokens=9, max_tokens=8, mean_tokens=8.5)
    with pytest.raises(ValueError, match="sha256 and count"):
        LengthDistribution(spec="jsonl:x", kind="jsonl", min_tokens=9, max_tokens=9, mean_tokens=9)


def test_context_and_memory_are_sized_for_the_longest_draw():
    fixed = LaneConfig(levels=[4], workload=workload(1024, 256))
    drawn = LaneConfig(levels=[4], workload=workload("uniform:64-1984", "normal:128,64"))
    assert drawn.workload.longest_request() == 1984 + 320
    assert drawn.ctx_wanted() == 4 * 2560 and fixed.ctx_wanted() == 4 * 1536
    assert workload_bytes(drawn, 4, False) > workload_bytes(fixed, 4, False)


def test_the_prefix_check_holds_the_shortest_prompt_a_distribution_can_draw():
    check_prompt_room(workload("uniform:40-400"), 30)
    with pytest.raises(UserError) as exc:
        check_prompt_room(workload("uniform:20-400"), 30)
    assert str(exc.value) == ("--prompt-tokens uniform:20-400: its shortest prompt, 20 tokens, is too small "
                              "for the unique request prefix (up to 30 tokens in this run); make every "
                              "prompt at least 38 tokens")
    with pytest.raises(UserError, match="--prompt-tokens 20 is too small"):
        check_prompt_room(workload(20), 30)


async def fake_tokenize(text: str, add_special: bool) -> list[int]:
    return ([1] if add_special else []) + [ord(c) + 10 for c in text]  # one token per character


async def test_the_builder_sends_each_request_its_drawn_lengths():
    w = workload("uniform:40-90", "uniform:2-50", seed=5)
    b = WorkloadBuilder(w, fake_tokenize, "abc")
    await b.prepare()
    await b.check_prefix_fits("default", 8, 3)
    reqs = await b.build("default", 2, 1, "measured", 40)
    expected = draws(w, 40)
    assert [(r.prompt_tokens, r.max_tokens) for r in reqs] == expected
    assert all(len(r.prompt) == r.prompt_tokens for r in reqs)
    assert len({r.prompt_tokens for r in reqs}) > 10 and len({r.max_tokens for r in reqs}) > 10
    other = WorkloadBuilder(w, fake_tokenize, "xyz")  # another run, lane and level: the same lengths
    await other.prepare()
    assert [(r.prompt_tokens, r.max_tokens) for r in await other.build("b", 8, 1, "measured", 40)] == expected


async def test_a_distribution_below_the_prefix_is_refused_before_the_lane_runs():
    b = WorkloadBuilder(workload("uniform:20-90"), fake_tokenize, "abc")
    await b.prepare()
    with pytest.raises(UserError, match=r"uniform:20-90: its shortest prompt, 20 tokens"):
        await b.check_prefix_fits("default", 8, 3)
