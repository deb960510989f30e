"""Every figure of a level, each defined once: name, unit, formula, inputs, how a level's
repetitions combine into it, and how it is shown (results.csv columns, the console table's cell,
`satbench compare`'s ratio).

results.csv (report/csvfile.py), the console and EVIDENCE.md level table (report/table.py),
compare's columns (report/compare.py), results.json's `definitions` (analysis/results.py) and the
table in docs/metrics.md are generated from LEVEL_METRICS, in its order; tests/metrics/test_specs.py
checks each spec's `path` against LevelResult and the docs table against `docs_table()`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from satbench.metrics.cache import HISTORY_FOUND
from satbench.metrics.stats import Estimate

Family = Literal["level", "throughput", "latency", "occupancy", "memory", "cache", "slo", "counts"]
Compare = Literal["mean", "p95"]

# the pieces of a figure a results.csv column can hold (`part_of`): "" is the figure itself (an
# Estimate's value); the rest name an Estimate's CI end, a Distribution's percentile, sample count or
# a percentile's CI end, a dict's sum, a list joined with " | "
Part = Literal["", "ci_low", "ci_high", "p50", "p95", "p99", "n", "p95_ci_low", "p95_ci_high", "total",
               "joined"]
# how the console table prints a figure (report/table.py LEVEL_CELLS): as an integer, an Estimate with
# its CI, "p50/p95" of a Distribution, its p50, a number to one decimal, bytes in MiB, a list's length,
# a share (an Estimate's value, or a number) as a percentage
Cell = Literal["int", "estimate", "p50/p95", "p50", "num1", "mib", "count", "pct"]


@dataclass(frozen=True)
class TableCell:
    """A figure's cell in the level table: its column's header (figures sharing a header share the
    cell, joined by "/"), how it prints, its decimals, whether it counts tokens (≈ when the server
    gave no count), and `when`: "" for a column every table has, else the path of a LevelResult truth
    (e.g. "cache.in_play") that must hold at one of the table's levels for the column to show."""

    header: str
    cell: Cell
    digits: int = 0
    approx: bool = False
    when: str = ""


@dataclass(frozen=True)
class MetricSpec:
    """One figure of a level (LevelResult)."""

    name: str                # its name: the field (and results.json `definitions` key, when `defined`)
    family: Family           # the step of summarize_level that computes it
    path: str                # where a LevelResult holds it, e.g. "latency.ttft_ms"
    unit: str
    formula: str             # what it is, from what
    inputs: str              # the records it is computed from
    aggregate: str           # how the level's repetitions combine into it
    csv: tuple[tuple[str, Part], ...] = ()  # its results.csv columns, in order: (header, part)
    table: TableCell | None = None
    label: str = ""          # short name in a column header: "TTFT"
    compare: Compare | None = None  # compare's ratio: of the mean over repetitions, or of the p95
    higher_is_better: bool = False
    defined: bool = False    # results.json `definitions` carries `formula` under `name`
    reads: tuple[str, ...] = ()  # other figures its formula uses

    @property
    def compare_name(self) -> str:
        """Its name in compare's output: "output_tok_per_s", "p95_ttft_ms"."""
        return self.name if self.compare == "mean" else f"p95_{self.name}"

    @property
    def compare_label(self) -> str:
        return self.label if self.compare == "mean" else f"p95 {self.label}"


def _estimate_csv(name: str, ci: bool = True) -> tuple[tuple[str, Part], ...]:
    ends: tuple[tuple[str, Part], ...] = ((f"{name}_ci_low", "ci_low"), (f"{name}_ci_high", "ci_high"))
    return ((name, ""),) + (ends if ci else ())


def _dist_csv(stem: str, parts: tuple[Part, ...], suffix: str = "_ms") -> tuple[tuple[str, Part], ...]:
    return tuple((f"{stem}_{p}{suffix}", p) for p in parts)


def _one(name: str, part: Part = "") -> tuple[tuple[str, Part], ...]:
    return ((name, part),)


