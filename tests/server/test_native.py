"""The native runtime starts and stops a llama-server executable with the lane's flags.

The executable here is tests/fakes/fake_llama_server_bin.py (no C++ build in the test suite);
the real binary was exercised by hand (docs/metrics.md, "Limits worth knowing"; docs/gpu.md).
"""

import json
from pathlib import Path

import pytest

from satbench.cli.main import main
from satbench.config.schema import ServerParams
from satbench.errors import UserError
from satbench.gguf.synthetic import write_synthetic_gguf
from satbench.records.manifest import read_manifest
from satbench.server.native import NativeRuntime

BIN = str(Path(__file__).resolve().parents[1] / "fakes" / "fake_llama_server_bin.py")


def test_flags_follow_llama_server(tmp_path, monkeypatch):
    argv_file = tmp_path / "argv.json"
    monkeypatch.setenv("FAKE_BIN_ARGV", str(argv_file))
    params = ServerParams(n_batch=1024, n_ubatch=256, n_threads=2, n_gpu_layers=99, kv_unified=True)
    rt = NativeRuntime(BIN, "/m.gguf", params, 4, 2048, tmp_path / "server.log")
    rt.start()
    try:
        assert rt.alive() and rt.base_url.startswith("http://127.0.0.1:")
    finally:
        rt.stop()
    assert not rt.alive()
    argv = json.loads(argv_file.read_text())
    joined = " ".join(argv)
    for flag in ("--host 127.0.0.1", "--parallel 4", "--ctx-size 2048", "--batch-size 1024",
                 "--ubatch-size 256", "--threads 2", "--n-gpu-layers 99", "--kv-unified", "--metrics",
                 "--slots"):
        assert flag in joined, flag


def test_sweep_with_server_bin_end_to_end(tmp_path):
    model = tmp_path / "m.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    out = tmp_path / "run"
    code = main(["sweep", "--server-bin", BIN, "--model", str(model), "--concurrency", "1,2",
                 "--requests-per-level", "4", "--repetitions", "1", "--prompt-tokens", "48",
                 "--output-tokens", "8", "-o", str(out)])
    assert code == 0
    m = read_manifest(out)
    rt = m.provenance.lanes["default"].runtime
    assert m.status == "complete" and rt.kind == "native"
    assert rt.total_slots == 2 and "99999" in rt.version and rt.backend == "CPU"


def test_failure_reason_comes_from_the_servers_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_BIN_FAIL", "1")
    model = tmp_path / "m.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    code = main(["sweep", "--server-bin", BIN, "--model", str(model), "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 3 and len(err.splitlines()) == 1
    assert "llama-server failed to start (exit 1): llama_model_load: error loading model: fake failure" in err


def test_missing_binary_is_a_user_error_before_the_run_and_a_start_error_at_start(tmp_path):
    from satbench.errors import RuntimeStartError
    from satbench.server.native import check_server_bin

    with pytest.raises(UserError, match=r"--server-bin .*nope: no such file"):
        check_server_bin(str(tmp_path / "nope"), "--server-bin")
    rt = NativeRuntime(str(tmp_path / "nope"), "/m.gguf", ServerParams(), 1, 512, tmp_path / "server.log")
    with pytest.raises(RuntimeStartError, match="nope: no such file"):  # the lane's failure, not the run's
        rt.start()


def test_a_chosen_port_is_used_and_a_port_in_use_is_a_one_line_error(tmp_path, capsys):
    import socket

    from satbench.server.base import free_loopback_port

    port = free_loopback_port()
    rt = NativeRuntime(BIN, "/m.gguf", ServerParams(port=port), 1, 256, tmp_path / "server.log")
    rt.start()
    try:
        assert rt.base_url == f"http://127.0.0.1:{port}"
    finally:
        rt.stop()
    model = tmp_path / "m.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        code = main(["sweep", "--server-bin", BIN, "--model", str(model), "--port", str(taken),
                     "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"--port {taken}: 127.0.0.1:{taken} is not free" in err


def test_the_binary_digest_covers_the_executable_and_the_libraries_beside_it(tmp_path):
    from satbench.server.native import server_binary_sha256

    exe = tmp_path / "llama-server"
    exe.write_bytes(b"\x7fELF server")
    lib = tmp_path / "libggml-cuda.so.0.26.0"
    lib.write_bytes(b"cuda kernels v1")
    first = server_binary_sha256(str(exe))
    assert first is not None and len(first) == 64
    (tmp_path / "libggml-cuda.so").symlink_to(lib.name)  # links are followed, each file counted once
    (tmp_path / "README.md").write_text("not code")  # neither the binary nor a library
    assert server_binary_sha256(str(exe)) == first
    (tmp_path / "link-to-server").symlink_to(exe.name)
    assert server_binary_sha256(str(tmp_path / "link-to-server")) == first
    lib.write_bytes(b"cuda kernels v2")  # same executable, other library: another build
    assert server_binary_sha256(str(exe)) != first
    lib.write_bytes(b"cuda kernels v1")
    exe.write_bytes(b"\x7fELF server, rebuilt")
    assert server_binary_sha256(str(exe)) != first
    assert server_binary_sha256(str(tmp_path / "gone")) is None


