"""The fake llama.cpp server is the reference other tests trust: check it against its script."""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fakes.fake_llama_server import CHAT_TEMPLATE_TOKENS, FakeLlamaServer, FakeScript

FAKE_PATH = Path(__file__).with_name("fake_llama_server.py")


async def stream(client: httpx.AsyncClient, path: str, payload: dict, rid: str | None = None) -> dict:
    """POST a streaming request; return status, headers, events (parsed) with arrival times."""
    headers = {"X-Request-Id": rid} if rid else {}
    sent = time.perf_counter_ns()
    async with client.stream("POST", path, json={**payload, "stream": True}, headers=headers) as r:
        out = {"status": r.status_code, "headers": r.headers, "sent_ns": sent, "events": [], "t_ns": []}
        if r.status_code != 200:
            out["body"] = json.loads(await r.aread())
            return out
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                out["t_ns"].append(time.perf_counter_ns())
                data = line[6:]
                out["events"].append(data if data == "[DONE]" else json.loads(data))
    return out


def metrics(text: str) -> dict[str, float]:
    return {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines() if ln and not ln.startswith("#")}


async def test_native_stream_exact_tokens_and_final_event():
    async with FakeLlamaServer(FakeScript(decode_iteration_ms=1)) as srv, \
            httpx.AsyncClient(base_url=srv.base_url) as c:
        out = await stream(c, "/completion", {"prompt": "one two three", "n_predict": 7, "ignore_eos": True})
    assert out["status"] == 200
    assert out["headers"]["content-type"] == "text/event-stream"
    assert out["headers"]["server"] == "llama.cpp"
    *partials, final = out["events"]
    assert len(partials) == 7 and all(e["stop"] is False and len(e["tokens"]) == 1 for e in partials)
    assert [e["tokens_predicted"] for e in partials] == list(range(1, 8))
    assert all(e["tokens_evaluated"] == 3 and e["id_slot"] == -1 for e in partials)
    assert final["stop"] is True and final["stop_type"] == "limit" and final["id_slot"] == 0
    assert final["tokens_predicted"] == 7 and final["tokens_evaluated"] == 3 and final["content"] == ""
    t = final["timings"]
    assert t["prompt_n"] == 3 and t["predicted_n"] == 7 and t["cache_n"] == 0
    assert set(t) == {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                      "predicted_n", "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}


async def test_oai_stream_usage_timings_done_and_multi_token_chunks():
    script = FakeScript(decode_iteration_ms=1, tokens_per_chunk=3)
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        out = await stream(c, "/v1/completions", {"prompt": [5, 6, 7, 8], "max_tokens": 8,
                                                  "stream_options": {"include_usage": True}})
        r = await c.post("/v1/completions", json={"prompt": "a b", "max_tokens": 4})
    *chunks, final, done = out["events"]
    assert done == "[DONE]"
    assert [len(e["choices"][0]["text"].split()) for e in chunks] == [1, 3, 3, 1]  # first token alone
    assert all(e["choices"][0]["finish_reason"] is None and e["object"] == "text_completion" for e in chunks)
    assert final["choices"][0]["finish_reason"] == "length"
    assert final["usage"] == {"completion_tokens": 8, "prompt_tokens": 4, "total_tokens": 12,
                              "prompt_tokens_details": {"cached_tokens": 0}}
    assert final["timings"]["predicted_n"] == 8 and final["system_fingerprint"] == "b11549-fake"
    body = r.json()
    assert r.status_code == 200 and body["usage"]["completion_tokens"] == 4
    assert len(body["choices"][0]["text"].split()) == 4


async def test_chat_stream_is_llamacpps_role_content_finish_usage_done():
    script = FakeScript(decode_iteration_ms=1, tokens_per_chunk=3)
    msg = {"messages": [{"role": "user", "content": "one two three four"}], "max_tokens": 5}
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        out = await stream(c, "/v1/chat/completions", {**msg, "stream_options": {"include_usage": True}},
                           rid="c")
        bare = await stream(c, "/v1/chat/completions", msg)
        r = await c.post("/v1/chat/completions", json=msg)
        bad = await c.post("/v1/chat/completions", json={"messages": "hi", "max_tokens": 2})
        rec = srv.schedule()[0]
    role, *chunks, finish, usage, done = out["events"]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": None} and done == "[DONE]"
    assert [len(e["choices"][0]["delta"]["content"].split()) for e in chunks] == [1, 3, 1]
    assert all(e["object"] == "chat.completion.chunk" and e["id"].startswith("chatcmpl-") for e in chunks)
    assert finish["choices"][0] == {"finish_reason": "length", "index": 0, "delta": {}}
    assert "usage" not in finish and "timings" not in finish
    n_prompt = 4 + CHAT_TEMPLATE_TOKENS
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    assert usage["usage"]["prompt_tokens"] == n_prompt and usage["timings"]["prompt_n"] == n_prompt
    assert rec["endpoint"] == "/v1/chat/completions" and rec["prompt_tokens"] == n_prompt
    *_, last, bare_done = bare["events"]  # without include_usage: no usage chunk, timings on the finish
    assert bare_done == "[DONE]" and "usage" not in last and last["timings"]["predicted_n"] == 5
    body = r.json()
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] == 5
    assert len(body["choices"][0]["message"]["content"].split()) == 5
    assert bad.status_code == 400


