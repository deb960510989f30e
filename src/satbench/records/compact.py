"""Requests read back from events.jsonl, held small: a run's analysis keeps every request in memory.

A request validated as a pydantic record takes ~7.8 KB (measured on the committed bundle: 36 chunks a
request). Most of it is not the data: a set of the 28 field names each record was given (2.3 KB, the
same set for every line satbench wrote), a tuple and two ints per chunk (~90 bytes a pair), and a new
copy of the lane, scenario and phase names per line. A read avoids these without changing a value it
reads back as: the chunks are validated as a `Chunks` (16 bytes a pair), the names are interned
(`intern_names`) and `compact` gives the record its class's shared field set. ~2 KB a request remains.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from pydantic import BaseModel

NAMES = ("kind", "lane", "scenario", "phase", "check", "role")  # fields whose values repeat across lines


class Chunks(Sequence[tuple[int, int]]):
    """A request's [t_ns, tokens] pairs in one typed array. Read-only; it iterates, indexes and
    compares as the list of (int, int) tuples it holds."""

    __slots__ = ("_flat",)

    def __init__(self, pairs: Iterable[tuple[int, int]]) -> None:
        flat = array("q")
        for t, n in pairs:
            flat.append(t)
            flat.append(n)
        self._flat = flat

    def __len__(self) -> int:
        return len(self._flat) // 2

    def __iter__(self) -> Iterator[tuple[int, int]]:
        it = iter(self._flat)
        return zip(it, it, strict=True)

    @overload
    def __getitem__(self, i: int) -> tuple[int, int]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[int, int]]: ...

    def __getitem__(self, i: int | slice) -> tuple[int, int] | list[tuple[int, int]]:
        if isinstance(i, slice):
            return list(self)[i]
        k = range(len(self))[i] * 2  # IndexError as a list's
        return self._flat[k], self._flat[k + 1]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == [tuple(p) for p in other]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # unhashable, like the list it stands for

    def __repr__(self) -> str:
        return f"Chunks({list(self)!r})"

    def tokens_within(self, lo: int, hi: int) -> bool:
        """Whether every pair's token count lies in lo..hi (its stamps are int64 by construction)."""
        tokens = self._flat[1::2]
        return not tokens or (lo <= min(tokens) and max(tokens) <= hi)


def _share_fields_set(model: BaseModel, shared: dict[type, set[str]]) -> None:
    """Give `model` the one set of its class's field names when it was given them all."""
    every = shared.setdefault(type(model), set(type(model).model_fields))
    if model.__pydantic_fields_set__ == every:
        object.__setattr__(model, "__pydantic_fields_set__", every)


_SHARED: dict[type, set[str]] = {}


def intern_names(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (a line's JSON object) with its repeating names (NAMES) interned."""
    for key in NAMES:
        if type(v := data.get(key)) is str:
            data[key] = sys.intern(v)
    return data


def compact(record: BaseModel) -> None:
    """Give a validated record, and the records in it, the one shared set of field names of its
    class (see the module): pydantic's bookkeeping, no field changes."""
    for value in record.__dict__.values():
        if isinstance(value, BaseModel):
            _share_fields_set(value, _SHARED)
    _share_fields_set(record, _SHARED)
