"""What is behind a URL: llama.cpp (detected through /props) or another OpenAI-compatible server.

Also measures the client↔server round-trip time (the loopback overhead used by the
queue-time estimate) and offers llama.cpp's /tokenize to the workload.
"""

from __future__ import annotations

import http.client
import statistics
import sys
import time
import urllib.error
from typing import TypeVar

from pydantic import Field

from satbench.config.limits import (
    MAX_CTX_TOKENS,
    MAX_HEALTH_BYTES,
    MAX_METRICS_BYTES,
    MAX_MODELS_BYTES,
    MAX_PROPS_BYTES,
    MAX_SLOTS,
    MAX_SLOTS_BYTES,
    MAX_TOKEN_ID,
    PREFLIGHT_DEADLINE_S,
    PROBE_DEADLINE_S,
    RTT_DEADLINE_S,
    AnswerTimeoutError,
    AnswerTooLarge,
    checked_int,
    figure,
    json_answer,
    text_figure,
    tokenize_limit,
)
from satbench.config.schema import LaneConfig, Strict
from satbench.errors import ParseError, RuntimeStartError, UserError
from satbench.http.access import EndpointSession, get_bytes, remote_endpoint
from satbench.http.errors import (
    NETWORK_ERRORS,
    STALE_CONNECTION,
    describe,
    tls_cause,
    tls_failure,
    unreachable,
)
from satbench.workload.builder import Detokenizer, Tokenizer


class ServerFacts(Strict):
    llamacpp: bool
    total_slots: int | None = None
    per_slot_ctx: int | None = None
    build_info: str | None = None
    model_alias: str | None = None
    model_path: str | None = None
    openai_model: str | None = None
    unavailable: list[str] = Field(default_factory=list)  # one line per /props figure refused, with why


class PropsFigures(Strict):
    """The figures satbench takes from a llama.cpp /props answer, each type- and range-checked;
    a figure that fails is None, and `unavailable` says why (one line each)."""

    total_slots: int | None = None
    per_slot_ctx: int | None = None
    build_info: str | None = None
    model_alias: str | None = None
    model_path: str | None = None
    unavailable: list[str] = Field(default_factory=list)


_V = TypeVar("_V")


def props_figures(props: dict, where: str) -> PropsFigures:
    """Read /props (`where`: its URL, for the reasons): total_slots in 1..MAX_SLOTS,
    default_generation_settings.n_ctx in 1..MAX_CTX_TOKENS, the text figures strings of at most
    MAX_SERVER_TEXT_CHARS. Never raises."""
    reasons: list[str] = []

    def keep(pair: tuple[_V, str | None]) -> _V:
        value, why = pair
        if why is not None:
            reasons.append(f"{where}: {why}; recorded as unavailable")
        return value

    dgs = props.get("default_generation_settings")
    if dgs is not None and not isinstance(dgs, dict):
        reasons.append(f"{where}: default_generation_settings is not a JSON object; "
                       "n_ctx recorded as unavailable")
    info = props.get("build_info")
    return PropsFigures(
        total_slots=keep(figure(props.get("total_slots"), 1, MAX_SLOTS, "total_slots")),
        per_slot_ctx=keep(figure(dgs.get("n_ctx"), 1, MAX_CTX_TOKENS, "default_generation_settings.n_ctx"))
        if isinstance(dgs, dict) else None,
        build_info=keep(text_figure(str(info) if isinstance(info, (int, float)) else info, "build_info")),
        model_alias=keep(text_figure(props.get("model_alias"), "model_alias")),
        model_path=keep(text_figure(props.get("model_path"), "model_path")),
        unavailable=reasons)


LOADING_WAIT_S = 60.0  # how long the preflight waits for a url lane's server to finish loading its model


def still_loading(base_url: str) -> str:
    return (f"the server at {base_url} is still loading its model (HTTP 503 Loading model): wait until "
            "/health answers 200, then run again")