_P95_CI: tuple[Part, ...] = ("p50", "p95", "p95_ci_low", "p95_ci_high", "p99")
_MEAN_T = "mean over repetitions, Student-t 95% CI floored at 0"
_POOLED = "pooled over the repetitions' windows; percentiles with order-statistic 95% CIs"
_WINDOW_MEAN = "mean over the repetitions with a steady window"
_REQUESTS = "request events (client stamps)"
_PROCESS = "process samples (10 Hz)"
_TIMED = "measured request events with the server's timings cache_n and prompt_n (llama.cpp)"
_POOLED_TIMED = "pooled over the repetitions' timed requests"
_POOLED_TURNS = "pooled over the repetitions' returning turns"
CACHE_CELL = TableCell("cache hit/found", "pct", when="cache.in_play")  # shown where the cache was in play
_THROUGHPUT_FORMULA = (
    "per stream from the start of a whole request to the window's end E: N / used * sum over streams of "
    "(sum over its measured requests sent in [A_s, E] of output tokens * share) / (E - A_s), A_s the send "
    "of the stream's first measured request that had not ended when the window opened, share = the part "
    "of the request's life (sent to end) elapsed by E (1 when it ended by E), over the used streams with "
    "such a request (a closed-loop stream does nothing else in that span, all under full load; a request "
    "stalled at E holds its stream down; all tokens in the window / its length overstates a server whose "
    "streams move in step)")

