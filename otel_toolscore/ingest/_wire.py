"""OTLP trace requests assembled from the protobuf bytes spans arrived as, so that the sidecar
forwards what it received without encoding it again.

A span decoded from protobuf keeps its serialized form (``DecodedSpan.wire``) when re-encoding
its decoded form with the SDK's encoder would give the same message (``_protobuf`` decides;
the one difference it patches is ``flags``, see ``patch_flags``). ``encode_request`` builds the
``ExportTraceServiceRequest`` body exactly as the SDK's ``encode_spans`` groups and encodes spans,
taking each span's bytes from ``wire`` where it has them. Protobuf parsing merges what is
concatenated: repeated fields gain entries (a span's added attributes are its bytes followed
by more ``attributes`` fields), and a singular scalar field sent twice keeps the last value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from opentelemetry.exporter.otlp.proto.common._internal import (
    _encode_instrumentation_scope,
    _encode_resource,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.util.types import AttributeValue

from otel_toolscore.ingest._encode import encode_attributes, encode_span
from otel_toolscore.ingest._utf8 import varint_bytes as _varint

_LEN: Final = 2  # wire type of length-delimited fields
_FIXED32: Final = 5


def _number(descriptor: object, name: str) -> int:
    return descriptor.fields_by_name[name].number  # type: ignore[attr-defined, no-any-return]


def _tag(number: int, wire_type: int) -> bytes:
    return _varint((number << 3) | wire_type)




_RESOURCE_SPANS: Final = _tag(_number(ExportTraceServiceRequest.DESCRIPTOR, "resource_spans"), _LEN)
_RS_RESOURCE: Final = _tag(_number(ResourceSpans.DESCRIPTOR, "resource"), _LEN)
_RS_SCOPE_SPANS: Final = _tag(_number(ResourceSpans.DESCRIPTOR, "scope_spans"), _LEN)
_RS_SCHEMA_URL: Final = _tag(_number(ResourceSpans.DESCRIPTOR, "schema_url"), _LEN)
_SS_SCOPE: Final = _tag(_number(ScopeSpans.DESCRIPTOR, "scope"), _LEN)
_SS_SPANS: Final = _tag(_number(ScopeSpans.DESCRIPTOR, "spans"), _LEN)
_SS_SCHEMA_URL: Final = _tag(_number(ScopeSpans.DESCRIPTOR, "schema_url"), _LEN)
_SPAN_FLAGS: Final = _tag(_number(PbSpan.DESCRIPTOR, "flags"), _FIXED32)


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def _string_field(tag: bytes, text: str | None) -> bytes:
    # proto3: an empty string is not written (the SDK's encoder omits it the same way)
    return _field(tag, text.encode("utf-8")) if text else b""


def patch_flags(wire: bytes, flags: int) -> bytes:
    """``wire`` with its ``flags`` field replaced by ``flags`` (a later value wins)."""
    return wire + _SPAN_FLAGS + flags.to_bytes(4, "little")


def append_attributes(wire: bytes, extra: Mapping[str, AttributeValue]) -> bytes:
    """``wire`` with the attributes ``extra`` after its own, encoded as the SDK encodes them
    (a value it cannot encode is logged and left out, as there); no key of ``extra`` may be on
    the span already (a repeated key is not a valid OTLP attribute list)."""
    return wire + encode_attributes(extra)


def span_bytes(span: ReadableSpan) -> bytes:
    """One span as a serialized ``Span``: the bytes it arrived as, or the SDK's encoding."""
    wire = getattr(span, "wire", None)
    if wire is not None:
        return wire  # type: ignore[no-any-return]
    return encode_span(span)


def _scope_head(scope: InstrumentationScope | None) -> bytes:
    return _field(_SS_SCOPE, _encode_instrumentation_scope(scope).SerializeToString())  # type: ignore[arg-type]


def encode_request(spans: Sequence[ReadableSpan]) -> bytes:
    """The serialized ``ExportTraceServiceRequest`` of ``spans``: the message the SDK's
    ``encode_spans(spans)`` builds (grouped by resource, then scope, in first-seen order),
    with spans that kept their protobuf bytes written as those bytes."""
    groups: dict[Resource, dict[InstrumentationScope | None, list[bytes]]] = {}
    # Resource hashing serializes its attributes: look each resource and scope object up once.
    seen: dict[tuple[int, int], list[bytes]] = {}
    for span in spans:
        resource, scope = span.resource, span.instrumentation_scope or None
        members = seen.get((id(resource), id(scope)))
        if members is None:
            # The same keys as encode_spans: Resource and InstrumentationScope equality and hashing.
            by_scope = groups.get(resource)
            if by_scope is None:
                by_scope = groups[resource] = {}
            members = by_scope.get(scope)
            if members is None:
                members = by_scope[scope] = []
            seen[id(resource), id(scope)] = members
        data = span_bytes(span)
        members.append(_SS_SPANS + _varint(len(data)))
        members.append(data)
    # Every nested message's length is worked out from its parts' sizes, so each span's bytes
    # are copied once, into the body (a request is often megabytes; nesting by concatenation
    # copied it once per level).
    out: list[bytes] = []
    for resource, by_scope in groups.items():
        resource_head = _field(_RS_RESOURCE, _encode_resource(resource).SerializeToString())
        resource_tail = _string_field(_RS_SCHEMA_URL, resource.schema_url)
        scope_groups = []
        size = len(resource_head) + len(resource_tail)
        for scope, members in by_scope.items():
            head = _scope_head(scope)
            tail = _string_field(_SS_SCHEMA_URL, scope.schema_url if scope else None)
            scope_size = len(head) + len(tail) + sum(map(len, members))
            prefix = _RS_SCOPE_SPANS + _varint(scope_size)
            size += len(prefix) + scope_size
            scope_groups.append((prefix, head, members, tail))
        out.append(_RESOURCE_SPANS + _varint(size))
        out.append(resource_head)
        for prefix, head, members, tail in scope_groups:
            out.append(prefix)
            out.append(head)
            out.extend(members)
            out.append(tail)
        out.append(resource_tail)
    return b"".join(out)
