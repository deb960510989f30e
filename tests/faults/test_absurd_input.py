"""Absurd numbers and lane files: one line, exit 2, and nothing created under the output directory
(no run directory, no server process) — every such check runs before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from satbench.cli.main import main
from satbench.config.ranges import MAX_LANES, MAX_LEVEL, MAX_TIMEOUT_S
from satbench.config.schema import LaneConfig, RunConfig, WorkloadConfig
from satbench.errors import UserError
from satbench.gguf.prefix_bound import min_tokens, pattern_of, read_vocabulary
from satbench.gguf.vocab import build_vocab
from satbench.host import hardware
from satbench.workload.budget import check_memory_fits, workload_bytes
from tests.faults.common import one_error_line


def _refused(argv: list[str], tmp_path: Path, capsys) -> str:
    """main(argv + -o OUT): exit 2 and one line; OUT stays absent. The line is returned."""
    out = tmp_path / "out"
    code = main([*argv, "-o", str(out / "run")])
    err = capsys.readouterr().err
    line = one_error_line(err)
    assert code == 2, err
    assert not out.exists(), sorted(out.rglob("*"))
    print(f"FAULT | {' '.join(argv[:4])[:60]} | {line[:140]}")
    return line


def _lane_file(tmp_path: Path, body: str | bytes) -> str:
    path = tmp_path / "lanes.toml"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    return str(path)


@pytest.mark.parametrize("flags, needle", [
    (["--concurrency", "1000000000"], "--concurrency: must be an integer from 1 to 4,096, got 1000000000"),
    (["--concurrency", f"1,{MAX_LEVEL + 1}"], "--concurrency: must be an integer from 1 to 4,096"),
    (["--request-timeout", "inf"], "--request-timeout: must be a finite number at least 0.1 and at most "
                                   "86400"),
    (["--request-timeout", "nan"], "--request-timeout: must be a finite number"),
    (["--request-timeout", "-5"], "--request-timeout: must be a finite number at least 0.1"),
    (["--request-timeout", "0"], "--request-timeout: must be a finite number at least 0.1"),
    (["--request-timeout", str(MAX_TIMEOUT_S * 2)], "at most 86400"),
    (["--prompt-tokens", "True"], "--prompt-tokens: expected an integer, normal:MEAN,SD, uniform:LO-HI or "
                                  "jsonl:PATH, got 'True'"),
    (["--prompt-tokens", str(1 << 30)], "--prompt-tokens: must be an integer from 8 to 1,048,576"),
    (["--output-tokens", "1"], "--output-tokens: must be an integer from 2 to"),
    (["--repetitions", "0"], "--repetitions: must be an integer from 1 to 100"),
    (["--requests-per-level", "10000000"], "--requests-per-level: must be an integer from 1 to 100,000"),
    (["--parallel", "0"], "--parallel: must be an integer from 1 to 4,096"),
    (["--ctx-size", "99999999999"], "--ctx-size: must be an integer from 64 to"),
    (["--batch-size", "0"], "--batch-size: must be an integer from 1 to"),
    (["--port", "70000"], "--port: must be an integer from 1 to 65,535"),
])
def test_out_of_range_flags_are_one_line_naming_the_flag_and_the_range(flags, needle, tmp_path, capsys):
    line = _refused(["sweep", *flags], tmp_path, capsys)
    assert needle in line


def test_a_level_memory_cannot_hold_is_refused_before_anything_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(hardware, "ram_available", lambda: 64 * 2**20)  # 64 MiB left
    line = _refused(["sweep", "--concurrency", "1,4096", "--prompt-tokens", "4096"], tmp_path, capsys)
    assert "--concurrency 4096: satbench would need about" in line and "0.1 GiB of memory available" in line


def test_the_memory_rule_counts_every_request_a_level_builds():
    lane = LaneConfig(levels=[64], workload=WorkloadConfig(prompt_tokens=1 << 20))
    # 64 warmup + 512 measured requests of 1 Mi ids: 8 MiB each, at the least
    assert workload_bytes(lane, 64, False) >= 576 * 8 * 2**20
    assert workload_bytes(lane, 64, True) > workload_bytes(lane, 64, False)  # + the background pool
    cfg = RunConfig(lanes=[lane])
    check_memory_fits(cfg, False, available_bytes=workload_bytes(lane, 64, False))  # exactly fits
    with pytest.raises(UserError, match="--concurrency 64: satbench would need"):
        check_memory_fits(cfg, False, available_bytes=workload_bytes(lane, 64, False) - 1)


A = '[[lanes]]\nname = "a"\n'  # the head of a one-lane file


@pytest.mark.parametrize("body, needle", [
    (A + 'concurrency = [1000000000]\n', "lanes.toml:3: lanes[0].concurrency[0]: must be an "
                                                            "integer from 1 to 4,096, got 1000000000"),
    (A + 'concurrency = [true]\n', "lanes.toml:3: lanes[0].concurrency[0]: must be an integer "
                                                      "from 1 to 4,096, got True"),
    (A + 'concurrency = [2.0]\n', "got 2.0"),
    (A + 'repetitions = false\n', "lanes.toml:3: lanes[0].repetitions: must be an integer"),
    (A + 'request_timeout_s = inf\n', "lanes.toml:3: lanes[0].request_timeout_s: must be a "
                                                        "finite number at least 0.1"),
    (A + 'request_timeout_s = nan\n', "request_timeout_s: must be a finite number"),
    (A + 'request_timeout_s = -1\n', "request_timeout_s: must be a finite number at least 0.1"),
    (A + 'request_timeout_s = true\n', "request_timeout_s: must be a finite number"),
    (A + '[lanes.server]\nparallel = true\n', "lanes.toml:4: lanes[0].server.parallel: must be"),
    (A + '[lanes.server]\nport = 0\n', "server.port: must be an integer from 1 to 65,535"),
    (A + 'slo = { p95_ttft_ms = inf, p95_tpot_ms = 1 }\n', "slo.p95_ttft_ms: must be a finite"),
    (A + '[lanes.fairness]\nf2_repetitions = 1.5\n', "fairness.f2_repetitions: must be an "
                                                                       "integer"),
    ('together = 1\n[[lanes]]\nname = "a"\n', "together: must be true or false, got 1"),
    (A + 'concurrency = [1]\nprompt_tokens = 10000000000000000000000000000000000\n',
     "prompt_tokens: must be an integer from 8 to 1,048,576, got an integer of"),
    ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nested more than 8 deep"),
    ("x = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n", "nested more than 8 deep"),
    ("x = [[[[[[[[[[1]]]]]]]]]]\n", "nested more than 8 deep"),
    ("x = " + "1" * 5000 + "\n", "not valid TOML"),
    (b"\xff\xfe[[lanes]]\n", "not UTF-8 text"),
    (b"\x00\x01\x02binary", "not valid TOML"),
    ('[[lanes]]\n"a\\nb" = 1\nname = "a"\n', "unknown key"),
    ("".join(f'[[lanes]]\nname = "l{i}"\n' for i in range(MAX_LANES + 1)),
     f"lanes: at most {MAX_LANES} entries, got {MAX_LANES + 1}"),
    (A + 'concurrency = [' + ", ".join(str(n) for n in range(1, 100)) + "]\n",
     "lanes.toml:3: lanes[0].concurrency: at most 64 entries, got 99"),
])
def test_absurd_lane_files_are_one_line_naming_the_line_and_key(body, needle, tmp_path, capsys):
    line = _refused(["sweep", "--lanes", _lane_file(tmp_path, body)], tmp_path, capsys)
    assert needle in line


def test_a_huge_lane_file_is_refused_unread(tmp_path, capsys):
    body = '[[lanes]]\nname = "a"\n' + "# padding\n" * 200_000
    line = _refused(["sweep", "--lanes", _lane_file(tmp_path, body)], tmp_path, capsys)
    assert "larger than 1,048,576 bytes" in line


def test_a_lane_file_with_a_byte_order_mark_reads_as_toml(tmp_path, capsys):
    """A BOM is accepted (as TOML tools do): the file's own error, on its own line number, comes through."""
    body = "\ufeff" + '[[lanes]]\nname = "a"\nconcurrency = [0]\n'
    line = _refused(["sweep", "--lanes", _lane_file(tmp_path, body.encode())], tmp_path, capsys)
    assert "Invalid statement" not in line and "lanes.toml:3: lanes[0].concurrency[0]: must be" in line


