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
import re
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from satbench.errors import ModelError
from satbench.gguf.files import _BLOCK, _GGUF_ARRAY, _GGUF_SCALARS, _GGUF_STRING, _Header, key_count

SPM_SPACE = "\u2581"
GPT2_SPACE = "\u0120"
_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.add_bos_token")
_TOKENS_KEY = "tokenizer.ggml.tokens"
MAX_PIECE_CHARS = 256  # the longest text bounded (a prefix is ~110 at most); longer pieces cannot cover it
MAX_VOCAB_TOKENS = 4_000_000
# what _joined may put between pieces: the first that no piece contains
_SEPARATORS = "".join(map(chr, (*range(0x20), 0xFFFE, 0xFFFF)))

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
            pieces: frozenset[str] | None = None
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


def _read_pieces(h: _Header) -> frozenset[str]:
    """The token array's strings, from `h` at its element type, leaving `h` just past the array. Read in
    blocks of _BLOCK bytes (a piece is sliced out of its block, never read on its own); a piece longer
    than 4 × MAX_PIECE_CHARS bytes is skipped unread; bytes that are not UTF-8 decode as U+FFFD. EOFError
    when the array runs past the end of the file."""
    etype, count = h.unpack("I"), h.unpack("Q")
    if etype != _GGUF_STRING or count > MAX_VOCAB_TOKENS:
        raise ValueError(f"{_TOKENS_KEY} is not a list of at most {MAX_VOCAB_TOKENS:,} strings")
    fh, size, length = h.fh, h.size, struct.Struct(h.order + "Q").unpack_from
    longest = 4 * MAX_PIECE_CHARS
    out: list[str] = []
    pos = start = fh.tell()  # pos: the next length field; start: where `buf` begins in the file
    buf = b""
    for _ in range(count):
        at = pos - start
        if at + 8 > len(buf):
            fh.seek(pos)
            start, at, buf = pos, 0, fh.read(max(_BLOCK, 8 + longest))
            if len(buf) < 8:
                raise EOFError("the file ends inside its header")
        n = length(buf, at)[0]
        end = pos + 8 + n
        if end > size:
            raise EOFError("the file ends inside its header")
        if n <= longest:
            if end - start > len(buf):  # the piece runs past its block: a new block starts at it
                fh.seek(pos)
                start, at, buf = pos, 0, fh.read(max(_BLOCK, 8 + longest))
                if 8 + n > len(buf):
                    raise EOFError("the file ends inside its header")
            out.append(buf[at + 8:at + 8 + n].decode("utf-8", errors="replace"))
        pos = end
    fh.seek(pos)
    return frozenset(out)


def _byte_piece(piece: str) -> str | None:
    """SentencePiece's byte-fallback piece "<0x41>" → "A" (printable ASCII only; None otherwise)."""
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        try:
            b = int(piece[3:5], 16)
        except ValueError:
            return None
        return chr(b) if 0x20 <= b < 0x7F else None
    return None


@lru_cache(maxsize=2)
def _joined(pieces: frozenset[str]) -> tuple[str, str] | None:
    """(sep, the pieces in the frozenset's order, each between two `sep`s): the whole vocabulary as one
    string, for scans in C (re) instead of a Python loop over its pieces. `sep` is the first character of
    _SEPARATORS that no piece contains (so no match can span two pieces); None when each one is in some
    piece."""
    for sep in _SEPARATORS:
        text = f"{sep}{sep.join(pieces)}{sep}"
        if text.count(sep) == len(pieces) + 1:  # no piece contains it
            return sep, text
    return None


def _spelled_in(pieces: frozenset[str], alphabet: frozenset[str]) -> list[str]:
    """The nonempty pieces all of whose characters are in `alphabet`, in the frozenset's order."""
    if not alphabet:
        return []
    joined = _joined(pieces)
    if joined is None or joined[0] in alphabet:
        return [p for p in pieces if p and set(p) <= alphabet]
    sep = re.escape(joined[0])
    chars = "".join(re.escape(c) for c in sorted(alphabet))
    return re.findall(f"{sep}([{chars}]+)(?={sep})", joined[1])


@lru_cache(maxsize=4)
def _with_bytes(pieces: frozenset[str]) -> frozenset[str]:
    """SentencePiece pieces and the characters its byte-fallback pieces stand for."""
    joined = _joined(pieces)
    if joined is None:
        named = [p for p in pieces if p.startswith("<0x")]
    else:  # exactly the pieces of 6 characters that start with "<0x" and end with ">"
        sep = re.escape(joined[0])
        named = re.findall(f"{sep}(<0x[^{sep}]{{2}}>)(?={sep})", joined[1])
    return pieces | {c for p in named if (c := _byte_piece(p)) is not None}


def _spelled(pattern: Pattern, space: str) -> Pattern:
    return [frozenset(space if c == " " else c for c in chars) for chars in pattern]


@lru_cache(maxsize=16)
def _usable(pieces: frozenset[str], alphabet: frozenset[str], longest: int) -> dict[str, tuple[str, ...]]:
    """The pieces spelled in `alphabet` and at most `longest` long, by their first two characters (a
    piece of one character by itself), each group shortest first."""
    by_head: dict[str, list[str]] = {}
    for p in _spelled_in(pieces, alphabet):
        if len(p) <= longest:
            by_head.setdefault(p[:2], []).append(p)
    return {head: tuple(sorted(ps, key=len)) for head, ps in by_head.items()}


def min_cover(pattern: Pattern, pieces: frozenset[str]) -> int | None:
    """The fewest pieces whose concatenation matches `pattern` (each position one of its characters),
    or None when some allowed character is covered by no single piece, or the pattern is longer than
    MAX_PIECE_CHARS. A dynamic program over the positions: best[j] = min over the pieces p that match
    the pattern at i = j − len(p) of best[i] + 1, best[0] = 0."""
    alphabet = frozenset().union(*pattern) if pattern else frozenset()
    if len(pattern) > MAX_PIECE_CHARS or any(c not in pieces for c in alphabet):
        return None  # too long: pieces past MAX_PIECE_CHARS were not read
    usable = _usable(pieces, alphabet, len(pattern))
    n = len(pattern)
    best = [0] + [n + 1] * n
    for i in range(n):
        step = best[i] + 1
        for first in pattern[i]:
            if first in usable and step < best[i + 1]:
                best[i + 1] = step
            for second in pattern[i + 1] if i + 1 < n else ():
                for p in usable.get(first + second, ()):
                    j = i + len(p)
                    if j > n:
                        break  # the rest of the group is longer still
                    if step < best[j] and all(p[k] in pattern[i + k] for k in range(2, len(p))):
                        best[j] = step
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