LEVEL_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("concurrency", "level", "concurrency", "streams", "N: the closed-loop streams of the level, "
               "each with one request in flight at a time", "the plan", "the level's setting",
               csv=_one("concurrency"), table=TableCell("N", "int")),
    MetricSpec("output_tok_per_s", "throughput", "throughput.output_tok_per_s", "tok/s", _THROUGHPUT_FORMULA,
               _REQUESTS, _MEAN_T, csv=_estimate_csv("output_tok_per_s"),
               table=TableCell("out tok/s", "estimate", 1, approx=True), label="out tok/s", compare="mean",
               higher_is_better=True, defined=True),
    MetricSpec("total_tok_per_s", "throughput", "throughput.total_tok_per_s", "tok/s",
               "as output_tok_per_s, counting each request's prompt (server's count: timings prompt_n + "
               "cache_n, else usage prompt_tokens, else the requested length; 0 when no token came) and "
               "output tokens", _REQUESTS, _MEAN_T, csv=_estimate_csv("total_tok_per_s", ci=False),
               defined=True, reads=("output_tok_per_s",)),
    MetricSpec("req_per_s", "throughput", "throughput.req_per_s", "req/s",
               "as output_tok_per_s, counting 1 per successful request (0 for a failed one)", _REQUESTS,
               _MEAN_T, csv=_estimate_csv("req_per_s"), table=TableCell("req/s", "estimate", 2),
               defined=True, reads=("output_tok_per_s",)),
    MetricSpec("ttft_ms", "latency", "latency.ttft_ms", "ms",
               "first chunk carrying >=1 generated token - sent_ns", _REQUESTS, _POOLED,
               csv=_dist_csv("ttft", _P95_CI), table=TableCell("TTFT p50/p95", "p50/p95", 0), label="TTFT",
               compare="p95", defined=True),
    MetricSpec("itl_ms", "latency", "latency.itl_ms", "ms",
               "gap between consecutive token-carrying chunks / tokens in the later chunk; pooled over "
               "requests", _REQUESTS, _POOLED, csv=_dist_csv("itl", ("p50", "p95", "p99")),
               table=TableCell("ITL p50/p95", "p50/p95", 1, approx=True), label="ITL", compare="p95",
               defined=True),
    MetricSpec("tpot_ms", "latency", "latency.tpot_ms", "ms",
               "(E2E - TTFT) / (output tokens - 1), per request", _REQUESTS, _POOLED,
               csv=_dist_csv("tpot", ("p50", "p95")), table=TableCell("TPOT p50", "p50", 1, approx=True),
               label="TPOT", defined=True),
    MetricSpec("e2e_ms", "latency", "latency.e2e_ms", "ms", "end_ns - sent_ns", _REQUESTS, _POOLED,
               csv=_dist_csv("e2e", _P95_CI), table=TableCell("E2E p50/p95", "p50/p95", 0), label="E2E",
               compare="p95", defined=True),
    MetricSpec("queue_time_ms", "latency", "latency.queue_time_ms", "ms",
               "estimate: max(0, TTFT - server prompt_ms - median loopback RTT); llama.cpp has no queue "
               "stamp", _REQUESTS + " and the server's timings", _POOLED,
               csv=_dist_csv("queue_time", ("p50", "p95"), "_ms_estimate"),
               table=TableCell("queue p50", "p50"), label="queue", defined=True),
    MetricSpec("slots", "occupancy", "occupancy.slots", "slots", "the server's slots (/props total_slots)",
               "/props", "the lane's setting", csv=_one("slots")),
    MetricSpec("time_weighted_busy_slots", "occupancy", "occupancy.time_weighted_busy_slots", "slots",
               "time-weighted mean over the window's covered time of busy slots from /slots (or "
               "requests_processing) readings; a reading holds until the next poll; one from before the "
               "window counts only if <= 2 poll intervals old; null when no reading inside the window "
               "succeeded", "/slots, else /metrics requests_processing", _WINDOW_MEAN,
               csv=_one("busy_slots_time_weighted"), table=TableCell("slots t/d/c", "num1"), defined=True),
    MetricSpec("time_weighted_source", "occupancy", "occupancy.time_weighted_source", "",
               "where time_weighted_busy_slots came from: slots, requests_processing (when /slots gave no "
               "reading in a repetition's window), or both joined by + when repetitions differed",
               "/slots, /metrics", "every repetition's source", defined=True,
               reads=("time_weighted_busy_slots",)),
    MetricSpec("decode_weighted_busy_slots", "occupancy", "occupancy.decode_weighted_busy_slots", "slots",
               "delta(n_busy_slots_per_decode * n_decode_total) / delta(n_decode_total) over the window",
               "/metrics", _WINDOW_MEAN, csv=_one("busy_slots_decode_weighted"),
               table=TableCell("slots t/d/c", "num1"), defined=True),
    MetricSpec("client_in_flight", "occupancy", "occupancy.client_in_flight", "requests",
               "time-weighted mean of requests between sent_ns and end_ns in the window", _REQUESTS,
               _WINDOW_MEAN, csv=_one("client_in_flight"), table=TableCell("slots t/d/c", "num1"),
               defined=True),
    MetricSpec("requests_deferred_max", "occupancy", "occupancy.requests_deferred_max", "requests",
               "the highest /metrics requests_deferred reading inside the windows", "/metrics",
               "max over the repetitions' windows", csv=_one("requests_deferred_max")),
    MetricSpec("peak_rss_bytes", "memory", "memory.peak_rss_bytes", "bytes",
               "the server process's highest resident set size", _PROCESS, "max over repetitions",
               csv=_one("peak_rss_bytes"), table=TableCell("RSS MiB", "mib")),
    MetricSpec("cache_hit_ratio", "cache", "cache.cache_hit_ratio", "share",
               "prompt tokens the server took from its prompt cache: sum of cache_n / sum of (cache_n + "
               "prompt_n) over a repetition's successful measured requests with both (timed requests)",
               _TIMED, _MEAN_T, csv=_estimate_csv("cache_hit_ratio"), table=CACHE_CELL, label="cache hit",
               compare="mean", higher_is_better=True, defined=True),
    MetricSpec("cache_hit_ratio_p50", "cache", "cache.cache_hit_ratio_p50", "share",
               "median over timed requests of cache_n / (cache_n + prompt_n)", _TIMED, _POOLED_TIMED,
               csv=_one("cache_hit_ratio_p50"), defined=True),
    MetricSpec("cached_prompt_tokens_p50", "cache", "cache.cached_prompt_tokens_p50", "tokens",
               "median cache_n of the timed requests", _TIMED, _POOLED_TIMED,
               csv=_one("cached_prompt_tokens_p50")),
    MetricSpec("new_prompt_tokens_p50", "cache", "cache.new_prompt_tokens_p50", "tokens",
               "median prompt_n (prompt tokens evaluated anew) of the timed requests", _TIMED, _POOLED_TIMED,
               csv=_one("new_prompt_tokens_p50")),
    MetricSpec("ttft_cache_hit_p50_ms", "cache", "cache.ttft_cache_hit_p50_ms", "ms",
               "median TTFT of the timed requests with cache_n > 0", _TIMED, _POOLED_TIMED,
               csv=_one("ttft_cache_hit_p50_ms"), defined=True),
    MetricSpec("ttft_cache_miss_p50_ms", "cache", "cache.ttft_cache_miss_p50_ms", "ms",
               "median TTFT of the timed requests with cache_n = 0", _TIMED, _POOLED_TIMED,
               csv=_one("ttft_cache_miss_p50_ms"), defined=True),
    MetricSpec("prefill_ms_per_new_token", "cache", "cache.prefill_ms_per_new_token", "ms/token",
               "sum of prompt_ms / sum of prompt_n over the timed requests with prompt_ms", _TIMED,
               _POOLED_TIMED, csv=_one("prefill_ms_per_new_token"), defined=True),
    MetricSpec("returning_turns", "cache", "cache.returning_turns", "requests",
               "timed conversation turns >= 2 whose previous turn (same stream, repetition, phase and "
               "conversation) is timed too", _TIMED + " of the chat workload", "sum over repetitions",
               csv=_one("returning_turns")),
    MetricSpec("history_found_rate", "cache", "cache.history_found_rate", "share",
               f"share of the returning turns with cache_n >= {HISTORY_FOUND} (metrics/cache.py "
               "HISTORY_FOUND) * the previous turn's cache_n + prompt_n; null without a returning turn",
               _TIMED + " of the chat workload", _POOLED_TURNS,
               csv=_one("history_found_rate"), table=CACHE_CELL, defined=True, reads=("returning_turns",)),
    MetricSpec("ttft_history_found_p50_ms", "cache", "cache.ttft_history_found_p50_ms", "ms",
               "median TTFT of the returning turns that found their history", _TIMED + " of the chat "
               "workload", _POOLED_TURNS, csv=_one("ttft_history_found_p50_ms"), defined=True),
    MetricSpec("ttft_history_lost_p50_ms", "cache", "cache.ttft_history_lost_p50_ms", "ms",
               "median TTFT of the returning turns that did not find their history", _TIMED + " of the chat "
               "workload", _POOLED_TURNS, csv=_one("ttft_history_lost_p50_ms"), defined=True),
    MetricSpec("peak_gpu_mem_bytes", "memory", "memory.peak_gpu_mem_bytes", "bytes",
               "the highest GPU memory used (NVML, all GPUs)", _PROCESS + " (NVML)", "max over repetitions",
               csv=_one("peak_gpu_mem_bytes")),
    MetricSpec("server_cpu_cores", "memory", "memory.server_cpu_cores", "cores",
               "delta(server process CPU seconds) / delta wall", _PROCESS, "mean over repetitions",
               csv=_one("server_cpu_cores")),
    MetricSpec("host_busy_cores", "memory", "memory.host_busy_cores", "cores",
               "whole machine: delta(total - idle - iowait CPU seconds) / delta wall, over the level's "
               "process samples", _PROCESS, "mean over repetitions", csv=_one("host_busy_cores"),
               defined=True),
    MetricSpec("client_cpu_cores", "memory", "memory.client_cpu_cores", "cores",
               "delta(satbench's own CPU seconds) / delta wall", _PROCESS, "mean over repetitions",
               csv=_one("client_cpu_cores")),
    MetricSpec("slo_attainment", "slo", "slo_attainment", "share",
               "window requests meeting both SLO targets / (window requests + failed requests ending in the "
               "window)", _REQUESTS, "pooled over the repetitions' windows", csv=_one("slo_attainment")),
    MetricSpec("goodput_req_per_s", "slo", "goodput_req_per_s", "req/s",
               "req_per_s * the share of window requests meeting both SLO targets", _REQUESTS,
               "pooled over the repetitions' windows", csv=_one("goodput_req_per_s"), reads=("req_per_s",)),
    MetricSpec("latency_samples", "counts", "latency.e2e_ms", "requests",
               "successful measured requests completing inside the steady windows (the latency sample)",
               _REQUESTS, "sum over repetitions", csv=_one("latency_samples", "n")),
    MetricSpec("requests_measured", "counts", "counts.requests_measured", "requests",
               "measured requests sent", _REQUESTS, "sum over repetitions", csv=_one("requests_measured")),
    MetricSpec("requests_ok", "counts", "counts.requests_ok", "requests", "measured requests that succeeded",
               _REQUESTS, "sum over repetitions", csv=_one("requests_ok")),
    MetricSpec("errors", "counts", "counts.errors_by_type", "requests",
               "measured requests that failed, every error type (satbench's own cancellations among them)",
               _REQUESTS, "sum over repetitions", csv=_one("errors", "total")),
    MetricSpec("retries", "counts", "counts.retries", "requests",
               "requests retried after a dropped connection", _REQUESTS, "sum over repetitions",
               csv=_one("retries")),
    MetricSpec("flags", "level", "flags", "", "the level's validity flags (metrics/flags.py), "
               "\"<kind>: <detail>\" each", "every figure above", "the level", csv=_one("flags", "joined"),
               table=TableCell("flags", "count")),
)