def is_loading(status: int, body: bytes) -> bool:
    """llama-server answers every endpoint HTTP 503 {"error": {"message": "Loading model", …}} until
    its model is loaded (tools/server/server-http.cpp)."""
    if status != 503:
        return False
    try:
        answer = json_answer(body, "")
    except ParseError:
        return False
    err = answer.get("error") if isinstance(answer, dict) else None
    return isinstance(err, dict) and err.get("message") == "Loading model"


async def _get_json(session: EndpointSession, path: str, limit_bytes: int,
                    deadline_s: float) -> tuple[int, object]:
    """(status, the JSON body of a 200 answer or None); RuntimeStartError while the server loads its
    model; AnswerTooLarge / AnswerTimeoutError past the endpoint's limits (EndpointSession.read)."""
    base_url = session.endpoint.base_url
    status, body = await session.read(path, limit_bytes=limit_bytes, deadline_s=deadline_s)
    if is_loading(status, body):
        raise RuntimeStartError(still_loading(base_url))
    if status != 200:
        return status, None
    try:
        return 200, json_answer(body, base_url + path)
    except ParseError:
        return 200, None


def refused_access(base_url: str, status: int, key_sent: bool, path: str = "/props") -> str:
    if key_sent:
        return (f"{base_url} refused the API key (HTTP {status} on {path}): "
                "check --api-key-env / --api-key-file")
    return (f"{base_url} needs an API key (HTTP {status} on {path}): pass --api-key-env VAR or "
            "--api-key-file FILE")


