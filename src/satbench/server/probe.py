"""What is behind a URL, probed at a lane's start: llama.cpp (detected through /props) or another
OpenAI-compatible server. What its answers decide is decided by pure functions (probed_facts,
server.checks.check_probe_reading); the preflight's reads are server.facts'.

Also measures the client↔server round-trip time (the loopback overhead used by the
queue-time estimate) and offers llama.cpp's /tokenize to the workload.
"""

from __future__ import annotations

import statistics
import sys
import time

from pydantic import Field

from satbench.config.limits import (
    MAX_HEALTH_BYTES,
    MAX_MODELS_BYTES,
    MAX_PROPS_BYTES,
    MAX_TOKEN_ID,
    PROBE_DEADLINE_S,
    RTT_DEADLINE_S,
    checked_int,
    json_answer,
    tokenize_limit,
)
from satbench.config.schema import Strict
from satbench.errors import ParseError, RuntimeStartError
from satbench.http.access import EndpointSession, read
from satbench.http.errors import RequestFailed, TimedOut, TooLarge
from satbench.server.checks import check_probe_reading, chosen_model
from satbench.server.facts import Reading, json_200, model_ids, props_figures
from satbench.workload.builder import Detokenizer, Tokenizer


class ServerFacts(Strict):
    """What the probe at a lane's start concluded of its server (probed_facts): llama.cpp or not, its
    checked /props figures, and the model id requests name (`openai_model`)."""

    llamacpp: bool
    total_slots: int | None = None
    per_slot_ctx: int | None = None
    build_info: str | None = None
    model_alias: str | None = None
    model_path: str | None = None
    openai_model: str | None = None
    unavailable: list[str] = Field(default_factory=list)  # one line per /props figure refused, with why


async def _reading(session: EndpointSession, path: str, limit_bytes: int, deadline_s: float) -> Reading:
    try:
        return await read(session, path, timeout_s=deadline_s, limit_bytes=limit_bytes)
    except RequestFailed as exc:
        return exc


def probed_facts(base_url: str, props: Reading, models: Reading, served_model: str | None) -> ServerFacts:
    """What the probe's /props and /v1/models answers say the server at `base_url` is: llama.cpp
    when /props is a JSON object holding total_slots (its figures checked: props_figures), else an
    OpenAI-compatible server naming the model `served_model` or its first listed id. RuntimeStartError
    when it answers neither; UserError when it does not list `served_model` (chosen_model)."""
    props_json = json_200(props, base_url + "/props")
    llamacpp = props_json if isinstance(props_json, dict) and "total_slots" in props_json else None
    models_json = json_200(models, base_url + "/v1/models")
    if llamacpp is None and models_json is None:
        raise RuntimeStartError(f"{base_url} answers neither /props nor /v1/models: not an inference server")
    openai_model = chosen_model(base_url, model_ids(models_json), served_model)
    if llamacpp is None:
        return ServerFacts(llamacpp=False, openai_model=openai_model)
    fig = props_figures(llamacpp, base_url + "/props")
    return ServerFacts(
        llamacpp=True, total_slots=fig.total_slots, per_slot_ctx=fig.per_slot_ctx, build_info=fig.build_info,
        model_alias=served_model or fig.model_alias, model_path=fig.model_path, openai_model=openai_model,
        unavailable=fig.unavailable)


async def probe_server(session: EndpointSession, served_model: str | None = None,
                       deadline_s: float = PROBE_DEADLINE_S) -> ServerFacts:
    """GET /props (llama.cpp), then /v1/models, of the session's endpoint; RuntimeStartError if the
    server cannot be reached, does not answer within `deadline_s`, answers more than the endpoint's
    limit, refuses the key (on /props, or on /v1/models: vLLM guards only /v1/*) or is still loading
    its model (check_probe_reading); then probed_facts. A /props figure of the wrong type or out of
    range is None in the facts, its reason in `unavailable` and on stderr (one warning line each)."""
    base_url, key_sent = session.endpoint.base_url, session.endpoint.has_key
    props = await _reading(session, "/props", MAX_PROPS_BYTES, deadline_s)
    check_probe_reading(base_url, key_sent, props, "/props")
    models = await _reading(session, "/v1/models", MAX_MODELS_BYTES, deadline_s)
    check_probe_reading(base_url, key_sent, models, "/v1/models")
    facts = probed_facts(base_url, props, models, served_model)
    for line in facts.unavailable:
        print(f"satbench: warning: {line}", file=sys.stderr)
    return facts


