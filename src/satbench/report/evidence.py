"""The content of EVIDENCE.md and report.html: what a stranger needs to trust or repeat every number.

Built from the derived files alone (results.json, recommendations.json) plus the raw files'
hashes, so `analyze` then `report` on the raw files gives the same text. Each section appears
when its data exists (no fairness section without verdicts, …). Prompts and generated text
are never recorded by satbench, so no payload can reach a report.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from satbench.analysis.results import VERDICTS_SCHEMA_VERSION, LaneResult, ResultsFile
from satbench.metrics.slot_memory import MARGIN_TEXT
from satbench.records.manifest import ResumeRecord, RuntimeInfo
from satbench.report.document import Block, Bullets, Code, Heading, Image, Para, TableBlock
from satbench.report.integrity import SUMS_FILE, FileHash
from satbench.report.plots import PlotFile
from satbench.report.table import (
    INTERFERENCE_HEADERS,
    LEVEL_HEADERS,
    LEVEL_LEGEND,
    MEMORY_HEADERS,
    RECOMMENDATION_HEADERS,
    VERDICT_HEADERS,
    interference_row,
    lane_title,
    level_ci_notes,
    level_row,
    memory_row,
    recommendation_row,
    verdict_row,
)
from satbench.saturation.recommend import RecommendationsFile
from satbench.server.memlog import LOG_VERBOSITY


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.1f} MiB"


def _cmd(argv: Sequence[str]) -> str:
    return shlex.join(argv)


def header(results: ResultsFile) -> list[Block]:
    p = results.provenance
    commit = p.satbench_commit or "not a git checkout"
    blocks: list[Block] = [
        Heading(level=1, text=f"satbench evidence: run {results.run_id}"),
        Para(text=f"Status: {results.status}"
                  f"{' — ' + results.status_reason if results.status_reason else ''}. "
                  f"Started {results.started_at}, finished {results.finished_at or 'n/a'}. "
                  f"satbench {p.satbench_version}, commit `{commit}`."),
    ]
    if p.satbench_modified_files:
        blocks.append(Para(text="The satbench checkout was modified when this ran; changed files: "
                                + ", ".join(f"`{f}`" for f in p.satbench_modified_files) + "."))
    return blocks


def _afar(lane: LaneResult) -> bool:
    """A url lane whose server ran on another machine than satbench (its hardware was not seen)."""
    return lane.runtime.kind == "url" and not lane.network.on_this_machine


def _where(lane: LaneResult) -> str:
    """Where a url lane's server ran: this machine (by loopback or one of its own addresses) or another."""
    if lane.network.path == "loopback":
        return "on this machine (loopback)"
    return "on another machine (remote network path)" if _afar(lane) else "on this machine (its own address)"


def _server_command(rt: RuntimeInfo, model: str | None, where: str) -> str:
    if rt.kind == "url":
        return f"a running server at {rt.base_url} {where}, given by --url; satbench did not start it"
    args = _cmd(["--model", model or "?", *rt.server_args])
    return (f"llama-server {args}" if rt.kind == "native"
            else f"embedded (xllamacpp, llama-server's flags): {args}")


def commands(results: ResultsFile, resumes: Sequence[ResumeRecord] = ()) -> list[Block]:
    blocks: list[Block] = [Heading(level=2, text="What was run"),
                           Para(text="The command, as recorded in `run.json` (credentials redacted):"),
                           Code(text=_cmd(results.command_line))]
    if resumes:
        blocks.append(Para(text="The run was resumed; each session re-ran only the units not yet finished, "
                                "and a unit cut short counts its latest session's records only:"))
        blocks.append(TableBlock(headers=["session", "started", "resumed from", "units already done",
                                          "command"],
                                 rows=[[str(r.session), r.started_at,
                                        r.from_status + (f" ({r.from_reason})" if r.from_reason else ""),
                                        str(r.units_already_complete), f"`{_cmd(r.command_line)}`"]
                                       for r in resumes]))
        servers = [[str(r.session), key, rt.base_url, str(rt.pid or "n/a"), _cmd(rt.server_args)]
                   for r in resumes for key, rt in sorted(r.servers.items())]
        if servers:
            blocks.append(TableBlock(headers=["session", "lane/scenario", "server", "pid", "flags"],
                                     rows=servers,
                                     caption="Servers the resumed sessions started (same model file and "
                                             "build, checked at start)"))
    rows = []
    for lane in results.lanes:
        prov = results.provenance.lanes.get(lane.lane)
        for label, rt in (("alone", lane.runtime), ("together", prov.together_runtime if prov else None),
                          ("fairness", prov.fairness_runtime if prov else None)):
            if rt is not None:
                rows.append([lane.lane, label, _server_command(rt, lane.model.path, _where(lane))])
    kind = "llama.cpp server" if all(lane.runtime.llamacpp for lane in results.lanes) else "server"
    blocks.append(TableBlock(headers=["lane", "server for", "server command line"], rows=rows,
                             caption=f"Each lane's own {kind} (bound to 127.0.0.1 when satbench started it)"))
    blocks.append(Para(text="To regenerate every derived file from the raw ones, and to check the bundle, "
                            "run these inside the run directory (the one that holds this file):"))
    blocks.append(Code(text=f"satbench analyze .\nsatbench recommend .\nsatbench report .\n"
                            f"satbench verify .        # or: sha256sum -c {SUMS_FILE}"))
    return blocks


