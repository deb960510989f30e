"""Command-line arguments → typed configuration: the parser (one-line errors, exit 2), the
single-lane flags, and the RunConfig they or a lane file describe."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

import satbench
from satbench.cli.exits import help_epilog
from satbench.cli.lanekeys import (
    FLAG_KEYS,
    ONE_LANE,
    SERVER,
    TRAFFIC_FIELDS,
    LaneKey,
    LaneValueError,
    build_lane,
    choices,
    help_text,
    value_type,
)
from satbench.config.ranges import number_text
from satbench.config.schema import (
    REPETITIONS_NEED,
    FairnessConfig,
    LaneConfig,
    RunConfig,
    idle_repetitions,
    list_items,
    parse_levels,
    parse_rates,
)
from satbench.errors import UserError

FILE_SCHEMA_NAMES = ("results", "verdicts", "recommendations", "capability", "fleet")
# what each command's --json prints (cli.output.OUTPUT_SCHEMAS)
OUTPUT_SCHEMA_NAMES = tuple(f"output-{c}" for c in (
    "sweep", "fairness", "analyze", "recommend", "capability", "report", "verify", "compare", "schema",
    "models-make", "fleet-run", "fleet-merge"))


class _Parser(argparse.ArgumentParser):
    """Every satbench parser: the exit codes as its help's epilog, and one-line errors (exit 2) that
    cli.main prefixes once with `satbench: error:`, naming the subcommand (`schema: argument ...`)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("epilog", help_epilog())
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        where = self.prog.removeprefix("satbench").strip()
        raise UserError(f"{where}: {message}" if where else message)


def _sweep_args(p: argparse.ArgumentParser, fairness: bool = False) -> None:
    """The flags of `sweep`, or (fairness) of `fairness`: the same lanes and run directory, without
    the sweep's own scenarios (--together, --with-fairness, --refine)."""
    lanes = p.add_argument_group("several lanes")
    lanes.add_argument("--lanes",
                       help="lane file (TOML): several models/runtimes, each with its knobs and SLO")
    if not fairness:
        lanes.add_argument("--together", action="store_true",
                           help="also run all lanes at once and report each one's degradation")
        lanes.add_argument("--with-fairness", action="store_true", help="then run the fairness and "
                           "starvation checks of every lane (same run directory)")
    lanes.add_argument("--checks",
                       help="fairness checks to run, e.g. S1,S2 (default all six: F1,F2,F3,S1,S2,S3)")
    if not fairness:
        lanes.add_argument("--refine", action="store_true",
                           help="measure 2-3 extra levels between the points that bracket the knee, "
                                "then recommend")
    else:
        p.set_defaults(together=False, with_fairness=False, refine=False,
                       **{key.dest: None for key in FLAG_KEYS if key.sweep_only})
    _lane_args(p, sweep=not fairness)
    p.add_argument("-o", "--output", help="run directory (default: runs/<timestamp>)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run from its first "
                   "unfinished level (with no other flags: the run's own configuration)")
    p.add_argument("--strict", action="store_true", help="refuse levels above the server's slot count "
                   "(default: warn and flag them queue_bound)")


def _capability_lane_args(p: argparse.ArgumentParser) -> None:
    """What capability reads of the lanes: the lane file, or one lane's model, runtime and traffic
    (TRAFFIC_FIELDS: what its figures must be measured with), not the knobs of a measurement."""
    p.add_argument_group("several lanes").add_argument(
        "--lanes", help="lane file (TOML): several models/runtimes, each with its knobs and SLO")
    _lane_args(p, groups=(ONE_LANE, *TRAFFIC_FIELDS))
    p.set_defaults(together=False, **{key.dest: None for key in FLAG_KEYS if key.group != ONE_LANE})
    p.add_argument("-o", "--output", help="write the report here instead of stdout")


