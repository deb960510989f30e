"""The server samples as columns: what analysis reads of `server_samples.jsonl`, in bounded memory.

A run samples `/metrics`, `/slots` and the server process several times a second for as long as it
runs, so its samples file grows with the run (10⁶ lines ≈ 300 MB of JSON). Holding every line as a
validated record costs 1.5–3 KB each; here each line is validated as it is read (`events.SampleLine`:
the same ranges) and only the fields the metrics use are kept, as numpy columns: 8 bytes per field,
about 60 bytes per sample (`BYTES_PER_SAMPLE`).

Per (lane, scenario) and kind, a `SampleColumns` holds its samples sorted by `t_ns`, samples with
equal stamps in file order (a stable sort; the file is already in time order per kind, as each
poller writes its own lines), and each sample's position in the file (`order`), so a figure that
sums over samples adds them in file order. Absent values are NaN in float columns and -1 in integer
ones (every integer field is ≥ 0, and NaN is refused in every float field on reading).

Kept per kind (everything else of a line is validated, then dropped):
- metrics: `t_ns`, `error`, and the `/metrics` values in METRIC_KEYS;
- slots: `t_ns`, `error`, `n_busy` (how many slot ids were busy);
- process: `t_ns`, `error` and every figure of a ProcessSample (PROCESS_INTS, PROCESS_FLOATS).

config.limits.MAX_SAMPLES caps what one read holds: a file with more samples is refused at the first
line over the cap (a RunDirError naming it), without reading the rest.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar, cast

import numpy as np

from satbench.config.limits import MAX_SAMPLES
from satbench.records.events import (
    SAMPLES_FILE,
    MetricsSample,
    ProcessSample,
    SlotsSample,
    present,
    read_jsonl,
    validate_sample,
)

Sample = MetricsSample | SlotsSample | ProcessSample
T = TypeVar("T")
KINDS = ("metrics", "slots", "process")
METRIC_KEYS = ("requests_processing", "requests_deferred", "n_decode_total", "n_busy_slots_per_decode")
"""The `/metrics` values analysis reads (metrics.occupancy, metrics.level); the others are not kept."""
PROCESS_INTS = ("rss_bytes", "gpu_mem_used_bytes", "server_pid", "client_pid")
PROCESS_FLOATS = ("cpu_seconds", "gpu_util_pct", "gpu_sm_clock_mhz", "host_busy_cpu_seconds",
                  "client_cpu_seconds")
_FLOATS = {"metrics": METRIC_KEYS, "slots": (), "process": PROCESS_FLOATS}
_INTS = {"metrics": (), "slots": ("n_busy",), "process": PROCESS_INTS}
BYTES_PER_SAMPLE = 60  # the columns' mean: 7 fields of a metrics sample, 3 of slots, 11 of process


class SampleColumns:
    """One kind of sample of one lane and scenario, sorted by `t_ns` (see the module). Read-only."""

    def __init__(self, kind: str, t_ns: np.ndarray, order: np.ndarray, error: np.ndarray,
                 errors: Sequence[str], columns: dict[str, np.ndarray]) -> None:
        if len(t_ns) > 1 and bool(np.any(t_ns[1:] < t_ns[:-1])):  # sorted in place, a column at a time
            perm = np.argsort(t_ns, kind="stable")
            for a in (t_ns, order, error, *columns.values()):
                a[:] = a[perm]
        self.kind, self.t_ns, self.order, self.error = kind, t_ns, order, error
        self.errors = tuple(errors)
        self._columns = columns
        self._cache: dict[object, object] = {}

    def __len__(self) -> int:
        return len(self.t_ns)

    def column(self, name: str) -> np.ndarray:
        """A field's column (KeyError for a field this kind does not keep)."""
        return self._columns[name]

    def error_of(self, i: int) -> str | None:
        """Row `i`'s recorded error (None: the poll succeeded)."""
        k = int(self.error[i])
        return None if k < 0 else self.errors[k]

    def failed(self, truthy: bool = False) -> np.ndarray:
        """Per row: an error was recorded (`truthy`: a non-empty one)."""
        def make() -> np.ndarray:
            bad = np.array([not truthy or bool(e) for e in self.errors] + [False], dtype=bool)
            return bad[self.error]  # -1 (no error) indexes the trailing False
        return self.memo(("failed", truthy), make)

    def errors_starting(self, prefix: str) -> np.ndarray:
        """Per row: its error starts with `prefix`."""
        flags = np.array([e.startswith(prefix) for e in self.errors] + [False], dtype=bool)
        return flags[self.error]

    def upto(self, t_ns: int) -> int:
        """How many rows have t ≤ `t_ns` (they come first)."""
        return int(np.searchsorted(self.t_ns, t_ns, side="right"))

    def before(self, t_ns: int) -> int:
        """How many rows have t < `t_ns`."""
        return int(np.searchsorted(self.t_ns, t_ns, side="left"))

    def within(self, lo: int, hi: int) -> slice:
        """The rows with lo ≤ t ≤ hi."""
        return slice(self.before(lo), self.upto(hi))

    def in_spans(self, spans: Iterable[tuple[int, int]]) -> np.ndarray:
        """Indices of the rows inside any of `spans` ([lo, hi] each), in file order."""
        parts = [np.arange(s.start, s.stop) for lo, hi in spans if (s := self.within(lo, hi)).stop > s.start]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        rows = np.unique(np.concatenate(parts))
        return rows[np.argsort(self.order[rows], kind="stable")]

    def memo(self, key: object, make: Callable[[], T]) -> T:
        """`make()`, computed once per table and `key`."""
        if key not in self._cache:
            self._cache[key] = make()
        return cast(T, self._cache[key])