async def test_detokenize_gives_back_the_words_tokenize_counted():
    async with FakeLlamaServer(FakeScript(decode_iteration_ms=1)) as srv, \
            httpx.AsyncClient(base_url=srv.base_url) as c:
        toks = (await c.post("/tokenize", json={"content": "the river ran past"})).json()["tokens"]
        text = (await c.post("/detokenize", json={"tokens": toks[1:3]})).json()["content"]
    assert text == "river ran"


@pytest.mark.alone  # wall-clock ticks of the fake: the default run's other workers delay them (97 ms for 90)
async def test_ttft_is_prefill_and_itl_is_iteration_at_low_load():
    script = FakeScript(prefill_ms_per_token=2.0, first_token_extra_ms=5.0, decode_iteration_ms=10.0)
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        await c.get("/health")  # warm the connection
        out = await stream(c, "/completion", {"prompt": list(range(20)), "n_predict": 10}, rid="r1")
        rec = srv.schedule()[-1]
    ttft_ms = (out["t_ns"][0] - out["sent_ns"]) / 1e6
    # 20 x 2 ms + 5 ms: never sooner; the upper margin leaves room for a busy 2-core box (a CPU hog
    # on the other core adds ~12 ms), while a fake that skipped its prefill, or ran it twice, fails
    assert 45.0 - 0.5 <= ttft_ms <= 45.0 + 30, ttft_ms
    prompt_ms = out["events"][-1]["timings"]["prompt_ms"]
    assert 45.0 - 0.5 <= prompt_ms <= 45.0 + 30, prompt_ms  # the same margin: a busy box runs it late
    gaps = [(b - a) / 1e6 for a, b in zip(rec["chunk_ns"], rec["chunk_ns"][1:])]
    assert len(gaps) == 9 and statistics.median(gaps) == pytest.approx(10.0, abs=1.0)
    assert (rec["chunk_ns"][-1] - rec["chunk_ns"][0]) / 1e6 == pytest.approx(90.0, abs=5.0)  # no drift
    assert rec["headers_ns"] == rec["chunk_ns"][0]  # llama.cpp sends the status line with the first token


