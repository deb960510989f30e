"""What this node runs for each lane now: the model file and the runtime build it would serve it with.

Models are hashed and their GGUF header read (architecture, file type, ...); servers are not
started: an embedded lane's build is the installed xllamacpp's, a native lane's what its
llama-server prints for --version (with the sha256 of the executable and the libraries beside it),
and a url lane's server is asked through /props (model path, build_info, slots and per-slot
context). capability/checks compares a `NodeLane` with the
recommendation measured for it.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

from pydantic import Field

from satbench.capability.remote import remote_props
from satbench.config.runtime import RuntimeConfig, runtime_class
from satbench.config.schema import LaneConfig, Strict
from satbench.records.manifest import ModelInfo
from satbench.server.facts import shape_of
from satbench.server.native import build_in_version, capped_output, server_binary_sha256, version_line


class NodeLane(Strict):
    """What this node runs for a lane now: model identity and runtime build."""

    lane: str
    model_path: str | None
    model_sha256: str | None
    runtime_kind: str
    runtime_build: str | None = Field(description="build number, else the version string; None if unknown")
    runtime_binary_sha256: str | None = Field(
        None, description="native lanes: sha256 over the llama-server executable and the libraries beside it")
    unreachable: str | None = Field(None, description="why a remote lane's server could not be asked "
                                                      "(/props)")
    total_slots: int | None = Field(None, description="url lanes: the slots the server reports now (/props)")
    per_slot_ctx: int | None = Field(None, description="url lanes: its per-slot context now (/props)")
    extra_server_args: list[str] | None = Field(None, description="a server satbench starts: the extra "
                                                "llama-server flags this node's lane gives it (None: url)")
    model: ModelInfo | None = Field(None, description="the lane's model file as found now: its path, "
                                    "sha256 and what its GGUF header says (None: a url lane, whose file is "
                                    "not here)")

    @property
    def runtime(self) -> type[RuntimeConfig]:
        """The class of the lane's runtime kind (config/runtime): what that kind means."""
        return runtime_class(self.runtime_kind)


def build_id(number: int | None, version: str | None) -> str | None:
    return str(number) if number else version


def build_from_info(build_info: str | None) -> str | None:
    """A server's build as /props tells it: the number from build_info "b11434-1a2b3c4", else
    build_info itself (a llama-server compiled outside git says "b0-unknown")."""
    m = re.match(r"^b(\d+)-", build_info or "")
    return m[1] if m and m[1] != "0" else build_info


def runtime_build_now(lane: LaneConfig) -> str | None:
    """The build this node would serve the lane with, without starting it."""
    rc = lane.runtime
    if rc.engine_package is not None:
        try:
            v = metadata.version(rc.engine_package)
        except metadata.PackageNotFoundError:
            return None
        m = re.match(r"^\d+\.\d+\.(\d+)$", v)
        return m[1] if m else v
    if rc.binary:
        text = capped_output([rc.binary, "--version"], timeout_s=20)  # bounded; bad UTF-8 replaced
        if text is None:
            return None
        return build_in_version(text) or version_line(text, first_if_none=False)
    return None


def identity_of(props: dict) -> tuple[str | None, str | None]:
    """(model path, build) a running server reports on /props."""
    info = props.get("build_info")
    return props.get("model_path"), build_from_info(None if info is None else str(info))


def remote_identity(lane: LaneConfig) -> tuple[str | None, str | None, str | None]:
    """(model path, build, None) a running server reports on /props, or (None, None, why) when it
    cannot be asked."""
    props, why = remote_props(lane)
    return (None, None, why) if props is None else (*identity_of(props), None)


def node_lane(lane: LaneConfig) -> NodeLane:
    """Identify the lane's model and runtime on this node (models are hashed, servers not started;
    a remote server is asked through /props, and its model is compared by path)."""
    from satbench.gguf.resolve import resolve_model

    if not lane.runtime.starts_server:
        props, why = remote_props(lane)
        (model_path, build), (slots, ctx) = ((None, None), (None, None)) if props is None else (
            identity_of(props), shape_of(props))
        return NodeLane(lane=lane.name, model_path=model_path, model_sha256=None, runtime_kind="url",
                        runtime_build=build, unreachable=why, total_slots=slots, per_slot_ctx=ctx)
    _path, info = resolve_model(lane.runtime.model, Path(lane.runtime.model_dir))
    binary = server_binary_sha256(lane.runtime.binary) if lane.runtime.binary else None
    return NodeLane(lane=lane.name, model_path=info.path, model_sha256=info.sha256,
                    runtime_kind=lane.runtime.kind, runtime_build=runtime_build_now(lane),
                    runtime_binary_sha256=binary, extra_server_args=list(lane.server.extra_args), model=info)