async def measure_rtt_ms(session: EndpointSession, n: int = 20,
                         deadline_s: float = RTT_DEADLINE_S) -> list[float]:
    """Round trips of GET /health (or /v1/models when /health is absent), in ms. An answer past its
    limits (`deadline_s`, the endpoint's size) ends the measurement: such a server gives no RTT."""
    out: list[float] = []
    path, limit = "/health", MAX_HEALTH_BYTES
    for _ in range(n):
        t0 = time.perf_counter_ns()
        try:
            answer = await read(session, path, timeout_s=deadline_s, limit_bytes=limit)
            if answer.status == 404 and path == "/health":
                path, limit = "/v1/models", MAX_MODELS_BYTES
                continue
        except (TooLarge, TimedOut):
            break
        except RequestFailed:
            continue
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def rtt_summary(samples: list[float]) -> tuple[float | None, float | None]:
    if not samples:
        return None, None
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95


async def _post_answer(session: EndpointSession, path: str, body: dict, limit_bytes: int,
                       deadline_s: float) -> object:
    """POST `body` to `path` and the JSON its answer holds; RuntimeStartError when that fails. A pooled
    connection the server has meanwhile closed (llama-server ends keep-alive after 100 requests or 5 s
    idle) is tried once more on a new one: the request is idempotent, and that is not the server
    failing."""
    async def post() -> bytes:
        answer = await read(session, path, method="POST", json_body=body, limit_bytes=limit_bytes,
                            timeout_s=deadline_s)
        return answer.body

    try:
        try:
            raw = await post()
        except RequestFailed as exc:
            if not exc.stale:  # closed, or reset when reused
                raise
            raw = await post()
    except (TooLarge, TimedOut) as exc:
        raise RuntimeStartError(str(exc)) from exc
    except RequestFailed as exc:
        raise RuntimeStartError(f"{path} failed: {exc.detail}") from exc
    try:
        return json_answer(raw, session.endpoint.url(path))
    except ParseError as exc:
        raise RuntimeStartError(f"{path} failed: {exc}") from exc


def llamacpp_tokenizer(session: EndpointSession, deadline_s: float = PROBE_DEADLINE_S) -> Tokenizer:
    """POST /tokenize {content, add_special} → ids (each an integer in 0..MAX_TOKEN_ID; the answer
    within `deadline_s` and limits.tokenize_limit of the text), tried once more on a stale
    connection (`_post_answer`)."""
    url = session.endpoint.url("/tokenize")

    async def tokenize(text: str, add_special: bool) -> list[int]:
        body = await _post_answer(session, "/tokenize", {"content": text, "add_special": add_special},
                                  tokenize_limit(len(text.encode())), deadline_s)
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list):
            raise RuntimeStartError("/tokenize returned no token list")
        try:
            return [checked_int(t, 0, MAX_TOKEN_ID, f"{url}: token id") for t in tokens]
        except ParseError as exc:
            raise RuntimeStartError(str(exc)) from exc

    return tokenize


DETOKENIZE_BYTES_PER_TOKEN = 64  # a token's text, as the answer's JSON may escape it: bounds its limit


def llamacpp_detokenizer(session: EndpointSession, deadline_s: float = PROBE_DEADLINE_S) -> Detokenizer:
    """POST /detokenize {tokens} → their text (the answer within `deadline_s` and limits.tokenize_limit
    of DETOKENIZE_BYTES_PER_TOKEN bytes a token), tried once more on a stale connection."""

    async def detokenize(ids: list[int]) -> str:
        body = await _post_answer(session, "/detokenize", {"tokens": ids},
                                  tokenize_limit(DETOKENIZE_BYTES_PER_TOKEN * len(ids)), deadline_s)
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, str):
            raise RuntimeStartError("/detokenize returned no text")
        return content

    return detokenize
