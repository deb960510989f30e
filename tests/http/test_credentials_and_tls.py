"""Remote servers: the API key goes only to its server and into no file; TLS is verified unless
the user says --insecure; satbench's own servers listen on 127.0.0.1 only.

HTTPS is served by the fake llama.cpp server with a self-signed certificate for 127.0.0.1
made here with the openssl CLI; the fake's `api_key` makes it answer 401 like llama-server
--api-key and count, per path, the requests that carried the key.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from satbench.cli.main import main
from satbench.config.schema import LaneConfig, RuntimeConfig
from satbench.records.events import RequestEvent, read_events
from satbench.records.manifest import read_manifest

KEY = "sk-satbench-test-9f8e7d6c5b4a"
TINY = ["--concurrency", "1", "--requests-per-level", "3", "--repetitions", "1", "--prompt-tokens", "16",
        "--output-tokens", "4"]


@pytest.fixture(scope="module")
def cert(tmp_path_factory) -> tuple[Path, Path]:
    """(certificate, private key): self-signed, for IP 127.0.0.1, valid one day."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command-line tool is not installed (needed to make a test certificate)")
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    return crt, key


def https_fake(fake_server, cert, **script):
    return fake_server(n_slots=1, decode_iteration_ms=2.0, tls_cert=str(cert[0]), tls_key=str(cert[1]),
                       **script)


def sweep(capsys, *args) -> tuple[int, str, str]:
    code = main(["sweep", *args])
    out, err = capsys.readouterr()
    return code, out, err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("satbench: error:")]


def fake_stats(fake) -> dict:
    """Stop the fake and return the stats it prints on exit."""
    schedule = fake.stop()
    last = fake.proc.stderr.read().decode().strip().splitlines()[-1]
    return {**json.loads(last)["stats"], "schedule": schedule}


def measured_nothing(run_dir: Path) -> bool:
    if not (run_dir / "events.jsonl").exists():
        return True
    return not any(isinstance(e, RequestEvent) for e in read_events(run_dir))


def assert_key_nowhere(run_dir: Path, *texts: str, key: str = KEY) -> None:
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"run.json", "EVIDENCE.md", "report.html", "results.json"} <= names, names
    assert any(p.parent.name == "plots" for p in files)
    for f in files:
        assert key.encode() not in f.read_bytes(), f
    for text in texts:
        assert key not in text


# -- TLS -----------------------------------------------------------------------------------------


def test_an_untrusted_certificate_fails_in_one_line_and_nothing_is_measured(fake_server, cert, capsys,
                                                                             tmp_path):
    fake = https_fake(fake_server, cert)
    code, _, err = sweep(capsys, "--url", fake.base_url, *TINY, "-o", str(tmp_path / "run"))
    assert code != 0
    assert "Traceback" not in err
    [line] = error_lines(err)
    assert "certificate verify failed" in line and "self-signed certificate" in line
    assert fake.base_url in line and "--ca-cert" in line and "--insecure" in line
    assert measured_nothing(tmp_path / "run")
    assert not [r for r in fake.stop() if r.get("endpoint")]  # no completion reached the server


def test_ca_cert_trusts_a_self_signed_server(fake_server, cert, capsys, tmp_path):
    fake = https_fake(fake_server, cert)
    run = tmp_path / "run"
    code, _, err = sweep(capsys, "--url", fake.base_url, "--ca-cert", str(cert[0]), *TINY, "-o", str(run))
    assert code == 0, err
    assert "TLS verification is OFF" not in err
    rt = read_manifest(run).config.lanes[0].runtime
    assert rt.ca_cert == str(cert[0]) and rt.insecure is False
    assert len([r for r in fake.stop() if r["status"] == "ok"]) == 4  # 1 warmup + 3 measured, over TLS


def test_insecure_skips_verification_warns_and_is_recorded(fake_server, cert, capsys, tmp_path):
    fake = https_fake(fake_server, cert)
    run = tmp_path / "run"
    code, _, err = sweep(capsys, "--url", fake.base_url, "--insecure", *TINY, "-o", str(run))
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "TLS verification is OFF" in line]
    assert warnings == [f"satbench: warning: TLS verification is OFF for {fake.base_url} (--insecure)"]
    assert read_manifest(run).config.lanes[0].runtime.insecure is True


