"""The workload a figure was measured with, as recommendations.json, the capability report and a
LiteLLM export name it (`WorkloadProfile`, made once from a `WorkloadConfig` by `profile_of`).

A profile is a record: its kind (random, shared-prefix, chat, trace), the kind's canonical text
(`WorkloadConfig.kind_text`), the prompt and output lengths as a report writes them, and what makes
one conversation or trace another (turns, think time, system prompt; the trace's sha256 and speed).
`differs` names the first difference between two profiles in the traffic they send; the lengths are
described and compared only when asked (docs/definitions.md#not-compared).
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from satbench.config.strict import Strict
from satbench.config.workload import Sha256, SystemPromptTokens, WorkloadConfig, WorkloadKind


class WorkloadProfile(Strict):
    """What traffic a lane was measured with (or is configured for). Invariants: the chat fields are
    set exactly for kind chat, the trace fields exactly for kind trace; `text` is the kind's canonical
    text; the lengths are None only for a trace (its lines give each request's) or in a profile read
    from a file that did not record them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: WorkloadKind
    text: str = Field(min_length=1, description="random, shared-prefix, chat:TURNS[,think=S][,system=N] or "
                      "trace:SHA256_PREFIX[,speed=X] (WorkloadConfig.kind_text)")
    prompt_lengths: str | None = Field(description="each prompt's (chat: each user message's) length in "
                                       "tokens: the integer or the distribution's text (null: a trace, "
                                       "whose lines give them, or not recorded)")
    output_lengths: str | None = Field(description="each request's output tokens: the integer or the "
                                       "distribution's text (null: a trace, or not recorded)")
    chat_turns: int | None = Field(None, ge=1, description="chat: turns per conversation")
    chat_think_s: float | None = Field(None, ge=0.0, description="chat: seconds a user waits between an "
                                       "answer and its next turn")
    system_prompt_tokens: SystemPromptTokens | None = Field(None, description="chat: the shared system "
                                                            "prompt's length, tokens (0: none)")
    trace_sha256: Sha256 | None = Field(None, description="trace: the trace file's sha256")
    trace_speed: float | None = Field(None, gt=0.0, description="trace: its recorded times divided by this")

    @model_validator(mode="after")
    def _fields_follow_kind(self) -> WorkloadProfile:
        for kind, names in (("chat", ("chat_turns", "chat_think_s", "system_prompt_tokens")),
                            ("trace", ("trace_sha256", "trace_speed"))):
            if {getattr(self, name) is not None for name in names} != {self.kind == kind}:
                raise ValueError(f"{', '.join(names)} belong to a {kind} profile, and it needs each")
        return self

    def described(self) -> str:
        """The profile in a sentence: its text, with the prompt and output lengths where recorded
        ("chat:4,think=2 (prompt 64, output 32 tokens)")."""
        if self.prompt_lengths is None or self.output_lengths is None:
            return self.text
        return f"{self.text} (prompt {self.prompt_lengths}, output {self.output_lengths} tokens)"

    def differs(self, other: WorkloadProfile, lengths: bool = False) -> str | None:
        """The first difference between this profile and `other` in words ("chat turns 4, not 8"),
        None when they send the same kind of traffic: the kind, then a chat's turns, think time and
        system prompt, or a trace's file (sha256) and speed. With `lengths`, then the prompt and output
        lengths, where both profiles recorded them."""
        pairs: list[tuple[str, object, object]] = [
            ("kind", self.kind, other.kind),
            ("chat turns", self.chat_turns, other.chat_turns),
            ("chat think time (s)", self.chat_think_s, other.chat_think_s),
            ("system prompt tokens", self.system_prompt_tokens, other.system_prompt_tokens),
            ("trace file sha256", self.trace_sha256, other.trace_sha256),
            ("trace speed", self.trace_speed, other.trace_speed)]
        if lengths:
            pairs += [(what, mine, theirs) for what, mine, theirs in (
                ("prompt lengths", self.prompt_lengths, other.prompt_lengths),
                ("output lengths", self.output_lengths, other.output_lengths))
                if mine is not None and theirs is not None]
        return next((f"{what} {_shown(mine)}, not {_shown(theirs)}" for what, mine, theirs in pairs
                     if mine != theirs), None)


def _shown(value: object) -> str:
    """A profile value in a sentence: a sha256 by its first 12 hex digits, a float as %g."""
    if isinstance(value, str) and len(value) == 64:
        return value[:12]
    return f"{value:g}" if isinstance(value, float) else str(value)


def profile_of(workload: WorkloadConfig) -> WorkloadProfile:
    """The profile of a lane's workload (its kind: `WorkloadConfig.kind`)."""
    prompt, output = (None, None) if workload.trace is not None else workload.length_texts()
    chat, trace = workload.chat, workload.trace
    return WorkloadProfile(
        kind=workload.kind, text=workload.kind_text, prompt_lengths=prompt, output_lengths=output,
        chat_turns=None if chat is None else chat.turns, chat_think_s=None if chat is None else chat.think_s,
        system_prompt_tokens=None if chat is None else workload.system_prompt_tokens,
        trace_sha256=None if trace is None else trace.sha256,
        trace_speed=None if trace is None else trace.speed)


# recommendations before schema 1.15 did not record it: every run then sent random or shared-prefix
# prompts, and the file alone cannot tell which (its run's results.json can: `satbench recommend`)
NOT_RECORDED = WorkloadProfile(kind="random", text="random", prompt_lengths=None, output_lengths=None)
