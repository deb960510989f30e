"""The text of list and duration flags (--concurrency 1,2,4, --rate 0.5,1, --budget 1m30s) read into
numbers, each by the number rule of config/ranges; the ranges are the models' to check."""

from __future__ import annotations

import re

from satbench.config.ranges import number_chars, number_text, shown


def list_items(text: str, what: str) -> list[str]:
    """The items of a comma-separated flag value, each stripped of the spaces around it; ValueError
    for an empty item (two commas, one at an end, or no item at all). Repeats are the model's to refuse."""
    parts = [p.strip() for p in text.split(",")]
    if any(not p for p in parts):
        raise ValueError(f"{what}: an empty item (two commas, or one at an end) in {shown(text)}")
    return parts


def parse_rates(text: str, what: str = "rates") -> list[float]:
    """Parse a comma-separated list of rates such as "0.5,1,2" (requests/s) into numbers, each by the
    number rule (the range check is the model's); ValueError naming `what` (the flag)."""
    return [float(number_text(p, what)) for p in list_items(text, what)]


def parse_levels(text: str, what: str = "concurrency levels") -> list[int]:
    """Parse a comma-separated list such as "1,2,4,8" into integers, each by the number rule (validation
    is the model's); ValueError naming `what` (the flag)."""
    return [int(number_text(p, what, integer=True)) for p in list_items(text, what)]


def parse_duration(text: str) -> float:
    """Seconds from "90", "90s", "2m", "1.5h" or "1m30s" (ASCII digits: `number_chars`); ValueError
    naming the text otherwise."""
    number_chars(text, "")
    t = text.strip().lower()
    num = r"([0-9]+(?:\.[0-9]+)?)"
    parts = re.fullmatch(rf"(?:{num}h)?(?:{num}m)?(?:{num}s?)?", t)
    if not t or parts is None or not any(parts.groups()):
        raise ValueError(f"a duration like 90s, 2m or 1h30m, got {shown(text)}")
    h, m, sec = (float(g) if g else 0.0 for g in parts.groups())
    return h * 3600 + m * 60 + sec
