"""The content of EVIDENCE.md and report.html: what a stranger needs to trust or repeat every number.

Built from the derived files alone (results.json, recommendations.json) plus the raw files'
hashes, so `analyze` then `report` on the raw files gives the same text. Each section appears
when its data exists (no fairness section without verdicts, …). Prompts and generated text
are never recorded by satbench, so no payload can reach a report. The answer comes first, after
the title (report/evidence_answer), then the provenance: the sections on what was run are
report/evidence_setup's, the findings report/evidence_findings'; this module adds the raw
files, the handoff and the closing note, and orders them all (`evidence_blocks`).
"""

from __future__ import annotations

from collections.abc import Sequence

from satbench.analysis.results import VERDICTS_SCHEMA_VERSION, LaneResult, ResultsFile
from satbench.config.runtime import runtime_class
from satbench.records.manifest import ResumeRecord
from satbench.report.document import Block, Bullets, Heading, Para, TableBlock
from satbench.report.evidence_answer import answer
from satbench.report.evidence_findings import flags, lane_section, limitations, plan_section, recommendations
from satbench.report.evidence_setup import (
    afar,
    commands,
    lanes_table,
    machine,
    memory_table,
    server_failures,
    shell_line,
    title,
)
from satbench.report.integrity import SUMS_FILE, FileHash
from satbench.report.plot_file import PlotFile
from satbench.saturation.recommendations_file import RecommendationsFile


def raw_files(hashes: Sequence[FileHash], bundle_note: str) -> list[Block]:
    return [Heading(level=2, text="Raw files and their hashes"),
            Para(text="What was measured, as written during the run. Every figure above is recomputed from "
                      f"these by `satbench analyze`. `{SUMS_FILE}` lists these and every derived file; "
                      f"{bundle_note}"),
            TableBlock(headers=["file", "bytes", "sha256"],
                       rows=[[h.file, f"{h.size_bytes:,}", f"`{h.sha256}`"] for h in hashes])]


def handoff(results: ResultsFile, recs: RecommendationsFile | None,
            recs_sha256: str | None) -> list[Block]:
    items = []
    if recs is not None:
        items.append(f"`recommendations.json` (schema {recs.schema_version}, `satbench schema "
                     f"recommendations`; sha256 `{recs_sha256}` when this report was written): per lane the "
                     "recommended concurrency, its binding reason and the figures expected there.")
        items.append(f"The capability report, run inside the run directory: `{capability_command(results)}` "
                     "(add `--format litellm` for a LiteLLM fragment; relative file paths are as the sweep "
                     "was given them) — it refuses a lane measured on other hardware, another build, "
                     "a model of another architecture or another model file"
                     + (f", and {', '.join(lane.lane for lane in results.lanes if afar(lane))}: measured "
                        "from another machine" if any(afar(lane) for lane in results.lanes) else "") + ".")
    items.append(f"`results.json` (schema {results.schema_version}) for every figure with its CI; "
                 "`results.csv` for spreadsheets" + (f"; `verdicts.json` (schema {VERDICTS_SCHEMA_VERSION})"
                                        if any(lane.fairness for lane in results.lanes) else "") + ".")
    missing = []
    for lane in results.lanes:
        top = max((lv.concurrency for lv in lane.levels), default=None)
        missing.append(f"{lane.lane}: concurrency above {top}" if top else f"{lane.lane}: no level measured")
        missing += [f"{lane.lane}: {f.level} or more in flight — the server failed there ({f.scenario})"
                    for f in lane.server_failures if f.level]
        lengths = "/".join(lane.workload.length_texts())
        missing.append(f"{lane.lane}: other prompt/output lengths than {lengths} tokens"
                       + (", and prompt-cache reuse (no --shared-prefix)" if lane.workload.kind == "random"
                          else "")
                       + (f", and other conversations than {lane.workload.kind_text}"
                          if lane.workload.chat is not None else ""))
        if not lane.fairness:
            missing.append(f"{lane.lane}: fairness and starvation (run with --with-fairness)")
        if not lane.together_levels and len(results.lanes) > 1:
            missing.append(f"{lane.lane}: interference from the other lanes (run with --together)")
        if afar(lane):
            missing.append(f"{lane.lane}: the server's GPU, memory and CPU (it runs on another machine)")
        elif not lane.hardware.gpus:
            missing.append(f"{lane.lane}: GPU memory and utilisation (no GPU on this machine)")
    if results.config.together:
        from satbench.config.schema import not_together

        missing += not_together(results.config)  # lanes of unequal length: the rest ran alone only
    return [Heading(level=2, text="Handoff"), Para(text="A consumer may rely on:"), Bullets(items=items),
            Para(text="Not measured by this run (do not extrapolate to it):"), Bullets(items=missing)]


