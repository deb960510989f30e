"""What a written plot is, without drawing anything: its kind and the `PlotFile` the evidence links to.
Kept apart from the drawing modules so that what only reads or lists plots never imports matplotlib."""

from __future__ import annotations

from typing import Literal

from satbench.config.schema import Strict

PlotKind = Literal["throughput", "latency", "occupancy", "gpu", "timeline", "starvation", "goodput"]
KINDS: tuple[PlotKind, ...] = ("throughput", "latency", "occupancy", "gpu", "timeline", "starvation",
                               "goodput")


class PlotFile(Strict):
    file: str
    lane: str | None
    kind: PlotKind
    title: str
    caption: str
