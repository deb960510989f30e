"""Requests of a sweep: prompt and output lengths fixed or drawn per request (workload/lengths.py), a
unique prefix per request.

When the server can tokenize (llama.cpp's `/tokenize`), prompts are token-id lists of
exactly `prompt_tokens` ids: a unique text prefix (tokenized with BOS) followed by filler
tokens. Elsewhere the prompt is text of about `prompt_tokens` words and the real count
comes back in the server's `usage`.

For the chat endpoint (workload.endpoint "chat") the prompt is always text, the content of one
user message: where the server tokenizes, the unique prefix followed by the text of
`prompt_tokens` − (prefix tokens) filler tokens (llama.cpp's /detokenize), so the message is
about `prompt_tokens` tokens; the server's template adds its own, and `usage.prompt_tokens`
says how many it processed.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Awaitable, Callable

from satbench.config.schema import WorkloadConfig
from satbench.errors import UserError
from satbench.http.client import CompletionRequest
from satbench.workload.chat import Phase, conversations
from satbench.workload.lengths import Lengths

Tokenizer = Callable[[str, bool], Awaitable[list[int]]]  # (text, add_special) -> ids
Detokenizer = Callable[[list[int]], Awaitable[str]]  # ids -> text

FILLER_TEXT = (
    "The river ran past the old mill and under the stone bridge where the children of the "
    "village met each morning before school to trade stories about the weather, the harvest, "
    "the travelling market and the strange lights that some of them said they had seen above "
    "the hills during the long summer nights when nobody could sleep because of the heat. "
)


class WorkloadBuilder:
    """Builds the `CompletionRequest`s of every level; one instance per lane and run."""

    def __init__(self, cfg: WorkloadConfig, tokenizer: Tokenizer | None, run_nonce: str,
                 detokenizer: Detokenizer | None = None) -> None:
        self.cfg = cfg
        self._tokenize = tokenizer
        self._detokenize = detokenizer
        self._nonce = run_nonce
        self._filler: list[int] = []
        self._lengths = Lengths(cfg)
        self._filler_text: dict[int, str] = {}  # chat: the text of the first n filler tokens, by n

    def derive(self, cfg: WorkloadConfig, run_nonce: str) -> WorkloadBuilder:
        """A builder with other sizes that shares this one's tokenizer (the same server)."""
        return WorkloadBuilder(cfg, self._tokenize, run_nonce, self._detokenize)

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
        for text in longest_prefixes(self._nonce, lane, max_level, max_repetition):
            longest = max(longest, len(await self._tokenize(text, True)))
        check_prompt_room(self.cfg, longest)

    def request_id(self, lane: str, level: int, repetition: int, phase: Phase, seq: int) -> str:
        return request_id(self._nonce, lane, level, repetition, phase, seq)

    async def build(
        self, lane: str, level: int, repetition: int, phase: Phase, count: int
    ) -> list[CompletionRequest]:
        """`count` requests for one level repetition and phase, each with its own id and its lengths
        (`Lengths.of(phase, repetition, seq)`: the fixed ones, or its draw under the lane's seed); the
        chat workload's are conversations (workload/chat.py)."""
        if self.cfg.chat is not None:
            return await conversations(self, lane, level, repetition, phase, count)
        out = []
        for seq in range(count):
            rid = self.request_id(lane, level, repetition, phase, seq)
            out.append(await self._one(rid, *self._lengths.of(phase, repetition, seq)))
        return out

    async def build_open(self, lane: str, rate_index: int, repetition: int,
                         count: int) -> list[CompletionRequest]:
        """`count` requests of one open-loop rate (its 1-based position `rate_index`), in arrival order;
        drawn lengths are phase "open"'s, the same at every rate (the rates compare one workload)."""
        return [await self._one(open_request_id(self._nonce, lane, rate_index, repetition, seq),
                                *self._lengths.of("open", repetition, seq))
                for seq in range(count)]

    async def _one(self, request_id: str, n_prompt: int, n_out: int) -> CompletionRequest:
        return await self.one(request_id, n_prompt, n_out)

    async def one(self, request_id: str, n_prompt: int, n_out: int, grow: bool = False) -> CompletionRequest:
        """One request of exactly `n_prompt` prompt tokens (when the server tokenizes) and
        `n_out` output tokens, with the unique prefix `request_id`. With `grow`, a prompt too
        short for the prefix is lengthened to prefix + 8 tokens instead of refused. For the chat
        endpoint the prompt is text (`text`)."""
        if self._tokenize is not None and len(self._filler) < 1:
            raise UserError("WorkloadBuilder.prepare() must run before requests are built")
        prefix_text = "" if self.cfg.shared_prefix else prefix_of(request_id)
        prompt: str | list[int]
        if self.cfg.endpoint == "chat" or self._tokenize is None:
            prompt, n_prompt = await self.text(prefix_text, n_prompt, grow)
        else:
            prefix = await self._tokenize(prefix_text, True)
            n_prompt = _fitted(len(prefix), n_prompt, grow)
            prompt = prefix + _cycle(self._filler, n_prompt - len(prefix))
        return CompletionRequest(request_id=request_id, prompt=prompt, prompt_tokens=n_prompt,
                                 max_tokens=n_out, cache_prompt=self.cfg.shared_prefix)

    async def text(self, prefix_text: str, n_tokens: int, grow: bool = False) -> tuple[str, int]:
        """(text, its length asked for): `prefix_text` and the text of the first n_tokens − (prefix
        tokens, no BOS: a chat template adds its own) filler tokens, each length detokenized once; where
        the server does not tokenize, words (about a token each). With `grow`, as `one`."""
        if self._tokenize is None or self._detokenize is None:
            return prefix_text + _words(n_tokens - len(prefix_text.split())), n_tokens
        prefix = await self._tokenize(prefix_text, False) if prefix_text else []
        n_tokens = _fitted(len(prefix), n_tokens, grow)
        n = n_tokens - len(prefix)
        if n not in self._filler_text:
            self._filler_text[n] = await self._detokenize(_cycle(self._filler, n))
        return prefix_text + self._filler_text[n].lstrip(" "), n_tokens

    @property
    def lengths(self) -> Lengths:
        """Each request's (prompt, output) lengths under the lane's seed."""
        return self._lengths

    @property
    def nonce(self) -> str:
        return self._nonce

    @staticmethod
    def prefix(request_id: str) -> str:
        """The text a request's prompt starts with (`prefix_of`)."""
        return prefix_of(request_id)