async def test_fifo_deferral_when_all_slots_busy():
    script = FakeScript(n_slots=2, decode_iteration_ms=10.0, prefill_ms_per_token=0.1)
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        first = [asyncio.create_task(stream(c, "/completion", {"prompt": "a b", "n_predict": 20},
                                            rid=f"r{i}"))
                 for i in range(2)]
        await asyncio.sleep(0.03)
        late = [asyncio.create_task(stream(c, "/completion", {"prompt": "a b", "n_predict": 5}, rid=f"r{i}"))
                for i in (2, 3)]
        await asyncio.sleep(0.03)
        m = metrics((await c.get("/metrics")).text)
        slots = (await c.get("/slots")).json()
        busy_503 = (await c.get("/slots?fail_on_no_slot=1")).status_code
        await asyncio.gather(*first, *late)
        recs = {r["id"]: r for r in srv.schedule()}
    assert m["llamacpp:requests_deferred"] == 2 and m["llamacpp:requests_processing"] == 2
    assert [s["is_processing"] for s in slots] == [True, True] and busy_503 == 503
    assert all(0 < s["next_token"][0]["n_decoded"] < 20 and s["n_prompt_tokens"] == 2 for s in slots)
    assert recs["r0"]["slot"] == 0 and recs["r1"]["slot"] == 1
    # the waiting ones get nothing until a slot frees, then go in arrival order
    freed = min(recs["r0"]["chunk_ns"][-1], recs["r1"]["chunk_ns"][-1])
    assert recs["r2"]["chunk_ns"][0] > freed and recs["r3"]["chunk_ns"][0] > freed
    assert recs["r2"]["task_id"] < recs["r3"]["task_id"]
    assert srv.stats()["deferred_total"] == 2


async def test_fifo_order_with_one_slot():
    async with FakeLlamaServer(FakeScript(n_slots=1, decode_iteration_ms=2.0)) as srv, \
            httpx.AsyncClient(base_url=srv.base_url) as c:
        tasks = []
        for i in range(4):
            body = {"prompt": "x", "n_predict": 3}
            tasks.append(asyncio.create_task(stream(c, "/completion", body, rid=str(i))))
            await asyncio.sleep(0.005)
        await asyncio.gather(*tasks)
        recs = srv.schedule()
    by_arrival = [r["id"] for r in sorted(recs, key=lambda r: r["arrival_ns"])]
    assert [r["id"] for r in sorted(recs, key=lambda r: r["chunk_ns"][0])] == by_arrival
    assert sum(r["n_decoded"] for r in recs) == 12


async def test_metrics_counters_add_up_and_gauges_reset():
    script = FakeScript(n_slots=3, decode_iteration_ms=2.0, prefill_ms_per_token=0.5)
    prompts, n_pred = [5, 9, 2, 7], [4, 6, 3, 8]
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        await asyncio.gather(*(stream(c, "/completion", {"prompt": list(range(p)), "n_predict": n})
                               for p, n in zip(prompts, n_pred)))
        text = (await c.get("/metrics")).text
        again = metrics((await c.get("/metrics")).text)
        recs = srv.schedule()
        stats = srv.stats()
    m = metrics(text)
    # the prompts share prefixes (range(p)): a later one in a used slot prefills only past its cached part
    assert m["llamacpp:prompt_tokens_total"] + m["llamacpp:prompt_tokens_cached_total"] == sum(prompts)
    assert m["llamacpp:tokens_predicted_total"] == sum(n_pred)
    assert m["llamacpp:n_decode_total"] == stats["iterations"]
    assert m["llamacpp:prompt_seconds_total"] == pytest.approx(
        sum(r["prompt_ms"] for r in recs) / 1e3, rel=1e-3)
    assert m["llamacpp:tokens_predicted_seconds_total"] == pytest.approx(
        sum(r["predicted_ms"] for r in recs) / 1e3, rel=1e-3)
    assert 1.0 <= m["llamacpp:n_busy_slots_per_decode"] <= 3.0
    assert m["llamacpp:predicted_tokens_seconds"] > 0 and m["llamacpp:prompt_tokens_seconds"] > 0
    assert again["llamacpp:predicted_tokens_seconds"] == 0 and again["llamacpp:prompt_tokens_seconds"] == 0
    assert again["llamacpp:tokens_predicted_total"] == sum(n_pred)  # counters do not reset
    assert m["llamacpp:requests_processing"] == 0 and m["llamacpp:requests_deferred"] == 0
    for name in ("prompt_tokens_total", "n_busy_slots_per_decode", "requests_deferred"):
        assert f"# HELP llamacpp:{name} " in text and f"# TYPE llamacpp:{name} " in text
    assert "# TYPE llamacpp:requests_deferred gauge" in text
    assert "# TYPE llamacpp:tokens_predicted_total counter" in text


