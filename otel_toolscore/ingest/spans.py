"""The span type every stage after ingest sees: an SDK ``ReadableSpan`` that keeps its sender's
dropped counts, built from decoded OTLP, and copied when a stage must change an ended span.

Decoded span contexts are always marked sampled: the span was exported, so it was sampled, and
the Python SDK does not put the sampled bit into OTLP ``flags`` (a downstream
``BatchSpanProcessor`` would silently drop an unsampled span).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.util.types import Attributes

__all__ = [
    "DecodedSpan",
    "copy_span",
    "decoded_span",
    "format_span_id",
    "format_trace_id",
    "link_context",
    "span_contexts",
]

# OTLP Span.flags: bits 0-7 are W3C trace flags, bit 8 says whether bit 9 (parent is remote) is set.
_FLAGS_TRACE_MASK: Final = 0xFF
_FLAGS_HAS_IS_REMOTE: Final = 0x100
_FLAGS_IS_REMOTE: Final = 0x200

_SAMPLED_FLAGS: Final = tuple(TraceFlags(i | TraceFlags.SAMPLED) for i in range(256))
_PLAIN_FLAGS: Final = tuple(TraceFlags(i) for i in range(256))
_TRACE_ID_MAX: Final = 2**128 - 1
_SPAN_ID_MAX: Final = 2**64 - 1


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


def _slow_span(
    name: str,
    trace_id: int,
    span_id: int,
    parent_id: int,
    flags: int,
    trace_state: TraceState | None,
    resource: Resource,
    attributes: Attributes,
    events: Sequence[Event],
    links: Sequence[Link],
    kind: SpanKind,
    status: Status,
    start: int,
    end: int,
    scope: InstrumentationScope | None,
    dropped: tuple[int, int, int],
    wire: bytes | None,
) -> DecodedSpan:
    # the reference construction, through the SDK's own constructors
    context, parent = span_contexts(trace_id, span_id, parent_id, flags, trace_state)
    return DecodedSpan(
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
        wire=wire,
    )


_new_tuple = tuple.__new__
_new_span = object.__new__
_DEFAULT_TRACE_STATE: Final = SpanContext(1, 1, False).trace_state


def _fast_span(
    name: str,
    trace_id: int,
    span_id: int,
    parent_id: int,
    flags: int,
    trace_state: TraceState | None,
    resource: Resource,
    attributes: Attributes,
    events: Sequence[Event],
    links: Sequence[Link],
    kind: SpanKind,
    status: Status,
    start: int,
    end: int,
    scope: InstrumentationScope | None,
    dropped: tuple[int, int, int],
    wire: bytes | None,
) -> DecodedSpan:
    # What _slow_span builds, field for field, without the SDK's constructors' calls and
    # checks: the sidecar builds one span per span it receives. _check_fast_span proves the
    # two equal on this SDK release at import; where they are not, decoded_span is _slow_span.
    trace_flags = _SAMPLED_FLAGS[flags & _FLAGS_TRACE_MASK]
    valid = 0 < trace_id <= _TRACE_ID_MAX
    context = _new_tuple(SpanContext, (trace_id, span_id, False, trace_flags,
                                       _DEFAULT_TRACE_STATE if trace_state is None else trace_state,
                                       valid and 0 < span_id <= _SPAN_ID_MAX))
    parent = None
    if parent_id:
        remote = bool(flags & _FLAGS_HAS_IS_REMOTE and flags & _FLAGS_IS_REMOTE)
        parent = _new_tuple(SpanContext, (trace_id, parent_id, remote, trace_flags, _DEFAULT_TRACE_STATE,
                                          valid and 0 < parent_id <= _SPAN_ID_MAX))
    span = _new_span(DecodedSpan)
    span.__dict__ = {
        "_name": name,
        "_context": context,
        "_kind": kind,
        "_instrumentation_info": None,
        "_instrumentation_scope": scope,
        "_parent": parent,
        "_start_time": start,
        "_end_time": end,
        "_attributes": attributes,
        "_events": events,
        "_links": links,
        "_resource": resource,
        "_status": status,
        "_n_dropped_attributes": dropped[0],
        "_n_dropped_events": dropped[1],
        "_n_dropped_links": dropped[2],
        "wire": wire,
    }
    return span


def _same(a: DecodedSpan, b: DecodedSpan) -> bool:
    da, db = vars(a), vars(b)
    if list(da) != list(db):
        return False
    for key, value in da.items():
        other = db[key]
        if type(value) is not type(other) or value != other:
            return False
        if isinstance(value, SpanContext) and (type(value.trace_flags) is not type(other.trace_flags)
                                               or type(value.trace_state) is not type(other.trace_state)):
            return False
    return True


def _check_fast_span() -> bool:
    """Whether ``_fast_span`` builds what the SDK's constructors build (this SDK release)."""
    resource = Resource({"service.name": "x"})
    scope = InstrumentationScope("s", "1")
    state = TraceState([("k", "v")])
    cases: tuple[tuple[Any, ...], ...] = (
        ("n", 1, 2, 3, 0x301, state, resource, {"a": 1}, [], [], SpanKind.CLIENT, Status(StatusCode.ERROR, "e"),
         5, 6, scope, (1, 2, 3), b"w"),
        ("", 2**128 - 1, 2**64 - 1, 0, 0x100, None, resource, {}, [], [], SpanKind.INTERNAL, Status(), 0, 0,
         None, (0, 0, 0), None),
        ("p", 7, 8, 9, 0x100, None, resource, {}, [], [], SpanKind.SERVER, Status(), 1, 2, scope, (0, 0, 0), None),
    )
    try:
        for args in cases:
            if not _same(_fast_span(*args), _slow_span(*args)):
                return False
    except Exception:  # noqa: BLE001 - an SDK release this does not know: the constructors then
        return False
    return True


#: A decoded span from OTLP ids and ``flags`` (see ``span_contexts``) and its other parts.
decoded_span = _fast_span if _check_fast_span() else _slow_span
