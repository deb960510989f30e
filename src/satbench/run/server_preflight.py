"""Before a new run's directory exists: every check that refuses a run in one line, naming the lane
(lane file) or the flag (remote_preflight, server_preflight). `satbench sweep`, the Python API and
a fleet node run them the same way (api.prepare_sweep)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from satbench.config.schema import LaneConfig, RunConfig
from satbench.errors import UserError

if TYPE_CHECKING:
    from satbench.server.facts import PreflightFacts


def remote_preflight(cfg: RunConfig) -> None:
    """Unreadable keys or CA files fail before anything starts; --insecure says so on stderr."""
    from satbench.http.access import check_remote_access

    for line in check_remote_access(cfg):
        print(line, file=sys.stderr)


def server_preflight(cfg: RunConfig, lane_file: bool) -> None:
    """Refused before a new run's directory exists, in one line naming the lane (lane file) or the
    flag. First every check that needs no server: a server_bin that cannot run, a --ctx-size too
    small for one request per slot, a port in use (or asked by two lanes that run together), levels
    whose requests and streams satbench's memory cannot hold (workload.budget.check_memory_fits) or whose
    records its analysis cannot read (check_records_fit), a prompt too short for its unique prefix by
    the model file's own vocabulary (prefix_preflight). Then the running servers, each read once
    (running_server_checks): a served_model its server does not list, and a run of running servers none of
    which answers (where one answers, the others become recorded lane failures). A running server
    still loading its model is waited for (a bounded time), one whose slots or per-slot context the
    workload does not fit, or whose /tokenize leaves no room after the prefix, is refused, and one
    without /metrics or /slots is warned about."""
    from satbench.run.preflight import check_prefix_bounds
    from satbench.server.base import check_port_free
    from satbench.server.checks import check_planned_fit
    from satbench.server.native import check_server_bin
    from satbench.workload.budget import check_memory_fits, check_records_fit

    ports: dict[int, str] = {}
    for lane in cfg.lanes:
        rc, port = lane.runtime, lane.server.port

        def where(key: str, name: str = lane.name) -> str:
            return f"lane {name}: {key}" if lane_file else f"--{key.replace('_', '-')}"

        if rc.binary is not None:
            check_server_bin(rc.binary, where("server_bin"))
        check_planned_fit(lane)
        if not rc.starts_server or port is None:
            continue
        if cfg.together and port in ports:
            raise UserError(f"lanes {ports[port]} and {lane.name} both ask for port {port} and the together "
                            "scenario runs them at once: give each lane its own port, or drop port")
        ports[port] = lane.name
        check_port_free(port, f"{where('port')} {port}")
    check_memory_fits(cfg, lane_file)
    check_records_fit(cfg)
    check_prefix_bounds(cfg, lane_file)
    running = [running_server_checks(cfg, lane, lane_file) for lane in cfg.lanes
               if not lane.runtime.starts_server]
    if len(running) == len(cfg.lanes):
        some_url_answers(cfg, running)


def running_server_checks(cfg: RunConfig, lane: LaneConfig, lane_file: bool = False) -> PreflightFacts:
    """A url lane's server, read once (server.facts.read_facts: waiting a bounded time while it loads
    its model), and its facts: a served_model it must list; then, if it answers, the workload must fit
    its per-slot context, its prompts the longest unique prefix as its /tokenize counts it, and with
    --strict its levels its slots (all checked again at the lane's start, which also warns of
    queueing levels); a disabled /metrics or /slots is one warning line each. Returns the facts."""
    from satbench.run.preflight import check_prefix_remote, prefix_texts
    from satbench.server.checks import check_fits, check_served_model, endpoint_warnings, server_shape
    from satbench.server.facts import read_facts

    facts = read_facts(lane, [text for group in prefix_texts(cfg, lane) for text in group])
    check_served_model(lane, facts)
    if not facts.answers:
        return facts
    shape = server_shape(facts)
    if shape is not None and not cfg.fairness_only:  # the fairness checks size their own requests
        check_fits(lane, *shape, cfg.strict, warn=False)
    if shape is not None:  # a llama.cpp server: it tokenizes
        check_prefix_remote(cfg, lane, facts, lane_file)
    for line in endpoint_warnings(lane, facts):
        print(line, file=sys.stderr)
    return facts


def some_url_answers(cfg: RunConfig, facts: list[PreflightFacts]) -> None:
    """A run whose lanes are all running servers (`facts`: theirs, in the lanes' order):
    RuntimeStartError when none of them answered (there would be nothing to measure). One that answers
    is enough: the others become recorded lane failures."""
    from satbench.errors import RuntimeStartError
    from satbench.server.checks import check_reachable

    down: list[str] = []
    for lane, lane_facts in zip(cfg.lanes, facts):
        try:
            check_reachable(lane_facts)
            return
        except RuntimeStartError as exc:
            if len(cfg.lanes) == 1:
                raise
            down.append(f"lane {lane.name}: {exc}")
    raise RuntimeStartError(f"no lane's server answers ({'; '.join(down)})")