@dataclass(frozen=True)
class LaneSamples:
    """The three kinds of sample of one lane in one scenario."""

    metrics: SampleColumns
    slots: SampleColumns
    process: SampleColumns


def _empty(kind: str) -> SampleColumns:
    z = np.zeros(0, dtype=np.int64)
    cols = {k: np.zeros(0) for k in _FLOATS[kind]} | {k: z for k in _INTS[kind]}
    return SampleColumns(kind, z, z, np.zeros(0, dtype=np.int32), (), cols)


@dataclass
class _Growing:
    """One table being read: typed arrays (8 bytes an entry), numpy views of them once built."""

    kind: str
    t_ns: array = field(default_factory=lambda: array("q"))
    order: array = field(default_factory=lambda: array("q"))
    error: array = field(default_factory=lambda: array("i"))
    errors: dict[str, int] = field(default_factory=dict)
    cols: dict[str, array] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cols = {k: array("d") for k in _FLOATS[self.kind]} | {k: array("q") for k in _INTS[self.kind]}

    def add(self, s: Sample, position: int) -> None:
        self.t_ns.append(s.t_ns)
        self.order.append(position)
        self.error.append(-1 if s.error is None else self.errors.setdefault(s.error, len(self.errors)))
        cols = self.cols
        if isinstance(s, MetricsSample):
            for k in METRIC_KEYS:
                cols[k].append(s.values.get(k, math.nan))
        elif isinstance(s, SlotsSample):
            cols["n_busy"].append(len(s.busy_ids))
        else:
            for k in PROCESS_FLOATS:
                v = getattr(s, k)
                cols[k].append(math.nan if v is None else v)
            for k in PROCESS_INTS:
                v = getattr(s, k)
                cols[k].append(-1 if v is None else v)

    def build(self, copy: bool) -> SampleColumns:
        """The columns: views of the arrays (which then cannot grow), or with `copy` copies of them."""
        def col(a: array) -> np.ndarray:
            v = np.frombuffer(a, dtype={"d": np.float64, "q": np.int64, "i": np.int32}[a.typecode])
            return v.copy() if copy else v
        return SampleColumns(self.kind, col(self.t_ns), col(self.order), col(self.error), list(self.errors),
                             {k: col(v) for k, v in self.cols.items()})


class SampleSet:
    """Every sample of a run (or of a part read so far), as columns per lane, scenario and kind."""

    def __init__(self, tables: dict[tuple[str, str, str], SampleColumns] | None = None) -> None:
        self._tables = tables or {}

    def lane(self, lane: str, scenario: str) -> LaneSamples:
        """The lane's samples in `scenario` (empty tables where it has none)."""
        t = self._tables
        return LaneSamples(*(t.get((lane, scenario, k)) or _empty(k) for k in KINDS))


class SampleBuilder:
    """Collects samples one at a time (kept as columns at once); `build` gives the SampleSet so far."""

    def __init__(self) -> None:
        self._growing: dict[tuple[str, str, str], _Growing] = {}
        self.count = 0

    def add(self, s: Sample) -> None:
        key = (s.lane, s.scenario, s.kind)
        if (g := self._growing.get(key)) is None:
            g = self._growing[key] = _Growing(s.kind)
        g.add(s, self.count)
        self.count += 1

    def build(self, keep_growing: bool = False) -> SampleSet:
        """The samples so far; `keep_growing`: copied, so that more can be added afterwards (without,
        the columns are views of what was read, and the builder is done)."""
        return SampleSet({k: g.build(keep_growing) for k, g in self._growing.items()})


def sample_set(samples: Iterable[Sample]) -> SampleSet:
    """A SampleSet of records already in memory (tests, the sweep's planner)."""
    b = SampleBuilder()
    for s in samples:
        b.add(s)
    return b.build()


def lane_samples(samples: LaneSamples | Sequence[Sample]) -> LaneSamples:
    """`samples` as LaneSamples; records in memory (tests: one lane and scenario) become columns."""
    if isinstance(samples, LaneSamples):
        return samples
    growing = {k: _Growing(k) for k in KINDS}
    for i, s in enumerate(samples):
        growing[s.kind].add(s, i)
    return LaneSamples(*(growing[k].build(False) for k in KINDS))


def as_columns(samples: SampleColumns | Sequence[Sample], kind: str) -> SampleColumns:
    """`samples` as the columns of `kind` (records in memory of other kinds are left out)."""
    if isinstance(samples, SampleColumns):
        return samples
    return getattr(lane_samples(samples), kind)


def read_sample_set(run_dir: Path, cap: int = MAX_SAMPLES) -> SampleSet:
    """server_samples.jsonl as columns, read line by line (no file: no samples); RunDirError at a
    line after the `cap`-th sample, naming the cap, without reading the rest."""
    path = run_dir / SAMPLES_FILE
    b = SampleBuilder()
    if not present(path):
        return b.build()
    for s in read_jsonl(path, validate_sample, cap, "samples"):
        b.add(s)
    return b.build()


MetricsColumns = SampleColumns | Sequence[MetricsSample]  # /metrics samples, as columns or as records
SlotsColumns = SampleColumns | Sequence[SlotsSample]
ProcessColumns = SampleColumns | Sequence[ProcessSample]
