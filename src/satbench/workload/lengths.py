"""Request lengths given as a distribution: the text of --prompt-tokens / --output-tokens (and the lane
keys prompt_tokens / output_tokens), and each request's draw.

The forms, for a prompt or an output length (`what`):

- `512` (an integer): every request gets it; no distribution (the behaviour and records of before).
- `normal:MEAN,SD`: round(N(MEAN, SD)) clipped to [max(FLOOR, round(MEAN - 3·SD)),
  min(CAP, round(MEAN + 3·SD))]; FLOOR ≤ MEAN ≤ CAP, SD ≥ 0 (numbers, such as 512 or 96.5).
- `uniform:LO-HI`: an integer from LO to HI inclusive, each equally likely; FLOOR ≤ LO ≤ HI ≤ CAP.
- `jsonl:PATH`: a file of one length per line, each an integer or a JSON object whose "prompt_tokens"
  key (for a prompt; "output_tokens" for an output) holds one; blank lines are skipped; every length
  from FLOOR to CAP; at most MAX_LENGTHS_LINES lines and MAX_LENGTHS_FILE_BYTES. A request gets the
  length of one line chosen uniformly at random (with replacement). PATH is read relative to the
  working directory; its sha256 and count are recorded, and a changed file is refused on --resume.

FLOOR and CAP are the fixed length's own range (config/ranges: a prompt 8 to MAX_PROMPT_TOKENS, an
output 2 to MAX_OUTPUT_TOKENS); a prompt must besides leave room for the unique request prefix, which
the lane's start checks against the shortest prompt a distribution can draw (`min_tokens`).

The seed rule: a request's length depends on the lane's seed (--seed, default 0) and the request's
(phase, repetition, sequence number) only, never on the run's nonce, the lane, the level or the clock:

    normal, uniform: random.Random(f"{seed}:{what}:{phase}:{repetition}:{seq}")
    jsonl line:      random.Random(f"{seed}:jsonl:{phase}:{repetition}:{seq}").randrange(count)

(Python seeds a Random from a str through its sha512, the same on every platform and version.) So the
same seed gives the same lengths on a rerun and on --resume, every level and lane of a run sends the
same lengths for the same request sequence (their figures compare like with like), and each repetition
draws afresh. A jsonl line is chosen without `what`: one file given to both flags keeps each line's
prompt and output together.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from satbench.config.limits import MAX_LENGTHS_FILE_BYTES, MAX_LENGTHS_LINES
from satbench.config.ranges import (
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_TOKENS,
    MIN_OUTPUT_TOKENS,
    MIN_PROMPT_TOKENS,
    shown,
)
from satbench.config.schema import LengthDistribution, WorkloadConfig
from satbench.errors import UserError

What = Literal["prompt", "output"]
FLOOR = {"prompt": MIN_PROMPT_TOKENS, "output": MIN_OUTPUT_TOKENS}  # the fixed lengths' own bounds
CAP = {"prompt": MAX_PROMPT_TOKENS, "output": MAX_OUTPUT_TOKENS}
KEY = {"prompt": "prompt_tokens", "output": "output_tokens"}  # a jsonl object's key
CLIP_SDS = 3.0  # a normal draw is clipped to MEAN ± this many SDs
FORMS = "an integer, normal:MEAN,SD, uniform:LO-HI or jsonl:PATH"
MAX_LENGTH_LINE_NESTING = 8  # a jsonl line is an integer or a flat object: deeper is refused unparsed

_NUMBER = r"[+-]?[0-9]+(?:\.[0-9]+)?"
_NORMAL = re.compile(rf"normal:\s*({_NUMBER})\s*,\s*({_NUMBER})")
_UNIFORM = re.compile(r"uniform:\s*([0-9]+)\s*-\s*([0-9]+)")


def parse_lengths(value: object, what: What) -> tuple[object, LengthDistribution | None]:
    """(the int field's value, the distribution) for a flag's text or a lane key's value: an integer (or
    its text) is returned as given, for the schema's range check, with no distribution; a distribution's
    int is its mean, rounded. ValueError, one line, for any other text or a range that does not fit."""
    if not isinstance(value, str):
        return value, None
    text = value.strip()
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text), None
    kind = text.partition(":")[0].strip().lower()
    if kind == "normal":
        dist = _normal(text, what)
    elif kind == "uniform":
        dist = _uniform(text, what)
    elif kind == "jsonl":
        dist = _jsonl(text.partition(":")[2].strip(), what)
    else:
        raise ValueError(f"expected {FORMS}, got {shown(value)}")
    return round(dist.mean_tokens), dist


def _bounds(what: What) -> str:
    return f"from {FLOOR[what]:,} to {CAP[what]:,}"


def _normal(text: str, what: What) -> LengthDistribution:
    m = _NORMAL.fullmatch(text.strip().lower())
    if m is None:
        parts = text.strip().partition(":")[2].split(",")
        if len(parts) != 2:
            raise ValueError(f"normal:MEAN,SD takes two numbers (normal:512,128), got {len(parts)} in "
                             f"{shown(text)}")
        for name, part in zip(("MEAN", "SD"), parts, strict=True):
            if not re.fullmatch(_NUMBER, part.strip()):
                raise ValueError(f"normal:MEAN,SD: the {name} {shown(part)} is not a decimal number such as "
                                 "512 or 12.5 (no exponent, nan or inf)")
        raise ValueError(f"expected normal:MEAN,SD with numbers (normal:512,128), got {shown(text)}")
    mean, sd = float(m[1]), float(m[2])
    if sd < 0:
        raise ValueError(f"normal:MEAN,SD: the SD must be at least 0, got {_num(sd)}")
    if not FLOOR[what] <= mean <= CAP[what]:
        raise ValueError(f"normal:MEAN,SD: the mean must be {_bounds(what)}, got {_num(mean)}")
    lo = max(FLOOR[what], round(mean - CLIP_SDS * sd))
    hi = min(CAP[what], round(mean + CLIP_SDS * sd))
    return LengthDistribution(spec=f"normal:{_num(mean)},{_num(sd)}", kind="normal", min_tokens=lo,
                              max_tokens=hi, mean_tokens=mean, sd_tokens=sd)


def _uniform(text: str, what: What) -> LengthDistribution:
    m = _UNIFORM.fullmatch(text.strip().lower())
    if m is None:
        raise ValueError(f"expected uniform:LO-HI with integers (uniform:64-1024), got {shown(text)}")
    lo, hi = int(m[1]), int(m[2])
    if lo > hi:
        raise ValueError(f"uniform:LO-HI: LO {lo:,} is above HI {hi:,}")
    if lo < FLOOR[what] or hi > CAP[what]:
        raise ValueError(f"uniform:LO-HI: each {what} length must be {_bounds(what)}, got uniform:{lo}-{hi}")
    return LengthDistribution(spec=f"uniform:{lo}-{hi}", kind="uniform", min_tokens=lo, max_tokens=hi,
                              mean_tokens=(lo + hi) / 2)


def _jsonl(path_text: str, what: What) -> LengthDistribution:
    if not path_text:
        raise ValueError("expected jsonl:PATH, a file of lengths, got no path")
    data = _read(Path(path_text))
    values = _values(data, path_text, what)
    return LengthDistribution(spec=f"jsonl:{path_text}", kind="jsonl", min_tokens=min(values),
                              max_tokens=max(values), mean_tokens=sum(values) / len(values),
                              sha256=hashlib.sha256(data).hexdigest(), count=len(values))


def _read(path: Path) -> bytes:
    from satbench.records.rundir import read_regular_file

    try:
        return read_regular_file(path, MAX_LENGTHS_FILE_BYTES, follow_links=True, error=UserError)
    except UserError as exc:
        raise ValueError(str(exc)) from exc


_EOL = re.compile(rb"\r\n|\r|\n")


def _lines(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, line) of `data`, ended by CRLF, CR or LF, one at a time: no list of
    every line (a file of millions of short lines stays the size of its bytes in memory)."""
    start, lineno = 0, 0
    for lineno, m in enumerate(_EOL.finditer(data), 1):
        yield lineno, start, data[start:m.start()]
        start = m.end()
    if start < len(data):
        yield lineno + 1, start, data[start:]


