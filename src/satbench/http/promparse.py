"""Prometheus text exposition → {name: value}. Only satbench's own ParseError escapes."""

from __future__ import annotations

import math

from satbench.config.limits import MAX_METRIC_NAME_CHARS, MAX_METRIC_SERIES, MAX_METRIC_VALUE
from satbench.errors import ParseError

LLAMACPP_PREFIX = "llamacpp:"


def parse_prometheus(text: str) -> dict[str, float]:
    """Every sample line `name[{labels}] value [timestamp]`; comments and blank lines skipped.

    Labelled samples keep their label block in the key (`name{a="b"}`).
    """
    out: dict[str, float] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            close = line.rfind("}")
            if close < line.index("{"):
                raise ParseError(f"/metrics line {lineno}: unclosed label block")
            name, rest = line[: close + 1], line[close + 1 :].split()
        else:
            parts = line.split()
            name, rest = parts[0], parts[1:]
        if not rest or len(rest) > 2:
            raise ParseError(f"/metrics line {lineno}: expected 'name value [timestamp]'")
        try:
            value = float(rest[0])
        except ValueError as exc:
            raise ParseError(f"/metrics line {lineno}: value {rest[0][:40]!r} is not a number") from exc
        out[name] = value
    return out


def llamacpp_values(text: str) -> dict[str, float]:
    """The `llamacpp:*` samples with the prefix removed; NaN/inf values dropped (llama.cpp prints a
    NaN for a ratio before its first decode). ParseError for a value outside 0..MAX_METRIC_VALUE
    (llama.cpp's series are never negative), a series whose name with its labels is longer than
    MAX_METRIC_NAME_CHARS, or more than MAX_METRIC_SERIES series: what is kept (a sample written
    10 times a second) stays under MAX_METRIC_SERIES × MAX_METRIC_NAME_CHARS characters of keys."""
    out: dict[str, float] = {}
    for k, v in parse_prometheus(text).items():
        if not k.startswith(LLAMACPP_PREFIX) or not math.isfinite(v):
            continue
        if len(k) > MAX_METRIC_NAME_CHARS:
            raise ParseError(f"/metrics series {k[:40]}... is longer than {MAX_METRIC_NAME_CHARS} characters")
        name = k[len(LLAMACPP_PREFIX):]
        if not 0.0 <= v <= MAX_METRIC_VALUE:
            raise ParseError(f"/metrics {k[:80]} {v:g} is outside 0..{MAX_METRIC_VALUE:g}")
        out[name] = v
        if len(out) > MAX_METRIC_SERIES:
            raise ParseError(f"/metrics has more than {MAX_METRIC_SERIES} llamacpp: series")
    return out
