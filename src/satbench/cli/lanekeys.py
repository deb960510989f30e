"""The one map between a lane's three spellings: its single-lane flag, its key in a lane file and its
field in `LaneConfig`, and the one translation of given values into a `LaneConfig`.

`LANE_KEYS` is the table. Each row names a field of `LaneConfig` by its dotted path
("server.n_parallel"), the lane-file key that sets it ("server.parallel", inside a `[[lanes]]`
table; None: no key) and the flag that sets it ("--parallel"; None: no flag). A field's type, range
and default are the schema's (config/schema.py) only: the argparse builder (cli/args.py) takes each
flag's argparse type and the default its help text states from the field, and the lane-file reader
(cli/lanefile.py) builds its key models from the fields. Rows are in `--help` order, which is also
the order a lane file's keys are validated in (the first bad key is the one reported).

`build_lane` turns given values (field path → value, from flags or from a lane file) into a
`LaneConfig`; `LaneValueError` names the field of its first complaint, which each side spells back
as its flag or key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, Field, ValidationError
from pydantic.fields import FieldInfo

from satbench.config.limits import MAX_CTX_TOKENS
from satbench.config.profiles import NEW_RUN_ADAPTIVE
from satbench.config.ranges import MAX_LEVELS_PER_LANE, Level, number_chars
from satbench.config.runtime import class_of
from satbench.config.schema import (
    DEFAULT_LEVELS,
    DEFAULT_MODEL_DIR,
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    MODEL_DIR_ENV,
    LaneConfig,
    NeedsError,
    parse_duration,
    resolve_model_dir,
    slot_ctx_at_most,
)
from satbench.config.workload import parse_workload
from satbench.workload.lengths import parse_lengths
from satbench.workload.trace_file import TraceFieldError, trace_given

ONE_LANE = "one lane (without --lanes)"
WORKLOAD = "workload"
OPEN_LOOP = "open loop (after the levels)"
SERVER = "llama.cpp server (same meaning as llama-server's flags)"


@dataclass(frozen=True)
class LaneKey:
    """One row of LANE_KEYS: a LaneConfig field, its lane-file key and its flag.

    `help` may hold "{default}": the field's schema default as a flag would be written (a list as
    1,2,4,8, a number as %g). `file_type` is the lane file's own (annotation, default) for the key
    where a file's rule differs from the schema's; None: the schema field's own.
    """

    field: str
    toml: str | None = None
    flag: str | None = None
    short: str | None = None
    group: str | None = None
    help: str | None = None
    metavar: str | None = None
    file_type: tuple[Any, Any] | None = None
    text: bool = False  # the flag takes text its caller parses (a list, a duration), not the field's type
    sweep_only: bool = False  # the sweep's levels and rates only: not a flag of `satbench fairness`

    @property
    def options(self) -> list[str]:
        """The flag's option strings, the short one first ("-np", "--parallel")."""
        return [o for o in (self.short, self.flag) if o]

    @property
    def dest(self) -> str:
        """The argparse attribute of the flag ("--request-timeout" → "request_timeout")."""
        return (self.flag or "").removeprefix("--").replace("-", "_")


