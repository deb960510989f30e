"""The prefix bound's fast paths (the token array read in blocks, pieces filtered by one regex scan of
the whole vocabulary, pieces indexed by their first two characters) give exactly what the
straightforward reading and search give, on small vocabularies built to reach their corners."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from satbench.errors import ModelError
from satbench.gguf import prefix_bound as pb
from satbench.gguf.files import _GGUF_STRING, _Header, key_count
from satbench.gguf.vocab import build_vocab

# ------------------------------------------------------------- the straightforward versions


def _reference_read(path: Path) -> set[str]:
    """The token array's pieces, one length and one piece at a time through _Header."""
    with open(path, "rb") as fh:
        h = _Header(fh, os.fstat(fh.fileno()).st_size)
        for _ in range(key_count(h)):
            key, vtype = h.string(), h.unpack("I")
            if key != pb._TOKENS_KEY:
                h.skip_value(vtype)
                continue
            assert h.unpack("I") == _GGUF_STRING
            out = set()
            for _ in range(h.unpack("Q")):
                n = h.unpack("Q")
                if n > 4 * pb.MAX_PIECE_CHARS:
                    h.skip(n)
                    continue
                out.add(h.take(n).decode("utf-8", errors="replace"))
            return out
    raise AssertionError("no token array")


def _reference_cover(pattern: pb.Pattern, pieces: frozenset[str]) -> int | None:
    """min_cover by trying every piece that starts with an allowed character at every position."""
    alphabet = frozenset().union(*pattern) if pattern else frozenset()
    if len(pattern) > pb.MAX_PIECE_CHARS or any(c not in pieces for c in alphabet):
        return None
    n = len(pattern)
    usable = [p for p in pieces if 0 < len(p) <= n and set(p) <= alphabet]
    best = [0] + [n + 1] * n
    for i in range(n):
        for p in usable:
            j = i + len(p)
            if j <= n and best[i] + 1 < best[j] and all(c in pattern[i + k] for k, c in enumerate(p)):
                best[j] = best[i] + 1
    return best[n] if best[n] <= n else None


def _reference_with_bytes(pieces: frozenset[str]) -> frozenset[str]:
    return pieces | {c for p in pieces if p.startswith("<0x") and (c := pb._byte_piece(p)) is not None}


# ------------------------------------------------------------- reading the token array


def _gguf(path: Path, pieces: list[bytes], order: str) -> Path:
    """A GGUF v3 header: a key before the tokens, the tokens, an array and the BOS flag after them."""
    def s(b: bytes) -> bytes:
        return struct.pack(order + "Q", len(b)) + b

    kv = [s(b"general.alignment") + struct.pack(order + "II", 4, 32),
          s(b"tokenizer.ggml.model") + struct.pack(order + "I", 8) + s(b"llama"),
          s(b"tokenizer.ggml.tokens") + struct.pack(order + "IIQ", 9, 8, len(pieces))
          + b"".join(s(p) for p in pieces),
          s(b"tokenizer.ggml.scores") + struct.pack(order + "IIQ3f", 9, 6, 3, 0, 1, 2),
          s(b"tokenizer.ggml.add_bos_token") + struct.pack(order + "I?", 7, True)]
    path.write_bytes(b"GGUF" + struct.pack(order + "IQQ", 3, 0, len(kv)) + b"".join(kv))
    return path