def test_a_lane_file_nested_5000_deep_is_not_a_traceback(tmp_path, capsys):
    body = '[[lanes]]\nname = "a"\nslo = ' + "[" * 5000 + "]" * 5000 + "\n"
    assert "nested more than" in _refused(["sweep", "--lanes", _lane_file(tmp_path, body)], tmp_path, capsys)


def _native_lane(name: str, model: Path, server_bin: str, prompt_tokens: int) -> str:
    return (f'[[lanes]]\nname = "{name}"\nmodel = "{model}"\nruntime = "native"\n'
            f'server_bin = "{server_bin}"\n'
            f"concurrency = [1]\nrepetitions = 1\nrequests_per_level = 4\nprompt_tokens = {prompt_tokens}\n"
            "output_tokens = 4\n")


def test_a_prompt_too_short_for_the_prefix_is_refused_before_any_server_or_run_dir(
        tmp_path, capsys, tiny_gguf, marker_bin):
    """The second lane's prompt cannot hold its prefix by the vocabulary alone: refused before the
    first lane's server starts (the old check ran only once that lane's server was up)."""
    server_bin, marker = marker_bin
    body = (_native_lane("first", tiny_gguf, server_bin, 256)
            + _native_lane("second", tiny_gguf, server_bin, 16))
    line = _refused(["sweep", "--lanes", _lane_file(tmp_path, body)], tmp_path, capsys)
    assert "lane second: prompt_tokens 16 is too small for the unique request prefix (at least" in line
    assert not marker.exists()
    line = _refused(["sweep", "--model", str(tiny_gguf), "--server-bin", server_bin, "--prompt-tokens", "12"],
                    tmp_path, capsys)
    assert line.startswith("satbench: error: --prompt-tokens 12 is too small") and not marker.exists()