LANE_KEYS: tuple[LaneKey, ...] = (
    LaneKey("name", "name", file_type=(str, ...)),  # every lane of a file names itself; the pattern after
    LaneKey("runtime.model", "model", "--model", group=ONE_LANE,
            help="GGUF file, {default} (default) or synthetic:ARCH-SIZE"),
    LaneKey("runtime.model_dir", "model_dir", "--model-dir", group=ONE_LANE,
            help=f"where built-in models are assembled (default ${MODEL_DIR_ENV} or "
                 f"{os.path.join(os.curdir, DEFAULT_MODEL_DIR)})",
            file_type=(str | None, None)),  # None: resolve_model_dir's choice
    LaneKey("runtime.kind", "runtime"),
    LaneKey("runtime.url", "url", "--url", group=ONE_LANE,
            help="measure a running server (llama-server or OpenAI-compatible)"),
    LaneKey("runtime.served_model", "served_model", "--served-model", group=ONE_LANE, metavar="ID",
            help="with --url: the model to measure, one of the ids the server's /v1/models lists "
                 "(default: the first)"),
    LaneKey("runtime.api_key_env", "api_key_env", "--api-key-env", group=ONE_LANE,
            help="environment variable holding the remote server's API key"),
    LaneKey("runtime.api_key_file", "api_key_file", "--api-key-file", group=ONE_LANE,
            help="file holding the remote server's API key (sent only to --url)"),
    LaneKey("runtime.ca_cert", "ca_cert", "--ca-cert", group=ONE_LANE,
            help="PEM CA or self-signed certificate to trust for an https --url (besides the system's CAs)"),
    LaneKey("runtime.insecure", "insecure", "--insecure", group=ONE_LANE,
            help="do NOT verify the https --url's certificate (a warning is printed and run.json "
                 "records it)"),
    LaneKey("runtime.server_bin", "server_bin", "--server-bin", group=ONE_LANE,
            help="start this llama-server binary instead of the embedded one"),
    LaneKey("levels", "concurrency", "--concurrency", group=WORKLOAD,
            help="fixed levels, e.g. 1,2,4,8,16, each run --repetitions times (default: the adaptive "
                 "sweep, doubling from 1 up to " + str(max(DEFAULT_LEVELS)) + " or the slots)",
            file_type=(Annotated[list[Level], Field(max_length=MAX_LEVELS_PER_LANE)] | None, None),
            text=True),
    LaneKey("adaptive.budget_s", "budget", "--budget", group=WORKLOAD, sweep_only=True, metavar="DURATION",
            help="time budget of each lane's adaptive sweep, e.g. 90s, 2m (default: none)",
            file_type=(str | float | None, None), text=True),
    LaneKey("rates", "rate", "--rate", group=OPEN_LOOP, sweep_only=True, metavar="RATES",
            help="open-loop Poisson arrival rates in requests/s, e.g. 0.5,1,2, run after the levels "
                 "(goodput per rate; the highest meeting the SLO is recommended)", text=True),
    LaneKey("rate_requests", "rate_requests", "--rate-requests", group=OPEN_LOOP, sweep_only=True,
            metavar="N",
            help="with --rate: arrivals per rate (default max(100, 20 s × rate))"),
    LaneKey("max_concurrency", "max_concurrency", "--max-concurrency", group=OPEN_LOOP, sweep_only=True,
            metavar="N",
            help="with --rate: requests in flight at most; later arrivals wait (default: slots × 2)"),
    LaneKey("workload.trace", "trace", "--trace", group=OPEN_LOOP, sweep_only=True, metavar="FILE",
            help="replay a Mooncake JSONL trace after the levels, open loop at its recorded times (its "
                 "lengths and shared prefix blocks; the levels cycle its requests); excludes --rate and "
                 "given lengths (docs/traces.md)", file_type=(str | None, None), text=True),
    LaneKey("workload.trace.speed", "trace_speed", "--trace-speed", group=OPEN_LOOP, sweep_only=True,
            metavar="X", help="with --trace: its recorded times divided by X (default {default})",
            file_type=(float | None, None)),
    LaneKey("workload.prompt_tokens", "prompt_tokens", "--prompt-tokens", group=WORKLOAD,
            help="an integer (default {default}), or lengths drawn per request: normal:MEAN,SD, "
                 "uniform:LO-HI or jsonl:PATH", file_type=(Any, DEFAULT_PROMPT_TOKENS), text=True),
    LaneKey("workload.output_tokens", "output_tokens", "--output-tokens", group=WORKLOAD,
            help="an integer (default {default}), or lengths drawn per request: normal:MEAN,SD, "
                 "uniform:LO-HI or jsonl:PATH", file_type=(Any, DEFAULT_OUTPUT_TOKENS), text=True),
    LaneKey("workload.seed", "seed", "--seed", group=WORKLOAD, sweep_only=True,
            help="seed of the drawn lengths and the --rate arrivals (default {default}): the same seed, the "
                 "same requests"),
    LaneKey("requests_per_level", "requests_per_level", "--requests-per-level", group=WORKLOAD,
            sweep_only=True, help="measured requests per level and repetition (default max(8N, 32))"),
    LaneKey("repetitions", "repetitions", "--repetitions", group=WORKLOAD, sweep_only=True,
            help="default {default}"),
    LaneKey("workload.shared_prefix", "shared_prefix", "--shared-prefix", group=WORKLOAD,
            help="same prompt for all, prompt cache on"),
    LaneKey("workload.chat", "workload", "--workload", group=WORKLOAD, sweep_only=True, metavar="KIND",
            help="random (default: independent prompts, no cache) or chat:TURNS[,think=SECONDS]: each "
                 "stream holds conversations that resend their history (prompt cache on; --prompt-tokens "
                 "is each user message, --output-tokens each answer)", file_type=(str | None, None),
            text=True),
    LaneKey("workload.system_prompt_tokens", "system_prompt_tokens", "--system-prompt-tokens",
            group=WORKLOAD, sweep_only=True,
            help="with --workload chat: a system prompt this long, shared by every conversation "
                 "(default {default}: none)"),
    LaneKey("workload.endpoint", "endpoint", "--endpoint", group=WORKLOAD,
            help="completions (default: raw prompts of exact length) or chat (/v1/chat/completions "
                 "through the server's chat template; prompt and output counts from its usage)"),
    LaneKey("request_timeout_s", "request_timeout_s", "--request-timeout", group=WORKLOAD,
            help="seconds per request (default {default})"),
    LaneKey("server.n_parallel", "server.parallel", "--parallel", "-np", SERVER,
            help="slots (default: the highest level)"),
    LaneKey("server.n_ctx", "server.ctx_size", "--ctx-size", "-c", SERVER,
            help="total context (default: enough for every slot)"),
    LaneKey("server.n_batch", "server.batch_size", "--batch-size", "-b", SERVER, help="default {default}"),
    LaneKey("server.n_ubatch", "server.ubatch_size", "--ubatch-size", "-ub", SERVER,
            help="default {default}"),
    LaneKey("server.n_threads", "server.threads", "--threads", "-t", SERVER),
    LaneKey("server.n_gpu_layers", "server.n_gpu_layers", "--n-gpu-layers", "-ngl", SERVER),
    LaneKey("server.kv_unified", "server.kv_unified", "--kv-unified", group=SERVER),
    LaneKey("server.extra_args", "server.args", "--server-arg", group=SERVER, metavar="ARGS",
            help="more llama-server flags, repeatable: --server-arg '-fa on' --server-arg=-ctk "
                 "--server-arg=q8_0 (checked against the server, recorded)"),
    LaneKey("server.port", "server.port", "--port", group=SERVER,
            help="port on 127.0.0.1 for a server satbench starts (default: a free one)"),
    LaneKey("slo", "slo"),
    LaneKey("fairness", "fairness"),
)