_URL_ACCESS_FLAGS = ("--served-model", "--api-key-env", "--api-key-file", "--ca-cert")


def _flag_value(argv: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def capability_command(results: ResultsFile) -> str:
    """The capability command that checks this run's lanes, to paste inside the run directory: the
    sweep's lane file; else a url lane's URL and access flags (without them capability would serve
    the built-in model instead), a started server's model file (absolute) and llama-server binary."""
    argv, opts = results.command_line, ["--lanes", "FILE"]
    lanes_file = _flag_value(argv, "--lanes")
    if lanes_file is not None:
        opts = ["--lanes", lanes_file]
    elif len(results.lanes) == 1:
        lane, rt = results.lanes[0], results.lanes[0].runtime
        if not rt.starts_server:
            opts = ["--url", rt.base_url]
            opts += [x for flag in _URL_ACCESS_FLAGS if (v := _flag_value(argv, flag)) is not None
                     for x in (flag, v)]
            opts += ["--insecure"] if "--insecure" in argv else []
        else:
            opts = ["--model", lane.model.path or "MODEL.gguf"]
            if runtime_class(rt.kind).needs_binary:
                opts += ["--server-bin", _flag_value(argv, "--server-bin") or "LLAMA_SERVER"]
    return shell_line(["satbench", "capability", "--recommendations", "recommendations.json", *opts])


def evidence_blocks(results: ResultsFile, recs: RecommendationsFile | None,
                    recs_sha256: str | None, plots: Sequence[PlotFile], hashes: Sequence[FileHash],
                    resumes: Sequence[ResumeRecord] = ()) -> list[Block]:
    """Every block of the report. The run directory's path is not an input: the text (and so the bundle
    digest) must not depend on how the directory was spelled, and its commands run inside it."""
    blocks = title(results) + answer(results, recs)
    blocks += commands(results, resumes) + machine(results) + lanes_table(results)
    blocks += memory_table(results) + server_failures(results)
    for lane in results.lanes:
        blocks += lane_section(lane, plots)
    blocks += recommendations(recs) + plan_section(results) + flags(results) + limitations(results, recs)
    blocks += raw_files(hashes, "check them with `satbench verify .` inside the run directory.")
    blocks += handoff(results, recs, recs_sha256)
    forms = "; ".join(f"{lane.lane}: {prompt_form(lane)}" for lane in results.lanes)
    blocks.append(Para(text=f"Prompts and generated text are not recorded by satbench ({forms}), so none "
                            "appear here; API keys and URL credentials are redacted before anything is "
                            "written."))
    return blocks


def prompt_form(lane: LaneResult) -> str:
    """How the lane's prompts were built (workload.py): token ids of exactly the asked length where the
    server tokenizes (llama.cpp's /tokenize), else text whose token count only the server knows."""
    w, shared = lane.workload, lane.workload.shared_prefix
    if w.chat is not None:
        system = (f"a {w.system_prompt_tokens}-token system prompt shared by every conversation, then "
                  if w.system_prompt_tokens else "")
        return (f"chat messages ({w.kind_text}): {system}each turn's history and a new user message of "
                f"{w.length_texts()[0]} tokens, each starting with a unique prefix; earlier answers "
                "resent as filler text of the length asked; the server's template builds the prompt")
    if lane.runtime.llamacpp:
        start = ("the same filler tokens for every request" if shared
                 else "a unique text prefix, then filler tokens")
        return f"token ids: {start}, {w.length_texts()[0]} per sweep request"
    start = "the same filler words for every request" if shared else "a unique prefix, then filler words"
    return (f"text: {start}, about {w.length_texts()[0]} words per sweep request; the server's own token "
            "count, where it reports usage, is each event's server_prompt_tokens")
