"""Versioned JSON artifacts (results, verdicts, recommendations, capability): one way to publish
their schema, render them deterministically, and write them validated and atomically."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from pydantic import BaseModel

from satbench.errors import RunDirError
from satbench.manifest import write_text_atomic


def published_schema(model: type[BaseModel], name: str, version: str, title: str | None = None) -> dict:
    """The JSON Schema of `model`, with its $id https://satbench.dev/schema/NAME/VERSION.json."""
    schema = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://satbench.dev/schema/{name}/{version}.json"
    schema["title"] = f"satbench {title or name} {version}"
    return schema


def render(obj: BaseModel) -> str:
    """Deterministic text: sorted keys, two-space indent, trailing newline (same input → same bytes)."""
    return json.dumps(obj.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def validate_text(text: str, schema: dict, filename: str) -> None:
    """RunDirError unless `text` is JSON that holds to `schema`."""
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError) as exc:
        msg = getattr(exc, "message", str(exc))
        raise RunDirError(f"{filename} does not match its schema: {msg}") from exc


def write_artifact(path: Path, obj: BaseModel, schema: dict) -> Path:
    """Render, validate against the published schema, then write atomically."""
    text = render(obj)
    validate_text(text, schema, path.name)
    write_text_atomic(path, text)
    return path
