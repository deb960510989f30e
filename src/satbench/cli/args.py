"""Command-line arguments → typed configuration: the parser (one-line errors, exit 2), the
single-lane flags, and the RunConfig they or a lane file describe."""

from __future__ import annotations

import argparse
from pathlib import Path

from pydantic import ValidationError

import satbench
from satbench.config.schema import (BUILTIN_MODEL, FairnessConfig, LaneConfig, RunConfig, RuntimeConfig, ServerParams,
                             WorkloadConfig, parse_levels, resolve_model_dir)
from satbench.errors import UserError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise UserError(f"{self.prog}: {message}")


# flags that describe one lane; a lane file replaces all of them
_LANE_FLAGS = ("model", "url", "served_model", "api_key_env", "api_key_file", "ca_cert", "server_bin", "concurrency",
               "prompt_tokens", "output_tokens",
               "requests_per_level", "repetitions", "request_timeout", "parallel", "ctx_size", "batch_size",
               "ubatch_size", "threads", "n_gpu_layers", "model_dir", "port")


def _sweep_args(p: argparse.ArgumentParser) -> None:
    lanes = p.add_argument_group("several lanes")
    lanes.add_argument("--lanes", help="lane file (TOML): several models/runtimes, each with its knobs and SLO")
    lanes.add_argument("--together", action="store_true",
                       help="also run all lanes at once and report each one's degradation")
    lanes.add_argument("--with-fairness", action="store_true",
                       help="then run the fairness and starvation checks of every lane (same run directory)")
    lanes.add_argument("--checks", help="fairness checks to run, e.g. S1,S2 (default all six: F1,F2,F3,S1,S2,S3)")
    lanes.add_argument("--refine", action="store_true",
                       help="measure 2-3 extra levels between the points that bracket the knee, then recommend")
    src = p.add_argument_group("one lane (without --lanes)")
    src.add_argument("--model", help=f"GGUF file, {BUILTIN_MODEL} (default) or synthetic:ARCH-SIZE")
    src.add_argument("--model-dir", help="where built-in models are assembled "
                     "(default $SATBENCH_MODEL_DIR or ./.satbench/models)")
    src.add_argument("--url", help="measure a running server (llama-server or OpenAI-compatible)")
    src.add_argument("--served-model", metavar="ID", help="with --url: the model to measure, one of the ids "
                     "the server's /v1/models lists (default: the first)")
    src.add_argument("--api-key-env", help="environment variable holding the remote server's API key")
    src.add_argument("--api-key-file", help="file holding the remote server's API key (sent only to --url)")
    src.add_argument("--ca-cert", help="PEM CA or self-signed certificate to trust for an https --url "
                     "(besides the system's CAs)")
    src.add_argument("--insecure", action="store_true", help="do NOT verify the https --url's certificate "
                     "(a warning is printed and run.json records it)")
    src.add_argument("--server-bin", help="start this llama-server binary instead of the embedded one")
    wl = p.add_argument_group("workload")
    wl.add_argument("--concurrency", help="levels, e.g. 1,2,4,8,16 (default 1,2,4,8)")
    wl.add_argument("--prompt-tokens", type=int, help=f"default {WorkloadConfig().prompt_tokens}")
    wl.add_argument("--output-tokens", type=int, help=f"default {WorkloadConfig().output_tokens}")
    wl.add_argument("--requests-per-level", type=int, help="measured requests per level and repetition "
                    "(default max(8N, 32))")
    wl.add_argument("--repetitions", type=int, help="default 3")
    wl.add_argument("--shared-prefix", action="store_true", help="same prompt for all, prompt cache on")
    wl.add_argument("--request-timeout", type=float, help="seconds per request (default 300)")
    ll = p.add_argument_group("llama.cpp server (same meaning as llama-server's flags)")
    ll.add_argument("-np", "--parallel", type=int, help="slots (default: the highest level)")
    ll.add_argument("-c", "--ctx-size", type=int, help="total context (default: enough for every slot)")
    ll.add_argument("-b", "--batch-size", type=int, help=f"default {ServerParams().n_batch}")
    ll.add_argument("-ub", "--ubatch-size", type=int, help=f"default {ServerParams().n_ubatch}")
    ll.add_argument("-t", "--threads", type=int)
    ll.add_argument("-ngl", "--n-gpu-layers", type=int)
    ll.add_argument("--kv-unified", action="store_true")
    ll.add_argument("--port", type=int, help="port on 127.0.0.1 for a server satbench starts (default: a free one)")
    p.add_argument("-o", "--output", help="run directory (default: runs/<timestamp>)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue an interrupted run from its first unfinished "
                   "level (with no other flags: the run's own configuration)")
    p.add_argument("--strict", action="store_true", help="refuse levels above the server's slot count "
                   "(default: warn and flag them queue_bound)")


