"""The quick "certainly valid" schema test never says valid where jsonschema finds an error,
and does say valid for the plain schemas and arguments most calls have."""

from __future__ import annotations

import random
from typing import Any

import pytest
from jsonschema import Draft3Validator, Draft7Validator, Draft202012Validator
from jsonschema.validators import validator_for

from otel_toolscore.scorers._schema_check import quick_check
from otel_toolscore.scorers.tool_validation import _argument_issues, compile_schema
from otel_toolscore.trajectory import ToolCall

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"location": {"type": "string", "description": "City"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
     "required": ["location"], "additionalProperties": False},
    {"type": "object", "properties": {"origin": {"type": "string"}, "date": {"type": "string", "format": "date"},
                                      "max_stops": {"type": "integer", "minimum": 0, "maximum": 3}},
     "required": ["origin", "date"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "minLength": 2},
                                               "minItems": 1, "maxItems": 3},
                                      "limit": {"type": ["integer", "null"]},
                                      "ratio": {"type": "number", "maximum": 1},
                                      "flag": {"type": "boolean"},
                                      "nested": {"type": "object", "properties": {"a": {"enum": [1, 2, "x"]}},
                                                 "additionalProperties": {"type": "string", "maxLength": 4}}},
     "additionalProperties": True},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
     "properties": {"email": {"type": "string", "format": "email"}, "any": True}, "required": ["email"]},
    {"properties": {"n": {"minimum": 2}}, "required": ["n"]},
    {"type": "object"},
    {},
]

_LEAVES: list[Any] = [None, True, False, 0, 1, 2, 3, 4, -1, 1.0, 0.5, 2.5, float("nan"), "", "a", "ab", "abcde",
                      "celsius", "fahrenheit", "kelvin", "2024-01-31", "2024-13-01", "x@example.com", "not an email",
                      "x", [], ["ab"], ["a"], ["ab", "cd", "ef", "gh"], {}]
_KEYS = ["location", "unit", "origin", "date", "max_stops", "tags", "limit", "ratio", "flag", "nested", "a", "b",
         "email", "any", "n", "other"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.35:
        return {k: _value(rng, depth + 1) for k in rng.sample(_KEYS, rng.randint(0, 4))}
    if depth < 3 and roll < 0.45:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice(_LEAVES)


def _values(rng: random.Random, valid: list[dict[str, Any]]) -> list[Any]:
    """Random values, and valid instances with one key dropped, replaced or added."""
    out = [_value(rng) for _ in range(3000)]
    for instance in valid:
        for _ in range(300):
            changed = dict(instance)
            key = rng.choice([*changed, *_KEYS])
            if key in changed and rng.random() < 0.3:
                del changed[key]
            else:
                changed[key] = _value(rng, 2)
            out.append(changed)
    return out


def _valid_instances() -> list[tuple[int, dict[str, Any]]]:
    return [
        (0, {"location": "Paris"}), (0, {"location": "Paris", "unit": "celsius"}),
        (1, {"origin": "A", "date": "2024-01-31", "max_stops": 1}),
        (2, {"tags": ["ab"], "limit": None, "ratio": 0.5, "flag": True, "nested": {"a": 1, "zz": "abc"}}),
        (3, {"email": "x@example.com", "any": [1, {"b": None}]}),
        (4, {"n": 3}), (5, {"k": 1}), (6, {}),
    ]


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_never_says_valid_where_jsonschema_finds_an_error(index: int) -> None:
    schema = SCHEMAS[index]
    cls = validator_for(schema, default=Draft202012Validator)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    quick = quick_check(schema, cls, validator.format_checker)
    assert quick is not None
    rng = random.Random(index)
    said_valid = said_invalid = 0
    for value in _values(rng, [v for i, v in _valid_instances() if i == index]):
        if quick(value):
            said_valid += 1
            assert validator.is_valid(value), (schema, value)
        elif not validator.is_valid(value):
            said_invalid += 1
    # the values hit both answers (so the check above checks something)
    assert said_valid > 0 and (said_invalid > 0 or not schema)


def test_says_valid_for_valid_plain_arguments() -> None:
    for index, instance in _valid_instances():
        schema = SCHEMAS[index]
        cls = validator_for(schema, default=Draft202012Validator)
        quick = quick_check(schema, cls, cls.FORMAT_CHECKER)
        assert quick is not None and quick(instance), (schema, instance)


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "^a"}}},
    {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    {"type": "array", "items": [{"type": "string"}]},
    {"type": "STRING"},
    {"type": "object", "properties": {"a": {"type": "integer", "exclusiveMinimum": 0}}},
    {"type": "object", "properties": {"a": False}},
])
def test_leaves_other_keywords_to_jsonschema(schema: dict[str, Any]) -> None:
    assert quick_check(schema, Draft202012Validator, Draft202012Validator.FORMAT_CHECKER) is None


def test_only_drafts_4_to_2020_12() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert quick_check(schema, Draft3Validator, None) is None
    assert quick_check(schema, Draft7Validator, None) is not None


def test_a_float_for_an_integer_is_left_to_jsonschema() -> None:
    # 1.0 is an integer to draft 6+, 1.5 is not: the quick test is unsure of both
    quick = quick_check({"type": "integer"}, Draft202012Validator, None)
    assert quick is not None and not quick(1.0) and not quick(1.5) and quick(1) and not quick(True)


def test_the_scorer_reports_the_same_issues_with_the_quick_test() -> None:
    rng = random.Random(7)
    for schema in SCHEMAS:
        compiled = compile_schema(schema)
        assert compiled.quick is not None
        slow = type(compiled)(compiled.validator, compiled.problem, compiled.accepts_empty, None)
        for _ in range(500):
            args = _value(rng)
            if not isinstance(args, dict):
                continue
            call = ToolCall(id="c", name="t", arguments=args, arguments_raw="{}")
            assert _argument_issues(call, compiled) == _argument_issues(call, slow)
