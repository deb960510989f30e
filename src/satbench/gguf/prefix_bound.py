"""A lower bound, read off a GGUF's vocabulary, on how many tokens a text takes.

Whatever llama.cpp's tokenizer does with a text (merges, pre-tokenizer splits, byte fallback), the
tokens it emits, decoded, spell the text out: they are a cover of the text by vocabulary pieces.
So the fewest pieces that can cover the text (a dynamic program over its positions), plus one when
the tokenizer adds a BOS token, is a sound lower bound on the real count: if even that leaves no
room in a prompt, the prompt does not fit, and that is known before any server starts.

The text is first written as the vocabulary spells it: SentencePiece ("llama") writes a space as
"▁" (and may put one in front: both ways are tried, the smaller count kept); GPT-2 BPE ("gpt2")
maps each byte to a printable character (a space is "Ġ"; printable ASCII is itself). Other
tokenizer models give no bound (None), nor does a text with a character no piece covers alone
(an unknown-token could then stand for several characters). Positions given as a set of
characters (a run's random nonce) are matched by any of them: the bound holds for every choice.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from satbench.errors import ModelError
from satbench.gguf.files import _GGUF_ARRAY, _GGUF_SCALARS, _GGUF_STRING, _Header, key_count

SPM_SPACE = "\u2581"
GPT2_SPACE = "\u0120"
_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.add_bos_token")
_TOKENS_KEY = "tokenizer.ggml.tokens"
MAX_PIECE_CHARS = 256  # the longest text bounded (a prefix is ~110 at most); longer pieces cannot cover it
MAX_VOCAB_TOKENS = 4_000_000

Pattern = list[frozenset[str]]  # the characters allowed at each position of a text


@dataclass(frozen=True)
class Vocabulary:
    """What the bound needs of a GGUF tokenizer: its model, whether it adds BOS, its pieces."""

    model: str
    add_bos: bool
    pieces: frozenset[str]


def read_vocabulary(path: Path) -> Vocabulary | None:
    """The tokenizer of a GGUF file, or None when it has none (ModelError when it cannot be read).
    Pieces longer than MAX_PIECE_CHARS are skipped unread."""
    try:
        with open(path, "rb") as fh:
            h = _Header(fh, os.fstat(fh.fileno()).st_size)
            found: dict[str, object] = {}
            pieces: set[str] | None = None
            for _ in range(key_count(h)):
                key, vtype = h.string(), h.unpack("I")
                if key in _KEYS and vtype == _GGUF_STRING:
                    found[key] = h.string()
                elif key in _KEYS and vtype in _GGUF_SCALARS:
                    found[key] = h.unpack(_GGUF_SCALARS[vtype])
                elif key == _TOKENS_KEY and vtype == _GGUF_ARRAY:
                    pieces = _read_pieces(h)
                else:
                    h.skip_value(vtype)
                if pieces is not None and all(k in found for k in _KEYS):
                    break
    except (OSError, ValueError, EOFError, struct.error) as exc:
        raise ModelError(f"cannot read the vocabulary of GGUF {path} ({exc})") from exc
    model = found.get("tokenizer.ggml.model")
    if pieces is None or not isinstance(model, str):
        return None
    return Vocabulary(model=model, add_bos=found.get("tokenizer.ggml.add_bos_token") is True,
                      pieces=frozenset(pieces))


def _read_pieces(h: _Header) -> set[str] | None:
    etype, count = h.unpack("I"), h.unpack("Q")
    if etype != _GGUF_STRING or count > MAX_VOCAB_TOKENS:
        raise ValueError(f"{_TOKENS_KEY} is not a list of at most {MAX_VOCAB_TOKENS:,} strings")
    out: set[str] = set()
    for _ in range(count):
        n = h.unpack("Q")
        if n > 4 * MAX_PIECE_CHARS:
            h.skip(n)
            continue
        out.add(h.take(n).decode("utf-8", errors="replace"))
    return out


def _byte_piece(piece: str) -> str | None:
    """SentencePiece's byte-fallback piece "<0x41>" → "A" (printable ASCII only; None otherwise)."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            b = int(piece[3:5], 16)
        except ValueError:
            return None
        return chr(b) if 0x20 <= b < 0x7F else None
    return None


