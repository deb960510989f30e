"""The chat workload (`WorkloadConfig.chat`): seeded synthetic conversations, each held by one user.

A conversation of T turns is T requests to the chat endpoint. Turn k sends, in order: the system
prompt (`system_prompt_tokens` long, the same text for every conversation of the run), then for each
earlier turn its user message and an answer, then turn k's new user message; the server's own chat
template builds the prompt from these messages. Each request asks for the prompt cache
(`cache_prompt`), as a chat client does.

What is seeded and what is not:
- Every user message starts with its request's unique prefix (`MessageSource.prefix`), so
  conversations share nothing after the system prompt, and no run shares a prompt with another (the
  request id starts with the run's nonce, and so does the system prompt).
- Message and answer lengths are `Lengths.of(phase, repetition, seq)` of the turn's position
  `seq = conversation × T + turn − 1`: the lane's fixed lengths, or its seeded draws. The same seed
  and nonce build the same conversations, byte for byte.
- The answer a later turn resends is filler text of the length that turn's answer asked for, not the
  text the server generated: the conversations are then the same whatever the server answered. The
  server's cache holds the answer it generated, so its prefix match ends where the earlier turn's
  prompt ended; a client that resends the generated answer could reuse up to that answer's tokens
  more (docs/workloads.md#what-a-conversation-sends).

Only the measured phase holds whole conversations. Warmup and background requests are first turns
(the system prompt and one user message), since the load generator hands them to streams one by one.
"""

from __future__ import annotations

import math
from typing import Literal, Protocol

from satbench.config.workload import WorkloadConfig
from satbench.http.client import ChatMessage, CompletionRequest
from satbench.workload.lengths import Lengths

Phase = Literal["warmup", "measured", "background"]  # a request's part of its level


class MessageSource(Protocol):
    """What conversations are built from (workload.builder.WorkloadBuilder is the one): the lane's
    workload, the run's nonce, its seeded lengths, request ids and their prefixes, and message text."""

    cfg: WorkloadConfig

    @property
    def nonce(self) -> str: ...

    @property
    def lengths(self) -> Lengths: ...

    def request_id(self, lane: str, level: int, repetition: int, phase: Phase, seq: int) -> str: ...

    def prefix(self, request_id: str) -> str: ...

    async def text(self, prefix_text: str, n_tokens: int, grow: bool = False) -> tuple[str, int]: ...


def conversation_count(requests: int, turns: int) -> int:
    """Conversations a level's measured phase holds: ⌈requests ÷ turns⌉ (its last one whole)."""
    return math.ceil(requests / turns)


async def system_message(builder: MessageSource) -> ChatMessage | None:
    """The system prompt every conversation of the run starts with: "[NONCE system] " and filler text,
    `system_prompt_tokens` long; None when the workload has none."""
    n = builder.cfg.system_prompt_tokens
    if not n:
        return None
    text, _ = await builder.text(f"[{builder.nonce} system] ", n, grow=True)
    return ChatMessage(role="system", content=text)


async def conversations(builder: MessageSource, lane: str, level: int, repetition: int, phase: Phase,
                        count: int) -> list[CompletionRequest]:
    """The requests of one level repetition and phase: for "measured", `conversation_count(count, T)`
    whole conversations, each its turns in order (turn 1 first), so ⌈count ÷ T⌉ × T requests; for
    the other phases `count` first turns. Turn k > 1 carries the conversation's think time."""
    chat = builder.cfg.chat
    assert chat is not None
    turns = chat.turns if phase == "measured" else 1
    system = await system_message(builder)
    n_system = builder.cfg.system_prompt_tokens if system is not None else 0
    out: list[CompletionRequest] = []
    for conversation in range(conversation_count(count, turns) if turns > 1 else count):
        history: list[ChatMessage] = [system] if system is not None else []
        sent = n_system  # content tokens of the history so far, asked for
        for turn in range(1, turns + 1):
            seq = conversation * turns + turn - 1
            rid = builder.request_id(lane, level, repetition, phase, seq)
            n_user, n_out = builder.lengths.of(phase, repetition, seq)
            text, n_user = await builder.text(builder.prefix(rid), n_user)
            history.append(ChatMessage(role="user", content=text))
            sent += n_user
            out.append(CompletionRequest(
                request_id=rid, prompt=text, prompt_tokens=sent, max_tokens=n_out, cache_prompt=True,
                messages=tuple(history), conversation=conversation, turn=turn,
                think_s=chat.think_s if turn > 1 else 0.0))
            answer, n_out = await builder.text("", n_out)
            history.append(ChatMessage(role="assistant", content=answer))
            sent += n_out
    return out