async def test_context_overflow_like_llamacpp_400_for_prompt_truncation_for_output():
    script = FakeScript(n_slots=2, n_ctx=128, decode_iteration_ms=1)  # 64 per slot
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        props = (await c.get("/props")).json()
        cut = await stream(c, "/completion", {"prompt": list(range(40)), "n_predict": 50}, rid="cut")
        big = await stream(c, "/completion", {"prompt": list(range(70)), "n_predict": 5})
        full = await stream(c, "/completion", {"prompt": list(range(64)), "n_predict": 1})  # llama.cpp: >=
        r = await c.post("/v1/completions", json={"prompt": list(range(60)), "max_tokens": 200})
        ok = await stream(c, "/completion", {"prompt": list(range(40)), "n_predict": 23}, rid="ok")
        recs = {x["id"]: x for x in srv.schedule() if x["id"]}
    assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 64
    assert props["build_info"] == "b11549-fake"
    # prompt fits, prompt + n_predict does not: 200, generation stops at the slot context (64 - 40)
    *partials, final = cut["events"]
    assert cut["status"] == 200 and len(partials) == 24
    assert final["tokens_predicted"] == 24 and final["truncated"] is True and final["stop_type"] == "limit"
    assert final["timings"]["predicted_n"] == 24 and final["generation_settings"]["n_predict"] == 50
    assert recs["cut"]["n_decoded"] == 24 and recs["cut"]["truncated"] is True
    # the prompt alone does not fit: 400 exceed_context_size_error
    for out in (big, full):
        assert out["status"] == 400 and out["body"]["error"]["type"] == "exceed_context_size_error"
        assert out["body"]["error"]["code"] == 400 and out["body"]["error"]["n_ctx"] == 64
    assert big["body"]["error"]["n_prompt_tokens"] == 70
    body = r.json()
    assert r.status_code == 200 and body["usage"]["completion_tokens"] == 4
    assert body["choices"][0]["finish_reason"] == "length"
    assert ok["status"] == 200 and ok["events"][-1]["tokens_predicted"] == 23
    assert ok["events"][-1]["truncated"] is False and recs["ok"]["truncated"] is False


async def test_generic_openai_mode():
    script = FakeScript(llamacpp=False, decode_iteration_ms=1)
    async with FakeLlamaServer(script) as srv, httpx.AsyncClient(base_url=srv.base_url) as c:
        for path in ("/props", "/metrics", "/slots"):
            assert (await c.get(path)).status_code == 404, path
        assert (await c.post("/completion", json={"prompt": "a", "n_predict": 2})).status_code == 404
        assert (await c.post("/tokenize", json={"content": "a"})).status_code == 404
        assert (await c.get("/health")).json() == {"status": "ok"}
        assert (await c.get("/v1/models")).json()["data"][0]["id"] == "fake-model"
        out = await stream(c, "/v1/completions", {"prompt": "a b", "max_tokens": 3,
                                                  "stream_options": {"include_usage": True}}, rid="g")
        rec = srv.schedule()[-1]
    *chunks, final, usage, done = out["events"]
    assert len(chunks) == 3 and done == "[DONE]"
    assert final["choices"][0]["finish_reason"] == "length"
    assert "timings" not in final and "usage" not in final
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3
    assert out["headers"].get("server") != "llama.cpp"
    assert rec["headers_ns"] < rec["chunk_ns"][0]  # generic servers send headers at once


async def test_tokenize_and_prompt_token_count_agree():
    async with FakeLlamaServer(FakeScript(decode_iteration_ms=1)) as srv, \
            httpx.AsyncClient(base_url=srv.base_url) as c:
        toks = (await c.post("/tokenize", json={"content": "the quick brown fox"})).json()["tokens"]
        out = await stream(c, "/completion", {"prompt": "the quick brown fox", "n_predict": 1})
    assert len(toks) == 4 and all(isinstance(t, int) for t in toks)
    assert out["events"][-1]["tokens_evaluated"] == 4


