"""Every flag-value parser on arbitrary text: a value, or one ValueError / UserError of one line; never
another exception (OverflowError, RecursionError, IndexError). The lane through the flags as well."""

from __future__ import annotations

import contextlib

from hypothesis import example, given, settings
from hypothesis import strategies as st

from satbench.cli.args import build_parser, lane_config
from satbench.config.schema import parse_duration, parse_levels, parse_rates
from satbench.errors import UserError
from satbench.server.server_args import parse_embedded
from satbench.workload.lengths import parse_lengths

NUMBERISH = st.text(alphabet="0123456789.,-+eE_ naif:/", max_size=30)
TEXT = st.one_of(NUMBERISH, st.text(max_size=30))


def _one_line_error(call, *args) -> None:
    try:
        call(*args)
    except (ValueError, UserError) as exc:
        assert "\n" not in str(exc), str(exc)


@settings(max_examples=300, deadline=None)
@given(TEXT)
@example("1e-300")
@example("1e999")
@example("1,,2")
@example("9" * 5000)
def test_rates_levels_and_durations(text):
    for parse in (parse_rates, parse_levels, parse_duration):
        _one_line_error(parse, text)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["normal:", "uniform:", ""]), TEXT, st.sampled_from(["prompt", "output"]))
@example("normal:", "64,-5", "prompt")
@example("normal:", "1e308,1e308", "output")
@example("uniform:", "8-" + "9" * 400, "prompt")
def test_length_forms(kind, text, what):
    _one_line_error(parse_lengths, kind + text, what)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["-ts", "-mg", "-fa", "-ctk", "-sm", "-nkvo", "--no-warmup",
                                           "-ts=", "-mg="]).flatmap(
    lambda f: st.builds(lambda v: f + v if f.endswith("=") else f, NUMBERISH)), NUMBERISH), max_size=6))
@example(["-ts=1e308,nan"])
@example(["-mg=9999"])
def test_embedded_server_args(args):
    _one_line_error(parse_embedded, args)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["--rate", "--rate-requests", "--max-concurrency", "--concurrency", "--budget"]),
       NUMBERISH)
@example("--rate", "1e-300")
@example("--rate", "0.0001")
def test_a_flag_gives_a_lane_or_one_line(flag, value):
    def parse() -> None:
        lane_config(build_parser().parse_args(["sweep", "--url", "http://127.0.0.1:9", flag, value]))
    with contextlib.suppress(SystemExit):  # argparse refused a flag-like value: its own one-line usage error
        _one_line_error(parse)
