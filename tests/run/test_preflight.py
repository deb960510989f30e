"""Bad server inputs are refused before a new run's directory exists (one line, naming the lane of a
lane file); what goes wrong only once a lane's server starts is that lane's recorded failure, and
the other lanes are measured and recommended. Also: a --url with a path, llama.cpp's reason for an
unrecognized option, and `recommend` on a path that is no run."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from satbench.cli.main import main
from satbench.errors import RuntimeStartError
from satbench.gguf.synthetic import write_synthetic_gguf
from satbench.records.manifest import read_manifest

BIN = str(Path(__file__).resolve().parents[1] / "fakes" / "fake_llama_server_bin.py")


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model") / "m.gguf"
    write_synthetic_gguf(path, "llama", "tiny", 1)
    return path


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


def _lane(name: str, model: Path, server_bin: str, port: int | None = None) -> str:
    return (f'[[lanes]]\nname = "{name}"\nmodel = "{model}"\nruntime = "native"\n'
            f'server_bin = "{server_bin}"\n'
            "concurrency = [1]\nrepetitions = 1\nrequests_per_level = 4\n"
            "prompt_tokens = 16\noutput_tokens = 4\n"
            + (f"[lanes.server]\nport = {port}\n" if port else ""))


def _refused(argv: list[str], run_dir: Path, capsys) -> tuple[int, str]:
    code = main([*argv, "-o", str(run_dir)])
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not run_dir.exists(), "a refused run left its directory behind"
    return code, err


def test_a_bad_server_bin_or_a_port_in_use_leaves_no_run_directory(tmp_path, model, busy_port, capsys):
    noexec = tmp_path / "noexec.sh"
    noexec.write_text("#!/bin/sh\n")
    run = tmp_path / "run"
    code, err = _refused(["sweep", "--server-bin", str(tmp_path / "gone"), "--model", str(model)], run,
                         capsys)
    assert code == 2 and f"--server-bin {tmp_path / 'gone'}: no such file" in err
    code, err = _refused(["sweep", "--server-bin", str(noexec), "--model", str(model)], run, capsys)
    assert code == 2 and f"--server-bin {noexec}: not an executable file" in err
    code, err = _refused(["sweep", "--server-bin", BIN, "--model", str(model), "--port", str(busy_port)],
                         run, capsys)
    assert code == 2 and f"--port {busy_port}: 127.0.0.1:{busy_port} is not free" in err


def test_an_unreachable_url_leaves_no_run_directory(tmp_path, capsys):
    code, err = _refused(["sweep", "--url", "http://127.0.0.1:1"], tmp_path / "run", capsys)
    assert code == 3 and "cannot reach http://127.0.0.1:1" in err


def test_an_openai_base_url_names_the_same_server(tmp_path, capsys):
    from satbench.http.endpoint import openai_base, split_credentials

    # the OpenAI and LiteLLM convention: the base URL ends in /v1; satbench adds its paths to the root
    assert split_credentials("http://127.0.0.1:8080/v1") == ("http://127.0.0.1:8080", None)
    assert split_credentials("https://u:p@example.com/api/v1/") == ("https://example.com/api", "p")
    assert split_credentials("http://127.0.0.1:8080/") == ("http://127.0.0.1:8080", None)
    # a server behind a reverse proxy at a path prefix is measured at that prefix
    assert split_credentials("https://gw.example/llm/") == ("https://gw.example/llm", None)
    assert openai_base("https://u:p@gw.example/llm/v1") == "https://gw.example/llm/v1"
    assert openai_base("http://h:8080") == "http://h:8080/v1"
    code, err = _refused(["sweep", "--url", "http://127.0.0.1:1/v1"], tmp_path / "run", capsys)
    assert code == 3 and "cannot reach http://127.0.0.1:1" in err  # the root, reached as any other


def test_a_url_with_a_query_is_refused_naming_the_paths_used(tmp_path, capsys):
    code, err = _refused(["sweep", "--url", "http://127.0.0.1:8080/v1?x=1"], tmp_path / "run", capsys)
    assert code == 2 and "(http://127.0.0.1:8080 or http://127.0.0.1:8080/v1) without a query" in err
    assert "/completion, /v1/completions or /v1/chat/completions" in err


def test_a_lane_files_bad_server_bin_or_shared_port_is_named_before_the_run(tmp_path, model, busy_port,
                                                                            capsys):
    noexec = tmp_path / "noexec.sh"
    noexec.write_text("#!/bin/sh\n")
    lanes = tmp_path / "lanes.toml"
    lanes.write_text(_lane("a", model, BIN) + _lane("b", model, str(noexec)))
    code, err = _refused(["sweep", "--lanes", str(lanes)], tmp_path / "run", capsys)
    assert code == 2 and f"lane b: server_bin {noexec}: not an executable file" in err
    lanes.write_text("together = true\n" + _lane("a", model, BIN, 18961) + _lane("b", model, BIN, 18961))
    code, err = _refused(["sweep", "--lanes", str(lanes)], tmp_path / "run", capsys)
    assert code == 2 and "lanes a and b both ask for port 18961" in err
    lanes.write_text(_lane("a", model, BIN) + _lane("b", model, BIN, busy_port))
    code, err = _refused(["sweep", "--lanes", str(lanes)], tmp_path / "run", capsys)
    assert code == 2 and f"lane b: port {busy_port}: 127.0.0.1:{busy_port} is not free" in err


@pytest.mark.parametrize("fault", ["binary", "port"])
def test_a_lane_whose_binary_or_port_fails_at_start_is_that_lanes_failure(tmp_path, model, busy_port, capsys,
                                                                          monkeypatch, fault):
    """Past the checks (the binary removed, the port taken meanwhile): lane b's failure is recorded,
    lane a stays measured and recommended, exit 4 (it used to abort the whole run, exit 2)."""
    import satbench.run.server_preflight

    monkeypatch.setattr(satbench.run.server_preflight, "server_preflight", lambda cfg, lane_file: None)
    noexec = tmp_path / "noexec.sh"
    noexec.write_text("#!/bin/sh\n")
    lanes = tmp_path / "lanes.toml"
    lanes.write_text(_lane("a", model, BIN) + (_lane("b", model, str(noexec)) if fault == "binary"
                                               else _lane("b", model, BIN, busy_port)))
    run_dir = tmp_path / "run"
    code = main(["sweep", "--lanes", str(lanes), "-o", str(run_dir)])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 4 and line.startswith("satbench: lane b: the server did not start: "), line
    assert ("not an executable file" if fault == "binary" else f"port {busy_port}") in line
    manifest = read_manifest(run_dir)
    assert manifest.status == "complete"
    failure, = manifest.server_failures
    assert (failure.lane, failure.unit) == ("b", "solo/b/start")
    recs = json.loads((run_dir / "recommendations.json").read_text())["lanes"]
    assert [r["lane"] for r in recs] == ["a"]
    assert (run_dir / "EVIDENCE.md").exists()


def test_an_unrecognized_option_is_the_reason_and_an_empty_log_says_so(tmp_path):
    from satbench.config.schema import ServerParams
    from satbench.server.logscan import failure_reason
    from satbench.server.native import NativeRuntime

    log = "/bin/sleep: unrecognized option '--model'\nTry '/bin/sleep --help' for more information.\n"
    assert failure_reason(log) == "/bin/sleep: unrecognized option '--model'"
    assert failure_reason("error: unknown argument: --foo\n") == "error: unknown argument: --foo"
    assert failure_reason("usage: llama-server [options]\n") == "usage: llama-server [options]"
    assert failure_reason("load_tensors: CPU memory usage: 5 MiB\nmain: exiting\n") == \
        "no error in its log; last line: main: exiting"
    rt = NativeRuntime("/bin/true", "/m.gguf", ServerParams(), 1, 256, tmp_path / "server.log")
    with pytest.raises(RuntimeStartError) as exc:
        rt.start()
    assert str(exc.value) == "llama-server failed to start (exit 0): its log is empty"


def test_recommend_on_a_path_that_is_no_run_says_so(tmp_path, capsys):
    assert main(["recommend", str(tmp_path / "nothing")]) == 5
    assert f"{tmp_path / 'nothing'} is not a satbench run directory" in capsys.readouterr().err


def test_several_url_lanes_none_of_which_answers_leave_no_run_directory(tmp_path, capsys):
    lanes = tmp_path / "lanes.toml"
    lanes.write_text("".join(f'[[lanes]]\nname = "{n}"\nruntime = "url"\nurl = "http://127.0.0.1:{p}"\n'
                             for n, p in (("a", 1), ("b", 9))))
    run = tmp_path / "r"
    code = main(["sweep", "--lanes", str(lanes), "-o", str(run)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 3 and not run.exists(), err
    assert err.startswith(
        "satbench: error: no lane's server answers (lane a: cannot reach http://127.0.0.1:1"), err
    assert "lane b: cannot reach http://127.0.0.1:9" in err


def test_several_url_lanes_one_of_which_answers_run(fake_server, tmp_path, capsys):
    """One answering lane is enough: the other becomes that lane's recorded failure."""
    good = fake_server(n_slots=2, decode_iteration_ms=2.0)
    lanes = tmp_path / "lanes.toml"
    lanes.write_text("".join(f'[[lanes]]\nname = "{n}"\nruntime = "url"\nurl = "{u}"\nconcurrency = [1]\n'
                             'repetitions = 1\nrequests_per_level = 4\n'
                             'prompt_tokens = 16\noutput_tokens = 4\n'
                             for n, u in (("down", "http://127.0.0.1:1"), ("good", good.base_url))))
    run = tmp_path / "r"
    code = main(["sweep", "--lanes", str(lanes), "-o", str(run)])
    assert code == 4 and run.is_dir(), capsys.readouterr().err
    assert [f["lane"] for f in json.loads((run / "run.json").read_text())["server_failures"]] == ["down"]
