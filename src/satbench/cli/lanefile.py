"""Lane files (TOML): several lanes, each a model on a runtime with its knobs, levels and SLO.

```toml
together = false                  # also run all lanes at once (same as --together)

[[lanes]]
name = "dense"
model = "builtin:gemma3-270m"     # a path, builtin:NAME or synthetic:ARCH-SIZE[-seedN]
runtime = "embedded"              # embedded | native (needs server_bin) | url (needs url)
# served_model = "ID"             # url only: which of the server's /v1/models ids to measure
                                  # (default: the first)
concurrency = [1, 2, 4, 8]
prompt_tokens = 64
output_tokens = 32
slo = { p95_ttft_ms = 2000, p95_tpot_ms = 100 }

[lanes.server]                    # llama-server's flags, by their long names
parallel = 8
ctx_size = 4096

[lanes.fairness]                  # thresholds and sizes of the fairness checks (config.FairnessConfig)
f1_max_min_ratio = 1.10
```

Unknown keys and bad values are errors that name the key and its line in the file.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, ValidationError, create_model, model_validator

from satbench.cli.lanekeys import LANE_KEYS, LaneValueError, build_lane, file_fields
from satbench.config.ranges import MAX_LANES, Flag
from satbench.config.runtime import runtime_class
from satbench.config.schema import REPETITIONS_NEED, LaneConfig, RunConfig, Strict, idle_repetitions
from satbench.errors import UserError

# The keys of a lane file and their rules: LANE_KEYS (cli/lanekeys.py) names them, the schema's fields
# type them and give their defaults.
FileServer = create_model("FileServer", __base__=Strict,
                          __doc__="[lanes.server]: llama-server flags by their long names (same meanings).",
                          **file_fields("server"))


class _LaneRules(Strict):
    """What a [[lanes]] table's keys must agree on: its runtime and the keys only that runtime uses."""

    if TYPE_CHECKING:  # the keys these rules and the reader use (the fields come from LANE_KEYS)
        name: str
        runtime: str
        url: str | None
        server_bin: str | None
        served_model: str | None
        server: Strict

    @model_validator(mode="after")
    def _runtime_needs(self) -> _LaneRules:
        """The keys the table's runtime kind (its class: config/runtime) needs, and none it would not use:
        a key of another runtime would be recorded yet never used, and the figures credited to a server
        that was not measured."""
        kind = runtime_class(self.runtime)
        if kind.starts_server:
            self._started_needs(kind.needs_binary)
        else:
            self._running_needs()
        return self

    def _running_needs(self) -> None:
        """runtime 'url': a url, and no model, server_bin or server flag (the running server has its own)."""
        if not self.url:
            raise ValueError("runtime 'url' needs a url")
        if self.server_bin:
            raise ValueError(f"server_bin is given but runtime is {self.runtime!r}: add runtime = \"native\" "
                             f"(or remove server_bin)")
        if "model" in self.model_fields_set:
            raise ValueError("runtime 'url' measures a model the running server has loaded: remove model "
                             "(served_model = \"ID\" names one of the ids its /v1/models lists)")
        # batch_size: declares the server's n_batch to the fairness checks
        applied = sorted(self.server.model_fields_set - {"batch_size"})
        if applied:
            raise ValueError(f"runtime 'url' measures a running server, which satbench does not start: "
                             f"server.{', server.'.join(applied)} cannot be applied to it")

    def _started_needs(self, needs_binary: bool) -> None:
        """A server satbench starts: no url or served_model; server_bin where the kind runs a binary."""
        if self.url:
            raise ValueError(f"url is given but runtime is {self.runtime!r}: add runtime = \"url\" "
                             "(or remove url)")
        if self.server_bin and not needs_binary:
            raise ValueError(f"server_bin is given but runtime is {self.runtime!r}: add runtime = \"native\" "
                             f"(or remove server_bin)")
        if self.served_model is not None:
            raise ValueError(f"served_model is given but runtime is {self.runtime!r}: it chooses among a "
                             "running server's models (runtime = \"url\"); a lane satbench starts serves its "
                             "model")
        if needs_binary and not self.server_bin:
            raise ValueError("runtime 'native' needs server_bin (the llama-server binary)")


FileLane = create_model("FileLane", __base__=_LaneRules,
                        __doc__="One [[lanes]] table.",
                        **file_fields("", {"server": FileServer}))


class LaneFile(Strict):
    together: Flag = RunConfig.model_fields["together"].default
    lanes: list[FileLane] = Field(min_length=1, max_length=MAX_LANES)


