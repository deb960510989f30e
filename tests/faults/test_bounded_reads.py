"""Every read from a server is bounded in size and time, and an absurd figure is data: endless
bodies, a trickle, a /props that never answers, total_slots of 10**30, "four", true, -1.

Each refusal is one line naming the endpoint and the limit; the fake counts the bytes it handed
to the kernel, so that a read that did not stop at its limit shows (loopback socket buffers hold a
few MiB: the bound checked is limit + SOCKET_SLACK, against the gigabytes an unbounded read takes)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from satbench.cli.main import main
from satbench.config import limits
from satbench.config.limits import AnswerTimeoutError, AnswerTooLarge
from satbench.config.schema import LaneConfig, RuntimeConfig, WorkloadConfig
from satbench.errors import ParseError, RuntimeStartError
from satbench.http.access import EndpointSession, read, read_sync
from satbench.http.client import ANSWER_TOO_LARGE, CompletionRequest, StreamClient
from satbench.http.endpoint import Endpoint
from satbench.http.errors import TimedOut, TooLarge
from satbench.load.sampler import ServerSampler
from satbench.records.events import SAMPLES_FILE, MetricsSample, SlotsSample, read_samples
from satbench.records.writer import JsonlWriter
from satbench.server.checks import server_shape
from satbench.server.facts import read_facts
from satbench.server.probe import llamacpp_tokenizer, probe_server
from tests.fakes.fault_server import Endless, FaultServer, Json, Silent, Trickle
from tests.fakes.raw_server import RawServer
from tests.faults.common import one_error_line, small_sweep, status_of

SOCKET_SLACK = 24 * limits.MIB  # kernel send + receive buffers on loopback, both sides
PROPS_REFUSED = "/props: answer larger than 1 MiB; not a llama.cpp server answer"


def url_lane(url: str) -> LaneConfig:
    return LaneConfig(levels=[1], workload=WorkloadConfig(prompt_tokens=32, output_tokens=4),
                      runtime=RuntimeConfig(kind="url", model=None, url=url))


async def probe(url: str, deadline_s: float = 2.0):
    async with EndpointSession(Endpoint.of(url)) as session:
        return await probe_server(session, deadline_s=deadline_s)


# -- the read (access.read / read_sync), byte for byte --------------------------------------------

def test_an_endless_props_is_refused_by_the_read_with_bounded_bytes():
    with FaultServer({"/props": Endless()}) as srv:
        with pytest.raises(TooLarge) as exc:
            read_sync(Endpoint.of(srv.base_url), "/props", timeout_s=10, limit_bytes=limits.MAX_PROPS_BYTES)
        assert str(exc.value) == srv.base_url + PROPS_REFUSED
        time.sleep(0.2)
        assert limits.MAX_PROPS_BYTES < srv.sent["/props"] < limits.MAX_PROPS_BYTES + SOCKET_SLACK


def test_a_trickle_is_cut_at_the_whole_reads_deadline_not_only_the_socket_timeout():
    with FaultServer({"/props": Trickle(interval_s=0.05)}) as srv, pytest.raises(TimedOut) as exc:
        read_sync(Endpoint.of(srv.base_url), "/props", timeout_s=1.0, limit_bytes=limits.MAX_PROPS_BYTES)
    # each byte came within the socket timeout: only the whole read's deadline can have ended it
    assert str(exc.value) == f"{srv.base_url}/props: no answer within 1 s"


def test_a_silent_props_names_the_endpoint_and_the_deadline():
    with FaultServer({"/props": Silent()}) as srv:
        with pytest.raises(TimedOut, match=r"/props: no answer within 0.5 s$"):
            read_sync(Endpoint.of(srv.base_url), "/props", timeout_s=0.5, limit_bytes=limits.MAX_PROPS_BYTES)
        assert server_shape(read_facts(url_lane(srv.base_url), timeout_s=0.5)) is None  # the probe says why


def test_an_error_body_is_bounded_as_any_answer():
    class EndlessError(RawServer):
        async def handle(self, reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\r\n")
            try:
                for _ in range(2000):
                    writer.write(b"e" * 65536)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            writer.close()

    async def go():
        async with EndlessError() as srv:
            await read(Endpoint.of(srv.url), "/health", timeout_s=10, limit_bytes=limits.MAX_HEALTH_BYTES)

    with pytest.raises(TooLarge, match=r"/health: answer larger than 64 KiB"):
        asyncio.run(go())


# -- the probe at a lane's start (aiohttp) -----------------------------------------------------

def test_an_endless_props_stops_the_probe_with_one_line_and_bounded_bytes():
    with FaultServer({"/props": Endless()}) as srv:
        with pytest.raises(RuntimeStartError) as exc:
            asyncio.run(probe(srv.base_url))
        time.sleep(0.2)
        assert str(exc.value) == srv.base_url + PROPS_REFUSED
        assert srv.sent["/props"] < limits.MAX_PROPS_BYTES + SOCKET_SLACK


@pytest.mark.parametrize("fault", [Silent(), Trickle(interval_s=0.05)], ids=["silent", "trickle"])
def test_a_props_that_never_answers_whole_names_the_endpoint_and_the_deadline(fault):
    with FaultServer({"/props": fault}) as srv, pytest.raises(RuntimeStartError) as exc:
        asyncio.run(probe(srv.base_url, deadline_s=1.0))
    assert str(exc.value) == f"{srv.base_url}/props: no answer within 1 s"  # never an empty "TimeoutError: "


@pytest.mark.parametrize("slots, why", [
    (10**30, "total_slots 1000000000000000000000000000000 is outside 1..65536"),
    ("four", "total_slots 'four' is not an integer"),
    (True, "total_slots True is not an integer"),
    (-1, "total_slots -1 is outside 1..65536"),
    (4.0, "total_slots 4.0 is not an integer"),
    (65537, "total_slots 65537 is outside 1..65536"),
])
def test_an_absurd_total_slots_is_an_unavailable_figure_with_its_reason(slots, why, capsys):
    props = {"total_slots": slots, "default_generation_settings": {"n_ctx": 2**25},
             "model_path": {"not": "text"}, "build_info": "b1-abc"}
    with FaultServer({"/props": Json(props)}) as srv:
        facts = asyncio.run(probe(srv.base_url))
        shape = server_shape(read_facts(url_lane(srv.base_url)))
    assert facts.llamacpp and facts.total_slots is None and facts.per_slot_ctx is None
    assert facts.model_path is None and facts.build_info == "b1-abc"
    assert f"{srv.base_url}/props: {why}; recorded as unavailable" in facts.unavailable
    ctx_why = "default_generation_settings.n_ctx 33554432 is outside 1..16777216"
    assert any(ctx_why in u for u in facts.unavailable)
    assert shape == (None, None)
    err = capsys.readouterr().err
    assert f"satbench: warning: {srv.base_url}/props: {why}; recorded as unavailable" in err
    assert "Traceback" not in err


def test_a_sane_props_is_taken_as_it_is():
    with FaultServer({}, n_slots=3, n_ctx=1536) as srv:
        facts = asyncio.run(probe(srv.base_url))
    assert (facts.total_slots, facts.per_slot_ctx, facts.unavailable) == (3, 512, [])


def test_tokenize_ids_are_range_checked_and_its_answer_bounded():
    with FaultServer({"/tokenize": Json({"tokens": [1, True, 2]})}) as srv:
        async def go():
            async with EndpointSession(Endpoint.of(srv.base_url)) as session:
                return await llamacpp_tokenizer(session)("hello", True)

        with pytest.raises(RuntimeStartError, match=r"/tokenize: token id True is not an integer"):
            asyncio.run(go())
    with FaultServer({"/tokenize": Endless(b'{"tokens": [', b"1," * 32768)}) as srv:
        with pytest.raises(RuntimeStartError, match=r"/tokenize: answer larger than \d+ bytes"):
            asyncio.run(go())
        assert srv.sent["/tokenize"] < limits.tokenize_limit(5) + SOCKET_SLACK


def test_read_capped_is_bounded_whatever_the_status():
    with FaultServer({"/v1/models": Endless()}) as srv:
        async def go():
            async with EndpointSession(Endpoint.of(srv.base_url)) as session:
                return await read(session, "/v1/models", timeout_s=5, limit_bytes=1000)

        with pytest.raises(TooLarge, match=r"/v1/models: answer larger than 1000 bytes"):
            asyncio.run(go())


# -- the sampler -------------------------------------------------------------------------------

async def test_an_endless_metrics_is_a_recorded_failed_scrape(tmp_path):
    with FaultServer({"/metrics": Endless(b"llamacpp:x 1\n", b"# " + b"c" * 65534 + b"\n"),
                      "/slots": Trickle(interval_s=0.05)}) as srv:
        writer = JsonlWriter(tmp_path / SAMPLES_FILE)
        sampler = ServerSampler(Endpoint.of(srv.base_url), "l", writer, interval_s=0.05, timeout_s=0.5)
        await sampler.start()
        await asyncio.sleep(1.5)
        await sampler.stop()
        writer.close()
        await asyncio.sleep(0.2)
        n_metrics = srv.connections["/metrics"]
        sent = srv.sent["/metrics"]
    samples = read_samples(tmp_path)
    metrics = [s for s in samples if isinstance(s, MetricsSample)]
    slots = [s for s in samples if isinstance(s, SlotsSample)]
    assert metrics and all(s.error and "/metrics: answer larger than 1 MiB" in s.error for s in metrics)
    assert slots and all(s.error and "/slots: no answer within 0.5 s" in s.error for s in slots)
    assert sent < n_metrics * (limits.MAX_METRICS_BYTES + SOCKET_SLACK)


# -- the streamed answer -------------------------------------------------------------------------

class EndlessStream(RawServer):
    """A 200 event stream that never ends: comment lines (nothing for the SSE reader to keep)."""

    def __init__(self, head_only: bool = False) -> None:
        self.sent, self.head_only = 0, head_only

    async def handle(self, reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n" if self.head_only else
                     b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        line = b"X-Pad: y\r\n" if self.head_only else b": keep-alive\n"
        try:
            while self.sent < 2**31:
                writer.write(line * 4096)
                self.sent += len(line) * 4096
                await writer.drain()
        except (ConnectionError, OSError):
            pass


async def test_an_endless_streamed_answer_is_a_failed_request_of_its_own_type():
    async with EndlessStream() as srv:
        out = await StreamClient(Endpoint.of(srv.url), request_timeout_s=60).run(
            CompletionRequest(request_id="r1", prompt="hi", prompt_tokens=1, max_tokens=1))
    limit = limits.stream_limit(1, 1)
    assert out.error_type == ANSWER_TOO_LARGE
    assert out.error_message == f"{srv.url}/completion: answer larger than {limits.size_text(limit)}; " \
                                "not a llama.cpp server answer"
    assert srv.sent < limit + SOCKET_SLACK


async def test_an_endless_head_is_refused():
    async with EndlessStream(head_only=True) as srv:
        out = await StreamClient(Endpoint.of(srv.url), request_timeout_s=60).run(
            CompletionRequest(request_id="r1", prompt="hi", prompt_tokens=1, max_tokens=1))
    assert out.error_type == "malformed_stream"
    assert out.error_message == f"{srv.url}/completion: response headers larger than 64 KiB"
    assert srv.sent < limits.MAX_HEADER_BYTES + SOCKET_SLACK


# -- whole runs ----------------------------------------------------------------------------------

def test_sweep_against_an_endless_props_ends_with_one_line(tmp_path, capsys):
    with FaultServer({"/props": Endless()}, n_slots=2) as srv:
        code = main(small_sweep(srv.base_url, tmp_path / "run"))
        time.sleep(0.2)
        sent = srv.sent["/props"]
    line = one_error_line(capsys.readouterr().err)
    assert code == 3 and line.startswith(f"satbench: error: {srv.base_url}{PROPS_REFUSED}"), line
    assert sent < 2 * (limits.MAX_PROPS_BYTES + SOCKET_SLACK)  # the preflight's read and the probe's


def test_sweep_against_an_absurd_total_slots_measures_and_writes_its_bundle(tmp_path, capsys):
    props = {"total_slots": 10**30, "default_generation_settings": {"n_ctx": 4096}}
    with FaultServer({"/props": Json(props)}, n_slots=2, decode_iteration_ms=2.0) as srv:
        code = main(small_sweep(srv.base_url, tmp_path / "run", extra=("--prompt-tokens", "64")))
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert "total_slots 1000000000000000000000000000000 is outside 1..65536; recorded as unavailable" in err
    assert status_of(tmp_path / "run") == "complete"
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert '"total_slots": null' in json.dumps(run)
    assert (tmp_path / "run" / "results.json").exists()
    assert any((tmp_path / "run").rglob("*.png")) or any((tmp_path / "run").rglob("*.svg"))


def test_healthy_is_false_for_an_endless_health():
    from satbench.server.native import _healthy

    with FaultServer({"/health": Endless(b"", b"h" * 65536)}) as srv:
        assert _healthy(srv.base_url) is False
        time.sleep(0.2)
        assert srv.sent["/health"] < limits.MAX_HEALTH_BYTES + SOCKET_SLACK


def test_limit_errors_are_parse_errors():
    assert issubclass(AnswerTooLarge, ParseError) and issubclass(AnswerTimeoutError, ParseError)


# -- satbench capability (urllib) ------------------------------------------------------------------

def test_capability_asks_props_within_its_limit_and_checks_its_figures(capsys):
    from satbench.capability.remote import remote_props

    with FaultServer({"/props": Endless()}) as srv:
        props, why = remote_props(url_lane(srv.base_url))
        time.sleep(0.2)
        assert srv.sent["/props"] < limits.MAX_PROPS_BYTES + SOCKET_SLACK
    assert props is None and why == srv.base_url + PROPS_REFUSED
    with FaultServer({"/props": Json({"total_slots": "four", "model_path": 7,
                                      "default_generation_settings": {"n_ctx": 4096}})}) as srv:
        props, why = remote_props(url_lane(srv.base_url))
    assert why is None and props["total_slots"] is None and props["model_path"] is None
    assert props["default_generation_settings"]["n_ctx"] == 4096
    err = capsys.readouterr().err
    assert f"satbench: warning: {srv.base_url}/props: total_slots 'four' is not an integer" in err
    assert "model_path 7 is not a string" in err
