"""What a url lane's server answers before the run, read once: `PreflightFacts`.

`read_facts` asks each endpoint the preflight needs at most once, in this order: /health (after
`wait_while_loading` has waited out llama.cpp's HTTP 503 "Loading model"), /v1/models (only for a
lane that names its `served_model`), /props, /metrics and /slots (only when /health answered: the
reachability check names a server that does not), and POST /tokenize for each text the caller
names (only for a llama.cpp server: /props answered with total_slots). Each read is bounded in time
(`timeout_s`, PREFLIGHT_DEADLINE_S) and size (config.limits), and kept as it came: the `Answer`, or
the `RequestFailed` that stopped it. What is decided of them (server.checks, run.preflight) is a pure
function of a lane's config and its facts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
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
    PREFLIGHT_DEADLINE_S,
    figure,
    json_answer,
    text_figure,
    tokenize_limit,
)
from satbench.config.schema import LaneConfig, Strict
from satbench.errors import ParseError, RuntimeStartError
from satbench.http.access import Answer, read_sync, remote_endpoint
from satbench.http.endpoint import Endpoint
from satbench.http.errors import RequestFailed, TooLarge

Reading = Answer | RequestFailed
"""One request's outcome: the server's answer (any HTTP status), or why none came whole."""

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


def answered(reading: Reading) -> bool:
    """Whether the server answered HTTP: any status, or an answer past its size limit."""
    return isinstance(reading, Answer | TooLarge)


def json_200(reading: Reading | None, where: str) -> object:
    """The JSON value of a 200 answer; None for anything else (not asked, no answer, another status,
    a body that is not JSON)."""
    if not isinstance(reading, Answer) or reading.status != 200:
        return None
    try:
        return json_answer(reading.body, where)
    except ParseError:
        return None


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


def shape_of(props: dict) -> tuple[int | None, int | None]:
    """(slots, per-slot context) a llama.cpp server reports on /props: total_slots and
    default_generation_settings.n_ctx, each None where absent, not an integer or out of range
    (props_figures)."""
    fig = props_figures(props, "/props")
    return fig.total_slots, fig.per_slot_ctx


def model_ids(models: object) -> list[str]:
    """The ids a /v1/models answer lists ({"data": [{"id": …}, …]}), in its order."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list):
        return []
    return [str(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), (str, int))
            and not isinstance(m.get("id"), bool)]


@dataclass(frozen=True)
class PreflightFacts:
    """One url lane's server as the preflight read it (see the module's docstring for what is read
    when). `None`: not asked. `token_counts`: each text asked of /tokenize → its token count; None
    when it was not asked or did not answer every text with a token list."""

    base_url: str  # credential-free
    health: Reading
    models: Reading | None = None
    props: Reading | None = None
    metrics: Reading | None = None
    slots: Reading | None = None
    token_counts: Mapping[str, int] | None = None

    @property
    def answers(self) -> bool:
        return answered(self.health)

    def llamacpp_props(self) -> dict | None:
        """The /props object of a llama.cpp server (a JSON object holding total_slots), else None."""
        props = json_200(self.props, self.base_url + "/props")
        return props if isinstance(props, dict) and "total_slots" in props else None


def _read(endpoint: Endpoint, path: str, limit_bytes: int, timeout_s: float, method: str = "GET",
          json_body: object = None) -> Reading:
    try:
        return read_sync(endpoint, path, timeout_s=timeout_s, limit_bytes=limit_bytes, method=method,
                         json_body=json_body)
    except RequestFailed as exc:
        return exc


def wait_while_loading(lane: LaneConfig, endpoint: Endpoint, wait_s: float | None = None, poll_s: float = 1.0,
                       timeout_s: float = PREFLIGHT_DEADLINE_S) -> Reading:
    """GET /health; while it answers llama.cpp's HTTP 503 "Loading model", say so once on stderr and
    ask again every `poll_s` for at most `wait_s` (default LOADING_WAIT_S), then RuntimeStartError
    (still loading). Otherwise the reading, whatever it is."""
    wait_s = LOADING_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        health = _read(endpoint, "/health", MAX_HEALTH_BYTES, timeout_s)
        if not (isinstance(health, Answer) and is_loading(health.status, health.body)):
            return health
        if time.monotonic() >= deadline:
            url = endpoint.base_url
            raise RuntimeStartError(still_loading(url) + (f" (waited {wait_s:.0f} s)" if wait_s > 0 else ""))
        if not said:
            print(f"satbench: lane {lane.name}: the server at {endpoint.base_url} is still loading its model "
                  f"(HTTP 503); waiting up to {wait_s:.0f} s for /health to answer 200", file=sys.stderr)
            said = True
        time.sleep(poll_s)


def _token_counts(endpoint: Endpoint, texts: Sequence[str], timeout_s: float) -> Mapping[str, int] | None:
    """POST /tokenize {content, add_special: true} for each distinct text: its token count; None at the
    first that is not answered 200 with a token list."""
    counts: dict[str, int] = {}
    for text in dict.fromkeys(texts):
        answer = _read(endpoint, "/tokenize", tokenize_limit(len(text.encode())), timeout_s,
                       method="POST", json_body={"content": text, "add_special": True})
        tokens = json_200(answer, endpoint.url("/tokenize"))
        tokens = tokens.get("tokens") if isinstance(tokens, dict) else None
        if not isinstance(tokens, list):
            return None
        counts[text] = len(tokens)
    return MappingProxyType(counts)


def read_facts(lane: LaneConfig, tokenize: Sequence[str] = (), wait_s: float | None = None,
               timeout_s: float = PREFLIGHT_DEADLINE_S) -> PreflightFacts:
    """A url lane's server, each endpoint read once (the module's docstring says which, when);
    RuntimeStartError when it is still loading its model after `wait_s` (wait_while_loading)."""
    endpoint = remote_endpoint(lane)
    health = wait_while_loading(lane, endpoint, wait_s, timeout_s=timeout_s)
    models = None
    if lane.runtime.served_model is not None:
        models = _read(endpoint, "/v1/models", MAX_MODELS_BYTES, timeout_s)
    facts = PreflightFacts(endpoint.base_url, health, models)
    if not facts.answers:
        return facts
    facts = replace(facts, props=_read(endpoint, "/props", MAX_PROPS_BYTES, timeout_s),
                    metrics=_read(endpoint, "/metrics", MAX_METRICS_BYTES, timeout_s),
                    slots=_read(endpoint, "/slots", MAX_SLOTS_BYTES, timeout_s))
    if facts.llamacpp_props() is None or not tokenize:
        return facts
    return replace(facts, token_counts=_token_counts(endpoint, tokenize, timeout_s))
