"""--prompt-tokens / --output-tokens / --seed and the lane keys prompt_tokens / output_tokens / seed:
an integer as before, or a distribution; every complaint is one line naming the flag or the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from satbench.cli.args import build_parser, lane_config
from satbench.cli.lanefile import load_lane_file
from satbench.errors import UserError


def cfg_of(*argv):
    return lane_config(build_parser().parse_args(["sweep", *argv]))


def test_integers_are_fixed_lengths_as_before():
    w = cfg_of("--prompt-tokens", "256", "--output-tokens", "128").workload
    assert (w.prompt_tokens, w.output_tokens, w.prompt_lengths, w.output_lengths, w.seed) == (
        256, 128, None, None, 0)
    assert cfg_of().workload.model_dump(mode="json") == {"prompt_tokens": 64, "output_tokens": 32,
                                                         "shared_prefix": False}


def test_distributions_and_a_seed_from_the_flags(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text("10\n20\n")
    lane = cfg_of("--prompt-tokens", "normal:512,128", "--output-tokens", f"jsonl:{path}", "--seed", "9",
                  "--parallel", "4")
    w = lane.workload
    assert w.prompt_lengths is not None and w.prompt_lengths.spec == "normal:512,128"
    assert w.output_lengths is not None and (w.output_lengths.count, w.output_tokens) == (2, 15)
    assert w.seed == 9 and w.prompt_tokens == 512
    assert lane.ctx_wanted() == 4 * 1024  # the longest draw, 896 + 20 (+ 16), per slot


@pytest.mark.parametrize("argv, message", [
    (["--prompt-tokens", "abc"], "--prompt-tokens: expected an integer, normal:MEAN,SD, uniform:LO-HI or "
                                 "jsonl:PATH, got 'abc'"),
    (["--output-tokens", "uniform:0-9"], "--output-tokens: uniform:LO-HI: each output length must be from 2 "
                                         "to 1,048,576, got uniform:0-9"),
    (["--prompt-tokens", "4"], "--prompt-tokens: must be an integer from 8 to 1,048,576, got 4"),
    (["--seed", "3"], "--seed: it draws request lengths and open-loop arrivals, but both lengths are fixed"),
    (["--seed", "-1", "--prompt-tokens", "uniform:8-9"], "--seed: must be an integer from 0"),
])
def test_a_bad_value_is_one_line_naming_the_flag(argv, message):
    with pytest.raises(UserError) as exc:
        cfg_of(*argv)
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)


def write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "lanes.toml"
    p.write_text('[[lanes]]\nname = "a"\n' + body)
    return p


def test_lane_file_keys_take_the_same_forms(tmp_path):
    lengths = tmp_path / "trace.jsonl"
    lengths.write_text('{"prompt_tokens": 100, "output_tokens": 7}\n'
                       '{"prompt_tokens": 300, "output_tokens": 9}\n')
    cfg = load_lane_file(write(tmp_path, f'prompt_tokens = "jsonl:{lengths}"\noutput_tokens = '
                                         f'"jsonl:{lengths}"\nseed = 4\n[[lanes]]\nname = "b"\n'
                                         'prompt_tokens = 128\noutput_tokens = "uniform:2-8"\n'))
    a, b = (lane.workload for lane in cfg.lanes)
    assert a.prompt_lengths is not None and a.prompt_lengths.kind == "jsonl" and a.prompt_tokens == 200
    assert a.output_lengths is not None and a.output_tokens == 8 and a.seed == 4
    assert (b.prompt_tokens, b.prompt_lengths, b.seed) == (128, None, 0)
    assert b.output_lengths is not None and b.output_lengths.spec == "uniform:2-8"


@pytest.mark.parametrize("body, line, needle", [
    ('prompt_tokens = "normal:5"\n', 3, "lanes[0].prompt_tokens: normal:MEAN,SD takes two numbers"),
    ('output_tokens = true\n', 3, "lanes[0].output_tokens: must be an integer from 2"),
    ('output_tokens = 2.5\n', 3, "lanes[0].output_tokens: must be an integer from 2"),
    ('seed = 1\n', 3, "lanes[0].seed: it draws request lengths"),
])
def test_a_bad_lane_key_names_its_line(tmp_path, body, line, needle):
    path = write(tmp_path, body)
    with pytest.raises(UserError) as exc:
        load_lane_file(path)
    assert str(exc.value).startswith(f"{path}:{line}: {needle}"), str(exc.value)