def build_parser() -> _Parser:
    parser = _Parser(prog="satbench", description="How many requests at once should this llama.cpp node take?")
    parser.add_argument("--version", action="version", version=f"satbench {satbench.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sw = sub.add_parser("sweep", help="closed-loop concurrency sweep against a real server")
    _sweep_args(sw)
    fa = sub.add_parser("fairness", help="fairness and starvation checks (F1-F3, S1-S3) per lane")
    _sweep_args(fa)
    an = sub.add_parser("analyze", help="recompute results.json from a run directory's raw files")
    an.add_argument("run_dir")
    sc = sub.add_parser("schema", help="print a published JSON Schema")
    sc.add_argument("name", choices=["results", "verdicts", "recommendations", "capability"])
    rc = sub.add_parser("recommend", help="write recommendations.json from a run directory")
    rc.add_argument("run_dir")
    ca = sub.add_parser("capability", help="the node's capability report, from recommendations checked against it")
    ca.add_argument("--recommendations", required=True, help="recommendations.json")
    ca.add_argument("--max-age-days", type=positive_days, default=30.0,
                    help="refuse older recommendations (default 30)")
    ca.add_argument("--format", choices=["json", "litellm"], default="json",
                    help="json: the capability report; litellm: a LiteLLM proxy model_list fragment")
    _sweep_args(ca)
    rp = sub.add_parser("report", help="write the evidence bundle: EVIDENCE.md, report.html, plots, results.csv, "
                        "SHA256SUMS")
    rp.add_argument("run_dir")
    ve = sub.add_parser("verify", help="check a run directory against its SHA256SUMS and recompute its results")
    ve.add_argument("run_dir")
    co = sub.add_parser("compare", help="ratios B ÷ A per lane and level, with CIs and significance")
    co.add_argument("run_a")
    co.add_argument("run_b")
    mo = sub.add_parser("models", help="model files")
    mo_sub = mo.add_subparsers(dest="models_command", required=True, parser_class=_Parser)
    mk = mo_sub.add_parser("make", help="write a SYNTHETIC random-weight GGUF that llama.cpp loads")
    mk.add_argument("--arch", required=True, choices=["llama", "qwen3moe", "deepseek2", "deepseek4"],
                    help="deepseek4: DeepSeek V4 (compressed attention, hyper-connections, hash routing)")
    mk.add_argument("--size", required=True, choices=["tiny", "small", "1.5b", "64e", "gpu"],
                    help="tiny, small: every arch, vocab 1,024; 1.5b: llama, 1.5 B parameters, vocab 128,256 "
                         "(3.0 GB); 64e: deepseek2, 64 experts top-6 + 2 shared, 7.0 B parameters, vocab 102,400 "
                         "(13.9 GB); gpu: deepseek4, V4-Flash's attention and routing, 64 experts top-6 + 1 "
                         "shared, 4.5 B parameters, vocab 129,280 (9.1 GB)")
    mk.add_argument("--vocab", type=int, help="vocabulary size instead of the size's own (512 to 262,144), "
                    "every other dimension unchanged")
    mk.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE",
                    help="replace one dimension of the size (repeatable), e.g. head_dim=256 or "
                         "compress_ratios=0,4,128,0; a shape llama.cpp is known to crash on is refused")
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("-o", "--output", required=True, help="FILE.gguf")
    mk.add_argument("--force", action="store_true",
                    help="replace an existing file at -o that is not a synthetic GGUF written by satbench")
    return parser


