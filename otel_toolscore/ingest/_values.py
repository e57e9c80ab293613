"""OTLP values decoded one by one: ``AnyValue`` (OTLP/JSON and protobuf) to SDK attribute values,
trace and span ids, integers, and text that UTF-8 can encode.

Attribute values are limited to what SDK attributes allow everywhere (str, bool, int, float and
homogeneous tuples of those), because decoded spans are re-exported and read by code written for
SDK spans. ``kvlistValue``, arrays holding arrays/kvlists and heterogeneous arrays become a
compact JSON string of the decoded value (readers parse JSON strings anyway); ``bytesValue``
becomes its base64 text; an empty ``AnyValue`` drops the attribute. An all-zero id reads as 0,
"absent" (some exporters write an all-zero ``parentSpanId`` for roots).

A part of the wrong shape raises ``BadValue``, whose message the decoders turn into a problem note.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any, Final

from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.util.types import AttributeValue

TRACE_ID_BYTES: Final = 16
SPAN_ID_BYTES: Final = 8
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64_LIMIT: Final = 2**64
UINT32_LIMIT: Final = 2**32


class BadValue(Exception):
    """A part of the input has the wrong shape; the message says how, for a problem note."""


class Empty:
    """An AnyValue with no value set (legal OTLP: "no value")."""


EMPTY: Final = Empty()


def type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def as_attribute(value: Any) -> AttributeValue:
    """A decoded AnyValue as an SDK attribute value (see the module docstring)."""
    if type(value) is list:
        return _sequence_attribute(value)
    if type(value) is dict:
        return _dumps(value)
    return value  # type: ignore[no-any-return]  # str, bool, int or float by construction


def _sequence_attribute(values: list[Any]) -> AttributeValue:
    first: type | None = None
    for item in values:
        if item is None:
            continue  # the SDK allows None inside sequences; it encodes as an empty AnyValue
        kind = type(item)
        if kind is list or kind is dict:
            return _dumps(values)
        if first is None:
            first = kind
        elif kind is not first:
            return _dumps(values)
    return tuple(values)


def as_body_attribute(value: Any) -> AttributeValue:
    # A structured body is one value (a message), never an SDK array; keep it whole as JSON.
    if type(value) is list or type(value) is dict:
        return _dumps(value)
    return value  # type: ignore[no-any-return]


def safe_text(value: str) -> str:
    """A JSON string as text that UTF-8 can encode.

    JSON lets a string hold a lone surrogate (``"\\ud800"``, and ``json.loads`` passes such raw
    bytes too); the OTLP encoder cannot encode one, so it would drop the attribute, or fail the
    whole export batch for a span name. Each lone surrogate becomes U+FFFD.
    """
    if value.isascii():  # O(1) in CPython: nearly every string ends here
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def _json_string(raw: Any) -> str:
    if type(raw) is str:
        return safe_text(raw)
    raise BadValue(f"stringValue is {type_name(raw)}")


def _json_bool(raw: Any) -> bool:
    if type(raw) is bool:
        return raw
    raise BadValue(f"boolValue is {type_name(raw)}")


def _json_int(raw: Any) -> int:
    return json_integer(raw, "intValue", _INT64_MIN, _INT64_MAX, "out of the int64 range")


def json_integer(raw: Any, what: str, lo: int, hi: int, out_of_range: str) -> int:
    """proto3 JSON writes 64-bit integers as strings; some senders write numbers."""
    kind = type(raw)
    if kind is str:
        try:
            value = int(raw)
        except ValueError:
            raise BadValue(f"{what} {raw[:40]!r} is not an integer") from None
    elif kind is int:
        value = raw
    elif kind is float and raw.is_integer():
        value = int(raw)
    else:
        raise BadValue(f"{what} is {type_name(raw)}")
    if not lo <= value <= hi:
        raise BadValue(f"{what} {value} is {out_of_range}")
    return value


def _json_double(raw: Any) -> float:
    kind = type(raw)
    if kind is float:
        return raw  # type: ignore[no-any-return]
    if kind is int:
        try:
            return float(raw)
        except OverflowError:  # JSON numbers have no size limit; a double has
            raise BadValue("doubleValue is a number out of the double range") from None
    if kind is str:  # proto3 JSON writes "NaN", "Infinity", "-Infinity" as strings
        try:
            return float(raw)
        except ValueError:
            raise BadValue(f"doubleValue {raw[:40]!r} is not a number") from None
    raise BadValue(f"doubleValue is {type_name(raw)}")


def _json_bytes(raw: Any) -> str:
    # JSON already carries bytes as base64 text, which is exactly the attribute value we want.
    if type(raw) is str:
        return safe_text(raw)
    raise BadValue(f"bytesValue is {type_name(raw)}")


def _json_array(raw: Any) -> list[Any]:
    if type(raw) is not dict:
        raise BadValue(f"arrayValue is {type_name(raw)}")
    values = raw.get("values")
    if values is None:
        return []
    if type(values) is not list:
        raise BadValue(f"arrayValue.values is {type_name(values)}")
    out: list[Any] = []
    for item in values:
        value = json_any(item)
        out.append(None if value is EMPTY else value)
    return out


def _json_kvlist(raw: Any) -> dict[str, Any]:
    if type(raw) is not dict:
        raise BadValue(f"kvlistValue is {type_name(raw)}")
    values = raw.get("values")
    if values is None:
        return {}
    if type(values) is not list:
        raise BadValue(f"kvlistValue.values is {type_name(values)}")
    out: dict[str, Any] = {}
    for item in values:
        if type(item) is not dict or type(item.get("key")) is not str:
            raise BadValue("kvlistValue holds an entry without a string key")
        value = json_any(item.get("value"))
        out[safe_text(item["key"])] = None if value is EMPTY else value
    return out


_JSON_ANY: Final[dict[str, Callable[[Any], Any]]] = {}
for _camel, _snake, _reader in (
    ("stringValue", "string_value", _json_string),
    ("boolValue", "bool_value", _json_bool),
    ("intValue", "int_value", _json_int),
    ("doubleValue", "double_value", _json_double),
    ("arrayValue", "array_value", _json_array),
    ("kvlistValue", "kvlist_value", _json_kvlist),
    ("bytesValue", "bytes_value", _json_bytes),
):
    _JSON_ANY[_camel] = _JSON_ANY[_snake] = _reader
del _camel, _snake, _reader


def json_any(raw: Any) -> Any:
    """An OTLP/JSON AnyValue as a plain Python value (lists, dicts, scalars) or ``EMPTY``."""
    if raw is None:
        return EMPTY
    if type(raw) is not dict:
        raise BadValue(f"value is {type_name(raw)}, not an AnyValue object")
    for key, inner in raw.items():
        reader = _JSON_ANY.get(key)
        if reader is not None and inner is not None:
            return reader(inner)
    if raw and not any(key in _JSON_ANY for key in raw):
        raise BadValue(f"unknown value field {next(iter(raw))!r}")
    return EMPTY


def pb_any(value: AnyValue) -> Any:
    """A protobuf AnyValue as a plain Python value (lists, dicts, scalars) or ``EMPTY``."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return value.int_value
    if which == "bool_value":
        return value.bool_value
    if which == "double_value":
        return value.double_value
    if which == "array_value":
        out: list[Any] = []
        for item in value.array_value.values:
            decoded = pb_any(item)
            out.append(None if decoded is EMPTY else decoded)
        return out
    if which == "kvlist_value":
        mapping: dict[str, Any] = {}
        for kv in value.kvlist_value.values:
            decoded = pb_any(kv.value)
            mapping[kv.key] = None if decoded is EMPTY else decoded
        return mapping
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return EMPTY