def machine(results: ResultsFile) -> list[Block]:
    h = results.provenance.host
    usable = f", {h.cores_usable} usable by satbench and its server" if h.cores_usable is not None else ""
    items = [f"CPU: {h.cpu_model}{f' ({h.cpu_signature})' if h.cpu_signature else ''}, {h.cores_logical} "
             f"logical / {h.cores_physical or 'n/a'} physical cores{usable}",
             f"RAM: {h.ram_bytes / 2**30:.1f} GiB", f"OS: {h.os}; Python {h.python}"]
    items += [f"GPU: {g.name}, {_mib(g.memory_total_bytes)}, driver {g.driver or 'n/a'}, CUDA "
              f"{g.cuda or 'n/a'}"
              for g in h.gpus] or ["GPU: none visible through NVML"]
    items.append(f"hardware fingerprint (sha256): `{h.fingerprint_sha256}`")
    return [Heading(level=2, text="Machine"), Bullets(items=items)]


def lanes_table(results: ResultsFile) -> list[Block]:
    models, runtimes = [], []
    for lane in results.lanes:
        m, rt, net = lane.model, lane.runtime, lane.network
        build = f"b{rt.build_number}" if rt.build_number else (rt.build_info or "n/a")
        weights = "SYNTHETIC" if m.synthetic else ("real" if m.synthetic is False else "n/a")
        models.append([lane.lane, m.path or rt.model_alias or "remote", _mib(m.size_bytes), weights,
                       f"`{m.sha256}`" if m.sha256 else "n/a"])
        name = f"running server {_where(lane)}" if rt.kind == "url" else rt.name
        runtimes.append([lane.lane, f"{name} {rt.version or ''}".strip(),
                         f"{build}{' ' + rt.build_commit if rt.build_commit else ''}"
                         + (f"; binary sha256 `{rt.binary_sha256[:16]}…`" if rt.binary_sha256 else ""),
                         rt.backend or "n/a",
                         str(rt.total_slots) if rt.total_slots is not None else "n/a",
                         str(rt.per_slot_ctx) if rt.per_slot_ctx is not None else "n/a",
                         f"{net.path}, RTT p50 {net.rtt_ms_median:.2f} ms" if net.rtt_ms_median is not None
                         else net.path,
                         f"{lane.workload.prompt_tokens} / {lane.workload.output_tokens}"
                         + (" shared prefix" if lane.workload.shared_prefix else "")])
    return [Heading(level=2, text="Lanes: models and runtimes"),
            TableBlock(headers=["lane", "model file", "size", "weights", "sha256"], rows=models),
            TableBlock(headers=["lane", "runtime", "llama.cpp build", "backend", "slots", "per-slot ctx",
                                "network", "prompt / output tokens"], rows=runtimes)]


