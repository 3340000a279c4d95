"""A tool call's arguments are checked without jsonschema when the tool's schema is plain
(`rlenv.worker.tools.plain_check`): the plain check may pass only arguments in which jsonschema
finds no error (a failed check goes on to jsonschema, whose message the model gets)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rlenv.json_schema import load_jsonschema
from rlenv.worker.tools import plain_check

TYPES = ["string", "boolean", "null", "array", "object", "integer", "number"]
NAMES = ["a", "b", "c", "term"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 1.0, -2.0, 3.5]),
    st.text(max_size=3),
)
values = st.one_of(
    scalars,
    st.booleans(),
    st.lists(scalars, max_size=2),
    st.dictionaries(st.text(max_size=2), scalars, max_size=2),
)


@st.composite
def plain_schemas(draw: Any) -> dict[str, Any]:
    properties = {
        name: ({"type": draw(st.sampled_from(TYPES))} if draw(st.integers(0, 3)) else {})
        | ({"description": "d"} if draw(st.booleans()) else {})
        for name in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
    }
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if draw(st.booleans()):
        schema["required"] = draw(st.lists(st.sampled_from(NAMES), max_size=3))
    if draw(st.booleans()):
        schema["additionalProperties"] = draw(st.booleans())
    return schema


def _errors(schema: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    jsonschema = load_jsonschema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [error.message for error in validator.iter_errors(arguments)]


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_the_plain_check_passes_only_what_jsonschema_passes(data: Any) -> None:
    schema = data.draw(plain_schemas())
    names = [*schema["properties"], "x"]  # the schema's own names, mostly, and one more
    arguments = data.draw(st.dictionaries(st.sampled_from(names), values, max_size=4))
    check = plain_check(schema)
    assert check is not None, schema
    if check(arguments):
        assert _errors(schema, arguments) == [], (schema, arguments)


SAMPLES: list[Any] = [None, True, False, 0, 1, -3, 10**20, 0.0, 1.0, 0.5, -2.5, "", "s", [], [1]]
SAMPLES += [{}, {"k": 1}]


def test_each_type_passes_what_jsonschema_passes_and_only_that() -> None:
    """Every JSON type against every kind of value: the plain check passes exactly what
    jsonschema passes, but for the integral floats jsonschema counts as integers (left to it)."""
    for kind in TYPES:
        schema = {"type": "object", "properties": {"a": {"type": kind}}}
        check = plain_check(schema)
        assert check is not None
        for value in SAMPLES:
            passes = not _errors(schema, {"a": value})
            integral_float = kind == "integer" and isinstance(value, float)
            assert check({"a": value}) == (passes and not integral_float), (kind, value)


def test_well_formed_arguments_pass_the_plain_check() -> None:
    schema = {
        "type": "object",
        "properties": {"term": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["term"],
        "additionalProperties": False,
    }
    check = plain_check(schema)
    assert check is not None
    assert check({"term": "k1", "n": 3}) and check({"term": ""})
    assert not check({"n": 3}) and not check({"term": "k", "other": 1})
    assert not check({"term": 1}) and not check({"term": "k", "n": True})


def test_any_other_schema_is_left_to_jsonschema() -> None:
    for schema in (
        {"type": "object", "$schema": "http://json-schema.org/draft-04/schema#"},
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 1}}},
        {"type": "object", "properties": {"a": {"type": ["string", "null"]}}},
        {"type": "object", "properties": {"a": {"type": "date"}}},
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"type": "object", "patternProperties": {"^a": {"type": "string"}}},
        {"type": "object", "required": "a"},
        {"properties": {}},
        {"type": "array"},
        [],
    ):
        assert plain_check(schema) is None, schema
