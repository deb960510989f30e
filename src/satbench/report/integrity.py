"""SHA256SUMS and `satbench verify`: is this run directory what its report says it is?

`SHA256SUMS` (the format `sha256sum -c` reads, so a stranger can check it without satbench)
lists every file of the run directory, raw and derived. `verify` checks three things:

1. every listed file is present with its hash (nothing modified, nothing missing);
2. the derived results follow from the raw files: results.json and verdicts.json are
   recomputed from run.json + the JSONL files and must be byte-identical (or equal to within
   floating-point rounding, below), and
   recommendations.json must match a fresh recommendation except its `created_at`. A file
   written under an older minor version of its schema (a bundle made by an earlier satbench)
   is read under the current one, absent fields taking their defaults, and must then equal the
   fresh derivation in everything but `schema_version` (and `definitions`, the prose restating
   the formulas, which an earlier satbench may have worded otherwise): an additive schema change does not
   break an old bundle, and a changed figure or a newly computed one still does. Numbers are
   equal when they agree to 1e-6 relative: the bundle may have been derived by another Python,
   numpy or scipy (on the machine that measured it), whose floating-point results differ in
   the last bits; an edited figure differs by far more;
   results.csv must hold the figures of the fresh results (to the 6 decimals it prints), and a
   verdicts.json in a run without fairness checks is inconsistent;
3. the files verify relies on (run.json, the JSONL files, the derived files) are listed: one
   that is present but not in SHA256SUMS fails (an emptied SHA256SUMS must not pass); other
   files present but not listed are named (added after the report; not an error).

Whatever bytes the files hold, verify answers with a verdict, never a crash: a SHA256SUMS line
that is not a 'sha256  path' line (binary, not UTF-8, too long) is listed as MODIFIED and fails
the bundle, whose well-formed lines are still checked; a derived file that cannot be read or
compared (not UTF-8, not JSON, too deeply nested, of the wrong types) is INCONSISTENT. Only a
run directory without a SHA256SUMS of its own (missing, or not a regular file) is an error.

A matching SHA256SUMS proves consistency, not authorship: whoever can edit the raw files can
rewrite SHA256SUMS. Quote the bundle digest (sha256 of SHA256SUMS) where the run is cited to
anchor it.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shlex
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from satbench.analysis.results import ResultsFile
from satbench.config.schema import Strict
from satbench.errors import RunDirError, SatbenchError
from satbench.gguf.files import sha256_file  # called with cache=None: a bundle is always read
from satbench.records.artifacts import (
    FLOAT_REL_TOL,
    older_minor,
    same_under_current_schema,
    schema_version_of,
)
from satbench.records.layout import SUMS_FILE
from satbench.records.manifest import write_text_atomic
from satbench.records.rundir import open_readable, read_regular_file, require_dir

# written by analyze / recommend / report; everything else in a run directory is raw
DERIVED_FILES = ("results.json", "verdicts.json", "recommendations.json", "results.csv", "EVIDENCE.md",
                 "report.html", SUMS_FILE)
DERIVED_DIRS = ("plots",)
MUST_BE_LISTED = (("run.json", "events.jsonl", "server_samples.jsonl")
                  + tuple(f for f in DERIVED_FILES if f != SUMS_FILE))
# prose restating the formulas; an earlier satbench worded it otherwise
OLDER_MINOR_IGNORED = ("definitions",)
CSV_ABS_TOL = 1e-6  # results.csv prints figures rounded to 6 decimals
MAX_DERIVED_BYTES = 64 * 2**20  # results.json and .csv, verdicts, recommendations: figures, not raw records
MAX_SUMS_BYTES = 16 * 2**20  # one ~100-byte line per file: far above any run directory satbench writes
MAX_PROBLEMS_LISTED = 3  # malformed SHA256SUMS lines named one by one; the rest are counted
# what reading or comparing a derived file can raise on bytes it did not write itself
_UNREADABLE = (SatbenchError, ValueError, RecursionError, csv.Error, ArithmeticError)  # OverflowError too


class FileHash(Strict):
    file: str = Field(description="path relative to the run directory, '/' separated")
    sha256: str
    size_bytes: int


def is_derived(rel: str) -> bool:
    return rel in DERIVED_FILES or rel.split("/", 1)[0] in DERIVED_DIRS


def run_files(run_dir: Path) -> list[str]:
    """Every regular file under the run directory (relative, sorted), but SHA256SUMS and temp files."""
    out = []
    for p in run_dir.rglob("*"):
        rel = p.relative_to(run_dir).as_posix()
        if p.is_file() and not p.is_symlink() and rel != SUMS_FILE and not p.name.startswith("."):
            out.append(rel)
    return sorted(out)


def hash_files(run_dir: Path, rels: list[str]) -> list[FileHash]:
    return [FileHash(file=r, sha256=sha256_file(run_dir / r, cache=None),
                     size_bytes=(run_dir / r).stat().st_size)
            for r in rels]


def raw_hashes(run_dir: Path) -> list[FileHash]:
    """The raw files (what was measured and how), with their hashes: EVIDENCE.md lists these."""
    return hash_files(run_dir, [r for r in run_files(run_dir) if not is_derived(r)])


def write_sums(run_dir: Path) -> str:
    """Write SHA256SUMS over every file; return the bundle digest (sha256 of SHA256SUMS)."""
    lines = "".join(f"{h.sha256}  {h.file}\n" for h in hash_files(run_dir, run_files(run_dir)))
    write_text_atomic(run_dir / SUMS_FILE, lines, run_dir=run_dir)
    return hashlib.sha256(lines.encode()).hexdigest()


def stale_sums_note(run_dir: Path, rewritten: list[str]) -> str | None:
    """After `analyze` or `recommend` rewrote files of a run that has a report: a note naming those
    whose SHA256SUMS entry no longer holds (verify would fail on them) and how to refresh the bundle;
    None when there is no SHA256SUMS or every entry still holds."""
    try:
        sums = read_sums(run_dir)
    except RunDirError:
        return None
    stale = [r for r in rewritten if r in sums and (run_dir / r).exists()
             and sha256_file(run_dir / r, cache=None) != sums[r]]
    if not stale:
        return None
    quoted = shlex.quote(str(run_dir))
    # recommendations.json names the results it was derived from: report alone keeps the old one
    redo = (f"`satbench recommend {quoted}` then `satbench report {quoted}` write the bundle again"
            if "results.json" in stale and (run_dir / "recommendations.json").exists()
            else f"`satbench report {quoted}` writes the bundle again")
    return (f"note: {', '.join(stale)} rewritten, so the report's SHA256SUMS no longer matches "
            f"(verify fails on it): {redo}")


def sums_bytes(run_dir: Path) -> bytes:
    """The bytes of the run directory's own SHA256SUMS (a regular file, not a link; up to
    MAX_SUMS_BYTES + 1 of them, so that parse_sums can call a longer one what it is); RunDirError
    when there is none or it cannot be read."""
    path = run_dir / SUMS_FILE
    if not os.path.lexists(path):
        raise RunDirError(f"{run_dir} has no {SUMS_FILE}; write it with "
                          f"`satbench report {shlex.quote(str(run_dir))}`")
    fd = open_readable(path, follow_links=False)
    try:
        with os.fdopen(fd, "rb") as fh:
            return fh.read(MAX_SUMS_BYTES + 1)
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from exc


def parse_sums(data: bytes) -> tuple[dict[str, str], list[str]]:
    """({path: sha256} of the well-formed lines, what is wrong with the others: 'line N: why')."""
    if len(data) > MAX_SUMS_BYTES:
        return {}, [f"more than {MAX_SUMS_BYTES} bytes, not a list satbench wrote"]
    sums: dict[str, str] = {}
    problems: list[str] = []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    for lineno, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            problems.append(f"line {lineno}: not UTF-8 text")
            continue
        digest, sep, rel = line.partition("  ")
        if (not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not rel
                or rel.startswith("/") or ".." in rel.split("/") or not rel.isprintable()):
            problems.append(f"line {lineno}: not a 'sha256  path' line")
            continue
        sums[rel] = digest
    return sums, problems


def read_sums(run_dir: Path) -> dict[str, str]:
    """SHA256SUMS as {path: sha256}; RunDirError when it is missing or any line is malformed."""
    sums, problems = parse_sums(sums_bytes(run_dir))
    if problems:
        raise RunDirError(f"{run_dir / SUMS_FILE}: {problems[0]}")
    return sums


def _listed(problems: list[str]) -> list[str]:
    """One MODIFIED entry per malformed SHA256SUMS line, the first MAX_PROBLEMS_LISTED named."""
    shown = [f"{SUMS_FILE} ({why})" for why in problems[:MAX_PROBLEMS_LISTED]]
    if len(problems) > MAX_PROBLEMS_LISTED:
        shown.append(f"{SUMS_FILE} (and {len(problems) - MAX_PROBLEMS_LISTED} more malformed lines)")
    return shown


class Verification(Strict):
    run_dir: str
    bundle_digest: str
    files_checked: int
    modified: list[str] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list)
    unlisted: list[str] = Field(default_factory=list)
    uncovered: list[str] = Field(default_factory=list,
                                 description="files verify relies on that are present but not in SHA256SUMS")
    inconsistent: list[str] = Field(default_factory=list, description="derived files that do not follow "
                                                                      "from the raw ones")
    older_schema: list[str] = Field(default_factory=list,
                                    description="derived files written under an older minor schema version, "
                                                "consistent under this one")
    rounding: list[str] = Field(default_factory=list,
                                description="derived files equal to a fresh derivation only to within "
                                            "floating-point rounding (relative 1e-6): derived by another "
                                            "Python, numpy or "
                                            "scipy")

    @property
    def ok(self) -> bool:
        return not (self.modified or self.missing or self.inconsistent or self.uncovered)


def verify(run_dir: Path, analyze: Callable[[Path], ResultsFile]) -> Verification:
    """Check SHA256SUMS and compare the derived JSON files with what `analyze` (raw files →
    results) and the recommendation rules give now."""
    require_dir(run_dir)
    data = sums_bytes(run_dir)
    sums, problems = parse_sums(data)
    present = set(run_files(run_dir))
    digest = (hashlib.sha256(data).hexdigest() if len(data) <= MAX_SUMS_BYTES
              else sha256_file(run_dir / SUMS_FILE, cache=None))
    v = Verification(run_dir=str(run_dir), files_checked=len(sums), bundle_digest=digest,
                     modified=_listed(problems))
    for rel, digest in sorted(sums.items()):
        if rel not in present:
            v.missing.append(rel)
        elif sha256_file(run_dir / rel, cache=None) != digest:
            v.modified.append(rel)
    v.unlisted = sorted(present - set(sums))
    v.uncovered = [f for f in v.unlisted if f in MUST_BE_LISTED]
    v.unlisted = [f for f in v.unlisted if f not in MUST_BE_LISTED]
    v.inconsistent, v.older_schema, v.rounding = _rederive(run_dir, analyze)
    return v


def _version_note(old: str, new: str) -> str:
    """When the file was written under another schema version, say so: a refresh, not tampering,
    may explain it."""
    was, now = schema_version_of(old), schema_version_of(new)
    if was is None:
        return " (not valid JSON, or no schema_version)"
    return "" if was == now else (f" (written as schema {was}; this satbench writes {now}: "
                                  "`satbench analyze` refreshes it)")


def _rederive(run_dir: Path,
              analyze: Callable[[Path], ResultsFile]) -> tuple[list[str], list[str], list[str]]:
    """(derived JSON that differs from what the raw files give now, each with the reason;
    derived JSON of an older minor schema that is consistent under the current one; derived JSON
    equal to the fresh one only within floating-point rounding)."""
    from satbench.analysis.results import VerdictsFile, render_results, render_verdicts, verdicts_of

    out: list[str] = []
    older: list[str] = []
    rounding: list[str] = []
    try:
        results = analyze(run_dir)
    except (OSError, *_UNREADABLE) as exc:
        return [f"raw files cannot be analyzed: {_why(exc)}"], [], []
    expected: dict[str, tuple[str, type[BaseModel]]] = {
        "results.json": (render_results(results), ResultsFile)}
    if (verdicts := verdicts_of(results)) is not None:
        expected["verdicts.json"] = (render_verdicts(verdicts), VerdictsFile)
    elif (run_dir / "verdicts.json").exists():
        out.append("verdicts.json: the raw files hold no fairness checks")
    try:
        if (csv_note := csv_differs(run_dir, results)) is not None:
            why, earlier = csv_note
            (older if earlier else out).append(why)
    except _UNREADABLE as exc:
        out.append(f"results.csv: cannot be read as CSV text ({_why(exc)})")
    for name, (text, model) in expected.items():
        path = run_dir / name
        if not os.path.lexists(path):
            out.append(f"{name}: missing (satbench analyze writes it)")
            continue
        try:
            _compare_derived(name, _derived_text(path), text, model, out, older, rounding)
        except (OSError, *_UNREADABLE) as exc:
            out.append(f"{name}: cannot be read or compared ({_why(exc)})")
    _check_recommendations(run_dir, out, older)
    return out, older, rounding


def _check_recommendations(run_dir: Path, out: list[str], older: list[str]) -> None:
    """recommendations.json, where present, against what the recommendation rules give now from the
    run directory's results.json: a line in `out` when it differs or cannot be recomputed, else one
    in `older` when it was written under another schema version."""
    from satbench.records.layout import RECOMMENDATIONS_FILE
    from satbench.saturation.recommend import recommendations_differ
    from satbench.saturation.recommendations_file import RecommendationsFile

    rec_path = run_dir / RECOMMENDATIONS_FILE
    if not os.path.lexists(rec_path):
        return
    was: str | None = None
    try:
        old = _derived_text(rec_path)
        differs = recommendations_differ(run_dir, old)
        was = schema_version_of(old)
    except (OSError, *_UNREADABLE) as exc:  # e.g. results.json unreadable: reported above
        differs = f"cannot be recomputed ({_why(exc)})"
    if differs:
        out.append(f"{RECOMMENDATIONS_FILE}: {differs}")
    elif was != RecommendationsFile.model_fields["schema_version"].default:
        older.append(f"{RECOMMENDATIONS_FILE}: schema {was}")


def _derived_text(path: Path) -> str:
    """A derived file's text: a regular file (not a link) of at most MAX_DERIVED_BYTES, UTF-8;
    RunDirError or UnicodeDecodeError (a ValueError) otherwise."""
    return read_regular_file(path, MAX_DERIVED_BYTES).decode("utf-8")


def _why(exc: BaseException) -> str:
    """One line: a satbench error's own message, else the exception's class and first line."""
    if isinstance(exc, SatbenchError):
        text = str(exc)
    elif isinstance(exc, UnicodeDecodeError):
        text = "not UTF-8 text"
    else:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        text = f"{exc.__class__.__name__}: {first}" if first else exc.__class__.__name__
    return " ".join(text.split())


def _compare_derived(name: str, old: str, text: str, model: type[BaseModel], out: list[str], older: list[str],
                     rounding: list[str]) -> None:
    """Judge the derived file `name` (its text `old`) against the fresh derivation `text`; append
    the verdict to `out` (inconsistent), `older` (an earlier schema) or `rounding`."""
    if old == text:
        return
    was, now = schema_version_of(old), schema_version_of(text)
    if was == now and same_under_current_schema(old, text, model):
        rounding.append(name)
    elif was == now and same_under_current_schema(old, text, model, ignore=OLDER_MINOR_IGNORED):
        # every figure agrees; only the prose restating the formulas was worded by another build
        older.append(f"{name}: schema {was}, its definitions worded otherwise")
    elif older_minor(was, now) and same_under_current_schema(old, text, model, ignore=OLDER_MINOR_IGNORED,
                                                             older_fields_only=True):
        older.append(f"{name}: schema {was}")
    else:
        out.append(f"{name}: differs from a fresh analysis of the raw files{_version_note(old, text)}")


def _cells_equal(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return abs(x - y) <= max(CSV_ABS_TOL, FLOAT_REL_TOL * max(abs(x), abs(y)))


def csv_differs(run_dir: Path, results) -> tuple[str, bool] | None:
    """(why results.csv does not hold the fresh results' figures, whether that is only an earlier
    satbench's fewer columns), or None when it does or is absent; a file that is not UTF-8 CSV
    raises ValueError or csv.Error (verify names it inconsistent). Columns are matched by name:
    one this satbench does not write, or an empty file, is inconsistent; a column it writes that
    the file lacks is from an earlier satbench (noted, and the shared columns still compared)."""
    from satbench.report.csvfile import CSV_FILE, render_csv

    path = run_dir / CSV_FILE
    if not os.path.lexists(path):
        return None
    old = list(csv.reader(_derived_text(path).splitlines()))
    fresh = list(csv.reader(render_csv(results).splitlines()))
    if not old:
        return f"{CSV_FILE}: empty", False
    unknown = [c for c in old[0] if c not in fresh[0]]
    if unknown or len(set(old[0])) != len(old[0]):
        return (f"{CSV_FILE}: columns this satbench does not write: "
                f"{', '.join(unknown) or 'a repeated name'}"), False
    if len(old) != len(fresh):
        return f"{CSV_FILE}: {len(old) - 1} rows, a fresh analysis gives {len(fresh) - 1}", False
    where = [fresh[0].index(c) for c in old[0]]
    for i, (a, b) in enumerate(zip(old[1:], fresh[1:]), 1):
        bad = ([c for c, x, j in zip(old[0], a, where) if not _cells_equal(x, b[j])]
               if len(a) == len(old[0]) else ["cell count"])
        if bad:
            return f"{CSV_FILE}: row {i} differs from a fresh analysis ({', '.join(bad)})", False
    if (missing := [c for c in fresh[0] if c not in old[0]]):
        return (f"{CSV_FILE}: written with fewer columns (an earlier satbench), the shared ones agree; "
                f"lacks {', '.join(missing)}", True)
    return None
