"""The sampler polls /metrics, /slots and the process at ≥10 Hz; failures are recorded, not fatal."""

import asyncio
import os

import pytest

from satbench.errors import ParseError
from satbench.host.gpu import NvmlGpus
from satbench.http.endpoint import Endpoint
from satbench.load.sampler import ServerSampler, parse_slots
from satbench.records.events import SAMPLES_FILE, MetricsSample, ProcessSample, SlotsSample, read_samples
from satbench.records.writer import JsonlWriter
from tests.fakes.fake_llama_server import FakeLlamaServer
from tests.fakes.fake_scheduler import FakeScript
from tests.host.test_gpu import FakeNvml


async def sample_for(tmp_path, script: FakeScript, seconds: float, **kw):
    writer = JsonlWriter(tmp_path / SAMPLES_FILE)
    async with FakeLlamaServer(script) as srv:
        sampler = ServerSampler(Endpoint.of(srv.base_url), "l", writer, interval_s=0.05, **kw)
        await sampler.start()
        await asyncio.sleep(seconds)
        await sampler.stop()
    writer.close()
    return read_samples(tmp_path), sampler


async def test_all_three_sources_at_the_requested_rate(tmp_path):
    samples, _ = await sample_for(tmp_path, FakeScript(n_slots=3), 1.0, pid=os.getpid(),
                                  gpus=NvmlGpus(FakeNvml()))
    metrics = [s for s in samples if isinstance(s, MetricsSample)]
    slots = [s for s in samples if isinstance(s, SlotsSample)]
    procs = [s for s in samples if isinstance(s, ProcessSample)]
    assert len(metrics) >= 15 and len(slots) >= 15 and len(procs) >= 15  # 20 Hz asked, 1 s
    assert "n_decode_total" in metrics[-1].values and slots[-1].n_slots == 3
    assert procs[-1].rss_bytes > 0 and procs[-1].gpu_mem_used_bytes == 12 * 2**30


async def test_disabled_endpoints_are_recorded_and_polling_stops(tmp_path):
    samples, sampler = await sample_for(
        tmp_path, FakeScript(endpoint_metrics=False, endpoint_slots=False), 1.5)
    errors = [s.error for s in samples if isinstance(s, (MetricsSample, SlotsSample))]
    assert errors and all(e and "HTTP 501" in e for e in errors)
    assert set(sampler.disabled) == {"metrics", "slots"}


def test_parse_slots():
    n, busy, decoded = parse_slots([
        {"id": 0, "is_processing": True, "next_token": [{"n_decoded": 7}]},
        {"id": 1, "is_processing": False},
    ])
    assert (n, busy, decoded) == (2, [0], {0: 7})
    with pytest.raises(ParseError):
        parse_slots({"not": "a list"})
