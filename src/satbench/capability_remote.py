"""What capability asks a running server (a url lane) and whether its URL is served by this machine."""

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
    from satbench.access import auth_headers, get_bytes, tls_context_for
    from satbench.runtimes.remote import split_credentials

    url, secret = split_credentials(lane.runtime.url or "")
    headers = auth_headers(lane.runtime, lane.name, secret)
    try:
        props = json.loads(get_bytes(url + "/props", headers, tls_context_for(lane.runtime), timeout_s=10))
    except (OSError, ValueError) as exc:
        return None, f"{url}/props: {_why(exc)}"[:300]
    if not isinstance(props, dict):
        return None, f"{url}/props did not answer a JSON object"
    return props, None


def shape_of(props: dict) -> tuple[int | None, int | None]:
    """(slots, per-slot context) a running server reports on /props (total_slots,
    default_generation_settings.n_ctx, as the probe reads them)."""
    dgs = props.get("default_generation_settings")
    ctx = dgs.get("n_ctx") if isinstance(dgs, dict) else None
    slots = props.get("total_slots")
    return (slots if isinstance(slots, int) else None), (ctx if isinstance(ctx, int) else None)
