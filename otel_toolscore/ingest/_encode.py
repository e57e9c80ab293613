"""SDK spans serialized as OTLP ``Span`` bytes without building protobuf objects: the bytes the
SDK's ``_encode_span(span).SerializeToString()`` gives, written field by field.

The sidecar forwards, besides the spans it received (which keep their own bytes, ``_wire``),
the spans it makes itself: evaluation spans, a few per run, each with a dozen attributes. The
SDK's encoder builds a protobuf object per attribute, value and span, then serializes them;
writing the bytes directly costs a fraction of that. Only plain values are written here
(str, bool, int64, float: what spans made here and nearly all others carry); any other
attribute value is encoded by the SDK's own code, one ``KeyValue`` at a time, which also keeps
its handling of what it cannot encode (logged and left out); a span whose name or other text
UTF-8 cannot encode is encoded by the SDK whole, which says what is wrong. Fields are written
in field-number order, as protobuf serializes them, so the bytes are the same as the SDK's and
not only the message (``tests/test_wire.py`` checks it).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final

from opentelemetry.exporter.otlp.proto.common._internal import _encode_attributes
from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import _SPAN_KIND_MAP, _encode_span
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore.ingest._utf8 import varint_bytes as _varint

_VARINT: Final = 0
_FIXED64: Final = 1
_LEN: Final = 2
_FIXED32: Final = 5
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64: Final = 2**64
_pack_double = struct.Struct("<d").pack
_pack_fixed64 = struct.Struct("<Q").pack
_pack_fixed32 = struct.Struct("<I").pack


def _tag(descriptor: Any, name: str, wire_type: int) -> bytes:
    return _varint((descriptor.fields_by_name[name].number << 3) | wire_type)


_S = PbSpan.DESCRIPTOR
_E = PbSpan.Event.DESCRIPTOR
_TRACE_ID: Final = _tag(_S, "trace_id", _LEN) + b"\x10"  # 16 bytes
_SPAN_ID: Final = _tag(_S, "span_id", _LEN) + b"\x08"  # 8 bytes
_TRACE_STATE: Final = _tag(_S, "trace_state", _LEN)
_PARENT_ID: Final = _tag(_S, "parent_span_id", _LEN) + b"\x08"
_NAME: Final = _tag(_S, "name", _LEN)
_KIND: Final = _tag(_S, "kind", _VARINT)
_START: Final = _tag(_S, "start_time_unix_nano", _FIXED64)
_END: Final = _tag(_S, "end_time_unix_nano", _FIXED64)
_ATTRIBUTE: Final = _tag(_S, "attributes", _LEN)
_DROPPED_ATTRIBUTES: Final = _tag(_S, "dropped_attributes_count", _VARINT)
_EVENT: Final = _tag(_S, "events", _LEN)
_DROPPED_EVENTS: Final = _tag(_S, "dropped_events_count", _VARINT)
_LINK: Final = _tag(_S, "links", _LEN)
_DROPPED_LINKS: Final = _tag(_S, "dropped_links_count", _VARINT)
_STATUS: Final = _tag(_S, "status", _LEN)
_FLAGS: Final = _tag(_S, "flags", _FIXED32)
_EVENT_TIME: Final = _tag(_E, "time_unix_nano", _FIXED64)
_EVENT_NAME: Final = _tag(_E, "name", _LEN)
_EVENT_ATTRIBUTE: Final = _tag(_E, "attributes", _LEN)
_EVENT_DROPPED: Final = _tag(_E, "dropped_attributes_count", _VARINT)
_L = PbSpan.Link.DESCRIPTOR
_LINK_TRACE_ID: Final = _tag(_L, "trace_id", _LEN) + b"\x10"
_LINK_SPAN_ID: Final = _tag(_L, "span_id", _LEN) + b"\x08"
_LINK_ATTRIBUTE: Final = _tag(_L, "attributes", _LEN)
_LINK_DROPPED: Final = _tag(_L, "dropped_attributes_count", _VARINT)
_LINK_FLAGS: Final = _tag(_L, "flags", _FIXED32)
_STATUS_MESSAGE: Final = _tag(PbStatus.DESCRIPTOR, "message", _LEN)
_STATUS_CODE: Final = _tag(PbStatus.DESCRIPTOR, "code", _VARINT)
_KV_KEY: Final = _tag(KeyValue.DESCRIPTOR, "key", _LEN)
_KV_VALUE: Final = _tag(KeyValue.DESCRIPTOR, "value", _LEN)
_A = AnyValue.DESCRIPTOR
_STRING: Final = _tag(_A, "string_value", _LEN)
_BOOL_TRUE: Final = _tag(_A, "bool_value", _VARINT) + b"\x01"
_BOOL_FALSE: Final = _tag(_A, "bool_value", _VARINT) + b"\x00"
_INT: Final = _tag(_A, "int_value", _VARINT)
_DOUBLE: Final = _tag(_A, "double_value", _FIXED64)
# Span.flags as the SDK writes them: "has is_remote", and is_remote for a remote parent.
_FLAGS_LOCAL: Final = _FLAGS + _pack_fixed32(0x100)
_FLAGS_REMOTE: Final = _FLAGS + _pack_fixed32(0x300)
_KINDS: Final = {kind: _KIND + _varint(code) if code else b"" for kind, code in _SPAN_KIND_MAP.items()}
_SMALL: Final = tuple(_varint(n) for n in range(128))


def _len(n: int) -> bytes:
    return _SMALL[n] if n < 128 else _varint(n)


def _text(tag: bytes, text: str) -> bytes:
    data = text.encode("utf-8")
    return tag + _len(len(data)) + data


def _value(value: object) -> bytes | None:
    """An ``AnyValue`` holding a plain value; None for anything else (the SDK encodes those).
    Raises ``UnicodeEncodeError`` for a string with a lone surrogate."""
    kind = type(value)
    if kind is str:
        data = value.encode("utf-8")  # type: ignore[attr-defined]
        n = len(data)
        return _STRING + (_SMALL[n] if n < 128 else _varint(n)) + data
    if kind is bool:
        return _BOOL_TRUE if value else _BOOL_FALSE
    if kind is int:
        if not _INT64_MIN <= value <= _INT64_MAX:  # type: ignore[operator]
            return None
        return _INT + _varint(value % _UINT64)  # type: ignore[operator]
    if kind is float:
        return _DOUBLE + _pack_double(value)
    return None


def _sdk_attribute(tag: bytes, key: object, value: object) -> bytes:
    # what the SDK does with it: its encoding, or nothing (it logs what it cannot encode)
    return b"".join(tag + _len(len(data)) + data
                    for data in (kv.SerializeToString() for kv in _encode_attributes({key: value})))  # type: ignore[dict-item]


# A KeyValue's key field by key: the same few keys recur on every evaluation span.
_KEYS: dict[str, bytes] = {}
_MAX_KEYS: Final = 4096


def _key(key: str) -> bytes:
    data = key.encode("utf-8")
    n = len(data)
    head = _KV_KEY + (_SMALL[n] if n < 128 else _varint(n)) + data if n else b""  # proto3 leaves "" out
    if len(_KEYS) < _MAX_KEYS:
        _KEYS[key] = head
    return head


# A whole KeyValue field by (tag, key, type, value): evaluation spans and a scored span's added
# attributes repeat the same names, labels, scores and often explanations run after run. The type
# is in the key because True == 1 == 1.0 (and hash alike) yet encode differently; 0.0 is never
# cached because -0.0 equals it and encodes differently; a long text would rarely come again.
_FIELDS: dict[tuple[bytes, str, type, object], bytes] = {}
_MAX_FIELDS: Final = 8192
_MAX_CACHED_TEXT: Final = 200


def encode_attributes(attributes: Mapping[str, Any] | None, tag: bytes = _ATTRIBUTE) -> bytes:
    """``attributes`` as repeated ``KeyValue`` fields under ``tag`` (a span's by default)."""
    if not attributes:
        return b""
    parts = []
    fields = _FIELDS
    # One pass, few calls: the sidecar writes a dozen attributes per evaluation span.
    for key, value in attributes.items():
        kind = type(value)
        cacheable = kind is bool or kind is int or (len(value) <= _MAX_CACHED_TEXT if kind is str else
                                                     kind is float and value != 0.0)
        if cacheable:
            cache_key = (tag, key, kind, value)
            field = fields.get(cache_key)
            if field is not None:
                parts.append(field)
                continue
        try:
            encoded = _value(value)
            head = _KEYS.get(key) or _key(key)  # AttributeError: not a str
        except (UnicodeEncodeError, AttributeError):
            encoded = None
        if encoded is None:
            parts.append(_sdk_attribute(tag, key, value))
            continue
        n = len(encoded)
        body = head + _KV_VALUE + (_SMALL[n] if n < 128 else _varint(n)) + encoded
        n = len(body)
        field = tag + (_SMALL[n] if n < 128 else _varint(n)) + body
        if cacheable:
            if len(fields) >= _MAX_FIELDS:
                fields.clear()  # the vocabulary moved on
            fields[cache_key] = field
        parts.append(field)
    return b"".join(parts)


def encode_span(span: ReadableSpan) -> bytes:
    """``span`` as the serialized ``Span`` the SDK's encoder writes."""
    if span.context is not None:
        try:
            return _direct(span)
        except (UnicodeEncodeError, KeyError, AttributeError):
            pass  # text UTF-8 cannot hold, an unknown kind: the SDK's encoder says what is wrong
    return _encode_span(span).SerializeToString()  # type: ignore[no-any-return]


def _direct(span: ReadableSpan) -> bytes:
    context = span.context
    parent = span.parent
    parts = [_TRACE_ID, context.trace_id.to_bytes(16, "big"), _SPAN_ID, context.span_id.to_bytes(8, "big")]  # type: ignore[union-attr]
    state = context.trace_state  # type: ignore[union-attr]
    if state:
        parts.append(_text(_TRACE_STATE, ",".join(f"{key}={value}" for key, value in state.items())))
    if parent is not None:
        parts.append(_PARENT_ID)
        parts.append(parent.span_id.to_bytes(8, "big"))
    if span.name:
        parts.append(_text(_NAME, span.name))
    parts.append(_KINDS[span.kind])
    if span.start_time:
        parts.append(_START + _pack_fixed64(span.start_time))
    if span.end_time:
        parts.append(_END + _pack_fixed64(span.end_time))
    parts.append(encode_attributes(span.attributes))
    if span.dropped_attributes:
        parts.append(_DROPPED_ATTRIBUTES + _varint(span.dropped_attributes))
    for event in span.events:
        body = []
        if event.timestamp:
            body.append(_EVENT_TIME + _pack_fixed64(event.timestamp))
        if event.name:
            body.append(_text(_EVENT_NAME, event.name))
        body.append(encode_attributes(event.attributes, _EVENT_ATTRIBUTE))
        if event.dropped_attributes:
            body.append(_EVENT_DROPPED + _varint(event.dropped_attributes))
        data = b"".join(body)
        parts.append(_EVENT + _len(len(data)) + data)
    if span.dropped_events:
        parts.append(_DROPPED_EVENTS + _varint(span.dropped_events))
    for link in span.links:
        # the SDK writes no trace_state for a link, and its flags from is_remote alone
        linked = link.context
        body = [_LINK_TRACE_ID, linked.trace_id.to_bytes(16, "big"), _LINK_SPAN_ID, linked.span_id.to_bytes(8, "big"),
                encode_attributes(link.attributes, _LINK_ATTRIBUTE)]
        if link.dropped_attributes:
            body.append(_LINK_DROPPED + _varint(link.dropped_attributes))
        body.append(_LINK_FLAGS + _pack_fixed32(0x300 if linked.is_remote else 0x100))
        data = b"".join(body)
        parts.append(_LINK + _len(len(data)) + data)
    if span.dropped_links:
        parts.append(_DROPPED_LINKS + _varint(span.dropped_links))
    status = span.status
    status_body = _text(_STATUS_MESSAGE, status.description) if status.description else b""
    code = status.status_code.value
    if code:
        status_body += _STATUS_CODE + _SMALL[code]
    parts.append(_STATUS + _len(len(status_body)) + status_body)
    parts.append(_FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS_LOCAL)
    return b"".join(parts)
