"""Command line: parse → typed config → library call → exit code. User errors: one line, no traceback."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from pydantic import ValidationError

import satbench
from satbench.config import (BUILTIN_MODEL, FairnessConfig, LaneConfig, RunConfig, RuntimeConfig, ServerParams,
                             WorkloadConfig, parse_levels, resolve_model_dir)
from satbench.errors import Interrupted, SatbenchError, ServerGoneError, UserError
from satbench.runtimes.remote import redact_url


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        raise UserError(f"{self.prog}: {message}")


# flags that describe one lane; a lane file replaces all of them
_LANE_FLAGS = ("model", "url", "api_key_env", "api_key_file", "ca_cert", "server_bin", "concurrency", "prompt_tokens", "output_tokens",
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
    ca.add_argument("--max-age-days", type=float, default=30.0, help="refuse older recommendations (default 30)")
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
    mk.add_argument("--arch", required=True, choices=["llama", "qwen3moe", "deepseek2"])
    mk.add_argument("--size", required=True, choices=["tiny", "small", "1.5b", "64e"],
                    help="tiny, small: every arch, vocab 1,024; 1.5b: llama, 1.5 B parameters, vocab 128,256 "
                         "(3.0 GB); 64e: deepseek2, 64 experts top-6 + 2 shared, 7.0 B parameters, vocab 102,400 "
                         "(13.9 GB)")
    mk.add_argument("--vocab", type=int, help="vocabulary size instead of the size's own (512 to 262,144), "
                    "every other dimension unchanged")
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("-o", "--output", required=True, help="FILE.gguf")
    return parser


def _given(value, default):
    return default if value is None else value


def lane_config(a: argparse.Namespace) -> LaneConfig:
    """One lane from the single-lane flags; pydantic's complaints become one-line UserErrors."""
    if a.url and (a.model or a.server_bin or a.port):
        raise UserError("--url measures a running server; it cannot be combined with --model, --server-bin or --port")
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
                                  url=a.url, api_key_env=a.api_key_env, api_key_file=a.api_key_file,
                                  ca_cert=a.ca_cert, insecure=a.insecure),
        )
    except ValueError as exc:  # ValidationError is a ValueError
        raise UserError(_first_error(exc)) from exc


def _check_remote_flags(a: argparse.Namespace) -> None:
    """Keys and TLS options go with --url only; one key source; verification on, off or widened."""
    given = [f for f, on in (("--api-key-env", a.api_key_env), ("--api-key-file", a.api_key_file),
                             ("--ca-cert", a.ca_cert), ("--insecure", a.insecure)) if on]
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
    cfg = _lanes_config(a)
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
    return cfg.model_copy(update={"with_fairness": a.with_fairness, "refine": a.refine, "strict": a.strict})


def _lanes_config(a: argparse.Namespace) -> RunConfig:
    if a.lanes:
        given = [f"--{f.replace('_', '-')}" for f in _LANE_FLAGS if getattr(a, f) is not None]
        given += ["--insecure"] if a.insecure else []
        if given or a.shared_prefix or a.kv_unified:
            raise UserError(f"--lanes describes every lane; drop {', '.join(given) or 'the single-lane flags'}")
        from satbench.lanefile import load_lane_file

        return load_lane_file(Path(a.lanes), together=True if a.together else None)
    if a.together:
        raise UserError("--together needs a lane file with at least two lanes (--lanes FILE)")
    return RunConfig(lanes=[lane_config(a)])


def _run_flags_given(a: argparse.Namespace) -> bool:
    """Did the user describe the run (so --resume must check it), or only name the run directory?"""
    return (any(getattr(a, f) is not None for f in _LANE_FLAGS) or bool(a.lanes or a.checks) or a.together
            or a.with_fairness or a.refine or a.strict or a.shared_prefix or a.kv_unified)


def _first_error(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "config"
        return f"invalid {loc}: {err['msg']}"
    return str(exc)


FAIRNESS_FAILED = 6


def _sigterm_as_interrupt(signum: int, frame: object) -> None:
    """SIGTERM becomes SIGINT, so that it takes Ctrl-C's path exactly: inside the event loop,
    asyncio.run's own SIGINT handler cancels the sweep and lets every `finally` run before
    KeyboardInterrupt leaves it. Raising KeyboardInterrupt here instead could land in the
    selector, outside any task, and leave the sweep's coroutine to be torn down at exit."""
    signal.raise_signal(signal.SIGINT)


def _remote_preflight(cfg: RunConfig) -> None:
    """Unreadable keys or CA files fail before anything starts; --insecure says so on stderr."""
    from satbench.access import check_remote_access

    for line in check_remote_access(cfg):
        print(line, file=sys.stderr)


def _cmd_sweep(a: argparse.Namespace) -> int:
    from satbench.report.progress import RichProgress
    from satbench.report.table import print_results
    from satbench.results import verdicts_of
    from satbench.sweep import Sweep, default_run_dir, prepare_run_dir

    argv = [redact_url(x) for x in ["satbench", *a.argv]]
    resume = None
    if a.resume:
        from satbench.resume import resumable_manifest

        if a.output:
            raise UserError("--resume continues RUN_DIR in place; drop -o")
        run_dir = Path(a.resume)
        resume = resumable_manifest(run_dir)
        cfg = run_config(a) if _run_flags_given(a) else resume.config
        _remote_preflight(cfg)
    else:
        cfg = run_config(a)
        _remote_preflight(cfg)
        run_dir = prepare_run_dir(Path(a.output) if a.output else default_run_dir())
    previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)  # kill / timeout / systemd stop = Ctrl-C
    try:
        results = Sweep(cfg, run_dir, argv, RichProgress(), resume=resume).run()
    except KeyboardInterrupt as exc:
        raise Interrupted(f"interrupted; what was measured is in {run_dir} (status: interrupted)") from exc
    except SatbenchError as exc:
        exc.args = (f"{exc} (run directory: {run_dir})",)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    print_results(results)
    if any(lane.levels for lane in results.lanes):
        _recommend(run_dir)
    _report(run_dir)
    print(f"run directory: {run_dir}")
    verdicts = verdicts_of(results)
    failures = [f for lane in results.lanes for f in lane.server_failures]
    if failures:
        for f in failures:
            below = f.level > 0
            print(f"satbench: {f.reason}; the rest of the run was measured and written"
                  + (" (recommendations stay below that level)" if below else ""), file=sys.stderr)
        return ServerGoneError.exit_code
    if verdicts is not None and verdicts.any_failed:
        print("satbench: a fairness or starvation check failed (see the verdict table)", file=sys.stderr)
        return FAIRNESS_FAILED
    return 0


