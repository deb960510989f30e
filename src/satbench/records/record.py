"""The base of every record satbench writes (events, samples, run.json, results.json): never changed."""

from __future__ import annotations

from pydantic import ConfigDict

from satbench.config.schema import Strict


class Record(Strict):
    """A Strict model (unknown keys are errors) whose fields cannot be assigned once it is built: a
    record that differs is a new one, built whole or as `record.model_copy(update={...})`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