BY_NAME = {s.name: s for s in LEVEL_METRICS}
Columns = tuple[tuple[str, tuple[MetricSpec, ...]], ...]  # a level table's (header, figures in its cell)


def family(name: Family) -> tuple[MetricSpec, ...]:
    """The figures of one family, in LEVEL_METRICS order."""
    return tuple(s for s in LEVEL_METRICS if s.family == name)


def figure(obj: Any, path: str) -> Any:
    """The figure at `path` ("latency.ttft_ms") of a LevelResult; None where a part on the way is None
    (a level without cache figures has no "cache.cache_hit_ratio")."""
    for attr in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, attr)
    return obj


def part_of(value: object, part: Part) -> object:
    """One piece of a figure (see `Part`); None where the figure has none."""
    if value is None:
        return None
    if part == "":
        return value.value if isinstance(value, Estimate) else value
    if part == "total":
        return sum(value.values())  # type: ignore[attr-defined]
    if part == "joined":
        return " | ".join(value)  # type: ignore[arg-type]
    if part in ("p95_ci_low", "p95_ci_high"):
        ci = value.ci.get("p95")  # type: ignore[attr-defined]
        return None if ci is None else getattr(ci, part.removeprefix("p95_ci_"))
    return getattr(value, part)


def table_columns(levels: Iterable[Any] = ()) -> Columns:
    """The level table's columns for a table of `levels` (LevelResults): (header, the figures in its
    cell), in LEVEL_METRICS order; a column whose figures name a `when` only where that holds at one of
    them (so the table of a run without those figures is what it was before them)."""
    at = tuple(levels)
    shown = [(s, t) for s in LEVEL_METRICS if (t := s.table) is not None
             and (not t.when or any(figure(lv, t.when) for lv in at))]
    return tuple((header, tuple(s for s, t in shown if t.header == header))
                 for header in dict.fromkeys(t.header for _, t in shown))


def csv_columns() -> list[tuple[str, MetricSpec, Part]]:
    """results.csv's level columns, in order: (header, figure, part)."""
    return [(header, s, part) for s in LEVEL_METRICS for header, part in s.csv]


def definitions() -> dict[str, str]:
    """The figures' entries of results.json `definitions`."""
    return {s.name: s.formula for s in LEVEL_METRICS if s.defined}


def docs_table() -> str:
    """The figures as a Markdown table (docs/metrics.md holds it between its markers)."""
    rows = ["| figure | unit | results.json | results.csv | table | over repetitions | from | formula |",
            "|---|---|---|---|---|---|---|---|"]
    for s in LEVEL_METRICS:
        csv = ", ".join(f"`{h}`" for h, _ in s.csv) or "-"
        table = s.table.header if s.table else "-"
        rows.append(f"| `{s.name}` | {s.unit or '-'} | `{s.path}` | {csv} | {table} | {s.aggregate} | "
                    f"{s.inputs} | {s.formula.replace('|', '/')} |")
    return "\n".join(rows) + "\n"
