"""OTLP trace data (OTLP/JSON, Collector JSON lines, protobuf) decoded into the SDK's ``ReadableSpan``.

Every entry point (sidecar, offline ``score FILE``) turns its input into the SDK's own span type
here, so the rest of the package has one span type and the sidecar can re-export with the SDK's
exporters. Input is untrusted: every part that cannot be read is skipped and described in
``OtlpBatch.problems``; ``OtlpDecodeError`` is raised only when nothing in the input is OTLP.

Decisions worth knowing:

* Attribute values are limited to what SDK attributes allow everywhere (str, bool, int, float and
  homogeneous tuples of those), because decoded spans are re-exported and read by code written
  for SDK spans. ``kvlistValue``, arrays holding arrays/kvlists and heterogeneous arrays become a
  compact JSON string of the decoded value (readers parse JSON strings anyway); ``bytesValue``
  becomes its base64 text; an empty ``AnyValue`` drops the attribute.
* Decoded span contexts are always marked sampled: the span was exported, so it was sampled, and
  the Python SDK does not put the sampled bit into OTLP ``flags`` (a downstream
  ``BatchSpanProcessor`` would silently drop an unsampled span).
* An all-zero ``parentSpanId`` means "no parent" (some exporters write it for roots).
* Log records with a ``spanId`` (the deprecated GenAI events) become span events of that span,
  after its own events, ordered by time; the body goes under ``semconv.EVENT_BODY``.
"""

from __future__ import annotations

import base64
import binascii
import gc
import gzip
import json
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.util.types import Attributes, AttributeValue

from otel_toolscore import semconv
from otel_toolscore.ingest.foreign import to_otlp_requests

__all__ = [
    "MAX_PROBLEMS",
    "OtlpBatch",
    "OtlpDecodeError",
    "parse_export_request",
    "OtlpSource",
    "decode_export_request",
    "format_span_id",
    "format_trace_id",
    "load_otlp",
    "read_otlp_json",
    "spans_from_otlp_dict",
]

# A path, "-" for stdin, the data itself, or a binary file object.
OtlpSource = str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes]

# Problems past this many are only counted: a file where every span has the same defect would
# otherwise produce one message per span, which no one reads and which costs memory.
MAX_PROBLEMS: Final = 1000

_TRACE_ID_BYTES: Final = 16
_SPAN_ID_BYTES: Final = 8
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64_LIMIT: Final = 2**64
_UINT32_LIMIT: Final = 2**32
# OTLP Span.flags: bits 0-7 are W3C trace flags, bit 8 says whether bit 9 (parent is remote) is set.
_FLAGS_TRACE_MASK: Final = 0xFF
_FLAGS_HAS_IS_REMOTE: Final = 0x100
_FLAGS_IS_REMOTE: Final = 0x200
_GZIP_MAGIC: Final = b"\x1f\x8b"
_GC_PAUSE_BYTES: Final = 1 << 20
_UTF8_BOM: Final = b"\xef\xbb\xbf"
_LEADING_WS = re.compile(rb"[ \t\r\n]*")

_SAMPLED_FLAGS: Final = tuple(TraceFlags(i | TraceFlags.SAMPLED) for i in range(256))
_PLAIN_FLAGS: Final = tuple(TraceFlags(i) for i in range(256))

# Enum values arrive as integers (OTLP/JSON) or as enum names (protobuf's generic JSON mapping).
_KINDS: Final[dict[int | str, SpanKind]] = {}
for _code, _names, _kind in (
    (0, ("SPAN_KIND_UNSPECIFIED",), SpanKind.INTERNAL),
    (1, ("SPAN_KIND_INTERNAL",), SpanKind.INTERNAL),
    (2, ("SPAN_KIND_SERVER",), SpanKind.SERVER),
    (3, ("SPAN_KIND_CLIENT",), SpanKind.CLIENT),
    (4, ("SPAN_KIND_PRODUCER",), SpanKind.PRODUCER),
    (5, ("SPAN_KIND_CONSUMER",), SpanKind.CONSUMER),
):
    _KINDS[_code] = _KINDS[str(_code)] = _kind
    for _name in _names:
        _KINDS[_name] = _kind
del _code, _names, _kind, _name
_STATUS_CODES: Final[dict[int | str, StatusCode]] = {
    0: StatusCode.UNSET,
    1: StatusCode.OK,
    2: StatusCode.ERROR,
    "0": StatusCode.UNSET,
    "1": StatusCode.OK,
    "2": StatusCode.ERROR,
    "STATUS_CODE_UNSET": StatusCode.UNSET,
    "STATUS_CODE_OK": StatusCode.OK,
    "STATUS_CODE_ERROR": StatusCode.ERROR,
}
_STATUS_UNSET: Final = Status(StatusCode.UNSET)
_STATUS_OK: Final = Status(StatusCode.OK)


class OtlpDecodeError(ValueError):
    """Nothing in the input could be read as OTLP; the message names the source and the defect."""


@dataclass
class OtlpBatch:
    """Spans decoded from one input, and notes on every part that was skipped or read leniently."""

    spans: list[ReadableSpan] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def format_trace_id(trace_id: int) -> str:
    """32 lowercase hex digits, the form OTLP/JSON and W3C traceparent use."""
    return f"{trace_id:032x}"


def format_span_id(span_id: int) -> str:
    """16 lowercase hex digits, the form OTLP/JSON and W3C traceparent use."""
    return f"{span_id:016x}"