def _values(data: bytes, where: str, what: What) -> list[int]:
    """The lengths of a jsonl file's bytes (see the module's docstring); ValueError naming the line.
    Read line by line, it stops at the first bad line or at MAX_LENGTHS_LINES without going on."""
    bom = 3 if data.startswith(codecs.BOM_UTF8) else 0  # a byte-order mark is skipped, as in a lane file
    out: list[int] = []
    for lineno, at, raw in _lines(data[bom:] if bom else data):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{where}: not UTF-8 text (byte {bom + at + exc.start}); expected one length "
                             "per line") from exc
        if not line.strip():
            continue
        if len(out) >= MAX_LENGTHS_LINES:
            raise ValueError(f"{where}: more than {MAX_LENGTHS_LINES:,} lengths")
        out.append(_length(line, where, lineno, what))
    if not out:
        raise ValueError(f"{where}: no lengths in the file")
    return out


def _length(line: str, where: str, lineno: int, what: What) -> int:
    """The length line `lineno` (not blank) of file `where` holds: an integer, or an object with
    KEY[what], within FLOOR[what] and CAP[what]; ValueError naming the line. Its nesting is checked
    before json.loads recurses into it."""
    opening = line[:len(line) - len(line.lstrip("[{ \t"))]
    if opening.count("[") + opening.count("{") > MAX_LENGTH_LINE_NESTING:  # before json recurses
        raise ValueError(f"{where}:{lineno}: nested deeper than {MAX_LENGTH_LINE_NESTING} levels; "
                         f"expected an integer or an object with \"{KEY[what]}\"")
    try:
        item = json.loads(line)
    except (ValueError, RecursionError) as exc:
        deep = " (nested too deep)" if isinstance(exc, RecursionError) else ""
        raise ValueError(f"{where}:{lineno}: not JSON{deep}; expected an integer or an object with "
                         f"\"{KEY[what]}\"") from None
    if isinstance(item, dict):
        if KEY[what] not in item:
            raise ValueError(f"{where}:{lineno}: the object has no \"{KEY[what]}\" key")
        item = item[KEY[what]]
    if type(item) is not int or not FLOOR[what] <= item <= CAP[what]:
        raise ValueError(f"{where}:{lineno}: a {what} length must be an integer {_bounds(what)}, "
                         f"got {shown(item)}")
    return item


