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
"""

from __future__ import annotations

import sys

from satbench.config.schema import LaneConfig
from satbench.errors import UserError
from satbench.records.manifest import LaneProvenance, ModelInfo, RuntimeInfo

CTX_PAD = 256  # llama.cpp pads a slot's context up to a multiple of this


def _does_not_fit(lane: LaneConfig, have: str) -> UserError:
    w = lane.workload
    prompt, output = w.prompt_bounds()[1], w.output_bounds()[1]
    which = "a request" if w.prompt_lengths is None and w.output_lengths is None else "the longest request"
    return UserError(
        f"lane {lane.name}: {which} needs prompt {prompt} + output {output} = {prompt + output} tokens "
        f"but {have} "
        "(llama.cpp would cut every answer short); lower --prompt-tokens/--output-tokens, or give the server "
        "more context (-c) or fewer slots (-np)")


def slot_ctx_at_most(n_ctx: int, n_parallel: int, kv_unified: bool) -> int:
    """The most context one slot can get from `-c n_ctx -np n_parallel`: llama.cpp gives each slot
    ceil(n_ctx / n_parallel) (all of n_ctx when the KV cache is unified) padded up to a multiple of
    256, and may cap it lower (the model's training context), never higher. b11434 measured:
    -c 500 -np 3 → 256, -c 1000 -np 3 → 512."""
    per_slot = n_ctx if kv_unified else -(-n_ctx // max(1, n_parallel))
    return -(-per_slot // CTX_PAD) * CTX_PAD


def check_planned_fit(lane: LaneConfig) -> None:
    """Before a server is started (and a run directory made): refuse a --ctx-size that cannot hold
    one request per slot even at its most generous. What the server really gives is checked once
    it answers (check_server_fits)."""
    if lane.runtime.kind == "url" or lane.server.n_ctx is None:
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
    label = () if stored.runtime.kind == rt.kind == "url" else ("name",)
    checks = [(stored.runtime, f) for f in (*label, "version", "build_info", "build_number", "binary_sha256",
                                                "llamacpp")]
    if same_scenario is not None:
        checks += [(same_scenario, f) for f in ("total_slots", "per_slot_ctx")]
    for old, field in checks:
        a, b = getattr(old, field), getattr(rt, field)
        if a != b and not (field == "binary_sha256" and a is None):  # a run from before 2.3 has none
            raise UserError(f"cannot continue lane {lane}: the server's {field} is {b!r} now, "
                            f"{a!r} in the run")
