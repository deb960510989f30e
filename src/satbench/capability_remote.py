"""What capability asks a running server (a url lane): its /props, or why it could not be asked."""

from __future__ import annotations

import json

from satbench.config import LaneConfig


def _why(exc: BaseException) -> str:
    """One phrase for a failed /props request: 'HTTP 401 Unauthorized', or the socket/TLS error
    that urllib wraps in `.reason`."""
    if getattr(exc, "code", None):
        return f"HTTP {exc.code} {getattr(exc, 'reason', '')}".strip()  # type: ignore[attr-defined]
    inner = getattr(exc, "reason", None)
    err = inner if isinstance(inner, BaseException) else exc
    return f"{err.__class__.__name__}: {err}"


def remote_props(lane: LaneConfig) -> tuple[dict | None, str | None]:
    """(/props, None) of a running server, or (None, why) when it cannot be asked (unreachable,
    refused the key, failed TLS verification, not a JSON object)."""
    from satbench.access import get_bytes
    from satbench.probe import remote_access

    url, headers, tls = remote_access(lane)
    try:
        props = json.loads(get_bytes(url + "/props", headers, tls, timeout_s=10))
    except (OSError, ValueError) as exc:
        return None, f"{url}/props: {_why(exc)}"[:300]
    if not isinstance(props, dict):
        return None, f"{url}/props did not answer a JSON object"
    return props, None