async def test_schedule_log_written(tmp_path):
    log = tmp_path / "sched.jsonl"
    async with FakeLlamaServer(FakeScript(decode_iteration_ms=1, schedule_log=log)) as srv, \
            httpx.AsyncClient(base_url=srv.base_url) as c:
        await stream(c, "/completion", {"prompt": "a b c", "n_predict": 4}, rid="abc")
        await stream(c, "/completion", {"prompt": list(range(5000)), "n_predict": 1}, rid="too-long")
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["id"] for x in lines] == ["abc", "too-long"]
    ok, err = lines
    assert ok["status"] == "ok" and ok["slot"] == 0 and len(ok["chunk_ns"]) == 4
    assert ok["arrival_ns"] <= ok["prompt_start_ns"] <= ok["headers_ns"] == ok["chunk_ns"][0] <= ok["end_ns"]
    assert err["status"] == "http_400"


async def test_client_disconnect_cancels_and_frees_slot():
    async with FakeLlamaServer(FakeScript(n_slots=1, decode_iteration_ms=5)) as srv, \
            httpx.AsyncClient(base_url=srv.base_url) as c:
        body = {"prompt": "a", "n_predict": 1000, "stream": True}
        async with c.stream("POST", "/completion", json=body) as r:
            async for _ in r.aiter_lines():
                break
        await asyncio.sleep(0.05)
        slots = (await c.get("/slots")).json()
        out = await stream(c, "/completion", {"prompt": "a", "n_predict": 2})
        recs = srv.schedule()
    assert slots[0]["is_processing"] is False
    assert recs[0]["status"] == "cancelled" and out["events"][-1]["tokens_predicted"] == 2


async def test_keep_alive_header_max_and_idle_close():
    script = FakeScript(keep_alive_max=2, keep_alive_timeout_s=0.3)
    async with FakeLlamaServer(script) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        heads = []
        for _ in range(2):
            writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            heads.append((await reader.readuntil(b"\r\n\r\n")).decode())
            await reader.readexactly(15)
        assert "Keep-Alive: timeout=0.3, max=2" in heads[0] and "Connection: close" in heads[1]
        assert await asyncio.wait_for(reader.read(), 1.0) == b""  # closed after the last allowed request
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        t0 = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 2.0) == b""  # idle connection closed by the server
        assert time.monotonic() - t0 >= 0.25  # by its idle timeout (0.3 s), not at once
        writer.close()


def test_cli_runs_in_own_process(tmp_path):
    script, ready = tmp_path / "s.json", tmp_path / "ready.json"
    script.write_text(json.dumps({"n_slots": 3, "build_info": "b1-cli"}))
    proc = subprocess.Popen([sys.executable, str(FAKE_PATH), "--port", "0", "--script", str(script),
                             "--ready-file", str(ready)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        base = json.loads(ready.read_text())["base_url"]
        props = httpx.get(base + "/props").json()
        assert props["total_slots"] == 3 and props["build_info"] == "b1-cli"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "stats" in err.decode()


def test_script_rejects_unknown_fields():
    with pytest.raises(ValueError):
        FakeScript(n_slot=2)


async def test_http_threads_limit_holds_extra_connections_unread():
    async with FakeLlamaServer(FakeScript(http_threads=1)) as srv:
        r1, w1 = await asyncio.open_connection("127.0.0.1", srv.port)
        w1.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        await r1.readuntil(b"\r\n\r\n")
        r2, w2 = await asyncio.open_connection("127.0.0.1", srv.port)
        w2.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        with pytest.raises(asyncio.TimeoutError):
            # its keep-alive neighbour holds the thread
            await asyncio.wait_for(r2.readuntil(b"\r\n\r\n"), 0.3)
        w1.close()
        assert (await asyncio.wait_for(r2.readuntil(b"\r\n\r\n"), 2.0)).startswith(b"HTTP/1.1 200 OK")
        w2.close()
