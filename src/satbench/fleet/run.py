"""`satbench fleet run`: the same lanes on every node of a Ray cluster.

One Ray task per node, pinned to it with node-affinity scheduling (soft=False, never retried), asking
for the node's GPUs; it runs the sweep the CLI hands over against the node's own server, then the
node's capability report (node_task.run_node), and returns the run directory's bytes. The driver
checks that the task ran where it was pinned, verifies the run centrally (pipeline.verify), keeps it
as `<fleet dir>/<node>/run` (`spot` for a --per-class short check), writes the node's capability
report beside it, and at the end merges the reports (fleet.merge, with Ray's hostname and node id
as what each report must match) into `capability.json`, `litellm.yaml` and `capability.prom`.
A node that cannot be placed, fails, dies mid-run or runs past `timeout_s` is recorded in
`fleet.json` with the reason; the others go on.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from satbench.config.schema import RunConfig
from satbench.fleet.inventory import Inventory
from satbench.fleet.node_task import NodeOutcome, NodeSpec, Probe, SweepFn, probe, run_node
from satbench.fleet.placement import Placed, place
from satbench.fleet.record import FleetRecord, NodeRecord, NodeState, store_node_run
from satbench.fleet.spot import spot_config, spot_verdict
from satbench.records.manifest import write_text_atomic

PROBE_TIMEOUT_S = 120.0
POLL_S = 0.5


def connect(address: str | None) -> float:
    """Connect to the Ray cluster (already connected: kept); the seconds it took."""
    import ray

    start = time.monotonic()
    if not ray.is_initialized():
        ray.init(address=address or "auto", log_to_driver=False, logging_level=logging.WARNING)
    return time.monotonic() - start


def _pinned(p: Placed, fn: Any, **extra: Any) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return fn.options(scheduling_strategy=NodeAffinitySchedulingStrategy(p.node.node_id, soft=False),
                      max_retries=0, retry_exceptions=False, **extra)


def _failure(exc: BaseException, node_alive: bool) -> tuple[NodeState, str]:
    """(state, reason) of a task that raised instead of returning an outcome."""
    import ray

    what = " ".join(str(exc).split())[:300]
    if isinstance(exc, ray.exceptions.GetTimeoutError):
        return "timed_out", what
    if not node_alive or isinstance(exc, ray.exceptions.NodeDiedError):
        return "lost", f"the node died mid-run ({exc.__class__.__name__})"
    if isinstance(exc, ray.exceptions.RayTaskError):
        return "failed", what
    return "lost", f"{exc.__class__.__name__}: {what}"


class FleetRun:
    """One fleet run's state on the driver: the placed nodes, the tasks in flight, the records."""

    def __init__(self, inv: Inventory, cfg: RunConfig, out_dir: Path, sweep: SweepFn, per_class: bool,
                 record: FleetRecord) -> None:
        import ray

        self.ray = ray
        self.inv, self.cfg, self.out, self.sweep, self.per_class = inv, cfg, out_dir, sweep, per_class
        self.record = record
        self.records: dict[str, NodeRecord] = {}
        self.placed: dict[str, Placed] = {}
        self.flight: dict[Any, tuple[str, str, float]] = {}  # ref → (node, mode, deadline)
        self.waiting: dict[str, list[str]] = {}  # class reference → nodes waiting for its run
        self.queued: list[tuple[str, str, str | None, bytes | None]] = []  # past max_parallel
        self.task = ray.remote(run_node)
        self.board: Any = None

    def say(self, name: str, **fields: Any) -> None:
        if self.board is not None:
            self.board.update.remote(name, fields)

    def alive(self, node_id: str) -> bool:
        return any(n["NodeID"] == node_id and n.get("Alive") for n in self.ray.nodes())

    def probe_all(self) -> dict[str, Probe]:
        """Each placed node asked who it is (pinned, no CPU held); one that does not answer in time or
        runs another satbench version is recorded and left out."""
        task = self.ray.remote(probe)
        refs = {_pinned(p, task, num_cpus=0).remote(): name for name, p in self.placed.items()}
        ready, _ = self.ray.wait(list(refs), num_returns=len(refs), timeout=PROBE_TIMEOUT_S)
        out: dict[str, Probe] = {}
        for ref, name in refs.items():
            rec = self.records[name]
            if ref not in ready:
                self.ray.cancel(ref, force=True)
                rec.state, rec.reason = "unreachable", f"did not answer a probe in {PROBE_TIMEOUT_S:.0f} s"
                continue
            try:
                got = self.ray.get(ref)
            except Exception as exc:
                rec.state, rec.reason = _failure(exc, self.alive(self.placed[name].node.node_id))
                continue
            rec.hostname, rec.hardware_fingerprint, rec.ran_on = got.hostname, got.hardware_fingerprint, \
                got.ray_node_id
            import satbench

            if got.satbench_version != satbench.__version__:
                rec.state, rec.reason = "failed", (f"runs satbench {got.satbench_version}, the driver "
                                                   f"{satbench.__version__}: install the same version")
                continue
            out[name] = got
        return out

    def launch(self, name: str, mode: str, reference: str | None = None, recs: bytes | None = None) -> None:
        """The node's task started now, or queued while max_parallel tasks are in flight."""
        if self.inv.max_parallel is not None and len(self.flight) >= self.inv.max_parallel:
            self.queued.append((name, mode, reference, recs))
            self.say(name, state="queued")
            return
        p, rec = self.placed[name], self.records[name]
        cfg = p.config if mode == "full" else spot_config(p.config, recs or b"{}", self.inv.spot_check)
        spec = NodeSpec(node_id=name, mode="spot" if mode == "spot" else "full", config=cfg,
                        api_base=p.api_base, max_age_days=self.inv.max_age_days,
                        accept_contended=self.inv.accept_contended, reference=reference,
                        reference_recommendations=recs)
        ref = _pinned(p, self.task, num_cpus=p.entry.cpus, num_gpus=p.num_gpus(),
                      resources=p.entry.resources or None, name=f"satbench-fleet-{name}").remote(
            spec, self.sweep, self.board)
        rec.mode = "spot+full" if rec.mode == "spot" and mode == "full" else mode  # type: ignore[assignment]
        self.flight[ref] = (name, mode, time.monotonic() + self.inv.timeout_s)
        self.say(name, state="spot check" if mode == "spot" else "starting")

    def start(self, probes: dict[str, Probe]) -> None:
        """Every probed node in full; with --per-class only the first of each hardware fingerprint,
        the others waiting for its run."""
        classes: dict[str, str] = {}
        for name, got in probes.items():
            reference = classes.setdefault(got.hardware_fingerprint, name) if self.per_class else name
            self.records[name].class_reference = reference if self.per_class else None
            if reference == name:
                self.launch(name, "full")
            else:
                self.waiting.setdefault(reference, []).append(name)
                self.say(name, state=f"waits for {reference}")

    def finished(self, ref: Any) -> None:
        name, mode, _deadline = self.flight.pop(ref)
        rec, p = self.records[name], self.placed[name]
        try:
            outcome: NodeOutcome = self.ray.get(ref)
        except Exception as exc:
            rec.state, rec.reason = _failure(exc, self.alive(p.node.node_id))
            self.say(name, state=rec.state)
            self.class_reference_done(name, None)
            return
        self.take(rec, p, outcome, mode)
        if mode == "spot" and rec.state == "ok":
            assert rec.class_reference is not None
            verdict = spot_verdict(self.out / rec.class_reference / "run", self.out / name / "spot",
                                   rec.class_reference, self.inv.spot_check)
            rec.spot = verdict
            if verdict.slower:
                rec.flags.append(verdict.reason or "slower than its class reference")
                (self.out / name / "capability.json").unlink(missing_ok=True)
                self.launch(name, "full")
                return
        if mode == "full" and rec.class_reference == name:
            self.class_reference_done(name, outcome if rec.state == "ok" else None)
        self.say(name, state=rec.state)

    def take(self, rec: NodeRecord, p: Placed, outcome: NodeOutcome, mode: str) -> None:
        """The outcome checked (ran where pinned), its run stored and verified, its capability kept."""
        rec.ran_on, rec.hostname, rec.exit_code = outcome.ray_node_id, outcome.hostname, outcome.exit_code
        rec.sweep_s, rec.task_s = round(outcome.sweep_s, 3), round(outcome.total_s, 3)
        rec.transfer_bytes = sum(len(b) for b in outcome.files.values())
        node_dir = self.out / p.name
        node_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(node_dir / f"{mode}.log", outcome.log)
        if outcome.ray_node_id != p.node.node_id:
            rec.state, rec.reason = "rejected", (f"ran on Ray node {outcome.ray_node_id}, not the pinned "
                                                 f"{p.node.node_id}")
            return
        if not outcome.files:
            rec.state = "failed"
            rec.reason = outcome.error or f"the sweep exited {outcome.exit_code} with no run"
            return
        self.say(p.name, state="verifying")
        start = time.monotonic()
        _where, rec.verify = store_node_run(node_dir, "spot" if mode == "spot" else "run", outcome.files)
        rec.store_s = round(time.monotonic() - start, 3)
        if not rec.verify.ok:
            rec.state, rec.reason = "rejected", "the run failed central verification: " + "; ".join(
                rec.verify.problems[:5])
            return
        if outcome.capability is None:
            rec.state, rec.reason = "failed", outcome.error or "no recommendations: nothing to advertise"
            return
        write_text_atomic(node_dir / "capability.json", outcome.capability)
        rec.state, rec.reason = "ok", outcome.error  # a server failure at some level: recorded, still ok

    def class_reference_done(self, reference: str, outcome: NodeOutcome | None) -> None:
        """The nodes waiting for `reference` run their short check against its run, or in full when it
        has no verified run to be checked against."""
        recs = outcome.files.get("recommendations.json") if outcome is not None else None
        for name in self.waiting.pop(reference, []):
            if recs is None:
                self.records[name].flags.append(f"class reference {reference} has no verified run: measured "
                                                "in full")
                self.records[name].class_reference = name
                self.launch(name, "full")
            else:
                self.launch(name, "spot", reference, recs)

    def drain(self) -> None:
        """Queued tasks started as far as max_parallel allows."""
        while self.queued and (self.inv.max_parallel is None or len(self.flight) < self.inv.max_parallel):
            self.launch(*self.queued.pop(0))

    def expire(self) -> None:
        now = time.monotonic()
        for ref, (name, _mode, deadline) in list(self.flight.items()):
            if now > deadline:
                del self.flight[ref]
                self.ray.cancel(ref, force=True)
                rec = self.records[name]
                rec.state, rec.reason = "timed_out", f"ran past timeout_s = {self.inv.timeout_s:g} s"
                self.say(name, state="timed_out")
                self.class_reference_done(name, None)


