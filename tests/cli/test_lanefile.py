"""Lane files: every error names the key and its line; good files become typed lanes."""

from pathlib import Path

import pytest

from satbench.cli.lanefile import key_lines, load_lane_file
from satbench.errors import UserError

GOOD = """\
together = true

[[lanes]]
name = "dense"
model = "builtin:gemma3-270m"
concurrency = [1, 2, 4]
slo = { p95_ttft_ms = 900, p95_tpot_ms = 50 }

[lanes.server]
parallel = 4
ctx_size = 4096

[[lanes]]
name = "remote"
runtime = "url"
url = "http://10.0.0.5:8080"
api_key_env = "NODE_KEY"
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "lanes.toml"
    p.write_text(text)
    return p


def test_good_file(tmp_path):
    cfg = load_lane_file(write(tmp_path, GOOD))
    dense, remote = cfg.lanes
    assert cfg.together
    assert dense.levels == [1, 2, 4] and dense.server.n_parallel == 4 and dense.server.n_ctx == 4096
    assert dense.slo.p95_ttft_ms == 900
    assert remote.runtime.kind == "url" and remote.runtime.model is None
    assert remote.runtime.api_key_env == "NODE_KEY"


def test_shipped_example_is_valid():
    cfg = load_lane_file(Path(__file__).parents[2] / "examples" / "lanes.toml")
    assert [lane.name for lane in cfg.lanes] == ["dense", "v4"]
    assert cfg.lanes[0].runtime.model == "builtin:gemma3-270m"
    assert cfg.lanes[1].runtime.model == "synthetic:deepseek4-small"


@pytest.mark.parametrize("edit, line, needle", [
    (("ctx_size = 4096", "ctx_sizee = 4096"), 11, "lanes[0].server.ctx_sizee: unknown key"),
    (('name = "remote"', 'name = "remote"\ncolour = "blue"'), 15, "lanes[1].colour: unknown key"),
    (("concurrency = [1, 2, 4]", "concurrency = [1, 0, 4]"), 6, "concurrency"),
    (("parallel = 4", 'parallel = "four"'), 10, "lanes[0].server.parallel"),
    (("p95_ttft_ms = 900", "p95_ttft_ms = -1"), 7, "lanes[0].slo"),
    (('url = "http://10.0.0.5:8080"', ""), 13, "lanes[1]: runtime 'url' needs a url"),
    (('api_key_env = "NODE_KEY"', 'api_key_env = "NODE_KEY"\n[lanes.server]\nthreads = 8\nbatch_size = 512'),
     13, "lanes[1]: runtime 'url' measures a running server, which satbench does not start: "
         "server.threads cannot"),
    (('name = "remote"', 'name = "dense"'), 14, "lanes[1].name: lane names repeat: dense"),
    (('name = "dense"', 'name = "no spaces allowed"'), 4, "lanes[0].name"),
    (('name = "remote"', 'name = "remote"\nserver . "threads" = "two"'), 15, "lanes[1].server.threads"),
])
def test_errors_name_the_key_and_its_line(tmp_path, edit, line, needle):
    path = write(tmp_path, GOOD.replace(*edit, 1))
    with pytest.raises(UserError) as info:
        load_lane_file(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{line}:"), msg
    assert needle in msg, msg
    assert "\n" not in msg


def test_toml_syntax_error_has_its_line(tmp_path):
    with pytest.raises(UserError, match=r"not valid TOML: .*line 2"):
        load_lane_file(write(tmp_path, "[[lanes]]\nname = \n"))


def test_missing_file_and_together_with_one_lane(tmp_path):
    with pytest.raises(UserError, match="No such file"):
        load_lane_file(tmp_path / "nope.toml")
    with pytest.raises(UserError, match="at least two lanes"):
        load_lane_file(write(tmp_path, '[[lanes]]\nname = "a"\n'), together=True)


def test_key_lines():
    lines = key_lines(GOOD)
    assert lines[("together",)] == 1
    assert lines[("lanes", 0)] == 3 and lines[("lanes", 1)] == 13
    assert lines[("lanes", 0, "server", "ctx_size")] == 11
    dotted = key_lines('[[lanes]]\nname = "a"\nslo.p95_ttft_ms = 900\n"server"."ctx.size" = 1\n')
    assert dotted[("lanes", 0, "slo", "p95_ttft_ms")] == 3 and dotted[("lanes", 0, "slo")] == 3
    assert dotted[("lanes", 0, "server", "ctx.size")] == 4


@pytest.mark.parametrize("lane, needle", [
    ('name = "r"\nurl = "http://127.0.0.1:9"', "add runtime = \"url\""),
    ('name = "n"\nserver_bin = "/bin/false"', "add runtime = \"native\""),
    ('name = "u"\nruntime = "url"\nurl = "http://127.0.0.1:9"\nmodel = "x.gguf"', "remove model"),
])
def test_a_key_of_another_runtime_is_refused_not_ignored(tmp_path, lane, needle):
    """A url (or server_bin) without its runtime used to be dropped silently: the embedded server
    was measured and the figures credited to the server the file named."""
    with pytest.raises(UserError, match=needle):
        load_lane_file(write(tmp_path, f"[[lanes]]\n{lane}\n"))


def test_a_run_recorded_with_an_unused_url_key_still_loads():
    """Runs recorded before the lane-file check carry kind 'embedded' with the unused url: their
    run.json must still load (analyze, report, verify), so the check lives in the lane file only."""
    from satbench.config.schema import RuntimeConfig
    rc = RuntimeConfig.model_validate({"kind": "embedded", "model": "m.gguf", "url": "http://127.0.0.1:8080"})
    assert rc.kind == "embedded"