BY_FIELD = {key.field: key for key in LANE_KEYS}
# the fields that say what kind of traffic a lane serves (config/workload_profile.py): capability takes
# their flags too, to check a recommendation against the traffic the lane is configured for
TRAFFIC_FIELDS = ("workload.shared_prefix", "workload.chat", "workload.system_prompt_tokens",
                  "workload.trace", "workload.trace.speed")
FLAG_KEYS = tuple(key for key in LANE_KEYS if key.flag)


def _model_of(annotation: Any) -> type[BaseModel]:
    """A section's model class from its annotation (`AdaptiveConfig | None` → AdaptiveConfig)."""
    if get_origin(annotation) in (Union, type(int | None)):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    return annotation


def _adaptive(given: dict[str, Any]) -> None:
    """The one rule of the sweep's kind: a lane given no levels runs the adaptive sweep (its budget, if
    any, in `adaptive`); one given levels runs them, and a budget is then refused."""
    knobs = given.pop("adaptive", {})
    if "budget_s" in knobs and isinstance(knobs["budget_s"], str):
        try:
            knobs["budget_s"] = parse_duration(knobs["budget_s"])
        except ValueError as exc:
            raise LaneValueError("adaptive", None, ("budget_s",), str(exc)) from exc
    if given.get("levels") is None:
        given["adaptive"] = {**NEW_RUN_ADAPTIVE, **knobs}
    elif knobs:
        raise LaneValueError("adaptive", None, ("budget_s",), "a budget applies to the adaptive sweep: "
                             "drop the fixed levels (concurrency) to use it")


