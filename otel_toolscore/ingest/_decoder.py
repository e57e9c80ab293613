"""What the OTLP decoders share: the result type, problem notes, and the accumulator that builds
spans (resources and scopes shared, log-record events attached to their spans at the end).

Input is untrusted: every part that cannot be read is skipped and described in
``OtlpBatch.problems``; ``OtlpDecodeError`` is raised only when nothing in the input is OTLP.
Log records with a ``spanId`` (the deprecated GenAI events) become span events of that span,
after its own events, ordered by time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanKind, Status, StatusCode, TraceState
from opentelemetry.util.types import AttributeValue

from otel_toolscore.ingest._values import type_name
from otel_toolscore.ingest.spans import DecodedSpan, decoded_span, format_span_id, format_trace_id

# Problems past this many are only counted: a file where every span has the same defect would
# otherwise produce one message per span, which no one reads and which costs memory.
MAX_PROBLEMS: Final = 1000

# Enum values arrive as integers (OTLP/JSON) or as enum names (protobuf's generic JSON mapping).
KINDS: Final[dict[int | str, SpanKind]] = {}
for _code, _names, _kind in (
    (0, ("SPAN_KIND_UNSPECIFIED",), SpanKind.INTERNAL),
    (1, ("SPAN_KIND_INTERNAL",), SpanKind.INTERNAL),
    (2, ("SPAN_KIND_SERVER",), SpanKind.SERVER),
    (3, ("SPAN_KIND_CLIENT",), SpanKind.CLIENT),
    (4, ("SPAN_KIND_PRODUCER",), SpanKind.PRODUCER),
    (5, ("SPAN_KIND_CONSUMER",), SpanKind.CONSUMER),
):
    KINDS[_code] = KINDS[str(_code)] = _kind
    for _name in _names:
        KINDS[_name] = _kind
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
STATUS_UNSET: Final = Status(StatusCode.UNSET)
_STATUS_OK: Final = Status(StatusCode.OK)


class OtlpDecodeError(ValueError):
    """Nothing in the input could be read as OTLP; the message names the source and the defect."""


@dataclass
class OtlpBatch:
    """Spans decoded from one input, and notes on every part that was skipped or read leniently."""

    spans: list[ReadableSpan] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class Problems:
    """The problem notes of one input: the first ``MAX_PROBLEMS`` listed, the rest counted."""

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


class Decoder:
    """Accumulates the spans of one input; log records are attached to their spans in ``finish``.

    The OTLP/JSON and protobuf readers (``_json``, ``_protobuf``) extend it with their formats."""

    def __init__(self) -> None:
        self.problems = Problems()
        self.spans: list[ReadableSpan] = []
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
        wire: bytes | None = None,
    ) -> None:
        span = decoded_span(name, trace_id, span_id, parent_id, flags, trace_state, resource, attributes, events,
                            links, kind, status, start, end, scope, dropped, wire)
        self.spans.append(span)

    def _lacks_ids(self, trace_id: int, span_id: int, where: str) -> bool:
        """A span without a trace or span id (all zeros) cannot be placed: noted, skipped."""
        for value, name in ((trace_id, "traceId"), (span_id, "spanId")):
            if not value:
                self.problems.add(f"{where}: missing {name}, skipped")
                return True
        return False

    def _kind(self, raw: Any, label: str) -> SpanKind:
        if raw is None:
            return SpanKind.INTERNAL
        kind = KINDS.get(raw) if type(raw) in (int, str) else None
        if kind is None:
            self.problems.add(f"{label}: unknown kind {str(raw)[:40]!r}, read as INTERNAL")
            return SpanKind.INTERNAL
        return kind

    def _status(self, raw_code: Any, message: Any, label: str) -> Status:
        if raw_code is None:
            return STATUS_UNSET
        code = _STATUS_CODES.get(raw_code) if type(raw_code) in (int, str) else None
        if code is None:
            self.problems.add(f"{label}: unknown status code {str(raw_code)[:40]!r}, read as UNSET")
            return STATUS_UNSET
        if code is StatusCode.ERROR:
            # The SDK keeps a description only with ERROR (it warns and drops it otherwise).
            return Status(StatusCode.ERROR, message if type(message) is str and message else None)
        return _STATUS_OK if code is StatusCode.OK else STATUS_UNSET

    def _trace_state(self, raw: Any, label: str) -> TraceState | None:
        if not raw:
            return None
        if type(raw) is not str:
            self.problems.add(f"{label}: traceState is {type_name(raw)}, ignored")
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
        # (trace id, span id) -> where the first span with them is; only log records need it
        index_of: dict[tuple[int, int], int] = {}
        if self._log_events:
            for i, decoded in enumerate(self.spans):
                context = decoded.context
                assert context is not None
                index_of.setdefault((context.trace_id, context.span_id), i)
        for key, pending in self._log_events.items():
            index = index_of.get(key)
            if index is None:
                for _, event, where in pending:
                    self.problems.add(
                        f"{where}: span {format_span_id(key[1])} of trace {format_trace_id(key[0])} is not in "
                        f"the input; event {event.name!r} skipped"
                    )
                continue
            pending.sort(key=lambda item: item[0])
            span = self.spans[index]
            assert isinstance(span, DecodedSpan)
            self.spans[index] = span.with_more_events(event for _, event, _ in pending)
        self._log_events.clear()
        if self._metrics_requests:
            self.problems.add(f"{self._metrics_requests} resourceMetrics request(s) ignored: metrics are not read")
        if self._logs_without_span:
            self.problems.add(
                f"{self._logs_without_span} log record(s) without a spanId ignored: only span events are read"
            )
        return OtlpBatch(spans=self.spans, problems=self.problems.result())