def key_lines(text: str) -> dict[tuple, int]:
    """Where each key is written: (("lanes", 0, "server", "ctx_size") → line). Table headers too."""
    out: dict[tuple, int] = {}
    table: tuple = ()
    lane_index = -1
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[["):
            name = line.strip("[] ")
            if name == "lanes":
                lane_index += 1
                table = ("lanes", lane_index)
            else:
                table = tuple(name.split("."))
            out.setdefault(table, lineno)
            continue
        if line.startswith("["):
            parts = tuple(line.strip("[] ").split("."))
            table = ("lanes", lane_index) + parts[1:] if parts[0] == "lanes" and lane_index >= 0 else parts
            out.setdefault(table, lineno)
            continue
        m = _KEY.match(line)
        if m:
            parts = tuple(p.strip().strip("\"'") for p in _PART.findall(m[1]))
            for cut in range(1, len(parts) + 1):  # a dotted key defines its tables where it is written
                out.setdefault(table + parts[:cut], lineno)
    return out


_BARE_OR_QUOTED = r"""(?:[A-Za-z0-9_\-]+|"[^"]*"|'[^']*')"""
_KEY = re.compile(rf"^(\s*{_BARE_OR_QUOTED}(?:\s*\.\s*{_BARE_OR_QUOTED})*)\s*=")
_PART = re.compile(_BARE_OR_QUOTED)


def _where(loc: tuple, lines: dict[tuple, int]) -> tuple[int | None, str]:
    """The line of the longest known prefix of `loc`, and the dotted key name."""
    name = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in loc).replace(".[", "[")
    for cut in range(len(loc), 0, -1):
        if loc[:cut] in lines:
            return lines[loc[:cut]], name
    return None, name


def _error(path: Path, loc: tuple, msg: str, lines: dict[tuple, int]) -> UserError:
    line, name = _where(loc, lines)
    at = f"{path}:{line}" if line else str(path)
    return UserError(f"{at}: {name or 'lane file'}: {msg}")


def to_lane_config(f: Any) -> LaneConfig:
    """A FileLane as a LaneConfig: each key written in the file set on its LANE_KEYS field, a key not
    written left unset (the schema's default applies, and a rule on what a lane sets sees it unset;
    LaneValueError)."""
    values: dict[str, object] = {}
    for key in LANE_KEYS:
        if key.toml is not None:
            value = f
            for part in key.toml.split("."):
                value = getattr(value, part) if part in value.model_fields_set else None
                if value is None:
                    break
            values[key.field] = value
    return build_lane(values)


def _file_key(exc: LaneValueError) -> tuple:
    """The lane-file key (inside its [[lanes]] table) a complaint after translation is about."""
    if not exc.loc:
        return ()
    key = exc.key
    return tuple(key.toml.split(".")) if key and key.toml else (str(exc.loc[0]),)


MAX_LANE_FILE_BYTES = 1 << 20  # a lane file of 64 lanes takes a few kB
MAX_NESTING = 8  # tables and arrays inside each other; a lane file needs 4
_BOM = "\ufeff"  # a UTF-8 byte-order mark, which editors on Windows write and TOML tools skip


def _read_text(path: Path) -> str:
    """The file as text: at most MAX_LANE_FILE_BYTES of UTF-8 (a leading byte-order mark dropped)."""
    from satbench.records.rundir import read_regular_file  # a regular file only: a named pipe never blocks

    data = read_regular_file(path, MAX_LANE_FILE_BYTES, follow_links=True, error=UserError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"lane file {path}: not UTF-8 text (byte {exc.start}); a lane file is TOML") from exc
    return text.removeprefix(_BOM)


def _parse_toml(path: Path, text: str) -> dict:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError as exc:
        raise _too_deep(path) from exc
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise UserError(f"{path}: not valid TOML: {exc}") from exc
    if _depth(raw) > MAX_NESTING:
        raise _too_deep(path)
    return raw


def _too_deep(path: Path) -> UserError:
    return UserError(f"{path}: not a lane file: tables or arrays nested more than {MAX_NESTING} deep")


def _depth(value: object) -> int:
    """How deeply tables and arrays nest in `value` (iterative: a crafted file cannot exhaust the stack)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth + 1 > MAX_NESTING:
                return depth + 1
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def one_line(text: str) -> str:
    """`text` with every character that is not printable (a newline in a quoted key) escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def load_lane_file(path: Path, together: bool | None = None) -> RunConfig:
    """Parse and validate a lane file; every problem is one UserError, on one line, naming file, line and
    key. A lane file is at most MAX_LANE_FILE_BYTES of UTF-8 TOML, nested at most MAX_NESTING deep."""
    try:
        return _load(path, together)
    except UserError as exc:
        raise UserError(one_line(str(exc))) from exc.__cause__
    except RecursionError as exc:  # a nesting _depth has missed
        raise _too_deep(path) from exc


def _load(path: Path, together: bool | None) -> RunConfig:
    text = _read_text(path)
    raw = _parse_toml(path, text)
    lines = key_lines(text)
    try:
        parsed = LaneFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        if err["type"] == "too_long" and "max_length" in err.get("ctx", {}):
            msg = f"at most {err['ctx']['max_length']} entries, got {err['ctx'].get('actual_length', 'more')}"
        raise _error(path, tuple(err["loc"]), msg, lines) from exc
    seen: set[str] = set()
    for i, f in enumerate(parsed.lanes):
        if f.name in seen:
            raise _error(path, ("lanes", i, "name"), f"lane names repeat: {f.name}", lines)
        seen.add(f.name)
    lanes = []
    for i, f in enumerate(parsed.lanes):
        try:
            lanes.append(to_lane_config(f))
        except LaneValueError as exc:
            raise _error(path, ("lanes", i) + _file_key(exc), exc.message, lines) from exc
    run_together = parsed.together if together is None else together
    for i, lane in enumerate(lanes):
        if idle_repetitions(lane, run_together):
            raise _error(path, ("lanes", i, "repetitions"), REPETITIONS_NEED, lines)
    try:
        return RunConfig(lanes=lanes, together=run_together)
    except ValidationError as exc:
        raise _error(path, ("lanes",), exc.errors()[0]["msg"].removeprefix("Value error, "), lines) from exc