class _DecodedSpan(ReadableSpan):
    """A ``ReadableSpan`` that reports the dropped counts its sender reported.

    The SDK derives dropped counts from its bounded containers, which a decoded span does not
    use; without this a re-export would claim that nothing had been dropped.
    """

    def __init__(
        self,
        *,
        name: str,
        context: SpanContext | None,
        parent: SpanContext | None,
        resource: Resource,
        attributes: Attributes,
        events: Sequence[Event],
        links: Sequence[Link],
        kind: SpanKind,
        status: Status,
        start_time: int | None,
        end_time: int | None,
        instrumentation_scope: InstrumentationScope | None,
        dropped_attributes: int = 0,
        dropped_events: int = 0,
        dropped_links: int = 0,
    ) -> None:
        super().__init__(
            name=name,
            context=context,
            parent=parent,
            resource=resource,
            attributes=attributes,
            events=events,
            links=links,
            kind=kind,
            status=status,
            start_time=start_time,
            end_time=end_time,
            instrumentation_scope=instrumentation_scope,
        )
        self._n_dropped_attributes = dropped_attributes
        self._n_dropped_events = dropped_events
        self._n_dropped_links = dropped_links

    @property
    def dropped_attributes(self) -> int:
        return self._n_dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._n_dropped_events

    @property
    def dropped_links(self) -> int:
        return self._n_dropped_links

    def with_more_events(self, extra: Iterable[Event]) -> _DecodedSpan:
        return copy_span(self, events=(*self.events, *extra))


def copy_span(
    span: ReadableSpan,
    *,
    attributes: Attributes | None = None,
    events: Sequence[Event] | None = None,
) -> _DecodedSpan:
    """An ended span with other attributes or events, keeping everything else, dropped counts
    included (ended SDK spans are immutable, so changing one means copying it)."""
    return _DecodedSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=span.attributes if attributes is None else attributes,
        events=span.events if events is None else events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
        dropped_attributes=span.dropped_attributes,
        dropped_events=span.dropped_events,
        dropped_links=span.dropped_links,
    )


# --- values ------------------------------------------------------------------------------------


class _Bad(Exception):
    """A part of the input has the wrong shape; the message says how, for a problem note."""


class _Empty:
    """An AnyValue with no value set (legal OTLP: "no value")."""


_EMPTY: Final = _Empty()


def _tname(value: object) -> str:
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


def _attribute(value: Any) -> AttributeValue:
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


def _body_attribute(value: Any) -> AttributeValue:
    # A structured body is one value (a message), never an SDK array; keep it whole as JSON.
    if type(value) is list or type(value) is dict:
        return _dumps(value)
    return value  # type: ignore[no-any-return]


def _text(value: str) -> str:
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
        return _text(raw)
    raise _Bad(f"stringValue is {_tname(raw)}")


def _json_bool(raw: Any) -> bool:
    if type(raw) is bool:
        return raw
    raise _Bad(f"boolValue is {_tname(raw)}")


def _json_int(raw: Any) -> int:
    return _json_integer(raw, "intValue", _INT64_MIN, _INT64_MAX, "out of the int64 range")


def _json_integer(raw: Any, what: str, lo: int, hi: int, out_of_range: str) -> int:
    """proto3 JSON writes 64-bit integers as strings; some senders write numbers."""
    kind = type(raw)
    if kind is str:
        try:
            value = int(raw)
        except ValueError:
            raise _Bad(f"{what} {raw[:40]!r} is not an integer") from None
    elif kind is int:
        value = raw
    elif kind is float and raw.is_integer():
        value = int(raw)
    else:
        raise _Bad(f"{what} is {_tname(raw)}")
    if not lo <= value <= hi:
        raise _Bad(f"{what} {value} is {out_of_range}")
    return value


def _json_double(raw: Any) -> float:
    kind = type(raw)
    if kind is float:
        return raw  # type: ignore[no-any-return]
    if kind is int:
        try:
            return float(raw)
        except OverflowError:  # JSON numbers have no size limit; a double has
            raise _Bad("doubleValue is a number out of the double range") from None
    if kind is str:  # proto3 JSON writes "NaN", "Infinity", "-Infinity" as strings
        try:
            return float(raw)
        except ValueError:
            raise _Bad(f"doubleValue {raw[:40]!r} is not a number") from None
    raise _Bad(f"doubleValue is {_tname(raw)}")


def _json_bytes(raw: Any) -> str:
    # JSON already carries bytes as base64 text, which is exactly the attribute value we want.
    if type(raw) is str:
        return _text(raw)
    raise _Bad(f"bytesValue is {_tname(raw)}")


def _json_array(raw: Any) -> list[Any]:
    if type(raw) is not dict:
        raise _Bad(f"arrayValue is {_tname(raw)}")
    values = raw.get("values")
    if values is None:
        return []
    if type(values) is not list:
        raise _Bad(f"arrayValue.values is {_tname(values)}")
    out: list[Any] = []
    for item in values:
        value = _json_any(item)
        out.append(None if value is _EMPTY else value)
    return out


def _json_kvlist(raw: Any) -> dict[str, Any]:
    if type(raw) is not dict:
        raise _Bad(f"kvlistValue is {_tname(raw)}")
    values = raw.get("values")
    if values is None:
        return {}
    if type(values) is not list:
        raise _Bad(f"kvlistValue.values is {_tname(values)}")
    out: dict[str, Any] = {}
    for item in values:
        if type(item) is not dict or type(item.get("key")) is not str:
            raise _Bad("kvlistValue holds an entry without a string key")
        value = _json_any(item.get("value"))
        out[_text(item["key"])] = None if value is _EMPTY else value
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


def _json_any(raw: Any) -> Any:
    """An OTLP/JSON AnyValue as a plain Python value (lists, dicts, scalars) or ``_EMPTY``."""
    if raw is None:
        return _EMPTY
    if type(raw) is not dict:
        raise _Bad(f"value is {_tname(raw)}, not an AnyValue object")
    for key, inner in raw.items():
        reader = _JSON_ANY.get(key)
        if reader is not None and inner is not None:
            return reader(inner)
    if raw and not any(key in _JSON_ANY for key in raw):
        raise _Bad(f"unknown value field {next(iter(raw))!r}")
    return _EMPTY


def _pb_any(value: AnyValue) -> Any:
    """A protobuf AnyValue as a plain Python value (lists, dicts, scalars) or ``_EMPTY``."""
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
            decoded = _pb_any(item)
            out.append(None if decoded is _EMPTY else decoded)
        return out
    if which == "kvlist_value":
        mapping: dict[str, Any] = {}
        for kv in value.kvlist_value.values:
            decoded = _pb_any(kv.value)
            mapping[kv.key] = None if decoded is _EMPTY else decoded
        return mapping
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return _EMPTY


