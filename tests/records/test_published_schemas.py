"""Every published JSON Schema is a valid draft 2020-12 schema (writing an artifact validates
against it without checking the schema itself each time: records/artifacts.validate_text)."""

from __future__ import annotations

import re

import jsonschema
import pytest

from satbench.errors import RunDirError
from satbench.records.artifacts import validate_text


def _schemas() -> dict:
    from satbench.analysis.results import results_json_schema, verdicts_json_schema
    from satbench.capability.report import capability_json_schema
    from satbench.saturation.recommendations_file import recommendations_json_schema

    return {"results": results_json_schema(), "verdicts": verdicts_json_schema(),
            "recommendations": recommendations_json_schema(), "capability": capability_json_schema()}


@pytest.mark.parametrize("name", ["results", "verdicts", "recommendations", "capability"])
def test_each_published_schema_holds_to_its_metaschema(name):
    schema = _schemas()[name]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    # a name, not an address: no web server publishes the schemas (`satbench schema NAME` does)
    assert schema["$id"].startswith(f"urn:satbench:schema:{name}:")


def test_a_text_that_breaks_the_schema_is_refused_naming_the_file():
    schema = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}}
    validate_text('{"a": 1}', schema, "x.json")
    with pytest.raises(RunDirError,
                       match=re.escape("x.json does not match its schema: 'b' is not of type 'integer'")):
        validate_text('{"a": "b"}', schema, "x.json")
    with pytest.raises(RunDirError, match=re.escape("x.json does not match its schema")):
        validate_text("not json", schema, "x.json")