def memory_table(results: ResultsFile) -> list[Block]:
    """The lanes' memory side by side: what llama.cpp allocated as each server started."""
    if not any(lane.memory for lane in results.lanes):
        return []
    return [Heading(level=2, text="Memory per slot"),
            Para(text="From the buffer sizes llama.cpp printed as each lane's server started (a probe "
                      f"start at log verbosity {LOG_VERBOSITY}, `server-LANE-memory.log`): the weights it "
                      "holds, and its cache (KV, and the recurrent or compressed-attention state) per slot "
                      "at the lane's per-slot context. Slots that fit: the server's slots plus the cache "
                      f"slots the memory left after loading holds, less {MARGIN_TEXT} (GPU memory when the "
                      "cache is on a GPU, else RAM; the lower of the readings at start and after the "
                      "levels). Not in the cache: the server's prompt cache and context checkpoints, which "
                      "show in RSS."),
            TableBlock(headers=list(MEMORY_HEADERS), rows=[memory_row(lane) for lane in results.lanes])]


def server_failures(results: ResultsFile) -> list[Block]:
    rows = [[f.lane, f.scenario, str(f.level) if f.level else "n/a", str(f.repetition), f.reason,
             f"`{f.server_log}`" if f.server_log else "n/a",
             f"yes (pid {f.restarted_server.pid})" if f.restarted and f.restarted_server else "no",
             ", ".join(f.skipped_units) or "none"]
            for f in [f for lane in results.lanes for f in lane.server_failures] + results.lanes_not_started]
    if not rows:
        return []
    return [Heading(level=2, text="Server failures"),
            Para(text="A server crashed or stopped answering. What it finished before is kept; the lane's "
                      "levels at or above the one that failed were not asked for again, a fresh server "
                      "(where "
                      "satbench starts them) measured what remained below it, and no recommendation reaches "
                      "that level."),
            TableBlock(headers=["lane", "scenario", "in flight", "rep", "what happened", "server log",
                                "restarted", "units not run"], rows=rows)]


def gpu_table(lane: LaneResult) -> list[Block]:
    rows = [[str(lv.concurrency), str(lv.gpu.samples),
             "n/a" if lv.gpu.util_mean_pct is None else f"{lv.gpu.util_mean_pct:.0f} / "
                                                        f"{lv.gpu.util_max_pct:.0f}",
             "n/a" if lv.gpu.sm_clock_mean_mhz is None else f"{lv.gpu.sm_clock_mean_mhz:.0f}",
             f"{_mib(lv.gpu.mem_used_mean_bytes)} / {_mib(lv.gpu.mem_used_peak_bytes)}",
             "n/a" if lv.memory.server_cpu_cores is None else f"{lv.memory.server_cpu_cores:.2f}"]
            for lv in lane.levels if lv.gpu is not None]
    if not rows:
        return []
    return [TableBlock(headers=["N", "NVML readings", "GPU util mean / max %", "SM clock MHz",
                                "GPU memory mean / peak", "server CPU cores"], rows=rows,
                       caption=f"{lane.lane}: GPU (NVML, device-wide) and server CPU, steady windows")]


def _plots_for(plots: Sequence[PlotFile], lane: str) -> list[Block]:
    return [Image(file=p.file, title=p.title, caption=p.caption) for p in plots if p.lane == lane]


def lane_section(lane: LaneResult, plots: Sequence[PlotFile]) -> list[Block]:
    blocks: list[Block] = [Heading(level=2, text=f"Lane {lane.lane}"), Para(text=lane_title(lane))]
    if lane.slo is not None:
        blocks.append(Para(text=f"SLO: {lane.slo.model_dump_json()}"))
    for label, levels in (("alone on the machine", lane.levels), ("together with the run's other lanes",
                                                                   lane.together_levels)):
        if levels:
            blocks.append(TableBlock(headers=list(LEVEL_HEADERS), rows=[level_row(lv) for lv in levels],
                                     caption=f"{lane.lane}, {label}"))
    if lane.levels or lane.together_levels:
        notes = [n for tag, levels in (("", lane.levels), ("together ", lane.together_levels))
                 for lv in levels for n in level_ci_notes(lv, f"{tag}N={lv.concurrency} ")]
        blocks.append(Para(text=LEVEL_LEGEND + "."))
        if notes:
            blocks.append(Bullets(items=notes))
    blocks += gpu_table(lane)
    if lane.interference:
        blocks.append(TableBlock(headers=list(INTERFERENCE_HEADERS),
                                 rows=[interference_row(r) for r in lane.interference],
                                 caption=f"{lane.lane}: together ÷ alone, with 95% CI (conservative "
                                         "interval arithmetic)"))
    if lane.fairness:
        blocks.append(Heading(level=3, text=f"Fairness and starvation ({lane.lane})"))
        blocks.append(TableBlock(headers=list(VERDICT_HEADERS), rows=[verdict_row(v) for v in lane.fairness]))
    blocks += _plots_for(plots, lane.lane)
    return blocks


