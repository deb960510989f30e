"""Checks made once a lane's server answers, before anything is measured.

- Does the workload fit? A request whose prompt + output (the longest a lane can draw) exceed
  the per-slot context is not refused by llama.cpp: it answers 200 with fewer tokens, so every
  such request would fail as `wrong_token_count`. That is refused up front, naming the fix (for
  a server satbench starts with --ctx-size, already before the server and the run directory
  exist).
- Levels above the slot count queue at the server: a warning (the levels are flagged
  `queue_bound`), or an error with `--strict` (for a running server given by --url, already before
  the run directory exists).
- On `--resume`, the server must be the one the run started with: same model file, same build
  (an OpenAI-compatible server that is not llama.cpp: the same model id on /v1/models).
- A running server (--url), before the run and at its lane's start: what it answered (a reading of
  server.facts) decides, each check a pure function of the lane's config and those answers.
"""

from __future__ import annotations

import sys

from satbench.config.schema import LaneConfig, slot_ctx_at_most
from satbench.errors import RuntimeStartError, UserError
from satbench.http.access import Answer
from satbench.http.errors import BadAnswer, TimedOut, TlsRefused, TooLarge
from satbench.records.manifest import LaneProvenance, ModelInfo, RuntimeInfo
from satbench.server.facts import (
    PreflightFacts,
    Reading,
    is_loading,
    json_200,
    model_ids,
    shape_of,
    still_loading,
)


def _does_not_fit(lane: LaneConfig, have: str) -> UserError:
    w = lane.workload
    prompt, output = w.prompt_bounds()[1], w.output_bounds()[1]
    which = "a request" if w.prompt_lengths is None and w.output_lengths is None else "the longest request"
    return UserError(
        f"lane {lane.name}: {which} needs prompt {prompt} + output {output} = {prompt + output} tokens "
        f"but {have} "
        "(llama.cpp would cut every answer short); lower --prompt-tokens/--output-tokens, or give the server "
        "more context (-c) or fewer slots (-np)")


def check_planned_fit(lane: LaneConfig) -> None:
    """Before a server is started (and a run directory made): refuse a --ctx-size that cannot hold
    one request per slot even at its most generous. What the server really gives is checked once
    it answers (check_server_fits)."""
    if not lane.runtime.starts_server or lane.server.n_ctx is None:
        return  # a running server's context is its own; without --ctx-size satbench asks for enough
    most = slot_ctx_at_most(lane.server.n_ctx, lane.slots_wanted(), lane.server.kv_unified)
    if most < lane.workload.longest_request():
        raise _does_not_fit(lane, f"--ctx-size {lane.server.n_ctx} over {lane.slots_wanted()} slots gives "
                                  f"each slot at most {most}")


def check_server_fits(lane: LaneConfig, rt: RuntimeInfo, strict: bool) -> None:
    check_fits(lane, rt.total_slots, rt.per_slot_ctx, strict)


def check_fits(lane: LaneConfig, total_slots: int | None, per_slot_ctx: int | None, strict: bool,
               warn: bool = True) -> None:
    """UserError when a request does not fit the per-slot context, or (with `strict`) a level
    exceeds the slots; else, with `warn`, a warning on stderr for the levels that will queue. A url
    lane is checked before its run directory exists (warn=False: the lane's start warns) and again
    at its start. An adaptive lane's levels are not run as given: its planner keeps to the slots
    (one level past them for a running server, none with `strict`)."""
    need = lane.workload.longest_request()
    if per_slot_ctx is not None and per_slot_ctx < need:
        raise _does_not_fit(lane, f"the server's per-slot context is {per_slot_ctx}")
    over = [n for n in lane.levels if total_slots is not None and n > total_slots and lane.adaptive is None]
    if not over:
        return
    what = (f"lane {lane.name}: level{'s' if len(over) > 1 else ''} {', '.join(map(str, over))} exceed"
            f"{'' if len(over) > 1 else 's'} the server's {total_slots} slots")
    if strict:
        raise UserError(f"{what} (--strict); lower the levels or start the server with more slots (-np)")
    if not warn:
        return
    print(f"satbench: warning: {what}: the extra requests queue at the server (those levels are flagged "
          "queue_bound; --strict refuses them)", file=sys.stderr)


def check_same_server(lane: str, stored: LaneProvenance, scenario: str, model: ModelInfo,
                      rt: RuntimeInfo) -> None:
    """Every server a lane starts (again, on --resume; or for another scenario) must serve the
    same model file with the same build as the lane's first; and the same shape (slots,
    per-slot context) as the earlier server of the same scenario. A server that is not llama.cpp
    names no file or build: its model id (/v1/models, recorded as model_alias) must be the same.
    A llama.cpp server's alias is not compared: its model file is, and --alias may rename the
    same weights. A running server's (--url) name is satbench's label for it, not its identity
    (it was renamed from "remote server"): not compared; its model, build and shape are."""
    was = stored.model
    if was.sha256 and model.sha256 and was.sha256 != model.sha256:
        raise UserError(f"cannot continue lane {lane}: its model file changed (sha256 {was.sha256[:12]} "
                        f"in the run, {model.sha256[:12]} now)")
    if was.path != model.path and was.sha256 is None:
        raise UserError(f"cannot continue lane {lane}: the server now serves {model.path}, not {was.path}")
    alias_was = stored.runtime.model_alias
    if (not stored.runtime.llamacpp and not rt.llamacpp and alias_was is not None
            and rt.model_alias is not None and alias_was != rt.model_alias):
        raise UserError(f"cannot continue lane {lane}: the server now serves {rt.model_alias!r}, "
                        f"not {alias_was!r}")
    same_scenario = {"solo": stored.runtime if stored.solo_recorded() else None,
                     "together": stored.together_runtime,
                     "fairness": stored.fairness_runtime}.get(scenario)
    label = () if not (stored.runtime.starts_server or rt.starts_server) else ("name",)
    checks = [(stored.runtime, f) for f in (*label, "version", "build_info", "build_number", "binary_sha256",
                                                "llamacpp")]
    if same_scenario is not None:
        checks += [(same_scenario, f) for f in ("total_slots", "per_slot_ctx")]
    for old, field in checks:
        a, b = getattr(old, field), getattr(rt, field)
        if a != b and not (field == "binary_sha256" and a is None):  # a run from before 2.3 has none
            raise UserError(f"cannot continue lane {lane}: the server's {field} is {b!r} now, "
                            f"{a!r} in the run")