def _given(value, default):
    return default if value is None else value


def lane_config(a: argparse.Namespace) -> LaneConfig:
    """One lane from the single-lane flags; pydantic's complaints become one-line UserErrors."""
    if a.url and (a.model or a.server_bin or a.port):
        raise UserError("--url measures a running server; it cannot be combined with --model, --server-bin or --port")
    started_only = [flag for flag, value in (("--parallel", a.parallel), ("--ctx-size", a.ctx_size),
                                             ("--ubatch-size", a.ubatch_size), ("--threads", a.threads),
                                             ("--n-gpu-layers", a.n_gpu_layers), ("--kv-unified", a.kv_unified or None))
                    if value is not None]
    if a.url and started_only:  # --batch-size stays: it declares the server's n_batch to the fairness checks
        raise UserError(f"--url measures a running server, which satbench does not start: {', '.join(started_only)} "
                        "would not be applied (and would be recorded as if it were)")
    _check_remote_flags(a)
    kind = "url" if a.url else ("native" if a.server_bin else "embedded")
    try:
        return LaneConfig(
            levels=parse_levels(_given(a.concurrency, "1,2,4,8")),
            requests_per_level=a.requests_per_level,
            repetitions=_given(a.repetitions, 3),
            request_timeout_s=_given(a.request_timeout, 300.0),
            workload=WorkloadConfig(prompt_tokens=_given(a.prompt_tokens, WorkloadConfig().prompt_tokens),
                                    output_tokens=_given(a.output_tokens, WorkloadConfig().output_tokens),
                                    shared_prefix=a.shared_prefix),
            server=ServerParams(n_parallel=a.parallel, n_ctx=a.ctx_size,
                                n_batch=_given(a.batch_size, ServerParams().n_batch),
                                n_ubatch=_given(a.ubatch_size, ServerParams().n_ubatch), n_threads=a.threads,
                                n_gpu_layers=a.n_gpu_layers, kv_unified=a.kv_unified, port=a.port),
            runtime=RuntimeConfig(kind=kind, model=None if a.url else (a.model or BUILTIN_MODEL),
                                  model_dir=resolve_model_dir(a.model_dir), server_bin=a.server_bin,
                                  url=a.url, served_model=a.served_model, api_key_env=a.api_key_env,
                                  api_key_file=a.api_key_file, ca_cert=a.ca_cert, insecure=a.insecure),
        )
    except ValueError as exc:  # ValidationError is a ValueError
        raise UserError(first_error(exc, _FLAG_OF)) from exc


def _check_remote_flags(a: argparse.Namespace) -> None:
    """The served model, keys and TLS options go with --url only; one key source; verification on,
    off or widened."""
    given = [f for f, on in (("--served-model", a.served_model), ("--api-key-env", a.api_key_env),
                             ("--api-key-file", a.api_key_file), ("--ca-cert", a.ca_cert), ("--insecure", a.insecure))
             if on]
    if given and not a.url:
        raise UserError(f"{', '.join(given)}: only for a remote server; use with --url")
    if a.api_key_env and a.api_key_file:
        raise UserError("--api-key-env and --api-key-file are mutually exclusive: give one")
    if a.ca_cert and a.insecure:
        raise UserError("--ca-cert and --insecure contradict each other: give one")
    if (a.ca_cert or a.insecure) and not a.url.lower().startswith("https://"):
        raise UserError("--ca-cert and --insecure apply to an https:// --url only")


