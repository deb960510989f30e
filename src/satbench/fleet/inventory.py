"""The fleet inventory (fleet.toml): which lane file every node runs, and the nodes, each named by its
Ray node id, hostname, address or labels. Unknown keys and bad values are refused with the file and
the key.

    lanes = "lanes.toml"                   # relative to this file; every node runs its lanes
    timeout_s = 3600                        # per node run, from its start
    max_parallel = 4                        # nodes measured at once (default: all)
    accept_contended = false                # as capability --accept-contended, on every node
    api_base = "http://{hostname}:8080/v1"  # optional; {node}, {hostname}, {ip} filled per node

    [spot_check]                            # --per-class: what a node of a measured class runs
    repetitions = 3
    min_effect = 0.10                       # slower by at least this, significantly: measured in full

    [[nodes]]
    name = "gpu-a"                          # the node id in reports (default: the Ray node's hostname)
    hostname = "gpu-a.example.net"          # or ray_node_id = "…", or address = "10.0.0.7",
                                            # or labels = { "satbench/pool" = "a" }
    gpus = 1                                # GPUs the task holds (default: all the node's)
    urls = { dense = "http://127.0.0.1:8081" }   # this node's URL for a url lane
    api_base = { dense = "http://gpu-a:8081/v1" }  # or one URL for every lane
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import Field, ValidationError, model_validator

from satbench.capability.identity import NODE_ID_PATTERN
from satbench.config.schema import Strict
from satbench.errors import UserError

MAX_INVENTORY_BYTES = 1 << 20
RESERVED_NAMES = {"fleet.json", "capability.json", "litellm.yaml", "capability.prom"}


class NodeEntry(Strict):
    name: str | None = Field(None, pattern=NODE_ID_PATTERN)
    ray_node_id: str | None = Field(None, pattern=r"^[0-9a-f]{56}$")
    hostname: str | None = None
    address: str | None = None
    labels: dict[str, str] | None = None
    gpus: float | None = Field(None, ge=0)
    cpus: float = Field(0, ge=0, description="CPU slots the task holds (0: it runs beside other tasks)")
    resources: dict[str, float] = Field(default_factory=dict, description="more Ray resources the task asks")
    urls: dict[str, str] = Field(default_factory=dict, description="lane → this node's URL (url lanes)")
    api_base: str | dict[str, str] | None = None
    model_dir: str | None = None

    @model_validator(mode="after")
    def _one_selector(self) -> NodeEntry:
        given = [k for k in ("ray_node_id", "hostname", "address", "labels") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("name the node by exactly one of ray_node_id, hostname, address, labels "
                             f"(given: {', '.join(given) or 'none'})")
        return self

    def selector(self) -> str:
        """The selector as text (what a refusal names)."""
        if self.labels:
            return "labels " + ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        key = next(k for k in ("ray_node_id", "hostname", "address") if getattr(self, k))
        return f"{key} {getattr(self, key)}"


class SpotCheck(Strict):
    repetitions: int = Field(3, ge=2, le=20)
    requests_per_level: int | None = Field(None, ge=4, le=100_000)
    min_effect: float = Field(0.10, gt=0, lt=1)


class Inventory(Strict):
    lanes: str = Field(description="the lane file, relative to the inventory")
    timeout_s: float = Field(3600.0, gt=0, le=7 * 86400)
    max_parallel: int | None = Field(None, ge=1, description="nodes measured at once (None: all); 1 for "
                                     "simulated nodes that share one machine")
    max_age_days: float = Field(30.0, gt=0)
    accept_contended: bool = Field(False, description="advertise a recommendation measured while other "
                                   "processes took CPU (capability --accept-contended)")
    api_base: str | dict[str, str] | None = None
    spot_check: SpotCheck = Field(default_factory=SpotCheck)
    nodes: list[NodeEntry] = Field(min_length=1, max_length=10_000)

    @model_validator(mode="after")
    def _unique_names(self) -> Inventory:
        names = [n.name for n in self.nodes if n.name]
        dup = sorted({x for x in names if names.count(x) > 1})
        if dup:
            raise ValueError(f"node names repeat: {', '.join(dup)}")
        bad = sorted(set(names) & RESERVED_NAMES)
        if bad:
            raise ValueError(f"node name {bad[0]} is one of the fleet directory's own files")
        return self


def load_inventory(path: Path) -> Inventory:
    """The inventory at `path`, or UserError naming the file and the key."""
    from satbench.records.rundir import read_regular_file

    raw = read_regular_file(path, MAX_INVENTORY_BYTES, follow_links=True, error=UserError)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"{path}: not TOML: {exc}") from exc
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "inventory"
        raise UserError(f"{path}: {where}: {err['msg']}") from exc


def lane_file_of(inventory: Inventory, path: Path) -> Path:
    return (path.parent / inventory.lanes).resolve()


def expand(template: str, node: str, hostname: str, ip: str) -> str:
    """An api_base template with {node}, {hostname} and {ip} filled in."""
    return template.replace("{node}", node).replace("{hostname}", hostname).replace("{ip}", ip)