def _lane_args(p: argparse.ArgumentParser, groups: tuple[str, ...] | None = None, sweep: bool = True) -> None:
    """The single-lane flags (LANE_KEYS), in their groups (all, or those named; without `sweep`, not the
    sweep's own: `LaneKey.sweep_only`); each flag's type and stated default are its schema field's."""
    made: dict[str | None, argparse._ArgumentGroup] = {}
    for key in FLAG_KEYS:
        if (groups is not None and not {key.group, key.field} & {*groups}) or (key.sweep_only and not sweep):
            continue
        if key.group not in made:
            made[key.group] = p.add_argument_group(key.group)
        group = made[key.group]
        kind = value_type(key.field)
        if kind is bool:
            group.add_argument(*key.options, action="store_true", help=help_text(key))
        elif not key.text and kind in (int, float):
            group.add_argument(*key.options, type=number_type(key.options[-1], integer=kind is int),
                               help=help_text(key), metavar=key.metavar)
        elif (allowed := choices(key.field)) is not None:
            group.add_argument(*key.options, choices=allowed, help=help_text(key), metavar=key.metavar)
        elif not key.text and kind is list:  # repeatable; each value split as a shell would
            group.add_argument(*key.options, action="extend", type=shlex.split, help=help_text(key),
                               metavar=key.metavar)
        else:  # text, or what the caller parses (--concurrency, --budget)
            group.add_argument(*key.options, help=help_text(key), metavar=key.metavar)


def build_parser() -> _Parser:
    parser = _Parser(prog="satbench",
                     description="How many requests at once should this llama.cpp node take?")
    parser.add_argument("--version", action="version", version=f"satbench {satbench.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sw = sub.add_parser("sweep", help="closed-loop concurrency sweep against a real server")
    _sweep_args(sw)
    _output_args(sw, "sweep", "the run directory, status, exit code, results and recommendations")
    fa = sub.add_parser("fairness", help="fairness and starvation checks (F1-F3, S1-S3) per lane")
    _sweep_args(fa, fairness=True)
    _output_args(fa, "fairness", "the run directory, status, exit code and results (verdicts included)")
    an = sub.add_parser("analyze", help="recompute results.json from a run directory's raw files")
    an.add_argument("run_dir")
    _output_args(an, "analyze", "the run directory and its results.json")
    sc = sub.add_parser("schema", help="print a published JSON Schema")
    sc.add_argument("name", choices=[*FILE_SCHEMA_NAMES, *OUTPUT_SCHEMA_NAMES],
                    help="a file's schema, or output-COMMAND: what COMMAND --json prints")
    _output_args(sc, "schema", "the schema (as without --json)", product=True)
    rc = sub.add_parser("recommend", help="write recommendations.json from a run directory")
    rc.add_argument("run_dir")
    _output_args(rc, "recommend", "the recommendations.json written")
    ca = sub.add_parser("capability",
                        help="the node's capability report, from recommendations checked against it")
    ca.add_argument("--recommendations", required=True, help="recommendations.json")
    ca.add_argument("--max-age-days", type=positive_days, default=30.0,
                    help="refuse older recommendations (default 30)")
    ca.add_argument("--format", choices=["json", "litellm"], default="json",
                    help="json: the capability report; litellm: a LiteLLM proxy model_list fragment")
    for f, w in (("--accept-contended", "while other processes took CPU"),
                 ("--accept-workload", "with another workload than the lane's (kind, chat turns, trace)")):
        ca.add_argument(f, action="store_true", help=f"advertise a figure measured {w} (refused by default)")
    ca.add_argument("--node-id", help="the node's name for the router and a fleet merge (default: the "
                    "hostname)")
    ca.add_argument("--api-base", action="append", default=[], metavar="[LANE=]URL",
                    help="the base URL a router sends a lane's requests to (repeatable; a bare URL is "
                         "every lane's; default for a url lane: its URL + /v1)")
    _capability_lane_args(ca)
    _output_args(ca, "capability", "the capability report as JSON, whatever --format (-o still writes "
                 "--format's file)", product=True)
    rp = sub.add_parser("report", help="write the evidence bundle: EVIDENCE.md, report.html, plots, "
                        "results.csv, SHA256SUMS")
    rp.add_argument("run_dir")
    _output_args(rp, "report", "the files written and the bundle digest")
    ve = sub.add_parser("verify",
                        help="check a run directory against its SHA256SUMS and recompute its results")
    ve.add_argument("run_dir")
    _output_args(ve, "verify", "the verification, file by file, and the exit code")
    co = sub.add_parser("compare", help="ratios B ÷ A per lane and level, with CIs and significance")
    co.add_argument("run_a")
    co.add_argument("run_b")
    _output_args(co, "compare", "the ratios B ÷ A per lane and level")
    _fleet_args(sub)
    cp = sub.add_parser("completion", help="print a shell completion script (bash: eval \"$(satbench "
                        "completion bash)\"; fish: satbench completion fish | source)")
    cp.add_argument("shell", choices=["bash", "zsh", "fish"])
    cp.set_defaults(json=False, quiet=False, stdout_product=True)
    _models_args(sub.add_parser("models", help="model files"))
    return parser


def _models_args(mo: argparse.ArgumentParser) -> None:
    """The subcommands of `models` (`mo`): `models make`, a synthetic GGUF, with its flags."""
    mo_sub = mo.add_subparsers(dest="models_command", required=True, parser_class=_Parser)
    mk = mo_sub.add_parser("make", help="write a SYNTHETIC random-weight GGUF that llama.cpp loads")
    mk.add_argument("--arch", required=True, choices=["llama", "qwen3moe", "deepseek2", "deepseek4"],
                    help="deepseek4: DeepSeek V4 (compressed attention, hyper-connections, hash routing)")
    mk.add_argument("--size", required=True, choices=["tiny", "small", "1.5b", "64e", "gpu"],
                    help="tiny, small: every arch, vocab 1,024; 1.5b: llama, 1.5 B parameters, vocab "
                         "128,256 (3.0 GB); 64e: deepseek2, 64 experts top-6 + 2 shared, 7.0 B parameters, "
                         "vocab 102,400 (13.9 GB); gpu: deepseek4, V4-Flash's attention and routing, 64 "
                         "experts top-6 + 1 shared, 4.5 B parameters, vocab 129,280 (9.1 GB)")
    mk.add_argument("--vocab", type=number_type("--vocab", integer=True), help="vocabulary size instead of "
                    "the size's own (512 to 262,144), every other dimension unchanged")
    mk.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE",
                    help="replace one dimension of the size (repeatable), e.g. head_dim=256 or "
                         "compress_ratios=0,4,128,0; a shape llama.cpp is known to crash on is refused")
    mk.add_argument("--seed", type=number_type("--seed", integer=True), default=0)
    mk.add_argument("-o", "--output", required=True, help="FILE.gguf")
    mk.add_argument("--force", action="store_true",
                    help="replace an existing file at -o that is not a synthetic GGUF written by satbench")
    _output_args(mk, "models-make", "what was written: path, shape, parameters, bytes, sha256")