def run_config(a: argparse.Namespace) -> RunConfig:
    """The run: from a lane file (--lanes), else one lane from the flags."""
    cfg = lanes_config(a)
    if a.checks:
        wanted = [c.strip().upper() for c in a.checks.split(",") if c.strip()]
        try:
            lanes = [lane.model_copy(update={"fairness": FairnessConfig.model_validate(
                {**lane.fairness.model_dump(), "checks": wanted})}) for lane in cfg.lanes]
        except ValueError as exc:
            raise UserError(f"--checks {a.checks}: expected a list of F1, F2, F3, S1, S2, S3") from exc
        cfg = cfg.model_copy(update={"lanes": lanes})
    if a.command == "fairness":
        if a.together or a.with_fairness or a.refine:
            raise UserError("satbench fairness runs only the checks; --together, --with-fairness and --refine "
                            "belong to sweep")
        return cfg.model_copy(update={"fairness_only": True, "strict": a.strict})
    if a.checks and not a.with_fairness:  # else the choice would be recorded and silently do nothing
        raise UserError("--checks chooses fairness checks: add --with-fairness (or run `satbench fairness`)")
    return cfg.model_copy(update={"with_fairness": a.with_fairness, "refine": a.refine, "strict": a.strict})


def lanes_config(a: argparse.Namespace) -> RunConfig:
    if a.lanes:
        given = [f"--{f.replace('_', '-')}" for f in _LANE_FLAGS if getattr(a, f) is not None]
        given += ["--insecure"] if a.insecure else []
        if given or a.shared_prefix or a.kv_unified:
            raise UserError(f"--lanes describes every lane; drop {', '.join(given) or 'the single-lane flags'}")
        from satbench.cli.lanefile import load_lane_file

        return load_lane_file(Path(a.lanes), together=True if a.together else None)
    if a.together:
        raise UserError("--together needs a lane file with at least two lanes (--lanes FILE)")
    return RunConfig(lanes=[lane_config(a)])


def run_flags_given(a: argparse.Namespace) -> bool:
    """Did the user describe the run (so --resume must check it), or only name the run directory?"""
    return (any(getattr(a, f) is not None for f in _LANE_FLAGS) or bool(a.lanes or a.checks) or a.together
            or a.with_fairness or a.refine or a.strict or a.shared_prefix or a.kv_unified)


# the flag a config field comes from (the field names of LaneConfig and the models it holds)
_FLAG_OF = {"levels": "--concurrency", "requests_per_level": "--requests-per-level",
            "repetitions": "--repetitions",
            "request_timeout_s": "--request-timeout", "prompt_tokens": "--prompt-tokens",
            "output_tokens": "--output-tokens", "n_parallel": "--parallel", "n_ctx": "--ctx-size",
            "n_batch": "--batch-size", "n_ubatch": "--ubatch-size", "n_threads": "--threads",
            "n_gpu_layers": "--n-gpu-layers", "port": "--port", "served_model": "--served-model"}


def first_error(exc: ValueError, flags: dict[str, str] | None = None) -> str:
    """pydantic's first complaint in one line: the flag (from `flags`, by the field's name) or the
    field, then what is wrong (the allowed range, for a number)."""
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        head = str(err["loc"][0]) if err["loc"] else ""
        if flags and head in flags:
            return f"{flags[head]}: {msg}"
        loc = ".".join(str(x) for x in err["loc"]) or "config"
        return f"invalid {loc}: {msg}"
    return str(exc)


MAX_AGE_DAYS = 36_500.0


def positive_days(text: str) -> float:
    """argparse type of --max-age-days: a finite number of days above 0."""
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of days, got {text!r}") from None
    if not 0 < days <= MAX_AGE_DAYS:  # nan fails every comparison
        raise argparse.ArgumentTypeError(f"must be a number of days above 0 and at most {MAX_AGE_DAYS:g}, "
                                         f"got {text!r}")
    return days
