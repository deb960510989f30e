"""What every request of a lane looks like (`WorkloadConfig`): its prompt and output lengths, fixed or
drawn from a distribution (`LengthDistribution`, drawn by workload/lengths.py), the seed of every
random draw, the prompt cache and the endpoint. config/schema.py composes it into a lane.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from satbench.config.ranges import Flag, OutputTokens, PromptTokens, Seed
from satbench.config.strict import Strict

DEFAULT_PROMPT_TOKENS = 64
DEFAULT_OUTPUT_TOKENS = 32

LengthKind = Literal["normal", "uniform", "jsonl"]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class LengthDistribution(Strict):
    """Per-request lengths in tokens, drawn from a distribution (workload/lengths.py parses the text
    and draws each request's length): `min_tokens` ≤ every draw ≤ `max_tokens`."""

    spec: str = Field(min_length=1, description="canonical text: normal:MEAN,SD, uniform:LO-HI or "
                      "jsonl:PATH")
    kind: LengthKind
    min_tokens: int = Field(ge=1, description="the shortest length a request can get (normal: its clip)")
    max_tokens: int = Field(ge=1, description="the longest length a request can get (normal: its clip)")
    mean_tokens: float = Field(ge=1, description="normal: MEAN; uniform: (LO + HI) / 2; jsonl: the "
                               "file's mean")
    sd_tokens: float | None = Field(None, ge=0, description="normal: SD")
    sha256: Sha256 | None = Field(None, description="jsonl: the file's sha256")
    count: int | None = Field(None, ge=1, description="jsonl: lengths in the file")

    @model_validator(mode="after")
    def _consistent(self) -> LengthDistribution:
        if self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens {self.min_tokens} > max_tokens {self.max_tokens}")
        if (self.kind == "jsonl") != (self.sha256 is not None and self.count is not None):
            raise ValueError("sha256 and count belong to a jsonl distribution, and it needs both")
        if (self.kind == "normal") != (self.sd_tokens is not None):
            raise ValueError("sd_tokens belongs to a normal distribution, and it needs one")
        return self


def _unset(value: object) -> bool:
    """A length field at its default (fixed lengths, seed 0): left out of run.json and results.json,
    which then read as before lengths could be drawn."""
    return value is None or value == 0


EndpointKind = Literal["completions", "chat"]
CHAT_TEMPLATE_TOKENS = 64  # context allowed per slot for a chat template's own tokens (endpoint chat)


class WorkloadConfig(Strict):
    """What every request of a sweep looks like. Each length is fixed (`prompt_tokens`,
    `output_tokens`) or drawn per request from `prompt_lengths` / `output_lengths` under `seed`;
    a drawn length's int field is then the distribution's mean, rounded (what the fairness checks'
    sizes start from), and `prompt_bounds` / `output_bounds` give the range the context and memory
    checks must hold."""

    prompt_tokens: PromptTokens = DEFAULT_PROMPT_TOKENS
    output_tokens: OutputTokens = DEFAULT_OUTPUT_TOKENS
    shared_prefix: Flag = Field(
        False, description="all requests share one prompt and may hit the prompt cache"
    )
    endpoint: EndpointKind = Field(
        "completions", exclude_if=lambda v: v == "completions",
        description="completions: raw prompts (/completion, /v1/completions); chat: "
        "/v1/chat/completions, a text prompt in one user message through the server's chat template")
    prompt_lengths: LengthDistribution | None = Field(
        None, exclude_if=_unset, description="each prompt's length drawn from this; None: prompt_tokens")
    output_lengths: LengthDistribution | None = Field(
        None, exclude_if=_unset, description="each request's max_tokens drawn from this; None: output_tokens")
    seed: Seed = Field(0, exclude_if=_unset, description="the seed of the drawn lengths "
                       "(workload/lengths.py) and of the open-loop arrivals (load/open_loop.py)")

    def prompt_bounds(self) -> tuple[int, int]:
        """(shortest, longest) prompt a request can get, tokens."""
        d = self.prompt_lengths
        return (self.prompt_tokens, self.prompt_tokens) if d is None else (d.min_tokens, d.max_tokens)

    def output_bounds(self) -> tuple[int, int]:
        """(fewest, most) output tokens a request can ask for."""
        d = self.output_lengths
        return (self.output_tokens, self.output_tokens) if d is None else (d.min_tokens, d.max_tokens)

    def length_texts(self) -> tuple[str, str]:
        """The prompt and output lengths as a report writes them: the integer, or the distribution's
        canonical text."""
        return (str(self.prompt_tokens) if self.prompt_lengths is None else self.prompt_lengths.spec,
                str(self.output_tokens) if self.output_lengths is None else self.output_lengths.spec)

    def longest_request(self) -> int:
        """The most context one request can need: longest prompt + most output tokens."""
        return self.prompt_bounds()[1] + self.output_bounds()[1]