def run_fleet(inv: Inventory, inventory_path: Path, cfg: RunConfig, lane_file: Path, out_dir: Path,
              sweep: SweepFn, address: str | None = None, per_class: bool = False, show_progress: bool = True,
              on_progress: Callable[[dict], None] | None = None) -> FleetRecord:
    """The fleet run, its directory written; the record (fleet.json) returned."""
    from satbench.fleet.board import board_snapshot, progress_table, start_board

    started, cpu = time.monotonic(), time.process_time()
    record = FleetRecord(started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                         address=address, inventory=f"{inventory_path} sha256 {_sha(inventory_path)}",
                         lane_file=f"{lane_file} sha256 {_sha(lane_file)}", per_class=per_class)
    record.ray_connect_s = round(connect(address), 3)
    import ray

    fr = FleetRun(inv, cfg, out_dir, sweep, per_class, record)
    placed, missing = place(inv, cfg, ray.nodes())
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, why in missing.items():
        fr.records[name] = NodeRecord(node_id=name, selector=name, state="unreachable", reason=why)
    for p in placed:
        fr.placed[p.name] = p
        fr.records[p.name] = NodeRecord(node_id=p.name, selector=p.entry.selector(),
                                        ray_node_id=p.node.node_id, address=p.node.address, gpus=p.num_gpus())
    fr.board = start_board()
    t = time.monotonic()
    probes = fr.probe_all()
    record.probe_s = round(time.monotonic() - t, 3)
    fr.start(probes)
    live = _live(show_progress)
    names = list(fr.records)
    snapshot: dict[str, dict] = {}
    try:
        while fr.flight or fr.queued:
            ready, _ = ray.wait(list(fr.flight), num_returns=1, timeout=POLL_S)
            for ref in ready:
                fr.finished(ref)
            fr.expire()
            fr.drain()
            if live is not None or on_progress is not None:
                snapshot = board_snapshot(fr.board, snapshot)
                if live is not None:
                    live.update(progress_table(names, snapshot, started))
                if on_progress is not None:
                    on_progress(snapshot)
    finally:
        if live is not None:
            live.stop()
        for ref in fr.flight:
            ray.cancel(ref, force=True)
    record.nodes = [fr.records[n] for n in names]
    _merge(record, out_dir, inv.max_age_days)
    record.finished_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    record.wall_s = round(time.monotonic() - started, 3)
    record.driver_cpu_s = round(time.process_time() - cpu, 3)
    write_text_atomic(out_dir / "fleet.json", record.model_dump_json(indent=2) + "\n")
    return record


