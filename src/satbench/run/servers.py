"""How one session of a sweep starts and stops its lanes' servers: the memory probe first (a lane's
first solo start), then the server itself, opened (`LaneSession.open`), checked against the lane
(`check_server_fits`) and against what run.json recorded of it (`check_same_server`), and recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from satbench.config.schema import LaneConfig, RunConfig
from satbench.host.gpu import NvmlGpus
from satbench.records.events import Scenario
from satbench.records.ledger import Ledger
from satbench.records.manifest import ModelInfo
from satbench.records.writer import JsonlWriter
from satbench.run.lane_session import LaneSession, make_runtime, probe_buffers
from satbench.run.logs import server_log_path
from satbench.server.checks import check_same_server, check_server_fits

Models = dict[str, tuple[Path | None, ModelInfo]]  # lane → (its model file, what run.json says of it)


@dataclass(frozen=True)
class LaneServers:
    """The servers of one session of a sweep (`session`: its index in run.json). `secrets`: lane →
    the credentials taken out of its URL; `samples`, `gpus`: what each server's sampler writes to
    and reads; `liveness_timeout_s`: every lane session's bound (liveness.py)."""

    cfg: RunConfig
    run_dir: Path
    ledger: Ledger
    session: int
    models: Models
    secrets: dict[str, str | None]
    nonce: str
    liveness_timeout_s: float
    samples: JsonlWriter
    gpus: NvmlGpus | None

    def log_path(self, lane: LaneConfig, scenario: str, restart: int = 0) -> Path:
        """The log file of `lane`'s server for `scenario` in this session (`server_log_path`)."""
        return server_log_path(self.run_dir, lane.name, len(self.cfg.lanes) == 1, scenario, self.session,
                               restart)

    async def start(self, lane: LaneConfig, scenario: Scenario, restart: int = 0) -> LaneSession:
        """`lane`'s server for `scenario`, started, checked and recorded in run.json; `restart` counts
        the restarts after a lost server (recorded with its ServerFailure instead)."""
        path, model = self.models[lane.name]
        prov = self.ledger.manifest.provenance
        assert prov is not None
        buffers = None  # the lane's memory, read once: from a start of its own at log verbosity 4
        # described: the lane's own server is in run.json, not only its fairness checks' server
        described = lane.name in prov.lanes and prov.lanes[lane.name].solo_recorded()
        if scenario == "solo" and not restart and not described:
            buffers = await probe_buffers(lane, path, self.log_path(lane, "memory"))
        runtime = make_runtime(lane, path, self.log_path(lane, scenario, restart))
        session = LaneSession(lane, scenario, runtime, model, self.secrets[lane.name], self.nonce,
                              session_index=self.session, liveness_timeout_s=self.liveness_timeout_s)
        try:
            await runtime.start_async()  # Ctrl-C / SIGTERM during a slow start lands here and stops it
            await session.open(self.samples, self.gpus, buffers)
            if scenario != "fairness":
                check_server_fits(lane, session.runtime_info(), self.cfg.strict)
            if lane.name in prov.lanes:
                check_same_server(lane.name, prov.lanes[lane.name], scenario, session.model_info(),
                                  session.runtime_info())
        except BaseException:
            await session.close()
            runtime.stop()
            raise
        if restart:
            return session  # recorded with its ServerFailure
        self.ledger.record_server(lane.name, scenario, self.session, session)
        return session

    @staticmethod
    async def stop(session: LaneSession) -> None:
        """Close what talks to the server, then stop it (a running server, --url, is left running)."""
        try:
            await session.close()
        finally:
            session.runtime.stop()
