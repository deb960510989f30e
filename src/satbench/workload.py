"""Requests of a sweep: fixed prompt and output lengths, a unique prefix per request.

When the server can tokenize (llama.cpp's `/tokenize`), prompts are token-id lists of
exactly `prompt_tokens` ids: a unique text prefix (tokenized with BOS) followed by filler
tokens. Elsewhere the prompt is text of about `prompt_tokens` words and the real count
comes back in the server's `usage`.
"""

from __future__ import annotations

import itertools
from typing import Awaitable, Callable, Literal

from satbench.client import CompletionRequest
from satbench.config import WorkloadConfig
from satbench.errors import UserError

Tokenizer = Callable[[str, bool], Awaitable[list[int]]]  # (text, add_special) -> ids
Phase = Literal["warmup", "measured", "background"]

FILLER_TEXT = (
    "The river ran past the old mill and under the stone bridge where the children of the "
    "village met each morning before school to trade stories about the weather, the harvest, "
    "the travelling market and the strange lights that some of them said they had seen above "
    "the hills during the long summer nights when nobody could sleep because of the heat. "
)


class WorkloadBuilder:
    """Builds the `CompletionRequest`s of every level; one instance per lane and run."""

    def __init__(self, cfg: WorkloadConfig, tokenizer: Tokenizer | None, run_nonce: str) -> None:
        self.cfg = cfg
        self._tokenize = tokenizer
        self._nonce = run_nonce
        self._filler: list[int] = []

    def derive(self, cfg: WorkloadConfig, run_nonce: str) -> WorkloadBuilder:
        """A builder with other sizes that shares this one's tokenizer (the same server)."""
        return WorkloadBuilder(cfg, self._tokenize, run_nonce)

    @property
    def exact_prompt_length(self) -> bool:
        return self._tokenize is not None

    async def prepare(self) -> None:
        """Tokenize the filler once (no BOS), so every prompt is cut from the same tokens."""
        if self._tokenize is None:
            return
        text = FILLER_TEXT * (1 + self.cfg.prompt_tokens // 40)
        self._filler = await self._tokenize(text, False)
        if not self._filler:
            raise UserError("the server tokenized the filler text to zero tokens")

    async def check_prefix_fits(self, lane: str, max_level: int, max_repetition: int) -> None:
        """Refuse, before the lane runs, a prompt too short for the longest request id it can
        use: ids grow with the level, repetition and sequence number, so a check per request
        let a run fail midway (and every resume with it). Sequence numbers are bounded by
        999,999 (background requests of the together scenario run on as long as needed), and
        several digit strings are tried since a tokenizer splits them unevenly."""
        if self._tokenize is None or self.cfg.shared_prefix:
            return
        longest = 0
        for phase in ("warmup", "measured", "background"):
            for seq in (999_999, 987_654, 100_000):
                rid = self.request_id(lane, max_level, max_repetition, phase, seq)  # type: ignore[arg-type]
                longest = max(longest, len(await self._tokenize(f"[{rid}] ", True)))
        if self.cfg.prompt_tokens <= longest:
            raise UserError(f"--prompt-tokens {self.cfg.prompt_tokens} is too small for the unique request prefix "
                            f"(up to {longest} tokens in this run); use at least {longest + 8}")

    def request_id(self, lane: str, level: int, repetition: int, phase: Phase, seq: int) -> str:
        return f"{self._nonce}-{lane}-n{level}-r{repetition}-{phase[0]}{seq}"

    async def build(
        self, lane: str, level: int, repetition: int, phase: Phase, count: int
    ) -> list[CompletionRequest]:
        """`count` requests for one level repetition and phase, each with its own id."""
        out = []
        for seq in range(count):
            rid = self.request_id(lane, level, repetition, phase, seq)
            out.append(await self._one(rid))
        return out

    async def _one(self, request_id: str) -> CompletionRequest:
        return await self.one(request_id, self.cfg.prompt_tokens, self.cfg.output_tokens)

    async def one(self, request_id: str, n_prompt: int, n_out: int, grow: bool = False) -> CompletionRequest:
        """One request of exactly `n_prompt` prompt tokens (when the server tokenizes) and
        `n_out` output tokens, with the unique prefix `request_id`. With `grow`, a prompt too
        short for the prefix is lengthened to prefix + 8 tokens instead of refused."""
        if self._tokenize is not None and len(self._filler) < 1:
            raise UserError("WorkloadBuilder.prepare() must run before requests are built")
        prefix_text = "" if self.cfg.shared_prefix else f"[{request_id}] "
        if self._tokenize is None:
            prompt: str | list[int] = prefix_text + _words(n_prompt - len(prefix_text.split()))
        else:
            prefix = await self._tokenize(prefix_text, True)
            if grow and len(prefix) + 8 > n_prompt:
                n_prompt = len(prefix) + 8
            if len(prefix) >= n_prompt:
                raise UserError(
                    f"--prompt-tokens {n_prompt} is too small for the unique request prefix "
                    f"({len(prefix)} tokens); use at least {len(prefix) + 8}"
                )
            prompt = prefix + _cycle(self._filler, n_prompt - len(prefix))
        return CompletionRequest(
            request_id=request_id,
            prompt=prompt,
            prompt_tokens=n_prompt,
            max_tokens=n_out,
            cache_prompt=self.cfg.shared_prefix,
        )


def _cycle(items: list, n: int) -> list:
    """The first `n` items of `items` repeated end to end."""
    return list(itertools.islice(itertools.cycle(items), n))


def _words(n: int) -> str:
    return " ".join(_cycle(FILLER_TEXT.split(), max(n, 1)))
