"""OTLP protobuf (``ExportTraceServiceRequest``) decoded into spans: parsing, with string fields
that are not UTF-8 repaired (``_utf8``), and the decoding of a parsed request."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, Status, TraceState
from opentelemetry.util.types import AttributeValue

from otel_toolscore.ingest._decoder import KINDS, STATUS_UNSET, Decoder, OtlpBatch, OtlpDecodeError
from otel_toolscore.ingest._utf8 import repair_utf8
from otel_toolscore.ingest._values import (
    SPAN_ID_BYTES,
    TRACE_ID_BYTES,
    BadValue,
    as_attribute,
    pb_any,
    pb_id,
    undecodable,
)
from otel_toolscore.ingest._wire import patch_flags
from otel_toolscore.ingest.spans import decoded_span, format_span_id, link_context

# AnyValue kinds read as they are: the SDK re-encodes them as the same kind and value.
_SCALARS: Final = frozenset({"string_value", "int_value", "bool_value", "double_value"})
_KIND_BY_CODE: Final = {code: kind for code, kind in KINDS.items() if type(code) is int and code}
# Span.flags as the SDK's encoder writes them: "has is_remote", and is_remote for a remote parent.
_FLAGS_LOCAL: Final = 0x100
_FLAGS_REMOTE: Final = 0x300
_STATUS_UNSET_CODE: Final = 0
_STATUS_ERROR_CODE: Final = 2


def _encoded_trace_state(state: TraceState) -> str:
    # as the SDK's encoder writes a TraceState
    return ",".join(f"{key}={value}" for key, value in state.items())


class PbDecoder(Decoder):
    """Decodes parsed protobuf requests, one ``add_pb_request`` each, into one batch.

    With ``keep_wire`` a span whose decoded form the SDK would encode as the same message keeps
    its serialized bytes (``DecodedSpan.wire``, see ``_wire``): every value read as it came
    (no kvlist, bytes or mixed array turned into a string, no duplicate key, nothing skipped or
    defaulted, no dropped count that ``Event``/``Link`` cannot carry). ``flags``, which the SDK
    writes from the parent alone, is patched instead. Unknown fields are discarded first.
    """

    def __init__(self, keep_wire: bool = False) -> None:
        super().__init__()
        self._keep_wire = keep_wire
        # set when a part of the span being decoded was read into another form or left out
        self._lossy = False

    def add_pb_request(self, message: ExportTraceServiceRequest) -> None:
        if self._keep_wire:
            message.DiscardUnknownFields()  # the SDK's encoder would not write them
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
                    try:
                        self._pb_span(span, resource, scope, k, group_where)
                    except Exception as exc:  # noqa: BLE001
                        # As for OTLP/JSON (_json): lose one span, never the batch.
                        self.problems.add(undecodable(f"span #{k} in {group_where}", exc))

    def _pb_attributes(
        self, raw: Sequence[KeyValue], label: str | Callable[[], str]
    ) -> dict[str, AttributeValue]:
        # label: for a problem note; a function where making the text for every span would cost
        out: dict[str, AttributeValue] = {}
        for kv in raw:
            value = kv.value
            # Most values are non-empty strings; reading one is a single call (a value of
            # another kind, or an empty string, reads as "" here).
            text = value.string_value
            if text:
                out[kv.key] = text
                continue
            which = value.WhichOneof("value")
            if which in _SCALARS:
                out[kv.key] = getattr(value, which)
            elif which is not None:
                try:
                    decoded = as_attribute(pb_any(value))
                except RecursionError:
                    where = label if isinstance(label, str) else label()
                    self.problems.add(f"{where}: attribute {kv.key!r} is nested too deeply, skipped")
                    continue
                if type(decoded) is not tuple:
                    self._lossy = True  # a kvlist, bytes or mixed/nested array became a string
                out[kv.key] = decoded
        if len(out) != len(raw):
            self._lossy = True  # an empty value or a repeated key
        return out

    def _pb_span(
        self, span: PbSpan, resource: Resource, scope: InstrumentationScope, k: int, group_where: str
    ) -> None:
        raw_trace, raw_span = span.trace_id, span.span_id
        if len(raw_trace) == TRACE_ID_BYTES and len(raw_span) == SPAN_ID_BYTES:  # nearly always
            trace_id, span_id = int.from_bytes(raw_trace, "big"), int.from_bytes(raw_span, "big")
        else:
            try:
                trace_id = pb_id(raw_trace, TRACE_ID_BYTES)
                span_id = pb_id(raw_span, SPAN_ID_BYTES)
            except BadValue as exc:
                self.problems.add(f"span #{k} in {group_where}: invalid id ({exc}), skipped")
                return
        if not trace_id or not span_id:
            self._lacks_ids(trace_id, span_id, f"span #{k} in {group_where}")
            return

        def label() -> str:
            return f"span {format_span_id(span_id)}"

        self._lossy = False
        raw_parent = span.parent_span_id
        if len(raw_parent) == SPAN_ID_BYTES:  # nearly always, or none at all
            parent_id = int.from_bytes(raw_parent, "big")
        else:
            try:
                parent_id = pb_id(raw_parent, SPAN_ID_BYTES)
            except BadValue as exc:
                self.problems.add(f"{label()}: invalid parentSpanId ({exc}); kept as a root")
                parent_id = 0
        if raw_parent and not parent_id:
            self._lossy = True  # an all-zero or invalid parent id is not written back
        # Parts in the order the problem notes have always come in.
        pb_events = span.events
        events = [self._pb_event(event, label) for event in pb_events] if pb_events else []
        links = self._pb_links(span, label) if span.links else []
        raw_state = span.trace_state
        trace_state = self._pb_trace_state(raw_state, label) if raw_state else None
        raw_kind = span.kind
        kind = _KIND_BY_CODE.get(raw_kind)
        if kind is None:
            kind = self._kind(raw_kind, label())
            self._lossy = True  # UNSPECIFIED or unknown, written back as INTERNAL
        attributes = self._pb_attributes(span.attributes, label)
        status = self._pb_status(span, label)
        flags = span.flags
        wire = None
        if self._keep_wire and not self._lossy:
            wire = span.SerializeToString()
            # the SDK writes flags from the parent alone: patched where the sender wrote others
            expected = _FLAGS_REMOTE if parent_id and flags & _FLAGS_REMOTE == _FLAGS_REMOTE else _FLAGS_LOCAL
            if flags != expected:
                wire = patch_flags(wire, expected)
        self.spans.append(decoded_span(
            span.name, trace_id, span_id, parent_id, flags, trace_state, resource, attributes, events, links, kind,
            status, span.start_time_unix_nano, span.end_time_unix_nano, scope,
            (span.dropped_attributes_count, span.dropped_events_count, span.dropped_links_count), wire,
        ))

    def _pb_event(self, event: PbSpan.Event, label: Callable[[], str]) -> Event:
        if event.dropped_attributes_count:
            self._lossy = True  # an SDK Event reports no dropped attributes
        return Event(
            event.name,
            self._pb_attributes(event.attributes, lambda: f"{label()} event {event.name!r}"),
            event.time_unix_nano,
        )

    def _pb_links(self, span: PbSpan, label: Callable[[], str]) -> list[Link]:
        links: list[Link] = []
        for i, link in enumerate(span.links):
            try:
                link_trace = pb_id(link.trace_id, TRACE_ID_BYTES)
                link_span = pb_id(link.span_id, SPAN_ID_BYTES)
            except BadValue as exc:
                self.problems.add(f"{label()}: link #{i} has an invalid id ({exc}), skipped")
                self._lossy = True
                continue
            if not link_trace or not link_span:
                self.problems.add(f"{label()}: link #{i} has no traceId or spanId, skipped")
                self._lossy = True
                continue
            flags = link.flags
            # The SDK writes a link's flags from its is_remote alone, and no dropped count.
            if flags != (_FLAGS_REMOTE if flags & _FLAGS_REMOTE == _FLAGS_REMOTE else _FLAGS_LOCAL) or (
                link.dropped_attributes_count
            ):
                self._lossy = True
            state = self._pb_trace_state(link.trace_state, label)
            context = link_context(link_trace, link_span, flags, state)
            links.append(Link(context, self._pb_attributes(link.attributes, f"{label()} link #{i}")))
        return links

    def _pb_trace_state(self, raw: str, label: Callable[[], str]) -> TraceState | None:
        if not raw:
            return None
        state = self._trace_state(raw, label())
        if state is None or _encoded_trace_state(state) != raw:
            self._lossy = True
        return state

    def _pb_status(self, span: PbSpan, label: Callable[[], str]) -> Status:
        if not span.HasField("status"):
            self._lossy = True  # the SDK writes an (empty) status for every span
            return STATUS_UNSET
        status = span.status
        code, message = status.code, status.message
        if code == _STATUS_UNSET_CODE and not message:
            return STATUS_UNSET
        if message and code != _STATUS_ERROR_CODE:
            self._lossy = True  # the SDK keeps a description only with ERROR
        decoded = self._status(code, message, label())
        if decoded.status_code.value != code:
            self._lossy = True  # an unknown code, read as UNSET
        return decoded


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
            fixed = repair_utf8(bytes(data), ExportTraceServiceRequest.DESCRIPTOR, 0, repaired)
        except (ValueError, RecursionError):
            raise first from None
        if not repaired[0]:
            raise
        message = ExportTraceServiceRequest()
        message.ParseFromString(fixed)
        if problems is not None:
            problems.append(f"{repaired[0]} string field(s) not valid UTF-8, repaired with U+FFFD")
        return message


def decode_protobuf(data: bytes, label: str) -> OtlpBatch:
    """A whole input read as one protobuf request; ``OtlpDecodeError`` when it is not OTLP."""
    repairs: list[str] = []
    try:
        message = parse_export_request(data, repairs)
    except Exception as exc:  # noqa: BLE001
        # The C parser's error types vary across protobuf versions; any failure means "not protobuf".
        raise OtlpDecodeError(f"{label}: protobuf decode failed ({exc or type(exc).__name__})") from None
    if not message.resource_spans:
        raise OtlpDecodeError(f"{label}: protobuf decode failed (no resourceSpans in it)")
    decoder = PbDecoder()
    for problem in repairs:
        decoder.problems.add(problem)
    decoder.add_pb_request(message)
    batch = decoder.finish()
    if not batch.spans and batch.problems:
        # Random bytes sometimes parse as protobuf; if not one span in it is valid, it was not OTLP.
        raise OtlpDecodeError(f"{label}: protobuf decode failed (no valid span; first problem: {batch.problems[0]})")
    return batch


def decode_export_request(
    msg: ExportTraceServiceRequest, problems: list[str] | None = None, *, keep_wire: bool = False
) -> list[ReadableSpan]:
    """Decode a parsed protobuf request (what the sidecar's receivers get).

    Notes on skipped parts are appended to ``problems`` when a list is given. ``keep_wire``:
    spans keep their serialized bytes where they can be forwarded as they are (``PbDecoder``);
    ``msg`` loses its unknown fields then.
    """
    decoder = PbDecoder(keep_wire)
    decoder.add_pb_request(msg)
    batch = decoder.finish()
    if problems is not None:
        problems.extend(batch.problems)
    return batch.spans
