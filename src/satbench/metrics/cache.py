"""Prompt-cache figures of a level (docs/definitions.md#prompt-cache), from llama.cpp's own count
of each request's prompt: `timings.cache_n` (tokens taken from the cache) and `timings.prompt_n`
(tokens evaluated anew), so the server's prompt = cache_n + prompt_n.

The figures read the successful measured requests whose timings carry both counts ("timed"
requests). A level with none (a server that is not llama.cpp, or one that gave no timings) has no
cache figures (None), never zeros. The hit ratio is taken per repetition and combined as the
throughput figures are (mean over repetitions, metrics/specs.py); every other figure here pools
the repetitions' requests.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from satbench.metrics import latency
from satbench.metrics.stats import Estimate, percentile, percentile_of
from satbench.records.events import RequestEvent
from satbench.records.record import Record

HISTORY_FOUND = 0.9
"""A returning turn found its history when the cache gave it at least this share of the previous
turn's prompt. A turn whose conversation is still in its slot gets all of that prompt back (the
chat workload resends it verbatim, and the prefix match ends where the earlier answer begins), but
not always to the token: llama.cpp restores a model with a sliding window or recurrent state from
its last checkpoint, and a chat template may re-tokenise the boundary. 90 % leaves room for that,
while a conversation whose slot went to another holds on to the shared system prompt at most, far
less unless the system prompt is nearly all of the first turn's prompt."""


class CacheFigures(Record):
    """A level's prompt-cache figures (tokens are the server's counts; shares are 0..1)."""

    requests: int = Field(description="timed requests: successful, measured, with cache_n and prompt_n")
    cache_hit_ratio: Estimate = Field(description="Σ cache_n ÷ Σ (cache_n + prompt_n) of each "
                                      "repetition's timed requests, mean over repetitions")
    cache_hit_ratio_p50: float | None = Field(description="median over timed requests of cache_n ÷ "
                                              "(cache_n + prompt_n); None when every prompt was empty")
    cached_prompt_tokens_p50: float = Field(description="median cache_n")
    new_prompt_tokens_p50: float = Field(description="median prompt_n")
    ttft_cache_hit_p50_ms: float | None = Field(description="median TTFT of timed requests with cache_n > 0")
    ttft_cache_miss_p50_ms: float | None = Field(description="median TTFT of timed requests with "
                                                 "cache_n = 0")
    prefill_ms_per_new_token: float | None = Field(description="Σ prompt_ms ÷ Σ prompt_n over the timed "
                                                   "requests with prompt_ms")
    returning_turns: int = Field(description="timed turns ≥ 2 whose previous turn is timed too: "
                                 "the count history_found_rate is a share of")
    history_found_rate: float | None = Field(description="share of returning_turns with cache_n ≥ "
                                             "HISTORY_FOUND × the previous turn's prompt; None without one")
    ttft_history_found_p50_ms: float | None = Field(
        None, description="median TTFT of the returning turns that found their history; None without one")
    ttft_history_lost_p50_ms: float | None = Field(
        None, description="median TTFT of the returning turns that did not; None without one")

    @property
    def in_play(self) -> bool:
        """Whether the cache had anything to do: a request took tokens from it, or a conversation came
        back. The level table shows the cache column only then (results.json and results.csv always
        carry the figures)."""
        return bool(self.returning_turns) or bool(self.cache_hit_ratio.value)


def timed(events: Sequence[RequestEvent]) -> list[RequestEvent]:
    """The successful measured requests whose timings give both cache_n and prompt_n."""
    return [e for e in events if e.phase == "measured" and e.ok and e.timings is not None
            and e.timings.cache_n is not None and e.timings.prompt_n is not None]


def _cache_n(e: RequestEvent) -> int:
    assert e.timings is not None and e.timings.cache_n is not None
    return e.timings.cache_n


def _prompt_n(e: RequestEvent) -> int:
    assert e.timings is not None and e.timings.prompt_n is not None
    return e.timings.prompt_n


def server_prompt(e: RequestEvent) -> int:
    """The prompt as the server counted it: cache_n + prompt_n (a timed request)."""
    return _cache_n(e) + _prompt_n(e)


def hit_ratio(events: Sequence[RequestEvent]) -> float | None:
    """Cache hit ratio = Σ cache_n ÷ Σ (cache_n + prompt_n) over the timed requests; None without one
    (or when every prompt was empty)."""
    reqs = timed(events)
    total = sum(server_prompt(e) for e in reqs)
    return sum(_cache_n(e) for e in reqs) / total if total else None


def _previous_turns(reqs: list[RequestEvent]) -> list[tuple[RequestEvent, RequestEvent]]:
    """(turn k, turn k − 1) of the same conversation (same lane, scenario, repetition, phase, stream
    and conversation number), for every timed turn k ≥ 2 whose previous turn is timed too."""
    def key(e: RequestEvent, turn: int) -> tuple:
        return e.lane, e.scenario, e.repetition, e.phase, e.stream, e.conversation, turn
    by_turn = {key(e, e.turn): e for e in reqs if e.conversation is not None and e.turn is not None}
    return [(e, prev) for e in reqs if e.conversation is not None and e.turn is not None and e.turn >= 2
            if (prev := by_turn.get(key(e, e.turn - 1))) is not None]


def history_found(turn: RequestEvent, previous: RequestEvent) -> bool:
    """Whether a returning turn found its history: cache_n ≥ HISTORY_FOUND × (cache_n + prompt_n of the
    previous turn)."""
    return _cache_n(turn) >= HISTORY_FOUND * server_prompt(previous)


def cache_figures(events: Sequence[RequestEvent], hit: Estimate) -> CacheFigures | None:
    """The prompt-cache figures of a level's events (all its repetitions), `hit` its cache hit ratio
    over repetitions (`hit_ratio` of each); None without a timed request."""
    reqs = timed(events)
    if not reqs:
        return None
    per_request = [_cache_n(e) / server_prompt(e) for e in reqs if server_prompt(e)]
    ttft = [(_cache_n(e) > 0, v) for e in reqs if (v := latency.ttft_ms(e)) is not None]
    prefill = [(e.timings.prompt_ms, _prompt_n(e)) for e in reqs
               if e.timings is not None and e.timings.prompt_ms is not None]
    prefill_n = sum(n for _, n in prefill)
    returning = [(history_found(t, p), latency.ttft_ms(t)) for t, p in _previous_turns(reqs)]
    found_ms = [v for found, v in returning if found and v is not None]
    lost_ms = [v for found, v in returning if not found and v is not None]
    return CacheFigures(
        requests=len(reqs), cache_hit_ratio=hit, cache_hit_ratio_p50=percentile_of(per_request, 50),
        cached_prompt_tokens_p50=percentile([_cache_n(e) for e in reqs], 50),
        new_prompt_tokens_p50=percentile([_prompt_n(e) for e in reqs], 50),
        ttft_cache_hit_p50_ms=percentile_of([v for hit_, v in ttft if hit_], 50),
        ttft_cache_miss_p50_ms=percentile_of([v for hit_, v in ttft if not hit_], 50),
        prefill_ms_per_new_token=sum(ms for ms, _ in prefill) / prefill_n if prefill_n else None,
        returning_turns=len(returning),
        history_found_rate=sum(found for found, _ in returning) / len(returning) if returning else None,
        ttft_history_found_p50_ms=percentile_of(found_ms, 50),
        ttft_history_lost_p50_ms=percentile_of(lost_ms, 50),
    )
