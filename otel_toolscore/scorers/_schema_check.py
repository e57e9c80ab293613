"""A quick "certainly valid" test for the plain tool schemas most tools offer.

``jsonschema`` finds and words every error, and costs about as much as the rest of
``tool_call_validation`` together even when there is none, which is the common case: a model
mostly calls its tools right. ``quick_check`` turns a schema that uses only the keywords below
into one function that answers True only when the arguments are valid; anything it is not sure
of (another keyword, a float where an integer is asked, a value of an unusual Python type) is
False, and the scorer asks ``jsonschema`` as before, so what it reports is unchanged. The same
format checker as the validator's decides ``format``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from jsonschema import (
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
    FormatChecker,
)

Check = Callable[[Any], bool]

#: drafts whose keywords below mean the same (draft 3 reads ``required`` and ``type`` otherwise)
_DRAFTS = (Draft4Validator, Draft6Validator, Draft7Validator, Draft201909Validator, Draft202012Validator)
#: keywords that never make an instance invalid
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "deprecated", "readOnly",
                          "writeOnly"})
_CHECKED = frozenset({"type", "properties", "required", "additionalProperties", "enum", "items", "format",
                      "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"})
#: the exact Python types that certainly are each JSON type (a subclass, a float that is a whole
#: number, a Decimal: not sure, so ``jsonschema`` decides)
_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,), "null": (type(None),),
    "integer": (int,), "number": (int, float),
}
#: what JSON decoding gives: for these, a keyword that applies to another type does not apply
_JSON_VALUES = frozenset({dict, list, str, bool, int, float, type(None)})
_NUMBERS = frozenset({int, float})
_OBJECT_KEYWORDS = frozenset({"properties", "required", "additionalProperties"})


def quick_check(schema: Mapping[str, Any], validator_class: type, formats: FormatChecker | None) -> Check | None:
    """The quick test for a schema already checked as valid, or None when it uses more than the
    keywords above (or a draft other than 4 to 2020-12)."""
    if validator_class not in _DRAFTS:
        return None
    body = {k: v for k, v in schema.items() if k != "$schema"}
    return _compile(body, formats)


def _compile(schema: Any, formats: FormatChecker | None) -> Check | None:
    if schema is True:
        return _anything
    if not isinstance(schema, Mapping) or not schema.keys() <= _CHECKED | _ANNOTATIONS:
        return None  # (a False schema: nothing is valid, jsonschema says why)
    checks: list[Check] = []
    if "type" in schema:
        check = _type_check(schema["type"])
        if check is None:
            return None
        checks.append(check)
    if "enum" in schema:
        check = _enum_check(schema["enum"])
        if check is None:
            return None
        checks.append(check)
    if "format" in schema:
        if formats is None:
            return None
        checks.append(_format_check(formats, schema["format"]))
    if not _OBJECT_KEYWORDS.isdisjoint(schema):
        object_check = _object_check(schema, formats)
        if object_check is None:
            return None
        checks.append(object_check)
    if "items" in schema:
        item = _compile(schema["items"], formats)
        if item is None:
            return None
        checks.append(_items_check(item))
    for keyword, kinds, test in _BOUNDS:
        if keyword in schema:
            bound = schema[keyword]
            if type(bound) not in _NUMBERS:
                return None
            checks.append(_bound_check(kinds, test, bound))
    if not checks:
        return _anything
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:  # (the usual "type" beside one other keyword: no loop to set up)
        first, second = checks
        return lambda value: first(value) and second(value)
    return lambda value: all(check(value) for check in checks)


def _anything(_value: Any) -> bool:
    return True


def _type_check(kind: Any) -> Check | None:
    kinds = [kind] if isinstance(kind, str) else kind
    if not isinstance(kinds, list) or not kinds or not all(isinstance(k, str) and k in _TYPES for k in kinds):
        return None
    allowed = frozenset(t for k in kinds for t in _TYPES[k])
    return lambda value: type(value) in allowed


def _enum_check(members: Any) -> Check | None:
    if not isinstance(members, list):
        return None
    # only members whose equality jsonschema and Python agree on, compared by exact type
    strings = frozenset(m for m in members if type(m) is str)
    integers = frozenset(m for m in members if type(m) is int)
    return lambda value: (value in strings) if type(value) is str else (type(value) is int and value in integers)


def _format_check(formats: FormatChecker, name: Any) -> Check:
    # ``formats.conforms(value, name)`` without its two calls and its FormatError: a format it
    # does not know conforms, a checker that answers falsy or raises does not (looked up on
    # every call, as ``conforms`` does: a format registered later counts)
    checkers = formats.checkers

    def check(value: Any) -> bool:
        try:
            entry = checkers.get(name)
            if entry is None:
                return True
            return bool(entry[0](value))
        except Exception:  # noqa: BLE001 - not sure: the validator decides, and says why
            return False

    return check


def _object_check(schema: Mapping[str, Any], formats: FormatChecker | None) -> Check | None:
    """The ``_OBJECT_KEYWORDS`` test; None when one of them is beyond the quick test."""
    props_schema = schema.get("properties", {})
    required = schema.get("required", [])
    extra_schema = schema.get("additionalProperties", True)
    if not isinstance(props_schema, Mapping) or not isinstance(required, list) \
            or not all(isinstance(r, str) for r in required):
        return None
    props: dict[str, Check] = {}
    for name, sub in props_schema.items():
        sub_check = _compile(sub, formats)
        if sub_check is None:
            return None
        props[name] = sub_check
    extra: Check | None
    if extra_schema is True:
        extra = _anything
    elif extra_schema is False:
        extra = None  # no other property allowed
    else:
        extra = _compile(extra_schema, formats)
        if extra is None:
            return None
    needed = tuple(required)

    def check(value: Any) -> bool:
        if type(value) is not dict:
            return type(value) in _JSON_VALUES
        for name in needed:
            if name not in value:
                return False
        for key, item in value.items():
            prop = props.get(key)
            if prop is not None:
                if not prop(item):
                    return False
            elif extra is None or not extra(item):
                return False
        return True

    return check


def _items_check(item: Check) -> Check:
    def check(value: Any) -> bool:
        if type(value) is not list:
            return type(value) in _JSON_VALUES
        return all(item(v) for v in value)

    return check


def _bound_check(kinds: frozenset[type], test: Callable[[Any, Any], bool], bound: Any) -> Check:
    def check(value: Any) -> bool:
        kind = type(value)
        if kind in kinds:
            return test(value, bound)
        # the keyword does not apply to another kind of value (a bool is no number to jsonschema)
        return kind in _JSON_VALUES

    return check


def _len_at_least(value: Any, bound: Any) -> bool:
    return len(value) >= bound


def _len_at_most(value: Any, bound: Any) -> bool:
    return len(value) <= bound


def _at_least(value: Any, bound: Any) -> bool:
    return bool(value >= bound)


def _at_most(value: Any, bound: Any) -> bool:
    return bool(value <= bound)


_BOUNDS: tuple[tuple[str, frozenset[type], Callable[[Any, Any], bool]], ...] = (
    ("minimum", _NUMBERS, _at_least),
    ("maximum", _NUMBERS, _at_most),
    ("minLength", frozenset({str}), _len_at_least),
    ("maxLength", frozenset({str}), _len_at_most),
    ("minItems", frozenset({list}), _len_at_least),
    ("maxItems", frozenset({list}), _len_at_most),
)