def recommendations(recs: RecommendationsFile | None) -> list[Block]:
    if recs is None:
        return []
    blocks: list[Block] = [Heading(level=2, text="Recommendations"),
                           TableBlock(headers=list(RECOMMENDATION_HEADERS),
                                      rows=[recommendation_row(r) for r in recs.lanes],
                                      caption="recommended = the largest measured level ≤ min(knee, SLO "
                                              "bound, slots, fairness cap, below a level whose server "
                                              "failed or "
                                              "where more than 1% of requests failed), none safe when no "
                                              "measured "
                                              "level is that low; out tok/s and p95 TTFT / TPOT with their "
                                              "95% CIs")]
    items = []
    for r in recs.lanes:
        items += [f"{r.lane}: {r.binding.detail}", f"{r.lane}: knee — {r.knee_reason}",
                  f"{r.lane}: server side {r.server_confirmation.statement}",
                  *([f"{r.lane}: what saturated ({r.saturation.resource}) — {r.saturation.statement}"]
                    if r.saturation is not None else []),
                  f"{r.lane}: USL — " + (f"peak N* ≈ {r.usl.peak_n:.1f}"
                                         if r.usl.peak_reported and r.usl.peak_n
                                         else r.usl.why_not or "no peak reported")]
    blocks.append(Bullets(items=items))
    return blocks


def flags(results: ResultsFile) -> list[Block]:
    items = [f"{lane.lane} {scenario} N={lv.concurrency}: {f}"
             for lane in results.lanes
             for scenario, levels in (("alone", lane.levels), ("together", lane.together_levels))
             for lv in levels for f in lv.flags]
    text = Bullets(items=items) if items else Para(text="No level raised a flag.")
    return [Heading(level=2, text="Flags raised"),
            Para(text="Every level's validity flags (few samples, Little's-law mismatch, retries, errors, "
                      "CPU contention, queue-bound levels, missing repetitions):"), text]