def _num(x: float) -> str:
    """A number as canonical text: 512 for 512.0, 96.5 as is."""
    return str(int(x)) if x == int(x) else repr(x)


class Lengths:
    """One lane's request lengths: `of(phase, repetition, seq)` is (prompt tokens, output tokens) by
    the seed rule of the module's docstring. A jsonl file is read once, here, and must still have the
    recorded sha256 (UserError otherwise)."""

    def __init__(self, cfg: WorkloadConfig) -> None:
        self.cfg = cfg
        given: tuple[tuple[What, LengthDistribution | None], ...] = (
            ("prompt", cfg.prompt_lengths), ("output", cfg.output_lengths))
        self._values = {what: _file_values(d, what) for what, d in given
                        if d is not None and d.kind == "jsonl"}

    def of(self, phase: str, repetition: int, seq: int) -> tuple[int, int]:
        return (self._draw("prompt", self.cfg.prompt_lengths, self.cfg.prompt_tokens, phase, repetition, seq),
                self._draw("output", self.cfg.output_lengths, self.cfg.output_tokens, phase, repetition, seq))

    def _draw(self, what: What, d: LengthDistribution | None, fixed: int, phase: str, repetition: int,
              seq: int) -> int:
        if d is None:
            return fixed
        seed = self.cfg.seed
        if d.kind == "jsonl":
            values = self._values[what]
            return values[random.Random(f"{seed}:jsonl:{phase}:{repetition}:{seq}").randrange(len(values))]
        rng = random.Random(f"{seed}:{what}:{phase}:{repetition}:{seq}")
        if d.kind == "uniform":
            return rng.randint(d.min_tokens, d.max_tokens)
        return min(d.max_tokens, max(d.min_tokens, round(rng.gauss(d.mean_tokens, d.sd_tokens or 0.0))))


def _file_values(d: LengthDistribution, what: What) -> list[int]:
    path = d.spec.removeprefix("jsonl:")
    try:
        data = _read(Path(path))
    except ValueError as exc:
        raise UserError(f"--{what}-tokens {d.spec}: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != d.sha256:
        raise UserError(f"--{what}-tokens {d.spec}: the file changed since the run was configured (its "
                        f"sha256 is not the recorded {d.sha256}); restore it or start a new run")
    return _values(data, path, what)
