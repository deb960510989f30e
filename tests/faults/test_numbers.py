"""The one number rule (config.ranges.number_text) for every number flag, list item, duration and
length form: ASCII digits, no digit separator, no surrounding whitespace; a refusal is one line
naming the flag (exit 2). With it: flags that would change nothing are refused (config.schema.NEEDS),
and timeouts and budgets have a sane minimum."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from satbench.cli.args import build_parser, lane_config, positive_days, run_config
from satbench.cli.lanefile import load_lane_file
from satbench.config.ranges import number_text
from satbench.config.schema import parse_duration, parse_levels, parse_rates
from satbench.errors import UserError

URL = ["sweep", "--url", "http://127.0.0.1:9"]
# Arabic-Indic and full-width digits: Python's int() reads them
FOREIGN_DIGITS = "١２３٤５６７８９００"
NUMBERISH = st.text(alphabet="0123456789.-+eE_ \t" + FOREIGN_DIGITS + "in", min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(NUMBERISH, st.booleans())
@example("1_0", True)
@example("١", True)
@example("１.5", False)
@example(" 1", True)
@example("1\t", False)
def test_a_number_is_ascii_digits_without_separators_or_spaces(text, integer):
    try:
        value = number_text(text, "--x", integer)
    except ValueError as exc:
        assert str(exc).startswith("--x: ") and "\n" not in str(exc)
        return
    assert text.isascii() and "_" not in text and text == text.strip()
    assert value == (int(text) if integer else float(text))


@pytest.mark.parametrize("flag, value", [
    ("--repetitions", "1_0"), ("--requests-per-level", "1_0"), ("--request-timeout", "1_0"),
    ("--rate-requests", "1_0"), ("--max-concurrency", "1_0"), ("--seed", "1_0"), ("--repetitions", "١"),
    ("--request-timeout", "１"), ("--seed", " 3"), ("--repetitions", "3 "),
])
def test_a_number_flag_refuses_what_int_and_float_would_take(flag, value):
    with pytest.raises(UserError) as info:
        build_parser().parse_args([*URL, "--rate", "1", "--concurrency", "1", flag, value])
    assert f"argument {flag}: " in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("argv", [
    ["sweep", "--model", "m.gguf", "--port", "8_080"], ["sweep", "--model", "m.gguf", "-np", "1_6"],
    ["sweep", "--model", "m.gguf", "-t", "１"], ["fleet", "merge", "--max-age-days", "1_0", "x.json"],
    ["capability", "--recommendations", "r.json", "--max-age-days", "١"],
    ["models", "make", "--arch", "llama", "--size", "tiny", "-o", "x.gguf", "--seed", "1_0"],
])
def test_every_other_number_flag_too(argv):
    with pytest.raises(UserError, match=r"digit separators|only ASCII digits"):
        build_parser().parse_args(argv)
    with pytest.raises(argparse.ArgumentTypeError):
        positive_days(argv[-2] if argv[-1] == "x.json" else argv[-1])


@pytest.mark.parametrize("flag, value, needle", [
    ("--rate", "١", "--rate: only ASCII digits"), ("--rate", "1,１", "--rate: only ASCII digits"),
    ("--concurrency", "１", "--concurrency: only ASCII digits"),
    ("--rate", "1_0", "--rate: digit separators"),
    ("--prompt-tokens", "normal:６４,5", "--prompt-tokens: only ASCII digits"),
    ("--prompt-tokens", "uniform:١٠-٢٠", "--prompt-tokens: only ASCII digits"),
    ("--output-tokens", "６４", "--output-tokens: only ASCII digits"),
    ("--budget", "١٠s", "--budget: only ASCII digits"),
])
def test_numbers_inside_a_flags_text_follow_the_rule(flag, value, needle):
    with pytest.raises(UserError, match=needle):
        lane_config(build_parser().parse_args([*URL, flag, value]))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789,." + FOREIGN_DIGITS, min_size=1, max_size=10))
def test_list_and_duration_parsers_never_read_a_foreign_digit(text):
    for parse in (parse_levels, parse_rates, parse_duration):
        try:
            parse(text)
        except ValueError:
            continue
        assert text.isascii(), (parse.__name__, text)


def _cfg(*flags: str):
    return run_config(build_parser().parse_args([*URL, *flags]))


@pytest.mark.parametrize("flags, needle", [
    (["--repetitions", "2"], "--repetitions: it repeats fixed levels and together steps"),
    (["--refine"], "--refine: it measures extra levels between fixed levels"),
    (["--with-fairness", "--checks", "S1,,S2"], "--checks: an empty item"),
    (["--with-fairness", "--checks", ""], "--checks: an empty item"),
    (["--with-fairness", "--checks", "S1,S1"], "a check is named twice"),
    (["--max-concurrency", "4"], "--max-concurrency: it acts on open-loop rates only"),
    (["--request-timeout", "1e-300"], "--request-timeout: must be a finite number at least 0.1"),
    (["--budget", "0.5s"], "--budget: must be a finite number at least 1"),
])
def test_a_flag_that_changes_nothing_or_is_nonsense_is_refused(flags, needle):
    with pytest.raises(UserError) as info:
        _cfg(*flags)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_the_same_flags_with_what_they_need_are_taken():
    cfg = _cfg("--concurrency", "1,2", "--repetitions", "2", "--refine", "--request-timeout", "0.1")
    assert cfg.refine and cfg.lanes[0].repetitions == 2 and cfg.lanes[0].request_timeout_s == 0.1
    assert _cfg("--with-fairness", "--checks", "S1, s2").lanes[0].fairness.checks == ["S1", "S2"]
    assert _cfg("--budget", "1s").lanes[0].adaptive.budget_s == 1.0


@pytest.mark.parametrize("body, needle", [
    ("repetitions = 3\n", "lanes.toml:3: lanes[0].repetitions: it repeats fixed levels and together steps"),
    ("budget = 1e-300\n", "lanes[0].budget: must be a finite number at least 1"),
    ("request_timeout_s = 1e-300\n", "lanes[0].request_timeout_s: must be a finite number at least 0.1"),
    ('prompt_tokens = "normal:６４,5"\n', "lanes[0].prompt_tokens: only ASCII digits"),
    ('budget = "1_0s"\n', "lanes[0].budget: digit separators"),
    ("max_concurrency = 4\n", "lanes[0].max_concurrency: it acts on open-loop rates only"),
    ("[fairness]\nchecks = [\"S1\", \"S1\"]\n", "a check is named twice"),
])
def test_lane_file_keys_follow_the_same_rules(body, needle, tmp_path: Path):
    body = body.replace("[fairness]", "[lanes.fairness]")
    path = tmp_path / "lanes.toml"
    path.write_text('[[lanes]]\nname = "a"\n' + body)
    with pytest.raises(UserError) as info:
        load_lane_file(path)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_lane_file_with_repetitions_and_levels_is_taken(tmp_path: Path):
    path = tmp_path / "lanes.toml"
    path.write_text('[[lanes]]\nname = "a"\nconcurrency = [1, 2]\nrepetitions = 2\n')
    assert load_lane_file(path).lanes[0].repetitions == 2


def test_adaptive_lanes_take_repetitions_for_the_together_scenario(tmp_path: Path):
    """The together scenario runs every lane's levels x repetitions, adaptive lanes' too
    (docs/adaptive.md)."""
    lane = 'runtime = "url"\nurl = "http://127.0.0.1:9"\nrepetitions = 2\n'
    path = tmp_path / "lanes.toml"
    path.write_text(f'together = true\n[[lanes]]\nname = "a"\n{lane}[[lanes]]\nname = "b"\n{lane}')
    assert [lane.repetitions for lane in load_lane_file(path).lanes] == [2, 2]
    path.write_text(path.read_text().replace("together = true", "together = false"))
    with pytest.raises(UserError, match=r"lanes\[0\]\.repetitions: it repeats fixed levels"):
        load_lane_file(path)
