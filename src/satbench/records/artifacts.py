"""Versioned JSON artifacts (results, verdicts, recommendations, capability): one way to publish
their schema, render them deterministically, and write them validated and atomically."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, overload

from pydantic import BaseModel

from satbench.config.ranges import RECORDED
from satbench.errors import RunDirError
from satbench.records.atomic import write_text_atomic


def published_schema(model: type[BaseModel], name: str, version: str, title: str | None = None) -> dict:
    """The JSON Schema of `model`, with its $id `urn:satbench:schema:NAME:VERSION`: a name, not an
    address (satbench publishes its schemas through `satbench schema NAME`, not on a web server)."""
    schema = model.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"urn:satbench:schema:{name}:{version}"
    schema["title"] = f"satbench {title or name} {version}"
    return schema


def render(obj: BaseModel) -> str:
    """Deterministic text: sorted keys, two-space indent, trailing newline (same input → same bytes)."""
    return json.dumps(obj.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def validate_text(text: str, schema: dict, filename: str) -> None:
    """RunDirError unless `text` is JSON that holds to `schema` (draft 2020-12; the published schemas
    themselves are checked against their metaschema by the tests, not on every write). jsonschema is
    imported here, where a document is checked: reading one needs none of it."""
    import jsonschema

    try:
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(schema).iter_errors(json.loads(text)))
    except ValueError as exc:
        raise RunDirError(f"{filename} does not match its schema: {exc}") from exc
    if error is not None:
        raise RunDirError(f"{filename} does not match its schema: {error.message}")


def write_artifact(path: Path, obj: BaseModel, schema: dict) -> Path:
    """Render, validate against the published schema, then write atomically (write_text_atomic: a
    link or a hard-linked file at `path` is refused, never written through nor replaced)."""
    text = render(obj)
    validate_text(text, schema, path.name)
    write_text_atomic(path, text)
    return path


def schema_version_of(text: str) -> str | None:
    """The top-level `schema_version` of a JSON document; None when it is not JSON (or nested past
    the parser's depth) or has none."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    version = data.get("schema_version") if isinstance(data, dict) else None
    return version if isinstance(version, str) else None


def older_minor(was: str | None, now: str | None) -> bool:
    """`was` is an earlier minor version of `now`'s major version ("2.2" before "2.3")."""
    try:
        (a_major, a_minor), (b_major, b_minor) = ([int(x) for x in v.split(".")]
                                                  for v in (was or "", now or ""))
    except ValueError:
        return False
    return a_major == b_major and a_minor < b_minor


FLOAT_REL_TOL = 1e-6  # far above the last-bit differences between Python, numpy or scipy builds (~1e-14),
# far below any change to a figure as it is printed


def close(a: object, b: object, rel: float = FLOAT_REL_TOL) -> bool:
    """Equal JSON values, numbers compared to `rel` relative where either is a float: another
    Python (3.12's sum() rounds differently from 3.11's) or numpy derives the same figures to
    within the last bits, not bit for bit."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if isinstance(a, float) or isinstance(b, float):
            return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b))
    return a == b


@overload
def only_keys_of(value: dict[str, Any], shape: object) -> dict[str, Any]: ...
@overload
def only_keys_of(value: object, shape: object) -> object: ...
def only_keys_of(value: object, shape: object) -> object:
    """`value` without the object keys that `shape` (the same document as an earlier minor wrote
    it) lacks, at every depth; lists are pruned item by item."""
    if isinstance(value, dict) and isinstance(shape, dict):
        return {k: only_keys_of(v, shape[k]) for k, v in value.items() if k in shape}
    if isinstance(value, list) and isinstance(shape, list) and len(value) == len(shape):
        return [only_keys_of(v, s) for v, s in zip(value, shape)]
    return value


def same_under_current_schema(old: str, fresh: str, model: type[BaseModel], ignore: tuple[str, ...] = (),
                              older_fields_only: bool = False) -> bool:
    """`old`, read under the current model (fields it lacks take their defaults), equals `fresh`
    in everything but `schema_version` and the top-level keys in `ignore`, numbers to within
    floating-point rounding (`close`). With `older_fields_only` (`old` is an earlier minor), the
    fields a later minor added are left out on both sides: `old` could not hold them."""
    try:
        was = model.model_validate_json(old, context=RECORDED).model_dump(mode="json")
        now = model.model_validate_json(fresh, context=RECORDED).model_dump(mode="json")
        if older_fields_only:
            shape = json.loads(old)
            was, now = only_keys_of(was, shape), only_keys_of(now, shape)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth: not the same
        return False
    for key in ("schema_version", *ignore):
        was.pop(key, None)
        now.pop(key, None)
    return close(was, now)