def _json_uint(raw: Any, what: str) -> int:
    """A uint64/uint32 field (times, counts, flags)."""
    return _json_integer(raw, what, 0, _UINT64_LIMIT - 1, "out of range")


def _parse_id(raw: Any, size: int) -> int:
    """A JSON trace/span id as an int (0 when absent).

    OTLP/JSON writes ids as hex, protobuf's generic JSON mapping as base64; their lengths differ
    (32/16 hex digits vs 22-24/11-12 base64 characters), so the length tells which it is.
    """
    if raw is None or raw == "":
        return 0
    if type(raw) is not str:
        raise _Bad(f"is {_tname(raw)}, not a string")
    length = len(raw)
    if length == 2 * size:
        try:
            data = bytes.fromhex(raw)
        except ValueError:
            raise _Bad(f"{raw[:40]!r} is not hex") from None
    elif length in ((size * 4 + 2) // 3, (size + 2) // 3 * 4):
        try:
            padded = raw.replace("-", "+").replace("_", "/") + "=" * (-length % 4)
            data = base64.b64decode(padded, validate=True)
        except (binascii.Error, ValueError):
            raise _Bad(f"{raw[:40]!r} is neither hex nor base64") from None
    else:
        raise _Bad(f"{raw[:40]!r} has {length} characters, not {2 * size} hex digits")
    if len(data) != size:
        raise _Bad(f"{raw[:40]!r} is not {size} bytes")
    return int.from_bytes(data, "big")


def _pb_id(raw: bytes, size: int) -> int:
    if not raw:
        return 0
    if len(raw) != size:
        raise _Bad(f"has {len(raw)} bytes, not {size}")
    return int.from_bytes(raw, "big")


def _undecodable(where: str, exc: Exception) -> str:
    return f"{where}: could not be decoded ({type(exc).__name__}: {exc}), skipped"


def _field(obj: dict[str, Any], camel: str, snake: str) -> Any:
    """A field under its OTLP/JSON (lowerCamelCase) name, or the proto (snake_case) name."""
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


# --- decoding ----------------------------------------------------------------------------------


class _Problems:
    __slots__ = ("items", "unlisted")

    def __init__(self) -> None:
        self.items: list[str] = []
        self.unlisted = 0

    def add(self, message: str) -> None:
        if len(self.items) < MAX_PROBLEMS:
            self.items.append(message)
        else:
            self.unlisted += 1

    def result(self) -> list[str]:
        if not self.unlisted:
            return self.items
        return [*self.items, f"... and {self.unlisted} more problems not listed"]


class _Decoder:
    """Accumulates the spans of one input; log records are attached to their spans in ``finish``."""

    def __init__(self) -> None:
        self.problems = _Problems()
        self.spans: list[ReadableSpan] = []
        self._index: dict[tuple[int, int], int] = {}
        # (trace id, span id) -> [(time, event, where)]: log records may precede their spans.
        self._log_events: dict[tuple[int, int], list[tuple[int, Event, str]]] = {}
        self._resources: dict[tuple[Any, ...], Resource] = {}
        self._scopes: dict[tuple[Any, ...], InstrumentationScope] = {}
        self._metrics_requests = 0
        self._logs_without_span = 0

    # -- shared construction --

    def _resource(self, attributes: dict[str, AttributeValue], schema_url: str) -> Resource:
        # Every line of a Collector file repeats the resource; share one object per distinct one.
        key = (schema_url, *attributes.items())
        resource = self._resources.get(key)
        if resource is None:
            resource = self._resources[key] = Resource(attributes, schema_url)
        return resource

    def _scope(
        self, name: str, version: str, schema_url: str, attributes: dict[str, AttributeValue]
    ) -> InstrumentationScope:
        key = (name, version, schema_url, *attributes.items())
        scope = self._scopes.get(key)
        if scope is None:
            scope = self._scopes[key] = InstrumentationScope(name, version, schema_url, attributes)
        return scope

    def _add_span(
        self,
        *,
        trace_id: int,
        span_id: int,
        parent_id: int,
        flags: int,
        trace_state: TraceState | None,
        name: str,
        kind: SpanKind,
        start: int,
        end: int,
        attributes: dict[str, AttributeValue],
        events: list[Event],
        links: list[Link],
        status: Status,
        resource: Resource,
        scope: InstrumentationScope,
        dropped: tuple[int, int, int],
    ) -> None:
        trace_flags = _SAMPLED_FLAGS[flags & _FLAGS_TRACE_MASK]
        context = SpanContext(trace_id, span_id, False, trace_flags, trace_state)
        parent = None
        if parent_id:
            remote = bool(flags & _FLAGS_HAS_IS_REMOTE and flags & _FLAGS_IS_REMOTE)
            parent = SpanContext(trace_id, parent_id, remote, trace_flags)
        span = _DecodedSpan(
            name=name,
            context=context,
            parent=parent,
            resource=resource,
            attributes=attributes,
            events=events,
            links=links,
            kind=kind,
            status=status,
            start_time=start,
            end_time=end,
            instrumentation_scope=scope,
            dropped_attributes=dropped[0],
            dropped_events=dropped[1],
            dropped_links=dropped[2],
        )
        self._index.setdefault((trace_id, span_id), len(self.spans))
        self.spans.append(span)

    def _kind(self, raw: Any, label: str) -> SpanKind:
        if raw is None:
            return SpanKind.INTERNAL
        kind = _KINDS.get(raw) if type(raw) in (int, str) else None
        if kind is None:
            self.problems.add(f"{label}: unknown kind {str(raw)[:40]!r}, read as INTERNAL")
            return SpanKind.INTERNAL
        return kind

    def _status(self, raw_code: Any, message: Any, label: str) -> Status:
        if raw_code is None:
            return _STATUS_UNSET
        code = _STATUS_CODES.get(raw_code) if type(raw_code) in (int, str) else None
        if code is None:
            self.problems.add(f"{label}: unknown status code {str(raw_code)[:40]!r}, read as UNSET")
            return _STATUS_UNSET
        if code is StatusCode.ERROR:
            # The SDK keeps a description only with ERROR (it warns and drops it otherwise).
            return Status(StatusCode.ERROR, message if type(message) is str and message else None)
        return _STATUS_OK if code is StatusCode.OK else _STATUS_UNSET

    def _trace_state(self, raw: Any, label: str) -> TraceState | None:
        if not raw:
            return None
        if type(raw) is not str:
            self.problems.add(f"{label}: traceState is {_tname(raw)}, ignored")
            return None
        state = TraceState.from_header([raw])
        if not state:
            self.problems.add(f"{label}: traceState {raw[:40]!r} is not a W3C tracestate, ignored")
            return None
        return state

    def _log_event(
        self, trace_id: int, span_id: int, name: str, attributes: dict[str, AttributeValue], time: int, where: str
    ) -> None:
        event = Event(name, attributes, time)
        self._log_events.setdefault((trace_id, span_id), []).append((time, event, where))

    def finish(self) -> OtlpBatch:
        for key, pending in self._log_events.items():
            index = self._index.get(key)
            if index is None:
                for _, event, where in pending:
                    self.problems.add(
                        f"{where}: span {format_span_id(key[1])} of trace {format_trace_id(key[0])} is not in "
                        f"the input; event {event.name!r} skipped"
                    )
                continue
            pending.sort(key=lambda item: item[0])
            span = self.spans[index]
            assert isinstance(span, _DecodedSpan)
            self.spans[index] = span.with_more_events(event for _, event, _ in pending)
        self._log_events.clear()
        if self._metrics_requests:
            self.problems.add(f"{self._metrics_requests} resourceMetrics request(s) ignored: metrics are not read")
        if self._logs_without_span:
            self.problems.add(
                f"{self._logs_without_span} log record(s) without a spanId ignored: only span events are read"
            )
        return OtlpBatch(spans=self.spans, problems=self.problems.result())

    # -- OTLP/JSON --

    def add_json_request(self, obj: Any, prefix: str) -> bool:
        """Decode one export request object; False when it is not OTLP at all."""
        if type(obj) is not dict:
            return False
        found = False
        resource_spans = _field(obj, "resourceSpans", "resource_spans")
        if resource_spans is not None:
            found = True
            self._json_resource_spans(resource_spans, prefix)
        resource_logs = _field(obj, "resourceLogs", "resource_logs")
        if resource_logs is not None:
            found = True
            self._json_resource_logs(resource_logs, prefix)
        if _field(obj, "resourceMetrics", "resource_metrics") is not None:
            found = True
            self._metrics_requests += 1
        return found

    def _json_list(self, raw: Any, what: str) -> list[Any]:
        if raw is None:
            return []
        if type(raw) is not list:
            self.problems.add(f"{what} is {_tname(raw)}, not an array; skipped")
            return []
        return raw

    def _json_attributes(self, raw: Any, label: str) -> dict[str, AttributeValue]:
        out: dict[str, AttributeValue] = {}
        if not raw:
            return out
        if type(raw) is not list:
            self.problems.add(f"{label}: attributes is {_tname(raw)}, not an array; skipped")
            return out
        for item in raw:
            if type(item) is not dict or type(item.get("key")) is not str:
                self.problems.add(f"{label}: attribute entry without a string key, skipped")
                continue
            key: str = item["key"]
            if not key.isascii():
                key = _text(key)
            value = item.get("value")
            # Nearly every attribute is a plain string: skip the generic path for it.
            if type(value) is dict:
                text = value.get("stringValue")
                if type(text) is str:
                    out[key] = text if text.isascii() else _text(text)
                    continue
            try:
                decoded = _json_any(value)
            except _Bad as exc:
                self.problems.add(f"{label}: attribute {key!r} has an unsupported value ({exc}), skipped")
                continue
            except RecursionError:
                self.problems.add(f"{label}: attribute {key!r} is nested too deeply, skipped")
                continue
            if decoded is not _EMPTY:
                out[key] = _attribute(decoded)
        return out

    def _json_time(self, raw: Any, label: str, what: str) -> int:
        if raw is None:
            return 0
        try:
            return _json_uint(raw, what)
        except _Bad as exc:
            self.problems.add(f"{label}: {exc}; read as 0")
            return 0

    def _json_resource_spans(self, raw: Any, prefix: str) -> None:
        for i, entry in enumerate(self._json_list(raw, f"{prefix}resourceSpans")):
            where = f"resourceSpans[{i}]"
            if type(entry) is not dict:
                self.problems.add(f"{prefix}{where} is {_tname(entry)}, not an object; skipped")
                continue
            resource = self._json_resource(entry, f"{prefix}{where}")
            scope_spans = _field(entry, "scopeSpans", "scope_spans")
            if scope_spans is None:  # OTLP before 0.15 called them instrumentation library spans
                scope_spans = _field(entry, "instrumentationLibrarySpans", "instrumentation_library_spans")
            for j, group in enumerate(self._json_list(scope_spans, f"{prefix}{where}.scopeSpans")):
                group_where = f"{where}.scopeSpans[{j}]"
                if type(group) is not dict:
                    self.problems.add(f"{prefix}{group_where} is {_tname(group)}, not an object; skipped")
                    continue
                scope = self._json_scope(group, f"{prefix}{group_where}")
                for k, span in enumerate(self._json_list(group.get("spans"), f"{prefix}{group_where}.spans")):
                    span_where = f"{prefix}span #{k} in {group_where}"
                    try:
                        self._json_span(span, resource, scope, span_where, prefix)
                    except Exception as exc:
                        # Untrusted input must never stop a sidecar or a CI run: lose this span, not the batch.
                        self.problems.add(_undecodable(span_where, exc))

    def _json_resource(self, entry: dict[str, Any], where: str) -> Resource:
        schema_url = _field(entry, "schemaUrl", "schema_url")
        schema_url = _text(schema_url) if type(schema_url) is str else ""
        raw = entry.get("resource")
        if raw is not None and type(raw) is not dict:
            self.problems.add(f"{where}.resource is {_tname(raw)}, not an object; read as empty")
            raw = None
        attributes = self._json_attributes(raw.get("attributes"), f"{where}.resource") if raw else {}
        return self._resource(attributes, schema_url)

    def _json_scope(self, group: dict[str, Any], where: str) -> InstrumentationScope:
        schema_url = _field(group, "schemaUrl", "schema_url")
        schema_url = _text(schema_url) if type(schema_url) is str else ""
        raw = group.get("scope")
        if raw is None:
            raw = _field(group, "instrumentationLibrary", "instrumentation_library")
        if raw is not None and type(raw) is not dict:
            self.problems.add(f"{where}.scope is {_tname(raw)}, not an object; read as empty")
            raw = None
        if not raw:
            return self._scope("", "", schema_url, {})
        name = raw.get("name")
        version = raw.get("version")
        return self._scope(
            _text(name) if type(name) is str else "",
            # The SDK's own tracers use "" for "no version"; match them so equal scopes compare equal.
            _text(version) if type(version) is str else "",
            schema_url,
            self._json_attributes(raw.get("attributes"), f"{where}.scope"),
        )

    def _json_span(self, raw: Any, resource: Resource, scope: InstrumentationScope, where: str, prefix: str) -> None:
        if type(raw) is not dict:
            self.problems.add(f"{where}: is {_tname(raw)}, not an object; skipped")
            return
        try:
            trace_id = _parse_id(_field(raw, "traceId", "trace_id"), _TRACE_ID_BYTES)
        except _Bad as exc:
            self.problems.add(f"{where}: invalid traceId ({exc}), skipped")
            return
        try:
            span_id = _parse_id(_field(raw, "spanId", "span_id"), _SPAN_ID_BYTES)
        except _Bad as exc:
            self.problems.add(f"{where}: invalid spanId ({exc}), skipped")
            return
        if not trace_id:
            self.problems.add(f"{where}: missing traceId, skipped")
            return
        if not span_id:
            self.problems.add(f"{where}: missing spanId, skipped")
            return
        label = f"{prefix}span {format_span_id(span_id)}"
        try:
            parent_id = _parse_id(_field(raw, "parentSpanId", "parent_span_id"), _SPAN_ID_BYTES)
        except _Bad as exc:
            self.problems.add(f"{label}: invalid parentSpanId ({exc}); kept as a root")
            parent_id = 0
        name = raw.get("name")
        if name is None:
            name = ""
        elif type(name) is not str:
            self.problems.add(f"{label}: name is {_tname(name)}, read as empty")
            name = ""
        else:
            name = _text(name)
        flags = raw.get("flags")
        if flags is not None:
            flags = self._json_time(flags, label, "flags")  # same shape: an unsigned integer
        status = raw.get("status")
        if status is None:
            status_value = _STATUS_UNSET
        elif type(status) is dict:
            message = status.get("message")
            status_value = self._status(status.get("code"), _text(message) if type(message) is str else None, label)
        else:
            self.problems.add(f"{label}: status is {_tname(status)}, read as UNSET")
            status_value = _STATUS_UNSET
        self._add_span(
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            flags=flags or 0,
            trace_state=self._trace_state(_field(raw, "traceState", "trace_state"), label),
            name=name,
            kind=self._kind(raw.get("kind"), label),
            start=self._json_time(_field(raw, "startTimeUnixNano", "start_time_unix_nano"), label, "startTimeUnixNano"),
            end=self._json_time(_field(raw, "endTimeUnixNano", "end_time_unix_nano"), label, "endTimeUnixNano"),
            attributes=self._json_attributes(raw.get("attributes"), label),
            events=self._json_events(raw.get("events"), label),
            links=self._json_links(raw.get("links"), label),
            status=status_value,
            resource=resource,
            scope=scope,
            dropped=(
                self._json_count(_field(raw, "droppedAttributesCount", "dropped_attributes_count"), label),
                self._json_count(_field(raw, "droppedEventsCount", "dropped_events_count"), label),
                self._json_count(_field(raw, "droppedLinksCount", "dropped_links_count"), label),
            ),
        )

    def _json_count(self, raw: Any, label: str) -> int:
        if raw is None or raw == 0:
            return 0
        try:
            # uint32 in OTLP: a larger count would make the OTLP encoder fail the whole re-export.
            return _json_integer(raw, "dropped count", 0, _UINT32_LIMIT - 1, "out of the uint32 range")
        except _Bad as exc:
            self.problems.add(f"{label}: {exc}; read as 0")
            return 0

    def _json_events(self, raw: Any, label: str) -> list[Event]:
        events: list[Event] = []
        for i, entry in enumerate(self._json_list(raw, f"{label}: events")):
            if type(entry) is not dict:
                self.problems.add(f"{label}: event #{i} is {_tname(entry)}, not an object; skipped")
                continue
            name = entry.get("name")
            if type(name) is not str:
                self.problems.add(f"{label}: event #{i} has no string name, skipped")
                continue
            name = _text(name)
            time = self._json_time(_field(entry, "timeUnixNano", "time_unix_nano"), label, f"event {name!r} time")
            attributes = self._json_attributes(entry.get("attributes"), f"{label} event {name!r}")
            events.append(Event(name, attributes, time))
        return events

    def _json_links(self, raw: Any, label: str) -> list[Link]:
        links: list[Link] = []
        for i, entry in enumerate(self._json_list(raw, f"{label}: links")):
            if type(entry) is not dict:
                self.problems.add(f"{label}: link #{i} is {_tname(entry)}, not an object; skipped")
                continue
            try:
                trace_id = _parse_id(_field(entry, "traceId", "trace_id"), _TRACE_ID_BYTES)
                span_id = _parse_id(_field(entry, "spanId", "span_id"), _SPAN_ID_BYTES)
            except _Bad as exc:
                self.problems.add(f"{label}: link #{i} has an invalid id ({exc}), skipped")
                continue
            if not trace_id or not span_id:
                self.problems.add(f"{label}: link #{i} has no traceId or spanId, skipped")
                continue
            flags = self._json_time(entry.get("flags"), label, f"link #{i} flags")
            context = SpanContext(
                trace_id,
                span_id,
                bool(flags & _FLAGS_HAS_IS_REMOTE and flags & _FLAGS_IS_REMOTE),
                _PLAIN_FLAGS[flags & _FLAGS_TRACE_MASK],
                self._trace_state(_field(entry, "traceState", "trace_state"), label),
            )
            links.append(Link(context, self._json_attributes(entry.get("attributes"), f"{label} link #{i}")))
        return links

    def _json_resource_logs(self, raw: Any, prefix: str) -> None:
        for i, entry in enumerate(self._json_list(raw, f"{prefix}resourceLogs")):
            where = f"resourceLogs[{i}]"
            if type(entry) is not dict:
                self.problems.add(f"{prefix}{where} is {_tname(entry)}, not an object; skipped")
                continue
            groups = self._json_list(_field(entry, "scopeLogs", "scope_logs"), f"{prefix}{where}.scopeLogs")
            for j, group in enumerate(groups):
                group_where = f"{where}.scopeLogs[{j}]"
                if type(group) is not dict:
                    self.problems.add(f"{prefix}{group_where} is {_tname(group)}, not an object; skipped")
                    continue
                records = self._json_list(
                    _field(group, "logRecords", "log_records"), f"{prefix}{group_where}.logRecords"
                )
                for k, record in enumerate(records):
                    record_where = f"{prefix}log record #{k} in {group_where}"
                    try:
                        self._json_log_record(record, record_where)
                    except Exception as exc:
                        # Same reason as for spans: one bad record must not lose the batch.
                        self.problems.add(_undecodable(record_where, exc))

    def _json_log_record(self, raw: Any, where: str) -> None:
        if type(raw) is not dict:
            self.problems.add(f"{where}: is {_tname(raw)}, not an object; skipped")
            return
        try:
            span_id = _parse_id(_field(raw, "spanId", "span_id"), _SPAN_ID_BYTES)
            trace_id = _parse_id(_field(raw, "traceId", "trace_id"), _TRACE_ID_BYTES)
        except _Bad as exc:
            self.problems.add(f"{where}: invalid id ({exc}), skipped")
            return
        if not span_id:
            # Plain application logs: not span events, and not a defect of the input.
            self._logs_without_span += 1
            return
        if not trace_id:
            self.problems.add(f"{where}: has a spanId but no traceId, skipped")
            return
        attributes = self._json_attributes(raw.get("attributes"), where)
        name = _field(raw, "eventName", "event_name")
        if type(name) is not str or not name:
            name = attributes.get(semconv.EVENT_NAME_ATTR)
        if type(name) is not str or not name:
            self.problems.add(f"{where}: no eventName or {semconv.EVENT_NAME_ATTR} attribute, skipped")
            return
        name = _text(name)
        body = raw.get("body")
        if body is not None:
            try:
                decoded = _json_any(body)
            except (_Bad, RecursionError) as exc:
                self.problems.add(f"{where}: body is unsupported ({exc or 'nested too deeply'}), left out")
                decoded = _EMPTY
            if decoded is not _EMPTY:
                attributes[semconv.EVENT_BODY] = _body_attribute(decoded)
        time = self._json_time(_field(raw, "timeUnixNano", "time_unix_nano"), where, "timeUnixNano")
        if not time:
            time = self._json_time(
                _field(raw, "observedTimeUnixNano", "observed_time_unix_nano"), where, "observedTimeUnixNano"
            )
        self._log_event(trace_id, span_id, name, attributes, time, where)

    # -- protobuf --

    def add_pb_request(self, message: ExportTraceServiceRequest) -> None:
        for i, entry in enumerate(message.resource_spans):
            where = f"resourceSpans[{i}]"
            resource = self._resource(
                self._pb_attributes(entry.resource.attributes, f"{where}.resource"), entry.schema_url
            )
            for j, group in enumerate(entry.scope_spans):
                group_where = f"{where}.scopeSpans[{j}]"
                pb_scope = group.scope
                scope = self._scope(
                    pb_scope.name,
                    pb_scope.version,
                    group.schema_url,
                    self._pb_attributes(pb_scope.attributes, f"{group_where}.scope"),
                )
                for k, span in enumerate(group.spans):
                    span_where = f"span #{k} in {group_where}"
                    try:
                        self._pb_span(span, resource, scope, span_where)
                    except Exception as exc:
                        # See _json_resource_spans: lose one span, never the batch.
                        self.problems.add(_undecodable(span_where, exc))

    def _pb_attributes(self, raw: Sequence[KeyValue], label: str) -> dict[str, AttributeValue]:
        out: dict[str, AttributeValue] = {}
        for kv in raw:
            try:
                decoded = _pb_any(kv.value)
            except RecursionError:
                self.problems.add(f"{label}: attribute {kv.key!r} is nested too deeply, skipped")
                continue
            if decoded is not _EMPTY:
                out[kv.key] = _attribute(decoded)
        return out

    def _pb_span(self, span: PbSpan, resource: Resource, scope: InstrumentationScope, where: str) -> None:
        try:
            trace_id = _pb_id(span.trace_id, _TRACE_ID_BYTES)
            span_id = _pb_id(span.span_id, _SPAN_ID_BYTES)
        except _Bad as exc:
            self.problems.add(f"{where}: invalid id ({exc}), skipped")
            return
        if not trace_id:
            self.problems.add(f"{where}: missing traceId, skipped")
            return
        if not span_id:
            self.problems.add(f"{where}: missing spanId, skipped")
            return
        label = f"span {format_span_id(span_id)}"
        try:
            parent_id = _pb_id(span.parent_span_id, _SPAN_ID_BYTES)
        except _Bad as exc:
            self.problems.add(f"{label}: invalid parentSpanId ({exc}); kept as a root")
            parent_id = 0
        events = [
            Event(
                event.name,
                self._pb_attributes(event.attributes, f"{label} event {event.name!r}"),
                event.time_unix_nano,
            )
            for event in span.events
        ]
        links: list[Link] = []
        for i, link in enumerate(span.links):
            try:
                link_trace = _pb_id(link.trace_id, _TRACE_ID_BYTES)
                link_span = _pb_id(link.span_id, _SPAN_ID_BYTES)
            except _Bad as exc:
                self.problems.add(f"{label}: link #{i} has an invalid id ({exc}), skipped")
                continue
            if not link_trace or not link_span:
                self.problems.add(f"{label}: link #{i} has no traceId or spanId, skipped")
                continue
            context = SpanContext(
                link_trace,
                link_span,
                bool(link.flags & _FLAGS_HAS_IS_REMOTE and link.flags & _FLAGS_IS_REMOTE),
                _PLAIN_FLAGS[link.flags & _FLAGS_TRACE_MASK],
                self._trace_state(link.trace_state, label),
            )
            links.append(Link(context, self._pb_attributes(link.attributes, f"{label} link #{i}")))
        self._add_span(
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            flags=span.flags,
            trace_state=self._trace_state(span.trace_state, label),
            name=span.name,
            kind=self._kind(span.kind, label),
            start=span.start_time_unix_nano,
            end=span.end_time_unix_nano,
            attributes=self._pb_attributes(span.attributes, label),
            events=events,
            links=links,
            status=self._status(span.status.code, span.status.message, label),
            resource=resource,
            scope=scope,
            dropped=(span.dropped_attributes_count, span.dropped_events_count, span.dropped_links_count),
        )


# --- entry points ------------------------------------------------------------------------------


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while a large input is parsed.

    Parsing allocates millions of acyclic objects, which triggers full collections that find
    nothing; pausing them halves the time for a large file. Restored as it was, whatever happens.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _read_source(source: OtlpSource) -> tuple[str, bytes]:
    if isinstance(source, bytes):
        return "<bytes>", source
    if isinstance(source, (bytearray, memoryview)):
        return "<bytes>", bytes(source)
    if isinstance(source, str) and source == "-":
        return "<stdin>", sys.stdin.buffer.read()
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        return str(path), path.read_bytes()
    read = getattr(source, "read", None)
    if callable(read):
        data = read()
        if isinstance(data, str):
            data = data.encode("utf-8")
        name = getattr(source, "name", None)
        return (name if isinstance(name, str) else "<stream>"), bytes(data)
    raise TypeError(f"cannot read OTLP from {type(source).__name__}: pass a path, '-', bytes or a binary file")


def _json_error(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno} column {exc.colno}: {exc.msg}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text: {exc.reason} at byte {exc.start}"
    return str(exc)


_NOT_OTLP: Final = "JSON but not OTLP: no resourceSpans/resourceLogs"


def _add_json_document(decoder: _Decoder, doc: Any, prefix: str) -> bool:
    """One JSON value holding a request, or an array of requests; False when none is OTLP.

    A document that is not OTLP may be a trace saved from Jaeger or Tempo (``foreign``)."""
    if type(doc) is not list:
        if decoder.add_json_request(doc, prefix):
            return True
        try:
            converted = to_otlp_requests(doc)
        except (TypeError, ValueError, AttributeError, OverflowError) as exc:  # a damaged foreign trace
            decoder.problems.add(f"{prefix}looks like a Jaeger trace but cannot be read: {type(exc).__name__}: {exc}")
            return False
        if converted is None:
            return False
        name, requests = converted
        return any([decoder.add_json_request(request, f"{prefix}{name}: ") for request in requests])
    found = False
    for i, item in enumerate(doc):
        item_prefix = f"{prefix}request[{i}]: "
        if decoder.add_json_request(item, item_prefix):
            found = True
        else:
            decoder.problems.add(f"{item_prefix}{_NOT_OTLP}, skipped")
    return found


def _decode_json(data: bytes, label: str) -> OtlpBatch:
    decoder = _Decoder()
    try:
        doc = json.loads(data)
    except RecursionError:
        raise OtlpDecodeError(f"{label}: not JSON (nested too deeply)") from None
    except ValueError as exc:
        # The Collector file exporter writes one request per line, which fails as one document
        # ("Extra data"); a truly broken document fails line by line too, and then we report the
        # whole-document error, which points at the real defect.
        batch = _decode_json_lines(data)
        if batch is None:
            raise OtlpDecodeError(f"{label}: not JSON ({_json_error(exc)})") from None
        return batch
    if not _add_json_document(decoder, doc, ""):
        if type(doc) is dict or type(doc) is list:
            raise OtlpDecodeError(f"{label}: {_NOT_OTLP}")
        raise OtlpDecodeError(f"{label}: JSON but not OTLP: {_tname(doc)}, not an object")
    return decoder.finish()


def _decode_json_lines(data: bytes) -> OtlpBatch | None:
    decoder = _Decoder()
    found = False
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        prefix = f"line {number}: "
        try:
            doc = json.loads(line)
        except RecursionError:
            decoder.problems.add(f"{prefix}not JSON (nested too deeply), skipped")
            continue
        except ValueError as exc:
            decoder.problems.add(f"{prefix}not JSON ({_json_error(exc)}), skipped")
            continue
        if _add_json_document(decoder, doc, prefix):
            found = True
        elif type(doc) is not list:
            decoder.problems.add(f"{prefix}{_NOT_OTLP}, skipped")
    return decoder.finish() if found else None


# --- protobuf with invalid UTF-8 ------------------------------------------------------------------
#
# protobuf's parser rejects a whole request when one string field is not UTF-8; the Collector's
# does not, so exporters in other languages send such data and get it accepted there. Rather than
# lose every span of the request, the wire format is walked once more with the message
# descriptors, bad strings become U+FFFD, and the repair is recorded as a problem.

_MAX_PB_DEPTH: Final = 100  # protobuf's own recursion limit


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _repair_utf8(data: bytes, descriptor: Any, depth: int, repaired: list[int]) -> bytes:
    """``data`` (a serialized message of type ``descriptor``) with every string field that is
    not UTF-8 decoded with replacement characters; ``ValueError`` on malformed wire data."""
    if depth > _MAX_PB_DEPTH:
        raise ValueError("nested too deeply")
    fields = descriptor.fields_by_number
    out = bytearray()
    pos, size = 0, len(data)
    while pos < size:
        start = pos
        key, pos = _read_varint(data, pos)
        wire_type = key & 7
        if wire_type == 0:
            _, pos = _read_varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            key_end = pos
            length, pos = _read_varint(data, pos)
            end = pos + length
            if end > size:
                raise ValueError("truncated field")
            field = fields.get(key >> 3)
            payload = data[pos:end]
            fixed = payload
            if field is not None and field.type == field.TYPE_STRING:
                try:
                    payload.decode("utf-8")
                except UnicodeDecodeError:
                    fixed = payload.decode("utf-8", "replace").encode("utf-8")
                    repaired[0] += 1
            elif field is not None and field.type == field.TYPE_MESSAGE:
                fixed = _repair_utf8(payload, field.message_type, depth + 1, repaired)
            pos = end
            if fixed is not payload and fixed != payload:
                out += data[start:key_end] + _varint_bytes(len(fixed)) + fixed
                continue
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        if pos > size:
            raise ValueError("truncated field")
        out += data[start:pos]
    return bytes(out)


def parse_export_request(data: bytes, problems: list[str] | None = None) -> ExportTraceServiceRequest:
    """``data`` parsed as an ``ExportTraceServiceRequest``; string fields that are not UTF-8 are
    repaired (U+FFFD, noted in ``problems``) instead of failing the whole request. Raises what
    protobuf raises when the data is not such a message at all."""
    message = ExportTraceServiceRequest()
    try:
        message.ParseFromString(data)
        return message
    except Exception as first:  # the C parser's error types vary across protobuf versions
        repaired = [0]
        try:
            fixed = _repair_utf8(bytes(data), ExportTraceServiceRequest.DESCRIPTOR, 0, repaired)
        except (ValueError, RecursionError):
            raise first from None
        if not repaired[0]:
            raise
        message = ExportTraceServiceRequest()
        message.ParseFromString(fixed)
        if problems is not None:
            problems.append(f"{repaired[0]} string field(s) not valid UTF-8, repaired with U+FFFD")
        return message


def _decode_protobuf(data: bytes, label: str) -> OtlpBatch:
    repairs: list[str] = []
    try:
        message = parse_export_request(data, repairs)
    except Exception as exc:
        # The C parser's error types vary across protobuf versions; any failure means "not protobuf".
        raise OtlpDecodeError(f"{label}: protobuf decode failed ({exc or type(exc).__name__})") from None
    if not message.resource_spans:
        raise OtlpDecodeError(f"{label}: protobuf decode failed (no resourceSpans in it)")
    decoder = _Decoder()
    for problem in repairs:
        decoder.problems.add(problem)
    decoder.add_pb_request(message)
    batch = decoder.finish()
    if not batch.spans and batch.problems:
        # Random bytes sometimes parse as protobuf; if not one span in it is valid, it was not OTLP.
        raise OtlpDecodeError(f"{label}: protobuf decode failed (no valid span; first problem: {batch.problems[0]})")
    return batch


def _decode_bytes(data: bytes, label: str) -> OtlpBatch:
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise OtlpDecodeError(f"{label}: gzip decompression failed ({exc})") from None
    start = 3 if data.startswith(_UTF8_BOM) else 0
    match = _LEADING_WS.match(data, start)
    first = data[match.end() : match.end() + 1] if match else b""
    if not first:
        raise OtlpDecodeError(f"{label}: empty input")
    if first in b"{[":
        try:
            return _decode_json(data, label)
        except OtlpDecodeError as json_error:
            # A protobuf request starts with 0x0A, a newline: it can look like JSON after whitespace.
            if data[:1] != b"\n":
                raise
            try:
                return _decode_protobuf(data, label)
            except OtlpDecodeError:
                raise json_error from None
    try:
        return _decode_protobuf(data, label)
    except OtlpDecodeError as pb_error:
        pb_reason = str(pb_error).removeprefix(f"{label}: ")
    # JSON lines whose first line is damaged do not start like JSON; the other lines still count.
    batch = _decode_json_lines(data)
    if batch is not None:
        return batch
    try:
        doc = json.loads(data)
    except RecursionError:
        raise OtlpDecodeError(f"{label}: not JSON (nested too deeply), and {pb_reason}") from None
    except ValueError as exc:
        raise OtlpDecodeError(f"{label}: not JSON ({_json_error(exc)}), and {pb_reason}") from None
    raise OtlpDecodeError(f"{label}: JSON but not OTLP: {_tname(doc)}, not an object")


def load_otlp(source: OtlpSource) -> OtlpBatch:
    """Decode OTLP trace data from a path, ``'-'`` (stdin), bytes or a binary file object.

    Accepts an OTLP/JSON ``ExportTraceServiceRequest`` (hex or base64 ids, camelCase or snake_case
    fields), a JSON array of requests, the Collector file exporter's JSON lines (trace, log and
    metric lines; metrics are ignored), traces saved from Jaeger (UI JSON, api/v3) and Tempo
    (``batches``, ``trace``), and binary protobuf, each optionally gzip-compressed.
    Raises ``OtlpDecodeError`` only when nothing in the input is OTLP; ``OSError`` when a path
    cannot be read.
    """
    label, data = _read_source(source)
    if len(data) < _GC_PAUSE_BYTES:
        return _decode_bytes(data, label)
    with _gc_paused():
        return _decode_bytes(data, label)


def read_otlp_json(source: OtlpSource) -> list[ReadableSpan]:
    """The spans of ``load_otlp(source)``, for callers that do not report problems."""
    return load_otlp(source).spans


def spans_from_otlp_dict(d: dict[str, Any]) -> OtlpBatch:
    """Decode an already parsed OTLP/JSON request (traces and/or logs)."""
    decoder = _Decoder()
    if not decoder.add_json_request(d, ""):
        raise OtlpDecodeError(f"<dict>: {_NOT_OTLP}")
    return decoder.finish()


def decode_export_request(msg: ExportTraceServiceRequest, problems: list[str] | None = None) -> list[ReadableSpan]:
    """Decode a parsed protobuf request (what the sidecar's receivers get).

    Notes on skipped parts are appended to ``problems`` when a list is given.
    """
    decoder = _Decoder()
    decoder.add_pb_request(msg)
    batch = decoder.finish()
    if problems is not None:
        problems.extend(batch.problems)
    return batch.spans
