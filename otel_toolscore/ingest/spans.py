"""The span type every stage after ingest sees: an SDK ``ReadableSpan`` that keeps its sender's
dropped counts, built from decoded OTLP, and copied when a stage must change an ended span.

Decoded span contexts are always marked sampled: the span was exported, so it was sampled, and
the Python SDK does not put the sampled bit into OTLP ``flags`` (a downstream
``BatchSpanProcessor`` would silently drop an unsampled span).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, TraceFlags, TraceState
from opentelemetry.util.types import Attributes

__all__ = ["DecodedSpan", "copy_span", "format_span_id", "format_trace_id", "link_context", "span_contexts"]

# OTLP Span.flags: bits 0-7 are W3C trace flags, bit 8 says whether bit 9 (parent is remote) is set.
_FLAGS_TRACE_MASK: Final = 0xFF
_FLAGS_HAS_IS_REMOTE: Final = 0x100
_FLAGS_IS_REMOTE: Final = 0x200

_SAMPLED_FLAGS: Final = tuple(TraceFlags(i | TraceFlags.SAMPLED) for i in range(256))
_PLAIN_FLAGS: Final = tuple(TraceFlags(i) for i in range(256))


def format_trace_id(trace_id: int) -> str:
    """32 lowercase hex digits, the form OTLP/JSON and W3C traceparent use."""
    return f"{trace_id:032x}"


def format_span_id(span_id: int) -> str:
    """16 lowercase hex digits, the form OTLP/JSON and W3C traceparent use."""
    return f"{span_id:016x}"


class DecodedSpan(ReadableSpan):
    """A ``ReadableSpan`` that reports the dropped counts its sender reported.

    The SDK derives dropped counts from its bounded containers, which a decoded span does not
    use; without this a re-export would claim that nothing had been dropped.

    ``wire``: the span as a serialized OTLP ``Span`` that is exactly what the SDK's encoder
    would write for it (``ingest._wire``), so the sidecar forwards it without encoding it
    again; None when it came otherwise or differs from that.
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
        wire: bytes | None = None,
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
        self.wire = wire

    @property
    def dropped_attributes(self) -> int:
        return self._n_dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._n_dropped_events

    @property
    def dropped_links(self) -> int:
        return self._n_dropped_links

    def with_more_events(self, extra: Iterable[Event]) -> DecodedSpan:
        return copy_span(self, events=(*self.events, *extra))


def copy_span(
    span: ReadableSpan,
    *,
    attributes: Attributes | None = None,
    events: Sequence[Event] | None = None,
) -> DecodedSpan:
    """An ended span with other attributes or events, keeping everything else, dropped counts
    included (ended SDK spans are immutable, so changing one means copying it).

    A span that kept its protobuf bytes keeps them when the only change is attributes added
    under new keys: the added ones are appended to its bytes (``_wire.append_attributes``)."""
    wire = getattr(span, "wire", None)
    if wire is not None and (events is not None or (attributes is not None and not _only_added(span, attributes))):
        wire = None
    if wire is not None and attributes is not None and len(attributes) != len(span.attributes or ()):
        from otel_toolscore.ingest._wire import append_attributes

        own = span.attributes or {}
        wire = append_attributes(wire, {key: value for key, value in attributes.items() if key not in own})
    return DecodedSpan(
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
        wire=wire,
    )


def _only_added(span: ReadableSpan, attributes: Attributes) -> bool:
    """Whether ``attributes`` are the span's own, in their order and unchanged (the same
    objects), followed by new keys only: what appending to its bytes can express."""
    own = span.attributes or {}
    if attributes is None or len(attributes) < len(own):
        return False
    # A dict's keys are unique: the keys after the span's own ones are new.
    for (key, value), (new_key, new_value) in zip(own.items(), attributes.items()):
        if key != new_key or value is not new_value:
            return False
    return True


def span_contexts(
    trace_id: int, span_id: int, parent_id: int, flags: int, trace_state: TraceState | None
) -> tuple[SpanContext, SpanContext | None]:
    """A decoded span's context and its parent's (None for a root), from OTLP ids and ``flags``."""
    trace_flags = _SAMPLED_FLAGS[flags & _FLAGS_TRACE_MASK]
    context = SpanContext(trace_id, span_id, False, trace_flags, trace_state)
    parent = None
    if parent_id:
        remote = bool(flags & _FLAGS_HAS_IS_REMOTE and flags & _FLAGS_IS_REMOTE)
        parent = SpanContext(trace_id, parent_id, remote, trace_flags)
    return context, parent


def link_context(trace_id: int, span_id: int, flags: int, trace_state: TraceState | None) -> SpanContext:
    """A link's span context from OTLP ids and ``flags`` (its trace flags kept as sent)."""
    return SpanContext(
        trace_id,
        span_id,
        bool(flags & _FLAGS_HAS_IS_REMOTE and flags & _FLAGS_IS_REMOTE),
        _PLAIN_FLAGS[flags & _FLAGS_TRACE_MASK],
        trace_state,
    )
