"""The synthetic vocabulary: unique printable-ASCII pieces at any size, stable prefix, suppression."""

from __future__ import annotations

import gguf
import pytest

from satbench.errors import ModelError
from satbench.gguf.vocab import (
    BYTE_BASE,
    MAX_VOCAB,
    MIN_VOCAB,
    N_FIXED,
    N_VOCAB,
    build_vocab,
    suppressed_token_ids,
)

PRINTABLE = {chr(c) for c in range(0x20, 0x7F)}


@pytest.mark.parametrize("n_vocab", [MIN_VOCAB, N_VOCAB, 32_000, 102_400, 128_256, MAX_VOCAB])
def test_vocabulary_is_unique_printable_ascii(n_vocab: int) -> None:
    tokens, scores, types = build_vocab(n_vocab)
    assert len(tokens) == len(set(tokens)) == len(scores) == len(types) == n_vocab
    assert tokens[:BYTE_BASE] == ["<unk>", "<s>", "</s>"]
    assert tokens[BYTE_BASE:N_FIXED] == [f"<0x{b:02X}>" for b in range(256)]
    assert set(types[BYTE_BASE:N_FIXED]) == {gguf.TokenType.BYTE}
    assert set(types[N_FIXED:]) == {gguf.TokenType.NORMAL}
    pieces = tokens[N_FIXED:]
    assert all(p and set(p.replace("\u2581", " ")) <= PRINTABLE for p in pieces)
    assert all("\u2581" not in p[1:] for p in pieces)  # a space only ever leads a piece
    assert scores[N_FIXED:] == [-float(i) for i in range(len(pieces))]


def test_large_vocabulary_looks_like_a_real_one() -> None:
    tokens, _, _ = build_vocab(128_256)
    pieces = tokens[N_FIXED:]
    mean = sum(len(p) for p in pieces) / len(pieces)
    assert 5 < mean < 10 and max(len(p) for p in pieces) <= 13
    assert sum(p.startswith("\u2581") for p in pieces) > len(pieces) / 2
    assert {"\u2581the", "the", "\u2581The", "42", "\u2581999"} <= set(tokens)


def test_smaller_vocabularies_are_prefixes_of_larger_ones() -> None:
    big, big_scores, big_types = build_vocab(128_256)
    for n in (MIN_VOCAB, N_VOCAB, 32_000):
        tokens, scores, types = build_vocab(n)
        assert (tokens, scores, types) == (big[:n], big_scores[:n], big_types[:n])


def test_same_size_gives_the_same_table_and_fresh_lists() -> None:
    a, b = build_vocab(32_000), build_vocab(32_000)
    assert a == b
    a[0].append("x")
    assert len(build_vocab(32_000)[0]) == 32_000


@pytest.mark.parametrize("n_vocab", [MIN_VOCAB - 1, 0, MAX_VOCAB + 1])
def test_out_of_range_vocabulary_raises(n_vocab: int) -> None:
    with pytest.raises(ModelError, match="vocabulary"):
        build_vocab(n_vocab)


def test_suppressed_tokens_are_unk_bos_and_unprintable_bytes() -> None:
    bad = suppressed_token_ids()
    assert bad[:2] == [0, 1] and 2 not in bad  # EOS may be generated
    byte_values = {t - BYTE_BASE for t in bad[2:]}
    printable = set(range(0x20, 0x7F)) | {0x09, 0x0A}
    assert byte_values == set(range(256)) - printable
    assert max(bad) < N_FIXED  # the same ids at every vocabulary size