QUIET_HELP = "no progress bar and no tables; warnings and errors still on stderr"

def _output_args(p: argparse.ArgumentParser, name: str, what: str, product: bool = False) -> None:
    """--json and --quiet, on every command. `product`: the command's stdout is what it makes (a
    report, a schema), which --quiet leaves alone."""
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true",
                     help=f"print one JSON document on stdout: {what} (its schema: satbench schema "
                          f"output-{name}); progress, warnings and errors go to stderr")
    out.add_argument("-q", "--quiet", action="store_true",
                     help="nothing changes: stdout is the document itself" if product else QUIET_HELP)
    p.set_defaults(stdout_product=product)


def _fleet_args(sub) -> None:
    fl = sub.add_parser("fleet", help="the same lanes on every node of a Ray cluster; per-node reports "
                        "merged")
    fl_sub = fl.add_subparsers(dest="fleet_command", required=True, parser_class=_Parser)
    fr = fl_sub.add_parser("run", help="sweep every node of the inventory on a Ray cluster, verify each "
                           "run centrally, merge")
    fr.add_argument("--inventory", required=True, help="fleet.toml: the lane file and the nodes")
    fr.add_argument("--address", help="the Ray cluster: ray://HEAD:10001, HOST:6379 or auto (default: "
                    "$RAY_ADDRESS, else auto)")
    fr.add_argument("--per-class", action="store_true",
                    help="measure one node per hardware fingerprint in full; spot-check the others "
                         "against it")
    fr.add_argument("-o", "--output", help="fleet directory (default: fleet/<timestamp>)")
    fr.add_argument("--no-progress", action="store_true", help="no live progress view")
    _output_args(fr, "fleet-run", "the fleet directory, exit code and fleet.json's record")
    fm = fl_sub.add_parser("merge", help="merge per-node capability reports into one router configuration")
    fm.add_argument("reports", nargs="+", metavar="CAP.json")
    fm.add_argument("--format", choices=["json", "litellm", "prometheus"], default="json",
                    help="json: the fleet capability; litellm: a LiteLLM proxy model_list, one deployment "
                         "per node x lane; prometheus: a node_exporter textfile")
    fm.add_argument("--max-age-days", type=positive_days, default=30.0,
                    help="refuse reports generated or measured longer ago (default 30)")
    fm.add_argument("-o", "--output", help="write here instead of stdout")
    _output_args(fm, "fleet-merge", "the fleet capability as JSON, whatever --format (-o still writes "
                 "--format's file)", product=True)


