"""Where each inventory node runs: its entry matched against the Ray cluster's alive nodes (by Ray node
id, hostname, address or labels), and what its task asks Ray for (node affinity, GPUs, resources)."""

from __future__ import annotations

import urllib.parse

from pydantic import Field

from satbench.config.schema import RunConfig, Strict
from satbench.errors import UserError
from satbench.fleet.inventory import Inventory, NodeEntry, expand
from satbench.http.endpoint import is_loopback, openai_base


class RayNode(Strict):
    """One node as `ray.nodes()` describes it."""

    node_id: str
    hostname: str
    address: str
    alive: bool
    labels: dict[str, str] = Field(default_factory=dict)
    resources: dict[str, float] = Field(default_factory=dict)


class Placed(Strict):
    """An inventory node bound to its Ray node, with the configuration it runs."""

    name: str
    entry: NodeEntry
    node: RayNode
    config: RunConfig
    api_base: list[str] = Field(description="--api-base items: LANE=URL")

    def num_gpus(self) -> float:
        return self.entry.gpus if self.entry.gpus is not None else self.node.resources.get("GPU", 0.0)


def ray_nodes(raw: list[dict]) -> list[RayNode]:
    return [RayNode(node_id=n["NodeID"], hostname=n.get("NodeManagerHostname", ""),
                    address=n.get("NodeManagerAddress", ""), alive=bool(n.get("Alive")),
                    labels={str(k): str(v) for k, v in (n.get("Labels") or {}).items()},
                    resources={str(k): float(v) for k, v in (n.get("Resources") or {}).items()})
            for n in raw]


def match(entry: NodeEntry, nodes: list[RayNode]) -> tuple[RayNode | None, str | None]:
    """(the one alive Ray node the entry names, None), or (None, why not)."""
    def hit(n: RayNode) -> bool:
        if entry.ray_node_id:
            return n.node_id == entry.ray_node_id
        if entry.hostname:
            return n.hostname == entry.hostname or n.hostname.split(".")[0] == entry.hostname
        if entry.address:
            return n.address == entry.address
        return all(n.labels.get(k) == v for k, v in (entry.labels or {}).items())

    found = [n for n in nodes if hit(n)]
    alive = [n for n in found if n.alive]
    if not alive:
        dead = " (its Ray node is dead)" if found else ""
        return None, f"unreachable: no alive Ray node has {entry.selector()}{dead}"
    if len(alive) > 1:
        return None, (f"{len(alive)} alive Ray nodes have {entry.selector()}: name it by ray_node_id or a "
                      "label that only it has")
    return alive[0], None


def node_config(cfg: RunConfig, entry: NodeEntry, node: RayNode) -> RunConfig:
    """The lanes as this node runs them: its own URL for a url lane (entry.urls) and model directory."""
    names = {lane.name for lane in cfg.lanes}
    unknown = sorted(set(entry.urls) - names)
    if unknown:
        raise UserError(f"inventory node {entry.name or entry.selector()}: urls names no lane {unknown[0]!r} "
                        f"(lanes: {', '.join(sorted(names))})")
    lanes = []
    for lane in cfg.lanes:
        runtime = lane.runtime
        if lane.name in entry.urls:
            if runtime.starts_server:
                raise UserError(f"inventory node {entry.name or entry.selector()}: lane {lane.name} is "
                                f"{runtime.kind}, not url: it has no URL to set")
            runtime = runtime.model_copy(update={"url": entry.urls[lane.name]})
        if entry.model_dir and runtime.starts_server:
            runtime = runtime.model_copy(update={"model_dir": entry.model_dir})
        lanes.append(lane.model_copy(update={"runtime": runtime}))
    return cfg.model_copy(update={"lanes": lanes})


def api_bases(inv: Inventory, entry: NodeEntry, name: str, node: RayNode, cfg: RunConfig) -> list[str]:
    """LANE=URL for every lane that has one: the node's api_base, else the inventory's (templates with
    {node}, {hostname}, {ip}), else a url lane's own URL + /v1 with a loopback host replaced by the
    node's address (a router on another machine reaches the node there)."""
    out: dict[str, str] = {}
    for given in (inv.api_base, entry.api_base):
        if isinstance(given, str):
            out |= {lane.name: given for lane in cfg.lanes}
        elif given:
            out |= given
    for lane in cfg.lanes:
        if lane.name not in out and (url := lane.runtime.remote_url):
            base = openai_base(url)
            if is_loopback(base):
                parts = urllib.parse.urlsplit(base)
                netloc = node.address + (f":{parts.port}" if parts.port else "")
                base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
            out[lane.name] = base
    return [f"{lane}={expand(url, name, node.hostname, node.address)}" for lane, url in sorted(out.items())]


def place(inv: Inventory, cfg: RunConfig, raw_nodes: list[dict]) -> tuple[list[Placed], dict[str, str]]:
    """(the nodes that can run, in inventory order; name → why not for the others). A node's name is
    its entry's, else its Ray hostname; two nodes with one name, or one Ray node named twice, are
    refused (UserError): the inventory must tell them apart."""
    nodes = ray_nodes(raw_nodes)
    placed: list[Placed] = []
    missing: dict[str, str] = {}
    for i, entry in enumerate(inv.nodes):
        node, why = match(entry, nodes)
        if node is None:
            missing[entry.name or f"nodes[{i}] ({entry.selector()})"] = why or "unreachable"
            continue
        name = entry.name or node.hostname
        taken = next((p for p in placed if p.name == name or p.node.node_id == node.node_id), None)
        if taken is not None:
            what = "name" if taken.name == name else f"Ray node {node.node_id[:12]}"
            raise UserError(f"inventory nodes[{i}] ({entry.selector()}) has the same {what} as "
                            f"{taken.name}: give each node its own name (name = ...) and Ray node")
        conf = node_config(cfg, entry, node)
        placed.append(Placed(name=name, entry=entry, node=node, config=conf,
                             api_base=api_bases(inv, entry, name, node, conf)))
    return placed, missing
