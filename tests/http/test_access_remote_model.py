"""A running server that is not llama.cpp: a key refused on /v1/* only (vLLM) is an access
problem, not "not an inference server"; `served_model` / `--served-model` chooses which of its
models is measured (checked against /v1/models, sent as every request's `model`, recorded);
`--resume` refuses a server that now serves another model; the LiteLLM fragment names the
served model."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from satbench.cli.main import main
from satbench.errors import RuntimeStartError, UserError
from satbench.http.access import EndpointSession
from satbench.http.endpoint import Endpoint
from satbench.records.manifest import read_manifest
from satbench.server.probe import probe_server
from tests.fakes import fake_llama_server
from tests.fakes.fake_llama_server import FakeLlamaServer, FakeScript

KEY = "sk-vllm-test-key"
TINY = ["--concurrency", "1", "--requests-per-level", "3", "--repetitions", "1", "--prompt-tokens", "16",
        "--output-tokens", "4"]


class _VllmLike(BaseHTTPRequestHandler):
    """vLLM's --api-key: /health and everything outside /v1 answer without a key (/props: 404);
    /v1/* needs `Authorization: Bearer KEY`."""

    models = ("model-A", "model-B")

    def do_GET(self) -> None:
        if self.path.startswith("/v1/") and self.headers.get("Authorization") != f"Bearer {KEY}":
            return self._send(401, {"error": "Unauthorized"})
        if self.path == "/health":
            return self._send(200, {})
        if self.path == "/v1/models":
            listed = [{"id": m, "object": "model"} for m in self.models]
            return self._send(200, {"object": "list", "data": listed})
        return self._send(404, {"detail": "Not Found"})

    def _send(self, status: int, body: dict) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def vllm_like():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _VllmLike)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def probe(url: str, key: str | None = None, served_model: str | None = None):
    async def go():
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with EndpointSession(Endpoint.of(url, headers)) as session:
            if served_model is None:
                return await probe_server(session)
            return await probe_server(session, served_model)

    return asyncio.run(go())


# -- D4: a key refused on /v1/models --------------------------------------------------------------


def test_a_missing_key_on_v1_only_is_reported_as_needing_a_key(vllm_like):
    with pytest.raises(RuntimeStartError, match=r"needs an API key \(HTTP 401 on /v1/models\)"):
        probe(vllm_like)
    with pytest.raises(RuntimeStartError, match=r"refused the API key \(HTTP 401 on /v1/models\)"):
        probe(vllm_like, key="sk-wrong")
    facts = probe(vllm_like, key=KEY)
    assert not facts.llamacpp and facts.openai_model == "model-A"  # without a choice: the first, as before


def test_the_sweep_says_the_key_is_missing_in_one_line(vllm_like, tmp_path, capsys):
    code = main(["sweep", "--url", vllm_like, *TINY, "-o", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert "needs an API key (HTTP 401 on /v1/models)" in last and "not an inference server" not in err


# -- D6: choosing the served model ----------------------------------------------------------------


def test_the_probe_takes_the_chosen_model_or_names_the_ones_offered(vllm_like):
    facts = probe(vllm_like, key=KEY, served_model="model-B")
    assert facts.openai_model == "model-B"
    with pytest.raises(UserError, match=r"does not serve model 'model-C'.*offers: model-A, model-B$"):
        probe(vllm_like, key=KEY, served_model="model-C")


class ThreadedFake:
    """The fake (not llama.cpp) in a thread of this process, listing two models and recording the
    `model` of every completion request it gets."""

    def __init__(self, monkeypatch, **script) -> None:
        self.asked: list[object] = []
        monkeypatch.setattr(fake_llama_server, "models_json", lambda s: {"object": "list", "data": [
            {"id": "model-A", "object": "model"}, {"id": "model-B", "object": "model"}]})
        real = FakeLlamaServer._completion

        def completion(srv, conn, headers, body, arrival, oai):
            self.asked.append(json.loads(body).get("model"))
            return real(srv, conn, headers, body, arrival, oai)

        monkeypatch.setattr(FakeLlamaServer, "_completion", completion)
        self.srv = FakeLlamaServer(FakeScript(llamacpp=False, n_slots=2, decode_iteration_ms=1.0, **script))
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.srv.start(), self.loop).result(timeout=20)
        self.base_url = self.srv.base_url

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.srv.stop(), self.loop).result(timeout=20)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=20)
        self.loop.close()


@pytest.fixture
def two_models(monkeypatch):
    fake = ThreadedFake(monkeypatch)
    yield fake
    fake.stop()


def test_served_model_is_sent_with_every_request_and_recorded(two_models, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["sweep", "--url", two_models.base_url, "--served-model", "model-B", *TINY,
                 "-o", str(run)]) == 0
    assert two_models.asked and set(two_models.asked) == {"model-B"}
    m = read_manifest(run)
    assert m.config.lanes[0].runtime.served_model == "model-B"
    assert m.provenance.lanes["default"].runtime.model_alias == "model-B"


def test_without_a_choice_the_first_listed_model_is_measured(two_models, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["sweep", "--url", two_models.base_url, *TINY, "-o", str(run)]) == 0
    assert set(two_models.asked) == {"model-A"}
    assert read_manifest(run).config.lanes[0].runtime.served_model is None


def test_a_model_the_server_does_not_list_is_one_line_before_anything_is_measured(two_models, tmp_path,
                                                                                   capsys):
    code = main(["sweep", "--url", two_models.base_url, "--served-model", "model-C", *TINY,
                 "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert "does not serve model 'model-C'" in err[-1] and "offers: model-A, model-B" in err[-1]
    assert two_models.asked == []
    assert not (tmp_path / "run").exists() and "run directory" not in err[-1]  # refused before it was made


def test_served_model_belongs_to_a_url_lane_only(tmp_path, capsys):
    assert main(["sweep", "--served-model", "x", *TINY, "-o", str(tmp_path / "r")]) == 2
    assert "--served-model: only for a remote server; use with --url" in capsys.readouterr().err
    from satbench.cli.lanefile import load_lane_file

    good = tmp_path / "good.toml"
    good.write_text('[[lanes]]\nname = "v"\nruntime = "url"\nurl = "http://127.0.0.1:1"\n'
                    'served_model = "model-B"\n')
    assert load_lane_file(good).lanes[0].runtime.served_model == "model-B"
    bad = tmp_path / "bad.toml"
    bad.write_text('[[lanes]]\nname = "e"\nserved_model = "model-B"\n')
    with pytest.raises(UserError,
                       match=r"bad.toml:1: lanes\[0\]: served_model is given but runtime is 'embedded'"):
        load_lane_file(bad)
    both = tmp_path / "both.toml"
    both.write_text('[[lanes]]\nname = "u"\nruntime = "url"\nurl = "http://127.0.0.1:1"\nmodel = "m"\n')
    with pytest.raises(UserError, match="served_model"):  # the refusal names the way to choose a model
        load_lane_file(both)


# -- D2: --resume against a server that now serves another model ----------------------------------


def _provenance(alias: str | None, llamacpp: bool = False):
    from satbench.records.manifest import LaneProvenance, ModelInfo, NetworkInfo, RuntimeInfo

    rt = RuntimeInfo(kind="url", name="remote server", llamacpp=llamacpp, base_url="http://127.0.0.1:1",
                     model_alias=alias, build_info="b1-x" if llamacpp else None)
    return LaneProvenance(model=ModelInfo(), runtime=rt, network=NetworkInfo(path="loopback")), rt


def test_a_resumed_non_llamacpp_lane_must_serve_the_same_model_id():
    from satbench.records.manifest import ModelInfo
    from satbench.server.checks import check_same_server

    stored, _ = _provenance("model-A")
    _, same = _provenance("model-A")
    check_same_server("v", stored, "solo", ModelInfo(), same)
    _, other = _provenance("model-B")
    with pytest.raises(UserError,
                       match=r"cannot continue lane v: the server now serves 'model-B', not 'model-A'"):
        check_same_server("v", stored, "solo", ModelInfo(), other)
    unknown, _ = _provenance(None)  # a run that recorded no model id is not refused for lacking it
    check_same_server("v", unknown, "solo", ModelInfo(), other)
    # llama.cpp: its model file is compared; --alias may rename the same weights
    stored_cpp, _ = _provenance("alias-1", llamacpp=True)
    _, renamed = _provenance("alias-2", llamacpp=True)
    check_same_server("v", stored_cpp, "solo", ModelInfo(), renamed)


def test_resume_against_a_server_now_serving_another_model_is_refused(monkeypatch, tmp_path, capsys):
    """A finished level under model-A, then the server lists model-B first: --resume refuses."""
    fake = ThreadedFake(monkeypatch)
    run = tmp_path / "run"
    try:
        assert main(["sweep", "--url", fake.base_url, *TINY, "-o", str(run)]) == 0
    finally:
        fake.stop()
    m = read_manifest(run)
    assert m.provenance.lanes["default"].runtime.model_alias == "model-A"
    # what an interrupted run looks like to --resume (the lane's unit not yet finished)
    from satbench.records.manifest import write_manifest

    write_manifest(run, m.model_copy(update={"status": "interrupted", "completed_units": []}))
    port = int(fake.base_url.rsplit(":", 1)[1])
    monkeypatch.setattr(fake_llama_server, "models_json", lambda s: {"object": "list", "data": [
        {"id": "model-B", "object": "model"}]})
    srv = FakeLlamaServer(FakeScript(llamacpp=False, n_slots=2, decode_iteration_ms=1.0), port=port)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(srv.start(), loop).result(timeout=20)
        capsys.readouterr()
        code = main(["sweep", "--resume", str(run)])
    finally:
        asyncio.run_coroutine_threadsafe(srv.stop(), loop).result(timeout=20)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=20)
        loop.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert "cannot continue lane default: the server now serves 'model-B', not 'model-A'" in err[-1]


# -- D7: the LiteLLM fragment names the served model ----------------------------------------------


def test_the_litellm_fragment_names_the_served_model_else_the_lane():
    from satbench.capability.identity import this_node
    from satbench.capability.report import CapabilityReport, LaneCapability, render_litellm
    from satbench.config.schema import LaneConfig, RunConfig, RuntimeConfig
    from satbench.records.manifest import HostInfo

    host = HostInfo(cpu_model="AMD EPYC", cores_logical=2, cores_physical=2, ram_bytes=2**34, os="Linux",
                    python="3.11")
    lanes = [LaneCapability(lane="chat", status="unmeasured", reason="r", model_path=None, model_sha256=None,
                            served_model="meta-llama/Llama-3.1-8B-Instruct", max_concurrency=1),
             LaneCapability(lane="other", status="unmeasured", reason="r", model_path=None, model_sha256=None,
                            max_concurrency=1)]
    cfg = RunConfig(lanes=[LaneConfig(name=n, runtime=RuntimeConfig(kind="url", model=None, url="http://h:1"))
                           for n in ("chat", "other")])
    report = CapabilityReport(generated_at="2026-01-01T00:00:00+00:00", hardware_fingerprint="f" * 64,
                              hardware=host, node=this_node(cfg.lanes, "n1"), lanes=lanes)
    models = [d["litellm_params"]["model"] for d in yaml.safe_load(render_litellm(report))["model_list"]]
    assert models == ["openai/meta-llama/Llama-3.1-8B-Instruct", "openai/other"]


def test_capability_takes_the_served_model_from_the_recommendation(monkeypatch, tmp_path, capsys):
    fake = ThreadedFake(monkeypatch)
    run = tmp_path / "run"
    try:
        assert main(["sweep", "--url", fake.base_url, "--served-model", "model-B", *TINY,
                     "-o", str(run)]) == 0
        capsys.readouterr()
        assert main(["capability", "--recommendations", str(run / "recommendations.json"),
                     "--url", fake.base_url, "--format", "litellm"]) == 0
        litellm = capsys.readouterr().out
        assert main(["capability", "--recommendations", str(run / "recommendations.json"), "--url",
                     fake.base_url]) == 0
        (lane,) = json.loads(capsys.readouterr().out)["lanes"]
    finally:
        fake.stop()
    assert yaml.safe_load(litellm)["model_list"][0]["litellm_params"]["model"] == "openai/model-B"
    assert lane["served_model"] == "model-B"