def _fitted(n_prefix: int, n_prompt: int, grow: bool) -> int:
    """`n_prompt`, or (with `grow`) n_prefix + 8 when that is more; UserError when the prefix leaves
    no room for filler."""
    if grow and n_prefix + 8 > n_prompt:
        n_prompt = n_prefix + 8
    if n_prefix >= n_prompt:
        raise UserError(f"--prompt-tokens {n_prompt} is too small for the unique request prefix "
                        f"({n_prefix} tokens); use at least {n_prefix + 8}")
    return n_prompt


NONCE_BYTES = 3  # a run's nonce: this many random bytes, as hex (2 digits a byte), starts every request id
TOGETHER_SUFFIX = ".together"  # appended to the lane name in the ids of requests not run solo
BACKGROUND_POOL_PER_STREAM = 4  # together: background requests built per stream, reused round-robin


def new_nonce() -> str:
    """A run's nonce (NONCE_BYTES random bytes as hex): keeps its prompts apart from any other run's."""
    return secrets.token_hex(NONCE_BYTES)


def request_id(nonce: str, lane: str, level: int, repetition: int, phase: Phase, seq: int) -> str:
    """The id of one request of a run (and its unique prompt prefix, see `prefix_of`)."""
    return f"{nonce}-{lane}-n{level}-r{repetition}-{phase[0]}{seq}"


def open_request_id(nonce: str, lane: str, rate_index: int, repetition: int, seq: int) -> str:
    """The id of one open-loop request: "q" and the rate's position where a level has "n", and "o" for its
    phase letter, so no closed-loop id equals it; never longer than the longest closed-loop id of the
    lane while rate_index and seq stay below the prefix check's bounds (MAX_LEVELS_PER_LANE, 999,999)."""
    return f"{nonce}-{lane}-q{rate_index}-r{repetition}-o{seq}"


def prefix_of(rid: str) -> str:
    """The text a request's prompt starts with: its id, which makes every prompt unique."""
    return f"[{rid}] "


PHASES: tuple[Phase, ...] = ("warmup", "measured", "background")
LONGEST_SEQS = (999_999, 987_654, 100_000)  # background runs on as long as needed: bounded by 999,999


def longest_prefixes(nonce: str, lane: str, max_level: int, max_repetition: int) -> list[str]:
    """The prefixes of the longest request ids a lane can use, in every phase (a tokenizer splits
    digit strings unevenly, so several are tried); the prefix check measures the longest of them."""
    return [prefix_of(request_id(nonce, lane, max_level, max_repetition, phase, seq))
            for phase in PHASES for seq in LONGEST_SEQS]


def check_prefix_length(prompt_tokens: int, longest: int, where: str = "--prompt-tokens",
                        bound: bool = False) -> None:
    """UserError when `prompt_tokens` leaves no room after the longest prefix (`longest` tokens; with
    `bound`, a lower bound on that count, read off the model's vocabulary)."""
    if prompt_tokens <= longest:
        at_least = "at least " if bound else "up to "
        raise UserError(f"{where} {prompt_tokens} is too small for the unique request prefix "
                        f"({at_least}{longest} tokens in this run); use at least {longest + 8}")


def check_prompt_room(w: WorkloadConfig, longest: int, where: str = "--prompt-tokens",
                      bound: bool = False) -> None:
    """`check_prefix_length` for the shortest prompt `w` can draw (its fixed length, or the lowest of
    its distribution, which the UserError names)."""
    if w.prompt_lengths is None:
        check_prefix_length(w.prompt_tokens, longest, where, bound)
        return
    shortest = w.prompt_bounds()[0]
    if shortest <= longest:
        at_least = "at least " if bound else "up to "
        raise UserError(f"{where} {w.prompt_lengths.spec}: its shortest prompt, {shortest} tokens, is too "
                        f"small for the unique request prefix ({at_least}{longest} tokens in this run); "
                        f"make every prompt at least {longest + 8} tokens")


def _cycle(items: list, n: int) -> list:
    """The first `n` items of `items` repeated end to end."""
    return list(itertools.islice(itertools.cycle(items), n))


def _words(n: int) -> str:
    return " ".join(_cycle(FILLER_TEXT.split(), max(n, 1)))
