"""EVIDENCE.md's account of what was run and on what: the title, the run's status and commands, the
machine, the lanes' models and runtimes, their memory per slot and the server failures (report/evidence
assembles the sections).

Each builder takes the derived results.json (`ResultsFile`) and returns its section's blocks, or
none when its data does not exist. Sizes print in MiB (2**20 bytes); argv prints shell-quoted.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from satbench.analysis.results import LaneResult, ResultsFile
from satbench.config.runtime import runtime_class
from satbench.gguf.architectures import described_architecture
from satbench.metrics.slot_memory import MARGIN_TEXT
from satbench.records.manifest import ResumeRecord, RuntimeInfo
from satbench.report.document import Block, Bullets, Code, Heading, Para, TableBlock
from satbench.report.integrity import SUMS_FILE
from satbench.report.table import MEMORY_HEADERS, memory_row
from satbench.server.memlog import LOG_VERBOSITY


def mib(n: int | None) -> str:
    """A byte count in MiB (2**20 bytes, one decimal), "n/a" when unknown."""
    return "n/a" if n is None else f"{n / 2**20:,.1f} MiB"


def shell_line(argv: Sequence[str]) -> str:
    """argv as one shell-quoted line (what a reader pastes)."""
    return shlex.join(argv)


def title(results: ResultsFile) -> list[Block]:
    return [Heading(level=1, text=f"satbench evidence: run {results.run_id}")]


def run_status(results: ResultsFile) -> list[Block]:
    """How the run ended, when, and which satbench ran it (with a modified checkout's changed files)."""
    p = results.provenance
    commit = p.satbench_commit or "not a git checkout"
    blocks: list[Block] = [
        Para(text=f"Status: {results.status}"
                  f"{' — ' + results.status_reason if results.status_reason else ''}. "
                  f"Started {results.started_at}, finished {results.finished_at or 'n/a'}. "
                  f"satbench {p.satbench_version}, commit `{commit}`"
                  f"{f', load generator on the {p.event_loop} event loop' if p.event_loop else ''}."),
    ]
    if p.satbench_modified_files:
        blocks.append(Para(text="The satbench checkout was modified when this ran; changed files: "
                                + ", ".join(f"`{f}`" for f in p.satbench_modified_files) + "."))
    return blocks


def afar(lane: LaneResult) -> bool:
    """A url lane whose server ran on another machine than satbench (its hardware was not seen)."""
    return not lane.runtime.starts_server and not lane.network.on_this_machine


def server_where(lane: LaneResult) -> str:
    """Where a url lane's server ran: this machine (by loopback or one of its own addresses) or another."""
    if lane.network.path == "loopback":
        return "on this machine (loopback)"
    return "on another machine (remote network path)" if afar(lane) else "on this machine (its own address)"


def _server_command(rt: RuntimeInfo, model: str | None, where: str) -> str:
    if not rt.starts_server:
        return f"a running server at {rt.base_url} {where}, given by --url; satbench did not start it"
    return f"{runtime_class(rt.kind).label} {shell_line(['--model', model or '?', *rt.server_args])}"


def commands(results: ResultsFile, resumes: Sequence[ResumeRecord] = ()) -> list[Block]:
    blocks: list[Block] = [Heading(level=2, text="What was run"), *run_status(results),
                           Para(text="The command, as recorded in `run.json` (credentials redacted):"),
                           Code(text=shell_line(results.command_line))]
    if resumes:
        blocks.append(Para(text="The run was resumed; each session re-ran only the units not yet finished, "
                                "and a unit cut short counts its latest session's records only:"))
        blocks.append(TableBlock(headers=["session", "started", "resumed from", "units already done",
                                          "command"],
                                 rows=[[str(r.session), r.started_at,
                                        r.from_status + (f" ({r.from_reason})" if r.from_reason else ""),
                                        str(r.units_already_complete), f"`{shell_line(r.command_line)}`"]
                                       for r in resumes]))
        servers = [[str(r.session), key, rt.base_url, str(rt.pid or "n/a"), shell_line(rt.server_args)]
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
                rows.append([lane.lane, label, _server_command(rt, lane.model.path, server_where(lane))])
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
    items += [f"GPU: {g.name}, {mib(g.memory_total_bytes)}, driver {g.driver or 'n/a'}, CUDA "
              f"{g.cuda or 'n/a'}"
              for g in h.gpus] or ["GPU: none visible through NVML"]
    items.append(f"hardware fingerprint (sha256): `{h.fingerprint_sha256}`")
    return [Heading(level=2, text="Machine"), Bullets(items=items)]


def parameters(n: int | None) -> str:
    """A parameter count as people say it: "268.1 M", "1.54 B"; "n/a" when unknown."""
    if n is None:
        return "n/a"
    return f"{n / 1e9:,.2f} B" if n >= 1e9 else f"{n / 1e6:,.1f} M" if n >= 1e5 else f"{n:,}"


def _header_text(text: str | None, limit: int = 80) -> str:
    """A string from a model file's header, as a table cell: printable, at most `limit` characters."""
    if text is None:
        return "n/a"
    clean = "".join(c if c.isprintable() else " " for c in text).strip()
    return clean if len(clean) <= limit else clean[:limit - 1] + "…"


def header_row(lane: LaneResult) -> list[str]:
    """What the lane's model file says it is (its GGUF header, read as the lane's model was found).
    A url lane's file is on its server's machine and is not read; a run before run.json 2.10 did
    not record it."""
    m = lane.model
    if not lane.runtime.starts_server:
        return [lane.lane, "not read (the server's own file)"] + ["n/a"] * 5
    if m.architecture is None and m.file_type is None and m.parameter_count is None:
        return [lane.lane, "not recorded (a run before run.json 2.10)"] + ["n/a"] * 5
    if m.expert_count:
        experts = f"{m.expert_count}, {m.expert_used_count if m.expert_used_count is not None else 'n/a'} " \
                  "per token"
    else:
        experts = "none (dense)" if m.architecture is not None else "n/a"
    arch = described_architecture(m.architecture)
    return [lane.lane, arch + (" — SYNTHETIC weights" if m.synthetic else ""), _header_text(m.name),
            parameters(m.parameter_count), m.file_type or "n/a",
            f"{m.context_length:,}" if m.context_length is not None else "n/a", experts]


def lanes_table(results: ResultsFile) -> list[Block]:
    models, runtimes = [], []
    for lane in results.lanes:
        m, rt, net = lane.model, lane.runtime, lane.network
        build = f"b{rt.build_number}" if rt.build_number else (rt.build_info or "n/a")
        weights = "SYNTHETIC" if m.synthetic else ("real" if m.synthetic is False else "n/a")
        models.append([lane.lane, m.path or rt.model_alias or "remote", mib(m.size_bytes), weights,
                       f"`{m.sha256}`" if m.sha256 else "n/a"])
        name = rt.name if rt.starts_server else f"running server {server_where(lane)}"
        runtimes.append([lane.lane, f"{name} {rt.version or ''}".strip(),
                         f"{build}{' ' + rt.build_commit if rt.build_commit else ''}"
                         + (f"; binary sha256 `{rt.binary_sha256[:16]}…`" if rt.binary_sha256 else ""),
                         rt.backend or "n/a",
                         str(rt.total_slots) if rt.total_slots is not None else "n/a",
                         str(rt.per_slot_ctx) if rt.per_slot_ctx is not None else "n/a",
                         f"{net.path}, RTT p50 {net.rtt_ms_median:.2f} ms" if net.rtt_ms_median is not None
                         else net.path,
                         " / ".join(lane.workload.length_texts())
                         + (f" seed {lane.workload.seed}" if lane.workload.seed else "")
                         + (" shared prefix" if lane.workload.shared_prefix else "")
                         + (f" {lane.workload.kind_text}" if lane.workload.kind in ("chat", "trace")
                            else "")])
    return [Heading(level=2, text="Lanes: models and runtimes"),
            TableBlock(headers=["lane", "model file", "size", "weights", "sha256"], rows=models),
            TableBlock(headers=["lane", "architecture", "model name", "parameters", "file type",
                                "trained context", "experts"],
                       rows=[header_row(lane) for lane in results.lanes],
                       caption="What each model file says it is: its GGUF header (general.architecture, "
                               "general.name, ...), read when the lane's model was found, before its "
                               "server started"),
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
