"""What capability asks a running server (a url lane): its /props, or why it could not be asked."""

from __future__ import annotations

import http.client
import sys

from satbench.config.schema import LaneConfig
from satbench.errors import ParseError
from satbench.config.limits import MAX_PROPS_BYTES, PREFLIGHT_DEADLINE_S, json_answer


def _why(exc: BaseException) -> str:
    """One phrase for a failed /props request: 'HTTP 401 Unauthorized', or the socket/TLS error
    that urllib wraps in `.reason`."""
    if getattr(exc, "code", None):
        return f"HTTP {exc.code} {getattr(exc, 'reason', '')}".strip()  # type: ignore[attr-defined]
    inner = getattr(exc, "reason", None)
    err = inner if isinstance(inner, BaseException) else exc
    text = str(err)
    return f"{err.__class__.__name__}: {text}" if text else err.__class__.__name__


def remote_props(lane: LaneConfig) -> tuple[dict | None, str | None]:
    """(/props, None) of a running server, or (None, why) when it cannot be asked (unreachable,
    refused the key, failed TLS verification, past its size or time limit, not a JSON object).
    The figures capability takes from it are checked (probe.props_figures): those refused are
    dropped from the returned dict, one warning line each on stderr."""
    from satbench.http.access import get_bytes
    from satbench.server.probe import props_figures, remote_access

    url, headers, tls = remote_access(lane)
    try:
        props = json_answer(get_bytes(url + "/props", headers, tls, PREFLIGHT_DEADLINE_S,
                                      limit_bytes=MAX_PROPS_BYTES), url + "/props")
    except ParseError as exc:  # past a limit (the message names the endpoint), or not JSON
        return None, str(exc)[:300]
    except (OSError, http.client.HTTPException) as exc:
        return None, f"{url}/props: {_why(exc)}"[:300]
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
