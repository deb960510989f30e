"""The synthetic models' SentencePiece vocabulary: specials, 256 byte tokens, ASCII pieces.

Every piece after the byte tokens is printable ASCII (``▁`` stands for a space, as in any
SentencePiece vocabulary), so whatever a random model generates decodes to valid UTF-8 as long
as the byte tokens that are not printable ASCII are never generated: those, with ``<unk>`` and
``<s>``, are :func:`suppressed_token_ids`. The byte tokens still exist, so llama.cpp tokenizes
any text through byte fallback.

The first 1,024 tokens are the default vocabulary: common English words (with their prefixes,
so merges reach them), letters, digits, ASCII punctuation and letter pairs. Larger vocabularies
(up to :data:`MAX_VOCAB`, e.g. 128,256 like Llama 3) continue with numbers and pseudo-words of
one and two syllables, each bare, after a space and capitalised, so piece lengths look like a
real tokenizer's (1 to 13 characters, 8 on average at 128k). The same size always gives the
same table.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from itertools import chain, islice

import gguf

from satbench.errors import ModelError

N_VOCAB = 1024
MIN_VOCAB = 512
MAX_VOCAB = 262_144
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
BYTE_BASE = 3  # token id of <0x00>
N_FIXED = BYTE_BASE + 256  # specials and byte tokens come before the pieces
_SPACE = "\u2581"
_WORDS = (
    "the of and to in is it that for on with as was he be at by this had not are but from or"
    " have an they which one you were her all she there would their we him been has when who"
    " will more"
    " no if out so said what up its about into than them can only other new some could"
    " time these two may then do first any my now such like our over even most made after"
).split()
_ONSETS = "b c d f g h j k l m n p r s t v w y z ch sh th tr st br pl gr".split()
_VOWELS = "a e i o u ai ea ou".split()
_CODAS = ["", "n", "r", "s", "t", "l", "nd", "ng"]
_STRIDE = 1_000_003  # coprime with the number of syllable pairs: a fixed, spread-out order


def _word_pieces() -> Iterator[str]:
    """The default pieces, most useful first (only the first 765 fit in 1,024 tokens)."""
    yield _SPACE
    for word in _WORDS:
        for end in range(1, len(word) + 1):  # prefixes keep whole words reachable by merges
            yield _SPACE + word[:end]
    alnum = [chr(c) for c in range(0x61, 0x7B)] + [chr(c) for c in range(0x30, 0x3A)]
    yield from (_SPACE + c for c in alnum)
    yield from (chr(c) for c in range(0x21, 0x7F))
    yield from (a + b for a in alnum[:26] for b in alnum[:26])


def _large_pieces() -> Iterator[str]:
    """Numbers, then syllables and syllable pairs, each bare, spaced and capitalised."""
    for n in range(10, 1000):
        yield str(n)
        yield _SPACE + str(n)
    syllables = [o + v + c for o in _ONSETS for v in _VOWELS for c in _CODAS]
    n_syl = len(syllables)
    words = chain(
        syllables,
        (syllables[j // n_syl] + syllables[j % n_syl]
         for j in (i * _STRIDE % n_syl**2 for i in range(n_syl**2))),
    )
    for word in words:
        yield word
        yield _SPACE + word
        yield _SPACE + word.capitalize()


@lru_cache(maxsize=8)
def _pieces(n: int) -> tuple[str, ...]:
    """The first ``n`` distinct pieces."""
    return tuple(islice(_unique(chain(_word_pieces(), _large_pieces())), n))


def _unique(pieces: Iterator[str]) -> Iterator[str]:
    seen: set[str] = set()
    for piece in pieces:
        if piece not in seen:
            seen.add(piece)
            yield piece


def build_vocab(n_vocab: int = N_VOCAB) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types of the SentencePiece vocabulary of ``n_vocab`` tokens."""
    if not MIN_VOCAB <= n_vocab <= MAX_VOCAB:
        raise ModelError(f"synthetic vocabulary must be {MIN_VOCAB:,} to {MAX_VOCAB:,} tokens, "
                         f"got {n_vocab}")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    words = _pieces(n_vocab - N_FIXED)
    scores = [0.0] * len(tokens) + [-float(i) for i in range(len(words))]
    tokens += words
    types += [gguf.TokenType.NORMAL] * len(words)
    return tokens, scores, [int(t) for t in types]


def suppressed_token_ids() -> list[int]:
    """Tokens random output must never produce: unk, bos, and bytes that are not printable ASCII."""
    printable = set(range(0x20, 0x7F)) | {0x09, 0x0A}
    return [UNK_ID, BOS_ID] + [BYTE_BASE + b for b in range(256) if b not in printable]


def add_tokenizer(w: gguf.GGUFWriter, n_vocab: int = N_VOCAB) -> None:
    """The ``tokenizer.ggml.*`` keys: SentencePiece ("llama") model, BOS added, no EOS."""
    tokens, scores, types = build_vocab(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(UNK_ID)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
