"""OTLP protobuf (``ExportTraceServiceRequest``) decoded into spans: parsing, with string fields
that are not UTF-8 repaired (``_utf8``), and the decoding of a parsed request."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link
from opentelemetry.util.types import AttributeValue

from otel_toolscore.ingest._decoder import Decoder, OtlpBatch, OtlpDecodeError
from otel_toolscore.ingest._utf8 import repair_utf8
from otel_toolscore.ingest._values import (
    EMPTY,
    SPAN_ID_BYTES,
    TRACE_ID_BYTES,
    BadValue,
    as_attribute,
    pb_any,
    pb_id,
    undecodable,
)
from otel_toolscore.ingest.spans import format_span_id, link_context


class PbDecoder(Decoder):
    """Decodes parsed protobuf requests, one ``add_pb_request`` each, into one batch."""

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
                    except Exception as exc:  # noqa: BLE001
                        # As for OTLP/JSON (_json): lose one span, never the batch.
                        self.problems.add(undecodable(span_where, exc))

    def _pb_attributes(self, raw: Sequence[KeyValue], label: str) -> dict[str, AttributeValue]:
        out: dict[str, AttributeValue] = {}
        for kv in raw:
            try:
                decoded = pb_any(kv.value)
            except RecursionError:
                self.problems.add(f"{label}: attribute {kv.key!r} is nested too deeply, skipped")
                continue
            if decoded is not EMPTY:
                out[kv.key] = as_attribute(decoded)
        return out

    def _pb_span(self, span: PbSpan, resource: Resource, scope: InstrumentationScope, where: str) -> None:
        try:
            trace_id = pb_id(span.trace_id, TRACE_ID_BYTES)
            span_id = pb_id(span.span_id, SPAN_ID_BYTES)
        except BadValue as exc:
            self.problems.add(f"{where}: invalid id ({exc}), skipped")
            return
        if self._lacks_ids(trace_id, span_id, where):
            return
        label = f"span {format_span_id(span_id)}"
        try:
            parent_id = pb_id(span.parent_span_id, SPAN_ID_BYTES)
        except BadValue as exc:
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
                link_trace = pb_id(link.trace_id, TRACE_ID_BYTES)
                link_span = pb_id(link.span_id, SPAN_ID_BYTES)
            except BadValue as exc:
                self.problems.add(f"{label}: link #{i} has an invalid id ({exc}), skipped")
                continue
            if not link_trace or not link_span:
                self.problems.add(f"{label}: link #{i} has no traceId or spanId, skipped")
                continue
            context = link_context(link_trace, link_span, link.flags, self._trace_state(link.trace_state, label))
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


def decode_export_request(msg: ExportTraceServiceRequest, problems: list[str] | None = None) -> list[ReadableSpan]:
    """Decode a parsed protobuf request (what the sidecar's receivers get).

    Notes on skipped parts are appended to ``problems`` when a list is given.
    """
    decoder = PbDecoder()
    decoder.add_pb_request(msg)
    batch = decoder.finish()
    if problems is not None:
        problems.extend(batch.problems)
    return batch.spans
