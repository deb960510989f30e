"""The base of every typed boundary: a pydantic model whose unknown keys are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Base for every model that crosses a module boundary: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")