def test_the_insecure_warning_never_shows_url_credentials(fake_server, cert, capsys, tmp_path):
    fake = https_fake(fake_server, cert)
    url = fake.base_url.replace("https://", f"https://user:{KEY}@")
    code, out, err = sweep(capsys, "--url", url, "--insecure", *TINY, "-o", str(tmp_path / "run"))
    assert code == 0, err
    assert "TLS verification is OFF for https://***@127.0.0.1" in err
    assert_key_nowhere(tmp_path / "run", out, err)


# -- API keys ------------------------------------------------------------------------------------


def test_a_server_that_needs_a_key_says_so_in_one_line(fake_server, cert, capsys, tmp_path):
    fake = https_fake(fake_server, cert, api_key=KEY)
    code, _, err = sweep(capsys, "--url", fake.base_url, "--ca-cert", str(cert[0]), *TINY,
                         "-o", str(tmp_path / "r"))
    assert code != 0 and "Traceback" not in err
    [line] = error_lines(err)
    assert "needs an API key (HTTP 401" in line and "--api-key-file" in line
    assert measured_nothing(tmp_path / "r")


def test_a_wrong_key_is_reported_as_refused(fake_server, cert, capsys, tmp_path, monkeypatch):
    fake = https_fake(fake_server, cert, api_key=KEY)
    monkeypatch.setenv("WRONG_KEY", "sk-not-the-key")
    code, _, err = sweep(capsys, "--url", fake.base_url, "--ca-cert", str(cert[0]),
                         "--api-key-env", "WRONG_KEY", *TINY, "-o", str(tmp_path / "r"))
    assert code != 0
    [line] = error_lines(err)
    assert "refused the API key (HTTP 401" in line and "sk-not-the-key" not in err


@pytest.mark.parametrize("source", ["file", "env"])
def test_the_key_reaches_the_server_and_no_file(source, fake_server, cert, capsys, tmp_path, monkeypatch):
    fake = https_fake(fake_server, cert, api_key=KEY)
    if source == "file":
        key_file = tmp_path / "key.txt"
        key_file.write_text(f"  {KEY}\n")  # surrounding whitespace is not part of the key
        how = ["--api-key-file", str(key_file)]
    else:
        monkeypatch.setenv("SATBENCH_TEST_KEY", KEY)
        how = ["--api-key-env", "SATBENCH_TEST_KEY"]
    run = tmp_path / "run"
    code, out, err = sweep(capsys, "--url", fake.base_url, "--ca-cert", str(cert[0]), *how, *TINY,
                           "-o", str(run))
    assert code == 0, err
    stats = fake_stats(fake)
    assert stats["auth"]["refused"] == {}
    authorized = stats["auth"]["authorized"]
    # probe, workload, requests, sampler
    for path in ("/props", "/tokenize", "/completion", "/metrics", "/slots"):
        assert authorized.get(path, 0) >= 1, (path, authorized)
    assert authorized["/completion"] == 4
    assert_key_nowhere(run, out, err)
    rt = read_manifest(run).config.lanes[0].runtime
    assert (rt.api_key_file, rt.api_key_env) == ((str(key_file), None) if source == "file"
                                                 else (None, "SATBENCH_TEST_KEY"))