def _odd_pieces(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    fixed = [b"", b"a", b"\xff\xfe", "\u00e9".encode(), b"\xe2\x96", b"x" * (4 * pb.MAX_PIECE_CHARS),
             b"y" * (4 * pb.MAX_PIECE_CHARS + 1), b"<0x41>", "\u2581the".encode(), b"z" * 5000]
    rand = [bytes(rng.randrange(256) for _ in range(rng.randrange(60))) for _ in range(400)]
    return fixed[:5] + rand[:200] + fixed[5:] + rand[200:]


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("block", [16, 1 << 20])
def test_the_token_array_read_in_blocks_is_the_one_read_piece_by_piece(tmp_path, monkeypatch, order, block):
    """Blocks of 16 bytes (the reader takes at least one longest piece's worth) make pieces and their
    lengths straddle block ends; a piece longer than 4 × MAX_PIECE_CHARS bytes is left out."""
    monkeypatch.setattr(pb, "_BLOCK", block)
    path = _gguf(tmp_path / "v.gguf", _odd_pieces(7), order)
    vocab = pb.read_vocabulary(path)
    assert vocab is not None and vocab.model == "llama" and vocab.add_bos  # the keys after the tokens
    assert set(vocab.pieces) == _reference_read(path)
    assert "x" * (4 * pb.MAX_PIECE_CHARS) in vocab.pieces and "\ufffd\ufffd" in vocab.pieces
    assert not any(p.startswith("y") and len(p) > 4 * pb.MAX_PIECE_CHARS for p in vocab.pieces)


@pytest.mark.parametrize("cut", [1, 5, 9, 1500])
def test_a_token_array_cut_short_is_a_model_error(tmp_path, monkeypatch, cut):
    monkeypatch.setattr(pb, "_BLOCK", 16)
    path = _gguf(tmp_path / "v.gguf", _odd_pieces(3), "<")
    data = path.read_bytes()
    end = data.index(b"tokenizer.ggml.scores") - 8
    path.write_bytes(data[:end - cut])
    with pytest.raises(ModelError, match="the file ends inside its header"):
        pb.read_vocabulary(path)


# ------------------------------------------------------------- the fewest pieces

_CHARS = "ab-]^\\[.*x\u2581\n"


def _vocabulary(rng: random.Random, extra: str = "") -> frozenset[str]:
    words = {"".join(rng.choice(_CHARS) for _ in range(rng.randint(2, 6))) for _ in range(300)}
    return frozenset(words | set(_CHARS[:-1]) | set(extra) | {"", "<0x41>", "<0x7E>", "<0x0A>", "<0x4G>"})


def _patterns(rng: random.Random) -> list[pb.Pattern]:
    def position() -> frozenset[str]:
        return frozenset(rng.sample(_CHARS + "A~Z", rng.choice([1, 1, 1, 2, 4])))

    return [[position() for _ in range(rng.randrange(25))] for _ in range(150)]


@pytest.mark.parametrize("extra", ["", pb._SEPARATORS], ids=["joined", "no-separator-left"])
def test_the_fewest_pieces_are_those_of_the_straightforward_search(extra):
    """Pieces with the characters a regex class escapes; with `extra` every character _joined could put
    between pieces is a piece, so the scan is made piece by piece instead: the same answers."""
    rng = random.Random(11)
    pieces = _vocabulary(rng, extra)
    assert (pb._joined(pieces) is None) == bool(extra)
    spelled = pb._with_bytes(pieces)
    assert spelled == _reference_with_bytes(pieces) and {"A", "~"} <= spelled
    assert ("\n" in spelled) == bool(extra)  # "<0x0A>" stands for no character: not printable
    answers = [(pb.min_cover(p, spelled), _reference_cover(p, spelled)) for p in _patterns(rng)]
    assert all(fast == slow for fast, slow in answers), [a for a in answers if a[0] != a[1]]
    assert {fast is None for fast, _ in answers} == {True, False}
    for alphabet in (frozenset("ab"), frozenset("]^\\-"), frozenset(_CHARS), frozenset()):
        assert pb._spelled_in(pieces, alphabet) == [p for p in pieces if p and set(p) <= alphabet]


def test_the_bound_on_the_synthetic_vocabulary_is_the_straightforward_one():
    """The built-in synthetic vocabulary and a run's prefixes, the nonce a hex wildcard."""
    tokens, _, _ = build_vocab()
    vocab = pb.Vocabulary(model="llama", add_bos=True, pieces=frozenset(tokens))
    hexes = {"\0" * 6: frozenset("0123456789abcdef")}
    for text in ("[\0\0\0\0\0\0-default-n8-r3-b999999] ", "[a3f09b-x-n1-r1-w1] ", "\0\0\0\0\0\0\0\0\0\0\0\0"):
        pattern = pb._spelled(pb.pattern_of(text, hexes), pb.SPM_SPACE)
        spelled = pb._with_bytes(vocab.pieces)
        fast = [pb.min_cover(p, spelled) for p in (pattern, [frozenset(pb.SPM_SPACE)] + pattern)]
        assert fast == [_reference_cover(p, spelled) for p in (pattern, [frozenset(pb.SPM_SPACE)] + pattern)]
        assert min_ok(fast) + 1 == pb.min_tokens(pb.pattern_of(text, hexes), vocab)


def min_ok(counts: list[int | None]) -> int:
    known = [c for c in counts if c is not None]
    assert known
    return min(known)