def _cmd_analyze(a: argparse.Namespace) -> int:
    from satbench.analyze import analyze_and_write
    from satbench.report.table import print_results

    results = analyze_and_write(Path(a.run_dir))
    print_results(results)
    return 0


def _cmd_schema(a: argparse.Namespace) -> int:
    from satbench.capability import capability_json_schema
    from satbench.results import results_json_schema, verdicts_json_schema
    from satbench.saturation.recommend import recommendations_json_schema

    schema = {"results": results_json_schema, "verdicts": verdicts_json_schema,
              "recommendations": recommendations_json_schema, "capability": capability_json_schema}[a.name]()
    print(json.dumps(schema, indent=2, sort_keys=True))
    return 0


def _recommend(run_dir: Path) -> None:
    from satbench.report.table import print_recommendations
    from satbench.saturation.recommend import recommend, write_recommendations

    recs = recommend(run_dir)
    path = write_recommendations(run_dir, recs)
    print_recommendations(recs)
    print(f"recommendations: {path}")


def _cmd_capability(a: argparse.Namespace) -> int:
    import datetime as dt

    from satbench.capability import capability_report, render_json, render_litellm

    if a.together or a.with_fairness or a.checks or a.refine:
        raise UserError("capability reads recommendations; --together, --with-fairness, --checks and --refine "
                        "belong to sweep")
    if a.max_age_days <= 0:
        raise UserError("--max-age-days must be positive")
    cfg = _lanes_config(a)
    _remote_preflight(cfg)
    report = capability_report(cfg, Path(a.recommendations), dt.timedelta(days=a.max_age_days))
    text = render_json(report) if a.format == "json" else render_litellm(report, cfg)
    if a.output:
        from satbench.manifest import write_text_atomic

        write_text_atomic(Path(a.output), text)
    else:
        sys.stdout.write(text)
    for lane in report.lanes:
        if lane.status == "unmeasured":
            print(f"satbench: lane {lane.lane} is unmeasured here: {lane.reason}", file=sys.stderr)
    return 0


def _report(run_dir: Path) -> None:
    from satbench.report.bundle import write_report

    files = write_report(run_dir)
    print(f"report: {files.evidence}, {files.html} ({len(files.plots)} plots), {files.csv}; "
          f"bundle digest (sha256 of SHA256SUMS) {files.bundle_digest}")


def _cmd_report(a: argparse.Namespace) -> int:
    _report(Path(a.run_dir))
    return 0


VERIFY_FAILED = 7


def _cmd_verify(a: argparse.Namespace) -> int:
    from satbench.report.integrity import verify

    v = verify(Path(a.run_dir))
    for label, items in (("MODIFIED", v.modified), ("MISSING", v.missing), ("INCONSISTENT", v.inconsistent),
                         ("not listed (added after the report)", v.unlisted)):
        for item in items:
            print(f"{label}: {item}")
    if v.older_schema:
        print(f"written by an earlier satbench, consistent under the current schemas: {', '.join(v.older_schema)}")
    verdict = "OK" if v.ok else "FAILED"
    print(f"verify {verdict}: {v.files_checked} files in SHA256SUMS, {len(v.modified)} modified, "
          f"{len(v.missing)} missing, {len(v.inconsistent)} derived files inconsistent with the raw ones; "
          f"bundle digest {v.bundle_digest}")
    return 0 if v.ok else VERIFY_FAILED


def _cmd_compare(a: argparse.Namespace) -> int:
    from satbench.report.compare import compare_runs, print_comparison

    print_comparison(compare_runs(Path(a.run_a), Path(a.run_b)))
    return 0


def _cmd_recommend(a: argparse.Namespace) -> int:
    _recommend(Path(a.run_dir))
    return 0


def _cmd_models(a: argparse.Namespace) -> int:
    from satbench.models.synthetic import write_synthetic_gguf

    info = write_synthetic_gguf(Path(a.output), arch=a.arch, size=a.size, seed=a.seed, n_vocab=a.vocab)
    print(f"wrote {info.path}: SYNTHETIC random weights, {info.arch} {info.size}, vocab {info.n_vocab:,}, "
          f"seed {info.seed}, {info.n_params:,} parameters, {info.file_bytes:,} bytes, sha256 {info.sha256}")
    return 0


COMMANDS = {"sweep": _cmd_sweep, "fairness": _cmd_sweep, "analyze": _cmd_analyze, "schema": _cmd_schema,
            "models": _cmd_models, "recommend": _cmd_recommend, "capability": _cmd_capability, "report": _cmd_report,
            "verify": _cmd_verify, "compare": _cmd_compare}


def main(argv: list[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = build_parser().parse_args(argv)
        args.argv = list(argv)  # what the user typed, recorded in run.json (credentials redacted)
        return COMMANDS[args.command](args)
    except SatbenchError as exc:
        print(f"satbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("satbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