def _lengths(given: dict[str, Any]) -> None:
    """prompt_tokens and output_tokens as given (an integer, or the text of a distribution:
    workload/lengths.py, its numbers by the number rule `number_chars`): a distribution sets its int
    field to its mean and `*_lengths` to itself. Whether the seed acts is the schema's rule (NEEDS)."""
    workload = given.get("workload", {})
    for what in ("prompt", "output"):
        name = f"{what}_tokens"
        if name not in workload:
            continue
        try:
            if isinstance(workload[name], str) and not workload[name].strip().lower().startswith("jsonl:"):
                number_chars(workload[name], "")  # parse_lengths' \d would read '６４' as 64
            workload[name], dist = parse_lengths(workload[name], what)
        except ValueError as exc:
            raise LaneValueError("workload", None, (name,), str(exc)) from exc
        if dist is not None:
            workload[f"{what}_lengths"] = dist


def _chat(given: dict[str, Any]) -> None:
    """The workload's kind as given (workload.chat: "random" or "chat:TURNS[,think=SECONDS]",
    config.workload.parse_workload), as ChatWorkload's fields; the chat workload's endpoint is chat
    unless given."""
    workload = given.get("workload", {})
    if not isinstance(workload.get("chat"), str):
        return
    try:
        workload["chat"] = parse_workload(workload["chat"])
    except ValueError as exc:
        raise LaneValueError("workload", None, ("chat",), str(exc)) from exc
    if workload["chat"] is None:
        del workload["chat"]
    else:
        workload.setdefault("endpoint", "chat")


def _trace(given: dict[str, Any]) -> None:
    """A trace given (workload.trace: its path) read once and set on the lane (`trace_given`), its lines
    checked against the per-slot context of a given --ctx-size (else MAX_CTX_TOKENS)."""
    server, ctx = given.get("server", {}), MAX_CTX_TOKENS
    if server.get("n_ctx"):
        slots = server.get("n_parallel") or max(given.get("levels") or DEFAULT_LEVELS)
        ctx = slot_ctx_at_most(server["n_ctx"], slots, bool(server.get("kv_unified")))
    try:
        trace_given(given, ctx)
    except TraceFieldError as exc:
        section, _, name = exc.field.rpartition(".")
        raise LaneValueError(section, None, (name,), str(exc)) from exc


def schema_field(path: str) -> FieldInfo:
    """The FieldInfo of a dotted LaneConfig path ("server.n_batch")."""
    model: type[BaseModel] = LaneConfig
    *heads, last = path.split(".")
    for head in heads:
        model = _model_of(model.model_fields[head].annotation)
    return model.model_fields[last]


def schema_default(path: str) -> Any:
    info = schema_field(path)
    return info.default_factory() if info.default_factory else info.default  # type: ignore[call-arg]


def value_type(path: str) -> Any:
    """The Python type of a field's values, Optional and constraints taken off: int, float, bool, str,
    or a list's origin (list)."""
    annotation = schema_field(path).annotation
    if get_origin(annotation) in (Union, type(int | None)):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return get_origin(annotation) or annotation