def lane_config(a: argparse.Namespace) -> LaneConfig:
    """One lane from the single-lane flags (each sets its LANE_KEYS field); pydantic's complaints become
    one-line UserErrors naming the flag."""
    if a.url and (a.model or a.server_bin or a.port):
        raise UserError("--url measures a running server; it cannot be combined with --model, --server-bin "
                        "or --port")
    # --batch-size stays: it declares the server's n_batch to the fairness checks; --port is refused above
    started_only = [key.options[-1] for key in FLAG_KEYS if key.group == SERVER and _given(a, key)
                    and key.field not in ("server.n_batch", "server.port")]
    if a.url and started_only:
        raise UserError("--url measures a running server, which satbench does not start: "
                        f"{', '.join(started_only)} would not be applied (and would be recorded as if it "
                        "were)")
    _check_remote_flags(a)
    values: dict[str, object] = {key.field: getattr(a, key.dest) for key in FLAG_KEYS}  # text: parsed below
    values["runtime.kind"] = "url" if a.url else ("native" if a.server_bin else "embedded")
    values["runtime.model"] = a.model or None  # an empty --model is the default one
    try:
        if a.concurrency is not None:
            values["levels"] = parse_levels(a.concurrency, "--concurrency")
        if a.rate is not None:
            values["rates"] = parse_rates(a.rate, "--rate")
        return build_lane(values)
    except LaneValueError as exc:
        key = exc.key
        if key and key.flag:
            raise UserError(f"{key.flag}: {exc.message}") from exc
        raise UserError(f"invalid {'.'.join(str(x) for x in exc.loc) or 'config'}: {exc.message}") from exc
    except ValueError as exc:  # parse_levels, parse_rates
        raise UserError(str(exc)) from exc


def _given(a: argparse.Namespace, key: LaneKey) -> bool:
    """Was the flag given? (a value, or a switch turned on)"""
    value = getattr(a, key.dest)
    return value is not None and value is not False


def _check_remote_flags(a: argparse.Namespace) -> None:
    """The served model, keys and TLS options go with --url only; one key source; verification on,
    off or widened."""
    given = [f for f, on in (("--served-model", a.served_model), ("--api-key-env", a.api_key_env),
                             ("--api-key-file", a.api_key_file), ("--ca-cert", a.ca_cert),
                             ("--insecure", a.insecure)) if on]
    if given and not a.url:
        raise UserError(f"{', '.join(given)}: only for a remote server; use with --url")
    if a.api_key_env and a.api_key_file:
        raise UserError("--api-key-env and --api-key-file are mutually exclusive: give one")
    if a.ca_cert and a.insecure:
        raise UserError("--ca-cert and --insecure contradict each other: give one")
    if (a.ca_cert or a.insecure) and not a.url.lower().startswith("https://"):
        raise UserError("--ca-cert and --insecure apply to an https:// --url only")