def model_ids(models: object) -> list[str]:
    """The ids a /v1/models answer lists ({"data": [{"id": …}, …]}), in its order."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list):
        return []
    return [str(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), (str, int))
            and not isinstance(m.get("id"), bool)]


MAX_OFFERS_SHOWN = 20  # model ids a refusal lists (a gateway may offer thousands)


def chosen_model(base_url: str, ids: list[str], served_model: str | None) -> str | None:
    """The model requests name: `served_model` when the server lists it (else a UserError naming
    what it offers), otherwise the first listed id (None when it lists none)."""
    if served_model is None:
        return ids[0] if ids else None
    if served_model not in ids:
        shown = [i[:100] for i in ids[:MAX_OFFERS_SHOWN]]
        more = f" (and {len(ids) - MAX_OFFERS_SHOWN} more)" if len(ids) > MAX_OFFERS_SHOWN else ""
        offers = ", ".join(shown) + more if ids else "none (no model list on /v1/models)"
        raise UserError(f"{base_url} does not serve model {served_model!r} (served_model / --served-model); "
                        f"its /v1/models offers: {offers}")
    return served_model


async def probe_server(session: EndpointSession, served_model: str | None = None,
                       deadline_s: float = PROBE_DEADLINE_S) -> ServerFacts:
    """GET /props (llama.cpp) and /v1/models of the session's endpoint; RuntimeStartError if the
    server cannot be reached, does not answer within `deadline_s`, answers more than the endpoint's
    limit, refuses the key (on /props, or on /v1/models: vLLM guards only /v1/*) or is still loading
    its model; UserError if it does not list `served_model`. A /props figure of the wrong type or
    out of range is None in the facts, its reason in `unavailable` and on stderr (one warning line
    each)."""
    base_url, key_sent = session.endpoint.base_url, session.endpoint.has_key
    try:
        status, props = await _get_json(session, "/props", MAX_PROPS_BYTES, deadline_s)
        if status in (401, 403):
            raise RuntimeStartError(refused_access(base_url, status, key_sent))
        status, models = await _get_json(session, "/v1/models", MAX_MODELS_BYTES, deadline_s)
        if status in (401, 403):
            raise RuntimeStartError(refused_access(base_url, status, key_sent, "/v1/models"))
    except (AnswerTooLarge, AnswerTimeoutError) as exc:
        raise RuntimeStartError(str(exc)) from exc
    except NETWORK_ERRORS as exc:
        tls = tls_cause(exc)
        if tls is not None:
            raise tls_failure(base_url, tls) from exc
        raise RuntimeStartError(f"cannot reach {base_url}: {describe(exc)}") from exc
    if not (isinstance(props, dict) and "total_slots" in props) and models is None:
        raise RuntimeStartError(f"{base_url} answers neither /props nor /v1/models: not an inference server")
    openai_model = chosen_model(base_url, model_ids(models), served_model)
    if not (isinstance(props, dict) and "total_slots" in props):
        return ServerFacts(llamacpp=False, openai_model=openai_model)
    fig = props_figures(props, base_url + "/props")
    for line in fig.unavailable:
        print(f"satbench: warning: {line}", file=sys.stderr)
    return ServerFacts(
        llamacpp=True, total_slots=fig.total_slots, per_slot_ctx=fig.per_slot_ctx, build_info=fig.build_info,
        model_alias=served_model or fig.model_alias, model_path=fig.model_path, openai_model=openai_model,
        unavailable=fig.unavailable)


def check_reachable(lane: LaneConfig, timeout_s: float = PREFLIGHT_DEADLINE_S) -> None:
    """Before the run: GET /health on a url lane's server, with its TLS policy and key. Any HTTP
    answer will do (/props decides later what serves); RuntimeStartError when nothing answers
    (within `timeout_s`: 'URL/health: no answer within 10 s')."""
    endpoint = remote_endpoint(lane)
    try:
        get_bytes(endpoint, "/health", timeout_s, limit_bytes=MAX_HEALTH_BYTES)
    except AnswerTimeoutError as exc:
        raise RuntimeStartError(str(exc)) from exc
    except (urllib.error.HTTPError, http.client.HTTPException, AnswerTooLarge):
        return  # it answers, if not with 200
    except NETWORK_ERRORS as exc:  # refused, TLS, a timeout, a reset after connecting
        raise unreachable(endpoint.base_url, exc) from exc


def _http_error_body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read()
    except NETWORK_ERRORS:
        return b""


def wait_while_loading(lane: LaneConfig, wait_s: float | None = None, poll_s: float = 1.0,
                       timeout_s: float = PREFLIGHT_DEADLINE_S) -> bool:
    """Before the run: while a url lane's server answers /health with llama.cpp's HTTP 503 "Loading
    model", say so once on stderr and ask again every `poll_s` for at most `wait_s` (default
    LOADING_WAIT_S); then
    RuntimeStartError (still loading). Otherwise whether it answers HTTP at all (no answer:
    check_reachable and the probe say why)."""
    endpoint = remote_endpoint(lane)
    url = endpoint.base_url
    wait_s = LOADING_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            get_bytes(endpoint, "/health", timeout_s, limit_bytes=MAX_HEALTH_BYTES)
            return True
        except urllib.error.HTTPError as exc:
            if not is_loading(exc.code, _http_error_body(exc)):
                return True
        except AnswerTooLarge:
            return True  # it answers
        except (*NETWORK_ERRORS, ParseError):
            return False
        if time.monotonic() >= deadline:
            raise RuntimeStartError(still_loading(url) + (f" (waited {wait_s:.0f} s)" if wait_s > 0 else ""))
        if not said:
            print(f"satbench: lane {lane.name}: the server at {url} is still loading its model (HTTP 503); "
                  f"waiting up to {wait_s:.0f} s for /health to answer 200", file=sys.stderr)
            said = True
        time.sleep(poll_s)


def server_shape(lane: LaneConfig,
                 timeout_s: float = PREFLIGHT_DEADLINE_S) -> tuple[int | None, int | None] | None:
    """Before the run: (total_slots, per-slot context) from a url lane's llama.cpp /props (each None
    when refused: see props_figures); None when it does not answer them (not llama.cpp, an error, past
    a limit): the probe at the lane's start says why."""
    endpoint = remote_endpoint(lane)
    url = endpoint.base_url
    try:
        props = json_answer(get_bytes(endpoint, "/props", timeout_s, limit_bytes=MAX_PROPS_BYTES),
                            url + "/props")
    except (*NETWORK_ERRORS, ParseError):
        return None
    if not (isinstance(props, dict) and "total_slots" in props):
        return None
    return shape_of(props)


def shape_of(props: dict) -> tuple[int | None, int | None]:
    """(slots, per-slot context) a llama.cpp server reports on /props: total_slots and
    default_generation_settings.n_ctx, each None where absent, not an integer or out of range
    (props_figures)."""
    fig = props_figures(props, "/props")
    return fig.total_slots, fig.per_slot_ctx


# What a llama.cpp server started without the endpoint's flag loses (it answers HTTP 501 there).
_ENDPOINT_LOSS = {
    "/metrics": ("--metrics", "decode-weighted busy slots and requests_deferred (the queue cross-check), and "
                              "the slot-bound reading of what saturated"),
    "/slots": ("--slots (drop --no-slots)", "busy slots sampled from /slots (time-weighted occupancy then "
                                            "comes from /metrics requests_processing, if that is on)"),
}


_ENDPOINT_LIMIT = {"/metrics": MAX_METRICS_BYTES, "/slots": MAX_SLOTS_BYTES}


def endpoint_warnings(lane: LaneConfig, timeout_s: float = PREFLIGHT_DEADLINE_S) -> list[str]:
    """Before the run: one warning line per llama.cpp endpoint a url lane's server has disabled
    (HTTP 501, llama.cpp's "not supported"), naming the flag to start it with and what is lost."""
    endpoint = remote_endpoint(lane)
    url = endpoint.base_url
    out = []
    for path, (flag, lost) in _ENDPOINT_LOSS.items():
        try:
            get_bytes(endpoint, path, timeout_s, limit_bytes=_ENDPOINT_LIMIT[path])
        except urllib.error.HTTPError as exc:
            if exc.code == 501:
                out.append(f"satbench: warning: lane {lane.name}: the server at {url} has {path} disabled "
                           f"(HTTP 501): start it with {flag} to measure {lost}; without it those figures "
                           "are null")
        except (*NETWORK_ERRORS, ParseError):
            pass  # the sampler records what the endpoint answers
    return out


def check_served_model(lane: LaneConfig, timeout_s: float = PREFLIGHT_DEADLINE_S) -> None:
    """Before the run: a url lane's `served_model` must be among the ids its server lists on
    /v1/models (UserError naming them). A server that does not answer, or lists nothing readable,
    is left to the probe at the lane's start, which says why."""
    if lane.runtime.served_model is None:
        return
    endpoint = remote_endpoint(lane)
    url = endpoint.base_url
    try:
        body = get_bytes(endpoint, "/v1/models", timeout_s, limit_bytes=MAX_MODELS_BYTES)
        ids = model_ids(json_answer(body, url + "/v1/models"))
    except (*NETWORK_ERRORS, ParseError):
        return
    if ids:
        chosen_model(url, ids, lane.runtime.served_model)


async def measure_rtt_ms(session: EndpointSession, n: int = 20,
                         deadline_s: float = RTT_DEADLINE_S) -> list[float]:
    """Round trips of GET /health (or /v1/models when /health is absent), in ms. An answer past its
    limits (`deadline_s`, the endpoint's size) ends the measurement: such a server gives no RTT."""
    out: list[float] = []
    path, limit = "/health", MAX_HEALTH_BYTES
    for _ in range(n):
        t0 = time.perf_counter_ns()
        try:
            status, _ = await session.read(path, limit_bytes=limit, deadline_s=deadline_s)
            if status == 404 and path == "/health":
                path, limit = "/v1/models", MAX_MODELS_BYTES
                continue
        except ParseError:
            break
        except NETWORK_ERRORS:
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
        _, raw = await session.read(path, method="POST", json_body=body, limit_bytes=limit_bytes,
                                    deadline_s=deadline_s)
        return raw

    try:
        try:
            raw = await post()
        except STALE_CONNECTION:  # closed, or reset when reused
            raw = await post()
    except (AnswerTooLarge, AnswerTimeoutError) as exc:
        raise RuntimeStartError(str(exc)) from exc
    except NETWORK_ERRORS as exc:
        raise RuntimeStartError(f"{path} failed: {describe(exc)}") from exc
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