def json_uint(raw: Any, what: str) -> int:
    """A uint64/uint32 field (times, counts, flags)."""
    return json_integer(raw, what, 0, _UINT64_LIMIT - 1, "out of range")


def json_id(raw: Any, size: int) -> int:
    """A JSON trace/span id as an int (0 when absent).

    OTLP/JSON writes ids as hex, protobuf's generic JSON mapping as base64; their lengths differ
    (32/16 hex digits vs 22-24/11-12 base64 characters), so the length tells which it is.
    """
    if raw is None or raw == "":
        return 0
    if type(raw) is not str:
        raise BadValue(f"is {type_name(raw)}, not a string")
    length = len(raw)
    if length == 2 * size:
        try:
            data = bytes.fromhex(raw)
        except ValueError:
            raise BadValue(f"{raw[:40]!r} is not hex") from None
    elif length in ((size * 4 + 2) // 3, (size + 2) // 3 * 4):
        try:
            padded = raw.replace("-", "+").replace("_", "/") + "=" * (-length % 4)
            data = base64.b64decode(padded, validate=True)
        except (binascii.Error, ValueError):
            raise BadValue(f"{raw[:40]!r} is neither hex nor base64") from None
    else:
        raise BadValue(f"{raw[:40]!r} has {length} characters, not {2 * size} hex digits")
    if len(data) != size:
        raise BadValue(f"{raw[:40]!r} is not {size} bytes")
    return int.from_bytes(data, "big")


def pb_id(raw: bytes, size: int) -> int:
    if not raw:
        return 0
    if len(raw) != size:
        raise BadValue(f"has {len(raw)} bytes, not {size}")
    return int.from_bytes(raw, "big")


def undecodable(where: str, exc: Exception) -> str:
    return f"{where}: could not be decoded ({type(exc).__name__}: {exc}), skipped"


def json_field(obj: dict[str, Any], camel: str, snake: str) -> Any:
    """A field under its OTLP/JSON (lowerCamelCase) name, or the proto (snake_case) name."""
    value = obj.get(camel)
    return obj.get(snake) if value is None else value