def test_the_prefix_bound_is_no_more_than_an_actual_cover():
    """The synthetic vocabulary's greedy longest-piece cover of a prefix is a real cover: the bound
    (BOS + fewest pieces) never exceeds it, and the nonce's wildcard can only lower it."""
    tokens, _, _ = build_vocab()
    pieces = set(tokens[259:])
    text = "[a3f09b-default-n8-r3-b999999] ".replace(" ", "\u2581")
    greedy, i = 0, 0
    while i < len(text):
        n = max(k for k in range(1, len(text) - i + 1) if text[i:i + k] in pieces)
        greedy, i = greedy + 1, i + n
    from satbench.gguf.prefix_bound import Vocabulary

    vocab = Vocabulary(model="llama", add_bos=True, pieces=frozenset(tokens))
    exact = min_tokens(pattern_of("[a3f09b-default-n8-r3-b999999] "), vocab)
    hex_digits = {"\0" * 6: frozenset("0123456789abcdef")}
    wild = min_tokens(pattern_of("[\0\0\0\0\0\0-default-n8-r3-b999999] ", hex_digits), vocab)
    assert exact is not None and wild is not None and 10 < wild <= exact <= greedy + 1
    assert min_tokens(pattern_of("\u00e9t\u00e9"), vocab) is None  # no piece covers é alone: no bound
    t5 = Vocabulary(model="t5", add_bos=False, pieces=frozenset(tokens))
    assert min_tokens(pattern_of("[x]"), t5) is None


def test_the_vocabulary_is_read_from_the_gguf(tiny_gguf):
    vocab = read_vocabulary(tiny_gguf)
    assert vocab is not None and vocab.model == "llama" and vocab.add_bos and "\u2581the" in vocab.pieces


def test_a_url_lanes_prefix_is_checked_by_its_tokenize_before_the_run(tmp_path, capsys, fake_server):
    """A running llama.cpp server: its /tokenize counts the longest prefix in the preflight; the
    first lane fits, the second does not, and nothing is sent to /completion."""
    fake = fake_server(tokenize_chars_per_token=1)  # each character a token: the prefix is ~30
    lane = ('[[lanes]]\nname = "{name}"\nruntime = "url"\nurl = "{url}"\nconcurrency = [1]\nrepetitions = 1\n'
            "requests_per_level = 4\nprompt_tokens = {prompt}\noutput_tokens = 4\n")
    body = (lane.format(name="fits", url=fake.base_url, prompt=64)
            + lane.format(name="short", url=fake.base_url, prompt=20))
    line = _refused(["sweep", "--lanes", _lane_file(tmp_path, body)], tmp_path, capsys)
    assert "lane short: prompt_tokens 20 is too small for the unique request prefix (up to" in line
    assert fake.stop() == []  # no request was measured


@pytest.mark.parametrize("days", ["nan", "inf", "-1", "0"])
def test_capability_max_age_days_is_finite_and_positive(days, tmp_path, capsys):
    line = _refused(["capability", "--recommendations", str(tmp_path / "r.json"), "--max-age-days", days],
                    tmp_path, capsys)
    assert "--max-age-days: must be a number of days above 0 and at most 36500" in line