def test_each_lane_sends_only_its_own_key(fake_server, cert, capsys, tmp_path):
    """Two servers with different keys in one run: each sees its own key and no other."""
    other = "sk-second-lane-0a1b2c3d"
    fa, fb = https_fake(fake_server, cert, api_key=KEY), https_fake(fake_server, cert, api_key=other)
    (tmp_path / "a.key").write_text(KEY)
    (tmp_path / "b.key").write_text(other)
    lanes = tmp_path / "lanes.toml"
    lanes.write_text("".join(
        f'[[lanes]]\nname = "{n}"\nruntime = "url"\nurl = "{f.base_url}"\napi_key_file = "{tmp_path / k}"\n'
        f'ca_cert = "{cert[0]}"\nconcurrency = [1]\nrequests_per_level = 3\nrepetitions = 1\n'
        f'prompt_tokens = 16\noutput_tokens = 4\n\n' for n, f, k in (("a", fa, "a.key"), ("b", fb, "b.key"))))
    code, out, err = sweep(capsys, "--lanes", str(lanes), "-o", str(tmp_path / "run"))
    assert code == 0, err
    for f in (fa, fb):
        stats = fake_stats(f)
        assert stats["auth"]["refused"] == {} and stats["auth"]["authorized"]["/completion"] == 4
    for key in (KEY, other):
        assert_key_nowhere(tmp_path / "run", out, err, key=key)


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, needle", [
    (["--url", "https://h:1", "--api-key-env", "X", "--api-key-file", "k"],
     "--api-key-env and --api-key-file are mutually exclusive"),
    (["--insecure"], "--insecure: only for a remote server; use with --url"),
    (["--ca-cert", "c.pem"], "--ca-cert: only for a remote server; use with --url"),
    (["--api-key-file", "k"], "--api-key-file: only for a remote server; use with --url"),
    (["--url", "https://h:1", "--insecure", "--ca-cert", "c.pem"], "contradict each other"),
    (["--url", "http://h:1", "--insecure"], "apply to an https:// --url only"),
])
def test_option_misuse_is_one_line_user_error(args, needle, capsys, tmp_path):
    code, _, err = sweep(capsys, *args, *TINY, "-o", str(tmp_path / "run"))
    assert code == 2 and "Traceback" not in err
    [line] = error_lines(err)
    assert needle in line
    assert not (tmp_path / "run").exists()  # refused before a run directory exists


def test_missing_or_bad_files_are_user_errors(capsys, tmp_path, cert):
    empty, spaced, notpem = tmp_path / "empty.key", tmp_path / "two-words.key", tmp_path / "notpem.pem"
    empty.write_text("\n  \n")
    spaced.write_text(f"{KEY} extra\n")
    notpem.write_text("hello")
    cases = [(["--api-key-file", str(tmp_path / "absent.key")],
              f"API key file {tmp_path / 'absent.key'}: No such file"),
             (["--api-key-file", str(empty)], f"API key file {empty} is empty"),
             (["--api-key-file", str(spaced)], "contains whitespace or control characters"),
             (["--ca-cert", str(tmp_path / "absent.pem")],
              f"--ca-cert {tmp_path / 'absent.pem'}: No such file"),
             (["--ca-cert", str(notpem)], "not a PEM certificate")]
    for args, needle in cases:
        code, _, err = sweep(capsys, "--url", "https://127.0.0.1:9", *args, *TINY,
                             "-o", str(tmp_path / "run"))
        assert code == 2, (args, err)
        [line] = error_lines(err)
        assert needle in line, (needle, line)
        assert KEY not in err
        assert not (tmp_path / "run").exists()


def test_lane_file_keys_map_to_the_runtime_and_are_checked(tmp_path):
    from satbench.cli.lanefile import load_lane_file
    from satbench.errors import UserError

    path = tmp_path / "lanes.toml"
    path.write_text('[[lanes]]\nname = "r"\nruntime = "url"\nurl = "https://10.0.0.5:8443"\n'
                    'api_key_file = "/etc/k"\nca_cert = "/etc/ca.pem"\n')
    rt = load_lane_file(path).lanes[0].runtime
    assert (rt.api_key_file, rt.ca_cert, rt.insecure) == ("/etc/k", "/etc/ca.pem", False)
    path.write_text('[[lanes]]\nname = "e"\ninsecure = true\n')
    with pytest.raises(UserError, match="insecure: only for a remote server"):
        load_lane_file(path)
    path.write_text('[[lanes]]\nname = "r"\nruntime = "url"\nurl = "https://h:1"\napi_key_env = "K"\n'
                    'api_key_file = "k"\n')
    with pytest.raises(UserError, match="mutually exclusive"):
        load_lane_file(path)