def limitations(results: ResultsFile, recs: RecommendationsFile | None) -> list[Block]:
    items = []
    for lane in results.lanes:
        if lane.model.synthetic:
            items.append(f"{lane.lane}: SYNTHETIC random weights — the timings are those of the architecture "
                         "and shapes, the text is meaningless; do not read quality into it.")
        if not lane.runtime.llamacpp:
            items.append(f"{lane.lane}: not a llama.cpp server — slots, queue estimate and token timing are "
                         "unavailable or approximate.")
        if lane.runtime.kind == "url" and not _afar(lane):
            items.append(f"{lane.lane}: a running server {_where(lane)}, given by --url — satbench did "
                         "not start it, so its process memory and CPU were not sampled"
                         + ("; GPU figures are NVML's device-wide readings of this machine."
                            if lane.hardware.gpus else "."))
        elif lane.runtime.kind == "url":
            items.append(f"{lane.lane}: a server on another machine (given by --url, remote network path) — "
                         "its memory, CPU and GPU were not sampled. Its figures hold for the server's "
                         "hardware, "
                         "which satbench did not see: the Machine section and the hardware fingerprint "
                         "describe "
                         "the measuring machine (this client), not the server, so the capability report "
                         "refuses "
                         "to advertise them; measure on the node itself to advertise the lane.")
    build = "llama.cpp" if all(lane.runtime.llamacpp for lane in results.lanes) else "server"
    remote = [lane.lane for lane in results.lanes if _afar(lane)]
    local = [lane.lane for lane in results.lanes if lane.lane not in remote]
    networked = [lane for lane in results.lanes if lane.network.path == "remote"]
    rtt = ("loopback RTT" if not networked else "client↔server network RTT, whose jitter enters the estimate"
           if len(networked) == len(results.lanes) else "client↔server RTT: loopback, or the network's")
    items += [
        f"Queue time is an estimate on llama.cpp (TTFT − server prompt_ms − {rtt}): the server stamps no "
        "queue time.",
        "Percentile CIs are distribution-free order-statistic intervals; throughput CIs are Student-t over "
        "repetitions, which assumes the repetitions are independent.",
    ]
    if local:
        items.append(f"Every figure{'' if not remote else ' of ' + ', '.join(local)} holds for this hardware "
                     f"fingerprint, this {build} build, this model file and this workload shape "
                     "(prompt/output tokens); the capability report refuses to apply it elsewhere.")
    if remote:
        items.append(f"{', '.join(remote)}: the figures hold for the remote server's hardware, this {build} "
                     "build, this model and this workload shape; as that hardware was not seen, the "
                     "capability "
                     "report refuses to advertise them anywhere.")
    if any(f.startswith("cpu_contention") for lane in results.lanes for lv in lane.levels for f in lv.flags):
        items.append("Some levels ran with the CPU saturated: the load generator shares the machine with the "
                     "server, so those levels measure the pair, not the server alone.")
    if results.status != "complete":
        items.append(f"The run is {results.status}: {results.status_reason or 'no reason recorded'}; "
                     "levels it did not reach are absent, not zero.")
    return [Heading(level=2, text="Limitations"), Bullets(items=items)]


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
                     "was given them) — it refuses a lane measured on other hardware, another build or "
                     "another model "
                     "file"
                     + (f", and {', '.join(lane.lane for lane in results.lanes if _afar(lane))}: measured "
                        "from another machine" if any(_afar(lane) for lane in results.lanes) else "") + ".")
    items.append(f"`results.json` (schema {results.schema_version}) for every figure with its CI; "
                 "`results.csv` for spreadsheets" + (f"; `verdicts.json` (schema {VERDICTS_SCHEMA_VERSION})"
                                        if any(lane.fairness for lane in results.lanes) else "") + ".")
    missing = []
    for lane in results.lanes:
        top = max((lv.concurrency for lv in lane.levels), default=None)
        missing.append(f"{lane.lane}: concurrency above {top}" if top else f"{lane.lane}: no level measured")
        missing += [f"{lane.lane}: {f.level} or more in flight — the server failed there ({f.scenario})"
                    for f in lane.server_failures if f.level]
        missing.append(f"{lane.lane}: other prompt/output lengths than {lane.workload.prompt_tokens}/"
                       f"{lane.workload.output_tokens} tokens" + ("" if lane.workload.shared_prefix else
                                                                  ", and prompt-cache reuse (no "
                                                                  "--shared-prefix)"))
        if not lane.fairness:
            missing.append(f"{lane.lane}: fairness and starvation (run with --with-fairness)")
        if not lane.together_levels and len(results.lanes) > 1:
            missing.append(f"{lane.lane}: interference from the other lanes (run with --together)")
        if _afar(lane):
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
        if rt.kind == "url":
            opts = ["--url", rt.base_url]
            opts += [x for flag in _URL_ACCESS_FLAGS if (v := _flag_value(argv, flag)) is not None
                     for x in (flag, v)]
            opts += ["--insecure"] if "--insecure" in argv else []
        else:
            opts = ["--model", lane.model.path or "MODEL.gguf"]
            if rt.kind == "native":
                opts += ["--server-bin", _flag_value(argv, "--server-bin") or "LLAMA_SERVER"]
    return _cmd(["satbench", "capability", "--recommendations", "recommendations.json", *opts])


def evidence_blocks(results: ResultsFile, recs: RecommendationsFile | None,
                    recs_sha256: str | None, plots: Sequence[PlotFile], hashes: Sequence[FileHash],
                    resumes: Sequence[ResumeRecord] = ()) -> list[Block]:
    """Every block of the report. The run directory's path is not an input: the text (and so the bundle
    digest) must not depend on how the directory was spelled, and its commands run inside it."""
    blocks = header(results) + commands(results, resumes) + machine(results) + lanes_table(results)
    blocks += memory_table(results) + server_failures(results)
    for lane in results.lanes:
        blocks += lane_section(lane, plots)
    blocks += recommendations(recs) + flags(results) + limitations(results, recs)
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
    if lane.runtime.llamacpp:
        start = ("the same filler tokens for every request" if shared
                 else "a unique text prefix, then filler tokens")
        return f"token ids: {start}, {w.prompt_tokens} per sweep request"
    start = "the same filler words for every request" if shared else "a unique prefix, then filler words"
    return (f"text: {start}, about {w.prompt_tokens} words per sweep request; the server's own token count, "
            "where it reports usage, is each event's server_prompt_tokens")
