"""The prompts of a replayed trace (`TracePrompts`; the file itself: workload/trace_file.py).

Block j of a request is BLOCK_TOKENS tokens, its marker (the text "[#HASH SCOPE] ", tokenized by the
server, with BOS for block 0) followed by filler ids; the prompt is its blocks end to end cut to
input_length. HASH comes first, so blocks of different hash ids differ within their first tokens;
SCOPE names the run's nonce, the lane and the pass, so an equal hash_id gives equal tokens inside one
pass only: equal hash_ids prefixes reach the server's prompt cache as equal token prefixes, and
nothing but a marker's first tokens is shared with another run, level or repetition.
Requests are sent with cache_prompt true. A server that does not tokenize (or the chat endpoint)
gets the same blocks as text, words for tokens.
"""

from __future__ import annotations

import itertools

from satbench.config.workload import WorkloadConfig
from satbench.errors import UserError
from satbench.http.client import CompletionRequest
from satbench.workload.builder import FILLER_TEXT, Phase, Tokenizer, open_request_id, request_id
from satbench.workload.trace_file import BLOCK_TOKENS, TraceRecord, load_trace, offsets_ns


def block_marker(scope: str, block: str) -> str:
    """The text a prompt block starts with: its hash id (or, for a block past a request's hash_ids, the
    request's own name for it) first, then its pass (`scope`)."""
    return f"[#{block} {scope}] "


class TracePrompts:
    """The requests of a trace lane, built from the trace's records (`load_trace`: its recorded sha256
    checked): the open-loop replay (`build_open`, every record once, in order) and the closed-loop
    levels (`build`, the records in order, cycled; each pass through them its own scope)."""

    def __init__(self, cfg: WorkloadConfig, tokenizer: Tokenizer | None, run_nonce: str) -> None:
        assert cfg.trace is not None
        self.trace = load_trace(cfg.trace)
        self.speed = cfg.trace.speed
        self._tokenize = None if cfg.endpoint == "chat" else tokenizer
        self._nonce = run_nonce
        self._filler: list[int] = []
        self._words = FILLER_TEXT.split()

    @property
    def offsets_ns(self) -> list[int]:
        """The replay's arrivals after the first, ns (`offsets_ns` at the lane's speed)."""
        return offsets_ns(self.trace.records, self.speed)

    async def prepare(self) -> None:
        """Tokenize the filler once (no BOS): every block's tokens after its marker are cut from it."""
        if self._tokenize is None:
            return
        self._filler = await self._tokenize(FILLER_TEXT * (1 + BLOCK_TOKENS // 40), False)
        if not self._filler:
            raise UserError("the server tokenized the filler text to zero tokens")

    async def build(self, lane: str, level: int, repetition: int, phase: Phase,
                    count: int) -> list[CompletionRequest]:
        """`count` requests of one level repetition and phase: request seq is record seq mod the trace's
        length, in the scope of its pass (seq ÷ the trace's length)."""
        records, out = self.trace.records, []
        blocks: dict[tuple[int, bool], list[int] | str] = {}
        for seq in range(count):
            n_pass, k = divmod(seq, len(records))
            if k == 0:
                blocks = {}
            scope = f"{self._nonce}-{lane}-n{level}-r{repetition}-{phase[0]}p{n_pass}"
            out.append(await self._one(request_id(self._nonce, lane, level, repetition, phase, seq),
                                       scope, records[k], blocks))
        return out

    async def build_open(self, lane: str, rate_index: int, repetition: int) -> list[CompletionRequest]:
        """The replay's requests, one per record, in arrival order."""
        blocks: dict[tuple[int, bool], list[int] | str] = {}
        scope = f"{self._nonce}-{lane}-q{rate_index}-r{repetition}-o"
        return [await self._one(open_request_id(self._nonce, lane, rate_index, repetition, seq), scope, r,
                                blocks) for seq, r in enumerate(self.trace.records)]

    async def _one(self, rid: str, scope: str, record: TraceRecord,
                   blocks: dict[tuple[int, bool], list[int] | str]) -> CompletionRequest:
        """One record's request: its blocks (each hash id's made once per scope, in `blocks`) end to end,
        cut to input_length; the blocks past its hash_ids named after the request."""
        n_blocks = -(-record.input_tokens // BLOCK_TOKENS)
        names = [*record.hash_ids, *(f"{rid}.{j}" for j in range(len(record.hash_ids), n_blocks))]
        parts = []
        for j, name in enumerate(names):
            key = (name, j == 0) if isinstance(name, int) else None
            part = blocks.get(key) if key is not None else None
            if part is None:
                part = await self._block(block_marker(scope, str(name)), j == 0)
                if key is not None:
                    blocks[key] = part
            parts.append(part)
        prompt: str | list[int]
        if self._tokenize is None:
            prompt = " ".join(list(itertools.chain.from_iterable(
                p.split() for p in parts if isinstance(p, str)))[:record.input_tokens])
        else:
            prompt = list(itertools.chain.from_iterable(p for p in parts if isinstance(p, list)))
            prompt = prompt[:record.input_tokens]
        return CompletionRequest(request_id=rid, prompt=prompt, prompt_tokens=record.input_tokens,
                                 max_tokens=record.output_tokens, cache_prompt=True)

    async def _block(self, marker: str, first: bool) -> list[int] | str:
        """One block of BLOCK_TOKENS: `marker`'s tokens (BOS first when `first`) and filler ids; text
        (marker and filler words, a word a token) where the server does not tokenize."""
        if self._tokenize is None:
            n = BLOCK_TOKENS - len(marker.split())
            return marker + " ".join(itertools.islice(itertools.cycle(self._words), n))
        if not self._filler:
            raise UserError("TracePrompts.prepare() must run before requests are built")
        ids = await self._tokenize(marker, first)
        if len(ids) >= BLOCK_TOKENS:
            raise UserError(f"a trace block's marker {marker.strip()!r} is {len(ids)} tokens, no room in a "
                            f"block of {BLOCK_TOKENS}")
        return ids + list(itertools.islice(itertools.cycle(self._filler), BLOCK_TOKENS - len(ids)))