def test_the_binary_digest_covers_an_installed_prefixs_lib_directory(tmp_path):
    """cmake --install puts llama-server in PREFIX/bin and libllama, libggml-* in PREFIX/lib."""
    from satbench.server.native import server_binary_sha256

    (tmp_path / "bin").mkdir()
    (tmp_path / "lib").mkdir()
    exe = tmp_path / "bin" / "llama-server"
    exe.write_bytes(b"\x7fELF server")
    lib = tmp_path / "lib" / "libllama.so"
    lib.write_bytes(b"llama v1")
    first = server_binary_sha256(str(exe))
    lib.write_bytes(b"llama v2")
    second = server_binary_sha256(str(exe))
    assert second != first
    (tmp_path / "lib" / "libssl.so.3").write_bytes(b"the OS's, not llama.cpp's")  # PREFIX may be /usr
    assert server_binary_sha256(str(exe)) == second


def test_capability_refuses_a_recommendation_measured_with_other_library_bytes(tmp_path, capsys, monkeypatch):
    """Two builds that report the same version (as builds compiled outside git all do: "0
    (unknown)") are told apart by their bytes: a library beside the binary changed after the
    sweep, so the node no longer runs what was measured."""
    import sys

    monkeypatch.setenv("FAKE_BIN_UNKNOWN_BUILD", "1")
    bindir = tmp_path / "build" / "bin"
    bindir.mkdir(parents=True)
    server = bindir / "llama-server"
    server.write_text(f"#!/bin/sh\nexec {sys.executable} {BIN} \"$@\"\n")
    server.chmod(0o755)
    lib = bindir / "libllama.so"
    lib.write_bytes(b"build A")
    model = tmp_path / "m.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    out = tmp_path / "run"
    assert main(["sweep", "--server-bin", str(server), "--model", str(model), "--concurrency", "1,2",
                 "--requests-per-level", "4", "--repetitions", "1", "--prompt-tokens", "48",
                 "--output-tokens", "8", "-o", str(out)]) == 0
    measured = read_manifest(out).provenance.lanes["default"].runtime.binary_sha256
    rec = json.loads((out / "recommendations.json").read_text())["lanes"][0]
    assert measured is not None and rec["runtime"]["binary_sha256"] == measured

    def capability() -> dict:
        capsys.readouterr()
        assert main(["capability", "--recommendations", str(out / "recommendations.json"),
                     "--server-bin", str(server), "--model", str(model)]) == 0
        return json.loads(capsys.readouterr().out)["lanes"][0]

    first = capability()
    assert first["status"] == "measured", first["reason"]
    lib.write_bytes(b"build B")
    lane = capability()
    assert lane["status"] == "unmeasured" and lane["max_concurrency"] == 1
    assert "another llama-server binary" in lane["reason"] and "0 (unknown)" in lane["reason"], lane["reason"]
    # a recommendation written before binaries were hashed cannot vouch for a build without a number
    lib.write_bytes(b"build A")
    data = json.loads((out / "recommendations.json").read_text())
    data["lanes"][0]["runtime"]["binary_sha256"] = None
    (out / "recommendations.json").write_text(json.dumps(data))
    lane = capability()
    assert lane["status"] == "unmeasured" and "no llama-server binary hash" in lane["reason"], lane["reason"]


def test_the_server_dies_with_satbench_even_when_satbench_is_killed(tmp_path):
    """SIGKILL (or the OOM killer) gives satbench no chance to stop its server: the kernel must,
    or an orphaned llama-server keeps its port and its CPU and skews the next benchmark."""
    from tests.server.orphans import outlives_its_parent

    script = (f"import sys, time; from pathlib import Path\n"
              f"from satbench.config.schema import ServerParams\n"
              f"from satbench.server.native import NativeRuntime\n"
              f"rt = NativeRuntime({BIN!r}, '/m.gguf', ServerParams(), 1, 256, "
              f"Path({str(tmp_path / 'server.log')!r}))\n"
              f"rt.start(); print(rt.pid, flush=True); time.sleep(120)\n")
    assert outlives_its_parent(script) is None, "llama-server outlived the satbench process that started it"


def test_memory_comes_from_a_probe_start_and_the_measured_server_logs_at_the_default(tmp_path):
    model = tmp_path / "m.gguf"
    write_synthetic_gguf(model, "llama", "tiny", 1)
    out = tmp_path / "run"
    assert main(["sweep", "--server-bin", BIN, "--model", str(model), "--concurrency", "1,2",
                 "--requests-per-level", "4", "--repetitions", "1", "--prompt-tokens", "48",
                 "--output-tokens", "8", "-o", str(out)]) == 0
    rt = read_manifest(out).provenance.lanes["default"].runtime
    assert rt.memory is not None and "--verbosity" not in rt.server_args
    ctx = int(rt.server_args[rt.server_args.index("--ctx-size") + 1])
    assert [b.kind for b in rt.memory.buffers] == ["model", "kv"]
    assert rt.memory.buffers[1].bytes == pytest.approx(ctx * 1024, abs=5500)  # printed to 2 decimals of MiB
    assert rt.memory.n_seq_max == 2 and rt.memory.ram_available_bytes > 0
    assert rt.memory.ram_available_end_bytes > 0  # read again once the levels had run
    assert "KV buffer size" in (out / "server-default-memory.log").read_text()
    assert "KV buffer size" not in (out / "server.log").read_text()
    lane = json.loads((out / "results.json").read_text())["lanes"][0]
    assert lane["memory"]["cache_bytes_per_slot"] == lane["memory"]["cache_bytes"] // 2