# -- a running server (--url): pure functions of what it answered ---------------------------------

MAX_OFFERS_SHOWN = 20  # model ids a refusal lists (a gateway may offer thousands)


def refused_access(base_url: str, status: int, key_sent: bool, path: str = "/props") -> str:
    if key_sent:
        return (f"{base_url} refused the API key (HTTP {status} on {path}): "
                "check --api-key-env / --api-key-file")
    return (f"{base_url} needs an API key (HTTP {status} on {path}): pass --api-key-env VAR or "
            "--api-key-file FILE")


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


def check_probe_reading(base_url: str, key_sent: bool, reading: Reading, path: str) -> None:
    """At a lane's start, one probe read (/props, /v1/models) of the server at `base_url`:
    RuntimeStartError when nothing usable came (past a limit: its one line; a TLS refusal: why and
    how to trust it; else 'cannot reach URL: ClassName: message'), when the server is still loading
    its model, or when it refuses the key (HTTP 401/403 on `path`)."""
    if isinstance(reading, TooLarge | TimedOut):
        raise RuntimeStartError(str(reading))
    if isinstance(reading, TlsRefused):
        raise RuntimeStartError(f"{base_url}: {reading.reason}")
    if not isinstance(reading, Answer):
        raise RuntimeStartError(f"cannot reach {base_url}: {reading.detail}")
    if is_loading(reading.status, reading.body):
        raise RuntimeStartError(still_loading(base_url))
    if reading.status in (401, 403):
        raise RuntimeStartError(refused_access(base_url, reading.status, key_sent, path))


def check_reachable(facts: PreflightFacts) -> None:
    """Before the run: whether a url lane's server answered /health at all. Any HTTP answer will do
    (/props decides later what serves); RuntimeStartError when none came ('URL/health: no answer
    within 10 s', a TLS refusal, 'cannot reach URL: Connection refused')."""
    health = facts.health
    if isinstance(health, Answer | TooLarge | BadAnswer):
        return  # it answers, if not with 200
    if isinstance(health, TimedOut):
        raise RuntimeStartError(str(health))
    if isinstance(health, TlsRefused):
        raise RuntimeStartError(f"{facts.base_url}: {health.reason}")
    raise RuntimeStartError(f"cannot reach {facts.base_url}: {health.reason}")


def check_served_model(lane: LaneConfig, facts: PreflightFacts) -> None:
    """Before the run: a url lane's `served_model` must be among the ids its server lists on
    /v1/models (UserError naming them). A server that does not answer, or lists nothing readable,
    is left to the probe at the lane's start, which says why."""
    if lane.runtime.served_model is None:
        return
    ids = model_ids(json_200(facts.models, facts.base_url + "/v1/models"))
    if ids:
        chosen_model(facts.base_url, ids, lane.runtime.served_model)


def server_shape(facts: PreflightFacts) -> tuple[int | None, int | None] | None:
    """(total_slots, per-slot context) from a url lane's llama.cpp /props (each None when refused:
    see facts.props_figures); None when it did not answer them (not llama.cpp, an error, past a
    limit): the probe at the lane's start says why."""
    props = facts.llamacpp_props()
    return None if props is None else shape_of(props)


# What a llama.cpp server started without the endpoint's flag loses (it answers HTTP 501 there).
_ENDPOINT_LOSS = {
    "/metrics": ("--metrics", "decode-weighted busy slots and requests_deferred (the queue cross-check), and "
                              "the slot-bound reading of what saturated"),
    "/slots": ("--slots (drop --no-slots)", "busy slots sampled from /slots (time-weighted occupancy then "
                                            "comes from /metrics requests_processing, if that is on)"),
}


def endpoint_warnings(lane: LaneConfig, facts: PreflightFacts) -> list[str]:
    """Before the run: one warning line per llama.cpp endpoint a url lane's server has disabled
    (HTTP 501, llama.cpp's "not supported"), naming the flag to start it with and what is lost."""
    out = []
    for path, reading in (("/metrics", facts.metrics), ("/slots", facts.slots)):
        flag, lost = _ENDPOINT_LOSS[path]
        if isinstance(reading, Answer) and reading.status == 501:
            out.append(f"satbench: warning: lane {lane.name}: the server at {facts.base_url} has {path} "
                       f"disabled (HTTP 501): start it with {flag} to measure {lost}; without it those "
                       "figures are null")
    return out
