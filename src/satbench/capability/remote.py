"""What capability asks a running server (a url lane): its /props, or why it could not be asked."""

from __future__ import annotations

import sys

from satbench.config.limits import MAX_PROPS_BYTES, PREFLIGHT_DEADLINE_S
from satbench.config.schema import LaneConfig
from satbench.errors import ParseError


def remote_props(lane: LaneConfig) -> tuple[dict | None, str | None]:
    """(/props, None) of a running server, or (None, why) when it cannot be asked (unreachable,
    refused the key, failed TLS verification, past its size or time limit, not a JSON object).
    The figures capability takes from it are checked (facts.props_figures): those refused are
    dropped from the returned dict, one warning line each on stderr."""
    from satbench.http.access import read_sync, remote_endpoint
    from satbench.http.errors import RequestFailed, status_phrase
    from satbench.server.facts import props_figures

    endpoint = remote_endpoint(lane)
    url = endpoint.base_url
    try:
        answer = read_sync(endpoint, "/props", timeout_s=PREFLIGHT_DEADLINE_S, limit_bytes=MAX_PROPS_BYTES)
        if not 200 <= answer.status < 300:
            return None, f"{url}/props: {status_phrase(answer.status)}"[:300]
        props = answer.json()
    except (RequestFailed, ParseError) as exc:  # no answer, past a limit (named), or not JSON
        return None, str(exc)[:300]
    if not isinstance(props, dict):
        return None, f"{url}/props did not answer a JSON object"
    fig = props_figures(props, url + "/props")
    for line in fig.unavailable:
        print(f"satbench: warning: {line}", file=sys.stderr)
    dgs = props.get("default_generation_settings")
    settings = {**(dgs if isinstance(dgs, dict) else {}), "n_ctx": fig.per_slot_ctx}
    checked = {"total_slots": fig.total_slots, "model_path": fig.model_path, "build_info": fig.build_info,
               "model_alias": fig.model_alias, "default_generation_settings": settings}
    return {**props, **checked}, None
