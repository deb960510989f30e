"""What every request of a lane looks like (`WorkloadConfig`): its prompt and output lengths, fixed or
drawn from a distribution (`LengthDistribution`, drawn by workload/lengths.py), the seed of every
random draw, the prompt cache and the endpoint. config/schema.py composes it into a lane.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from satbench.config.ranges import MAX_PROMPT_TOKENS, Flag, IntRange, OutputTokens, PromptTokens, Seed
from satbench.config.strict import Strict

DEFAULT_PROMPT_TOKENS = 64
DEFAULT_OUTPUT_TOKENS = 32

LengthKind = Literal["normal", "uniform", "jsonl"]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
SystemPromptTokens = Annotated[int, IntRange(0, MAX_PROMPT_TOKENS)]


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
WorkloadKind = Literal["random", "shared-prefix", "chat", "trace"]  # `WorkloadConfig.kind`
CHAT_TEMPLATE_TOKENS = 64  # context allowed per slot for a chat template's own tokens (endpoint chat)
CHAT_MESSAGE_TOKENS = 16  # chat workload: context allowed per message of a history for its template tokens
MAX_TURNS = 64  # turns of one conversation at most
MAX_THINK_S = 3600.0  # a user's think time between turns at most, seconds


class ChatWorkload(Strict):
    """Synthetic conversations (`--workload chat:TURNS[,think=SECONDS]`, workload/chat.py): each
    closed-loop stream is a user who holds a conversation of `turns` turns. Turn k sends the system
    prompt (`WorkloadConfig.system_prompt_tokens`, shared by every conversation), the k − 1 earlier
    user messages and answers, and a new user message, through the server's chat template; the user
    waits `think_s` after each answer, and starts a new conversation after the last turn."""

    turns: int = Field(ge=1, le=MAX_TURNS, description="turns per conversation")
    think_s: float = Field(0.0, ge=0.0, le=MAX_THINK_S, description="seconds a user waits between an "
                           "answer and its next turn")

    @property
    def spec(self) -> str:
        """The canonical text, as --workload takes it: chat:4 or chat:4,think=2."""
        return f"chat:{self.turns}" + (f",think={self.think_s:g}" if self.think_s else "")


def parse_workload(text: str) -> dict | None:
    """--workload's text as WorkloadConfig.chat's value: None for "random", else the fields of
    "chat:TURNS[,think=SECONDS]" (their ranges are ChatWorkload's). ValueError names what is wrong."""
    value = text.strip().lower()
    if value == "random":
        return None
    kind, _, rest = value.partition(":")
    if kind != "chat" or not rest:
        raise ValueError(f"{text!r}: expected random or chat:TURNS[,think=SECONDS], e.g. chat:4,think=2")
    turns, *options = rest.split(",")
    if not turns.strip().isdigit():
        raise ValueError(f"{text!r}: TURNS must be a whole number of turns, e.g. chat:4")
    out: dict = {"turns": int(turns)}
    for option in options:
        name, _, number = option.partition("=")
        if name.strip() != "think" or not number.strip():
            raise ValueError(f"{text!r}: the chat workload's one option is think=SECONDS")
        try:
            out["think_s"] = float(number)
        except ValueError:
            raise ValueError(f"{text!r}: think=SECONDS takes a number of seconds") from None
    return out


MAX_TRACE_SPEED = 1000.0  # a trace's times compressed at most this many times


class TraceWorkload(Strict):
    """A replayed trace (`--trace FILE`, Mooncake JSONL; workload/trace_file.py reads and checks it): each
    line's request is sent at its `timestamp` ÷ `speed`, with its `input_length` prompt tokens (equal
    `hash_ids` blocks give equal tokens) and `output_length` output tokens."""

    path: str = Field(min_length=1, description="the trace file, as given")
    sha256: Sha256 = Field(description="the trace file's sha256")
    requests: int = Field(ge=1, description="requests (lines) in the trace")
    duration_s: float = Field(ge=0.0, description="the last request's timestamp minus the first's, seconds")
    speed: float = Field(1.0, gt=0.0, le=MAX_TRACE_SPEED, description="--trace-speed: the recorded times "
                         "are divided by this")


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
    chat: ChatWorkload | None = Field(
        None, exclude_if=_unset, description="conversations (endpoint chat): prompt_tokens is then "
        "each user message's length, output_tokens each answer's; None: one independent prompt each")
    system_prompt_tokens: SystemPromptTokens = Field(
        0, exclude_if=_unset, description="chat: the length of the system prompt every conversation "
        "shares, tokens (0: none)")

    trace: TraceWorkload | None = Field(
        None, exclude_if=_unset, description="a replayed trace (open loop at its recorded times); None: "
        "the requests are built from prompt_tokens and output_tokens")

    @model_validator(mode="after")
    def _chat_shape(self) -> WorkloadConfig:
        if self.chat is None and self.system_prompt_tokens:
            raise ValueError("system_prompt_tokens belongs to the chat workload (--workload chat:TURNS)")
        if self.chat is not None and self.endpoint != "chat":
            raise ValueError("the chat workload sends conversations to the chat endpoint (endpoint chat)")
        if self.chat is not None and self.shared_prefix:
            raise ValueError("shared_prefix and the chat workload exclude each other: a conversation "
                             "shares its system prompt and its own history")
        return self

    @property
    def kind(self) -> WorkloadKind:
        """What kind of traffic this is: trace when it replays one, else chat when it holds
        conversations, else shared-prefix or random."""
        if self.trace is not None:
            return "trace"
        if self.chat is not None:
            return "chat"
        return "shared-prefix" if self.shared_prefix else "random"

    @property
    def kind_text(self) -> str:
        """The kind as reports and recommendations name it: random, shared-prefix, the chat workload's
        canonical text with its system prompt (chat:4,think=2,system=256), or trace: and the first 12
        hex digits of the trace's sha256 (with its speed when not 1)."""
        if self.trace is not None:
            return f"trace:{self.trace.sha256[:12]}" + (f",speed={self.trace.speed:g}"
                                                        if self.trace.speed != 1 else "")
        if self.chat is not None:
            return self.chat.spec + (f",system={self.system_prompt_tokens}" if self.system_prompt_tokens
                                     else "")
        return self.kind

    def message_bounds(self) -> tuple[int, int]:
        """(shortest, longest) prompt or user message a request can get, tokens."""
        d = self.prompt_lengths
        return (self.prompt_tokens, self.prompt_tokens) if d is None else (d.min_tokens, d.max_tokens)

    def prompt_bounds(self) -> tuple[int, int]:
        """(shortest, longest) prompt a request can get, tokens. The chat workload's longest is its last
        turn: the system prompt, every turn's longest user message, the longest answer of each earlier
        turn, and CHAT_MESSAGE_TOKENS per message for the template's own tokens."""
        lo, hi = self.message_bounds()
        if self.chat is None:
            return lo, hi
        turns, messages = self.chat.turns, 2 * self.chat.turns + (1 if self.system_prompt_tokens else 0)
        return lo, (self.system_prompt_tokens + turns * hi + (turns - 1) * self.output_bounds()[1]
                    + messages * CHAT_MESSAGE_TOKENS)

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