@lru_cache(maxsize=4)
def _with_bytes(pieces: frozenset[str]) -> frozenset[str]:
    """SentencePiece pieces and the characters its byte-fallback pieces stand for."""
    return pieces | {c for p in pieces if p.startswith("<0x") and (c := _byte_piece(p)) is not None}


def _spelled(pattern: Pattern, space: str) -> Pattern:
    return [frozenset(space if c == " " else c for c in chars) for chars in pattern]


@lru_cache(maxsize=16)
def _usable(pieces: frozenset[str], alphabet: frozenset[str], longest: int) -> dict[str, tuple[str, ...]]:
    """The pieces spelled in `alphabet` and at most `longest` long, by their first character."""
    by_first: dict[str, list[str]] = {}
    for p in pieces:
        if 0 < len(p) <= longest and set(p) <= alphabet:
            by_first.setdefault(p[0], []).append(p)
    return {c: tuple(ps) for c, ps in by_first.items()}


def min_cover(pattern: Pattern, pieces: frozenset[str]) -> int | None:
    """The fewest pieces whose concatenation matches `pattern` (each position one of its characters),
    or None when some allowed character is covered by no single piece, or the pattern is longer than
    MAX_PIECE_CHARS."""
    alphabet = frozenset().union(*pattern) if pattern else frozenset()
    if len(pattern) > MAX_PIECE_CHARS or any(c not in pieces for c in alphabet):
        return None  # too long: pieces past MAX_PIECE_CHARS were not read
    usable = _usable(pieces, alphabet, len(pattern))
    n = len(pattern)
    best = [0] + [n + 1] * n
    for i in range(n):
        for first in pattern[i]:
            for p in usable.get(first, ()):
                j = i + len(p)
                if j <= n and best[i] + 1 < best[j] and all(c in pattern[i + k] for k, c in enumerate(p)):
                    best[j] = best[i] + 1
    return best[n] if best[n] <= n else None


def min_tokens(pattern: Pattern, vocab: Vocabulary) -> int | None:
    """A lower bound on the tokens llama.cpp makes of a text matching `pattern` with special tokens
    added (BOS when the vocabulary says so), or None when no sound bound is known for this tokenizer."""
    if vocab.model == "llama":
        pieces = _with_bytes(vocab.pieces)
        spelled = _spelled(pattern, SPM_SPACE)
        counts = [min_cover(spelled, pieces), min_cover([frozenset(SPM_SPACE)] + spelled, pieces)]
    elif vocab.model == "gpt2":
        if any(not (c == " " or 0x21 <= ord(c) < 0x7F) for chars in pattern for c in chars):
            return None  # beyond printable ASCII the byte map is not the identity
        counts = [min_cover(_spelled(pattern, GPT2_SPACE), vocab.pieces)]
    else:
        return None
    if any(c is None for c in counts):
        return None
    return min(c for c in counts if c is not None) + (1 if vocab.add_bos else 0)


def pattern_of(text: str, wildcards: dict[str, frozenset[str]] | None = None) -> Pattern:
    """`text` as a pattern, where each occurrence of a key of `wildcards` (a placeholder string) stands
    for as many positions, each any character of its set."""
    out: Pattern = []
    i = 0
    keys = sorted(wildcards or {}, key=len, reverse=True)
    while i < len(text):
        key = next((k for k in keys if k and text.startswith(k, i)), None)
        if key is not None:
            out.extend([wildcards[key]] * len(key))  # type: ignore[index]
            i += len(key)
        else:
            out.append(frozenset(text[i]))
            i += 1
    return out