def choices(path: str) -> tuple[Any, ...] | None:
    """The values a Literal field allows ("workload.endpoint" → ("completions", "chat")); None for
    any other field."""
    annotation = schema_field(path).annotation
    return get_args(annotation) if get_origin(annotation) is Literal else None


def flag_text(value: object) -> str:
    """A default as a flag would be written: 1,2,4,8 for a list, %g for a number."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def help_text(key: LaneKey) -> str | None:
    """The flag's help, its "{default}" read from the schema."""
    if key.help is None or "{default}" not in key.help:
        return key.help
    return key.help.format(default=flag_text(schema_default(key.field)))


def file_fields(section: str, tables: Mapping[str, type[BaseModel]] | None = None) -> dict[str, Any]:
    """The lane-file keys of `section` ("" for a [[lanes]] table's own keys, "server" for
    [lanes.server]) as pydantic field definitions: the schema field's annotation and default, or the
    row's `file_type`. A sub-table ("server") is one field of its model in `tables`, where its first
    key is."""
    out: dict[str, Any] = {}
    for key in LANE_KEYS:
        if key.toml is None:
            continue
        table, _, name = key.toml.rpartition(".")
        if table != section:
            if not section and table not in out:
                model = (tables or {})[table]
                out[table] = (model, Field(default_factory=model))
            continue
        info = schema_field(key.field)
        default = (Field(default_factory=info.default_factory) if info.default_factory
                   else Field(default=info.default))
        out[name] = key.file_type or (info.rebuild_annotation(), default)
    return out


class LaneValueError(ValueError):
    """The first complaint about a lane's values. `section` is the dotted LaneConfig path of the model
    that raised it ("" for the lane itself), `loc` pydantic's location inside that model, `message`
    its text; `key` is the LANE_KEYS row of the field it is about, if any."""

    def __init__(self, section: str, exc: ValidationError | None, loc: tuple = (), message: str = "") -> None:
        if exc is not None:
            first = exc.errors()[0]
            loc, message = tuple(first["loc"]), str(first["msg"])
            needs = (first.get("ctx") or {}).get("error")
            if isinstance(needs, NeedsError):  # a field that would not act: the complaint is about it
                section, _, name = needs.field.rpartition(".")
                loc, message = (name,), str(needs)
        self.section = section
        self.loc = tuple(loc)
        self.message = message.removeprefix("Value error, ")
        super().__init__(self.message)

    @property
    def key(self) -> LaneKey | None:
        if not self.loc:
            return None
        return BY_FIELD.get(".".join(p for p in (self.section, str(self.loc[0])) if p))


def build_lane(values: Mapping[str, object]) -> LaneConfig:
    """A LaneConfig from given values (dotted field path → value). None is "not given": the schema's
    default applies, except that runtime.model_dir is resolve_model_dir's choice and a lane whose
    runtime satbench does not start (runtime.kind "url") has no model (its server's is measured).
    Each section (workload, server, runtime) is validated before the lane's own fields, in
    LaneConfig's field order, so the first complaint is that order's. Raises LaneValueError."""
    given: dict[str, Any] = {}
    for path, value in values.items():
        head, _, rest = path.partition(".")
        if value is not None and rest:
            given.setdefault(head, {})[rest] = value
        elif value is not None:
            given[path] = value
    _adaptive(given)
    _lengths(given)
    _chat(given)
    _trace(given)
    runtime = given.setdefault("runtime", {})
    runtime["model_dir"] = resolve_model_dir(runtime.get("model_dir"))
    if not class_of(runtime).starts_server:  # a running server's model is its own
        runtime["model"] = None
    for section, info in LaneConfig.model_fields.items():
        if isinstance(given.get(section), dict):
            model: type[BaseModel] = _model_of(info.annotation)
            try:
                given[section] = model.model_validate(given[section])
            except ValidationError as exc:
                raise LaneValueError(section, exc) from exc
    try:
        return LaneConfig.model_validate(given)
    except ValidationError as exc:
        raise LaneValueError("", exc) from exc