def run_config(a: argparse.Namespace) -> RunConfig:
    """The run: from a lane file (--lanes), else one lane from the flags; the run-wide switches set and
    validated with it (a switch that would change nothing is refused: RunConfig's rules)."""
    cfg = lanes_config(a)
    if a.checks is not None:
        try:
            wanted = [c.upper() for c in list_items(a.checks, "--checks")]
            lanes = [lane.model_copy(update={"fairness": FairnessConfig.model_validate(
                {**lane.fairness.model_dump(), "checks": wanted})}) for lane in cfg.lanes]
        except ValidationError as exc:
            raise UserError(f"--checks {a.checks}: {_checks_problem(exc)}") from exc
        except ValueError as exc:  # list_items: an empty item
            raise UserError(str(exc)) from exc
        cfg = cfg.model_copy(update={"lanes": lanes})
    if a.command == "fairness":
        return _run_with(cfg, fairness_only=True, strict=a.strict)
    if a.checks is not None and not a.with_fairness:  # else the choice would be recorded and do nothing
        raise UserError("--checks chooses fairness checks: add --with-fairness (or run `satbench fairness`)")
    return _run_with(cfg, with_fairness=a.with_fairness, refine=a.refine, strict=a.strict)


def _checks_problem(exc: ValidationError) -> str:
    err = exc.errors()[0]
    if err["type"] == "value_error":  # FairnessConfig's own: a check named twice
        return str(err["msg"]).removeprefix("Value error, ")
    return "expected a list of F1, F2, F3, S1, S2, S3"


# RunConfig's switches as flags, for its refusals
_SWITCH_FLAGS = {"refine": "--refine", "together": "--together", "with_fairness": "--with-fairness"}


def _run_with(cfg: RunConfig, **switches: bool) -> RunConfig:
    """`cfg` with the run-wide switches set, validated again (model_copy alone would not): a refusal
    is one line naming the flag."""
    try:
        return RunConfig.model_validate({**dict(cfg), **switches})
    except ValidationError as exc:
        msg = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        field = msg.partition(":")[0]
        flag = _SWITCH_FLAGS.get(field)
        raise UserError(f"{flag}{msg[len(field):]}" if flag else msg) from None


def lanes_config(a: argparse.Namespace) -> RunConfig:
    if a.lanes:
        given = [key.options[-1] for key in FLAG_KEYS if _given(a, key) and key.field not in _UNNAMED]
        if given or any(_given(a, key) for key in FLAG_KEYS):
            drop = ", ".join(given) or "the single-lane flags"
            raise UserError(f"--lanes describes every lane; drop {drop}")
        from satbench.cli.lanefile import load_lane_file

        return load_lane_file(Path(a.lanes), together=True if a.together else None)
    if a.together:
        raise UserError("--together needs a lane file with at least two lanes (--lanes FILE)")
    lane = lane_config(a)
    if idle_repetitions(lane, together=False):
        raise UserError(f"--repetitions: {REPETITIONS_NEED}")
    return RunConfig(lanes=[lane])


# switches --lanes refuses without naming them
_UNNAMED = ("workload.shared_prefix", "server.kv_unified")
# a switch that alone does not make --resume take the flags' configuration
_NOT_A_RUN_FLAG = ("runtime.insecure",)


def run_flags_given(a: argparse.Namespace) -> bool:
    """Did the user describe the run (so --resume must check it), or only name the run directory?"""
    return (any(_given(a, key) for key in FLAG_KEYS if key.field not in _NOT_A_RUN_FLAG)
            or bool(a.lanes or a.checks) or a.together or a.with_fairness or a.refine or a.strict)


MAX_AGE_DAYS = 36_500.0


def number_type(flag: str, integer: bool = False) -> Callable[[str], int | float]:
    """argparse type of a number flag: the one number rule (config.ranges.number_text), its refusal
    one line naming the flag; the range is the field's."""
    def parse(text: str) -> int | float:
        try:
            return number_text(text, flag, integer)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag}: ")) from None
    parse.__name__ = "integer" if integer else "number"
    return parse


def positive_days(text: str) -> float:
    """argparse type of --max-age-days: a finite number of days above 0, by the one number rule."""
    try:
        days = float(number_text(text, "--max-age-days"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--max-age-days: ")) from None
    if not 0 < days <= MAX_AGE_DAYS:  # nan fails every comparison
        raise argparse.ArgumentTypeError(f"must be a number of days above 0 and at most {MAX_AGE_DAYS:g}, "
                                         f"got {text!r}")
    return days