def _merge(record: FleetRecord, out_dir: Path, max_age_days: float) -> None:
    """The ok nodes' capability reports merged (each must be from the hostname and Ray node it ran on)."""
    from satbench.fleet.export import render_fleet_json, render_fleet_litellm, render_fleet_prometheus
    from satbench.fleet.merge import Expected, merge_reports

    ok = [r for r in record.nodes if r.state == "ok"]
    now = dt.datetime.now(dt.timezone.utc)
    expected = {r.node_id: Expected(hostname=r.hostname, ray_node_id=r.ray_node_id) for r in ok}
    merged, refused = merge_reports([out_dir / r.node_id / "capability.json" for r in ok], now,
                                    dt.timedelta(days=max_age_days), expected)
    record.merged, record.refused = [m.report.node.node_id for m in merged], refused
    for r in ok:
        why = next((x.reason for x in refused if Path(x.path).parent.name == r.node_id), None)
        if why is not None:
            r.state, r.reason = "rejected", f"its capability report was refused by the merge: {why}"
    for name, render in (("capability.json", render_fleet_json), ("litellm.yaml", render_fleet_litellm),
                         ("capability.prom", render_fleet_prometheus)):
        write_text_atomic(out_dir / name, render(merged, now))


def _live(show: bool) -> Any:
    if not show or not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.live import Live

    live = Live(console=Console(stderr=True), refresh_per_second=2, transient=False)
    live.start()
    return live


def _sha(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return "unreadable"
