"""Checks made once a lane's server answers, before anything is measured.

- Does the workload fit? A request whose prompt + output exceed the per-slot context is not
  refused by llama.cpp: it answers 200 with fewer tokens, so every request would fail as
  `wrong_token_count`. That is refused up front, naming the fix.
- Levels above the slot count queue at the server: a warning (the levels are flagged
  `queue_bound`), or an error with `--strict`.
- On `--resume`, the server must be the one the run started with: same model file, same build.
"""

from __future__ import annotations

import sys

from satbench.config import LaneConfig
from satbench.errors import UserError
from satbench.manifest import LaneProvenance, ModelInfo, RuntimeInfo


def check_server_fits(lane: LaneConfig, rt: RuntimeInfo, strict: bool) -> None:
    need = lane.workload.prompt_tokens + lane.workload.output_tokens
    if rt.per_slot_ctx is not None and rt.per_slot_ctx < need:
        raise UserError(
            f"lane {lane.name}: a request needs prompt {lane.workload.prompt_tokens} + output "
            f"{lane.workload.output_tokens} = {need} tokens but the server's per-slot context is {rt.per_slot_ctx} "
            "(llama.cpp would cut every answer short); lower --prompt-tokens/--output-tokens, or give the server "
            "more context (-c) or fewer slots (-np)")
    over = [n for n in lane.levels if rt.total_slots is not None and n > rt.total_slots]
    if not over:
        return
    what = (f"lane {lane.name}: level{'s' if len(over) > 1 else ''} {', '.join(map(str, over))} exceed"
            f"{'' if len(over) > 1 else 's'} the server's {rt.total_slots} slots")
    if strict:
        raise UserError(f"{what} (--strict); lower the levels or start the server with more slots (-np)")
    print(f"satbench: warning: {what}: the extra requests queue at the server (those levels are flagged "
          "queue_bound; --strict refuses them)", file=sys.stderr)


def check_same_server(lane: str, stored: LaneProvenance, scenario: str, model: ModelInfo, rt: RuntimeInfo) -> None:
    """Every server a lane starts (again, on --resume; or for another scenario) must serve the
    same model file with the same build as the lane's first; and the same shape (slots,
    per-slot context) as the earlier server of the same scenario."""
    was = stored.model
    if was.sha256 and model.sha256 and was.sha256 != model.sha256:
        raise UserError(f"cannot continue lane {lane}: its model file changed (sha256 {was.sha256[:12]} in the run, "
                        f"{model.sha256[:12]} now)")
    if was.path != model.path and was.sha256 is None:
        raise UserError(f"cannot continue lane {lane}: the server now serves {model.path}, not {was.path}")
    same_scenario = {"solo": stored.runtime, "together": stored.together_runtime,
                     "fairness": stored.fairness_runtime}.get(scenario)
    checks = [(stored.runtime, f) for f in ("name", "version", "build_info", "build_number", "binary_sha256",
                                                "llamacpp")]
    if same_scenario is not None:
        checks += [(same_scenario, f) for f in ("total_slots", "per_slot_ctx")]
    for old, field in checks:
        a, b = getattr(old, field), getattr(rt, field)
        if a != b and not (field == "binary_sha256" and a is None):  # a run from before 2.3 has none
            raise UserError(f"cannot continue lane {lane}: the server's {field} is {b!r} now, {a!r} in the run")