def test_run_json_holds_the_key_files_path_never_the_key():
    rc = RuntimeConfig(kind="url", model=None, url="https://h:1", api_key_file="/run/secrets/key")
    dumped = LaneConfig(runtime=rc).model_dump_json()
    assert "/run/secrets/key" in dumped and '"insecure":false' in dumped


# -- capability talks to --url with the same key and TLS policy ---------------------------------------


def test_capability_asks_props_with_the_lanes_key_and_tls_policy(fake_server, cert, tmp_path):
    from satbench.capability.node import remote_identity

    fake = https_fake(fake_server, cert, api_key=KEY)
    (tmp_path / "k").write_text(KEY)

    def lane(**rt) -> LaneConfig:
        return LaneConfig(runtime=RuntimeConfig(kind="url", model=None, url=fake.base_url, **rt))

    path, build, why = remote_identity(lane())  # certificate not trusted
    assert path is None and build is None and "certificate verify failed: self-signed certificate" in why
    path, build, why = remote_identity(lane(ca_cert=str(cert[0])))  # 401: no key
    assert path is None and "401" in why
    path, build, why = remote_identity(lane(ca_cert=str(cert[0]), api_key_file=str(tmp_path / "k")))
    assert path == "/models/fake-model-Q8_0.gguf" and build == "11549" and why is None
    # the reason reaches the capability report's refusal instead of a generic "cannot confirm the build"
    from satbench.capability.checks import check_lane
    from satbench.capability.node import node_lane

    node = node_lane(lane())
    assert node.unreachable and check_lane(object(), node, "f", None, None).startswith(
        "cannot ask the lane's server what it runs: ")
    assert fake_stats(fake)["auth"]["authorized"] == {"/props": 1}


# -- satbench's own servers listen on loopback only ----------------------------------------------------


def test_native_server_is_told_to_listen_on_loopback_only(tmp_path):
    from satbench.config.schema import ServerParams
    from satbench.server.native import NativeRuntime

    binary = Path(__file__).resolve().parents[1] / "fakes" / "fake_llama_server_bin.py"
    rt = NativeRuntime(str(binary), "/m.gguf", ServerParams(), 2, 1024, tmp_path / "server.log")
    cmd = rt.command(8080)
    assert cmd.count("--host") == 1 and cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert "--host" not in rt.server_args


@pytest.mark.integration
def test_embedded_server_listens_on_127_0_0_1_only(tmp_path):
    import psutil

    from satbench.config.schema import ServerParams
    from satbench.gguf.synthetic import write_synthetic_gguf
    from satbench.server.embedded import EmbeddedRuntime

    model = tmp_path / "tiny.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 3)
    rt = EmbeddedRuntime(str(model), ServerParams(), 1, 256, tmp_path / "server.log")
    rt.start()
    try:
        assert rt.pid is not None
        root = psutil.Process(rt.pid)
        listening = [c for p in [root, *root.children(recursive=True)]
                     for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    finally:
        rt.stop()
    assert listening, "the embedded server has no listening socket"
    assert {c.laddr.ip for c in listening} == {"127.0.0.1"}
    assert any(rt.base_url == f"http://127.0.0.1:{c.laddr.port}" for c in listening)


def test_key_and_ca_files_are_read_bounded_and_never_block(tmp_path):
    """Every path that reads them (a sweep, --resume, the API) goes through http.access's readers:
    a FIFO is refused unopened, /dev/zero and a sparse giant at their caps, without reading them whole."""
    import os

    from satbench.config.schema import RuntimeConfig
    from satbench.errors import UserError
    from satbench.http.access import read_key_file, tls_context_for

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    with open(big, "wb") as fh:
        fh.truncate(1 << 31)
    for path, needle in ((fifo, "not a regular file"), ("/dev/zero", "not a regular file"),
                         (big, "larger than 65,536 bytes")):
        with pytest.raises(UserError, match=needle):
            read_key_file(str(path))
        with pytest.raises(UserError, match=f"--ca-cert {path}"):
            tls_context_for(RuntimeConfig(kind="url", model=None, url="https://127.0.0.1:9",
                                          ca_cert=str(path)))
