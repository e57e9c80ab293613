"""A held agent span packed while its run waits (``_handoff.pack_held``) and rebuilt when it is
released (``unpack_held``) is the same span for export: the OTLP protobuf encoder's bytes, the
SDK's ``to_json()`` and every field an exporter or a downstream processor reads, on SDK spans of
every shape (events, links, status descriptions, attribute types, limits that drop, non-default
scope, resource and trace state). The packed form is what the collector stops walking, and a
packed span is still forwarded exactly once, whoever releases it."""

from __future__ import annotations

import gc
import time
from collections import deque
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace.span import TraceState

from otel_toolscore.runtime._handoff import pack_held, unpack_held
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor, _Held


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.ended: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


_scalars = st.one_of(st.text(max_size=8), st.integers(-2**63, 2**63 - 1), st.booleans(),
                     st.floats(allow_nan=False), st.binary(max_size=4))
_values = st.one_of(_scalars, st.lists(st.text(max_size=4), max_size=3), st.lists(st.integers(-5, 5), max_size=3),
                    st.lists(st.booleans(), max_size=2), st.lists(st.floats(allow_nan=False), max_size=2))
_attributes = st.dictionaries(st.text(min_size=1, max_size=6), _values, max_size=6)
_trace_states = st.one_of(st.none(), st.just(TraceState([("vendor", "v1"), ("k", "x")])))
_contexts = st.builds(lambda t, s, remote, flags, state: SpanContext(t, s, remote, TraceFlags(flags), state),
                      st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.booleans(), st.sampled_from([0, 1]),
                      _trace_states)
_shapes = st.fixed_dictionaries({
    "name": st.text(max_size=10),
    "kind": st.sampled_from(list(SpanKind)),
    "attributes": _attributes,
    "events": st.lists(st.tuples(st.text(max_size=5), _attributes, st.one_of(st.none(), st.integers(0, 2**62))),
                       max_size=4),
    "links": st.lists(st.tuples(_contexts, _attributes), max_size=3),
    "status": st.one_of(st.none(), st.tuples(st.sampled_from(list(StatusCode)), st.one_of(st.none(), st.text(max_size=6)))),
    "parent": st.one_of(st.none(), _contexts),
    "limits": st.one_of(st.none(), st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(0, 2),
                                             st.one_of(st.none(), st.integers(0, 5)))),
    "resource": st.one_of(st.just({}), _attributes),
    "scope": st.tuples(st.text(max_size=4), st.one_of(st.none(), st.text(max_size=4)),
                       st.one_of(st.none(), st.just("https://s")), st.one_of(st.none(), _attributes)),
    "times": st.one_of(st.none(), st.tuples(st.integers(0, 2**62), st.integers(0, 2**10))),
})


def _make(shape: dict[str, Any]) -> ReadableSpan:
    """One SDK span of this shape, ended through a real TracerProvider."""
    collect = _Collect()
    limits = shape["limits"]
    kwargs: dict[str, Any] = {}
    if limits is not None:
        kwargs["span_limits"] = SpanLimits(max_span_attributes=limits[0], max_events=limits[1], max_links=limits[2],
                                           max_attribute_length=limits[3])
    provider = TracerProvider(resource=Resource(shape["resource"]), sampler=ALWAYS_ON, **kwargs)
    provider.add_span_processor(collect)
    name, version, schema, scope_attributes = shape["scope"]
    tracer = provider.get_tracer(name, version, schema, attributes=scope_attributes)
    parent = shape["parent"]
    context = set_span_in_context(NonRecordingSpan(parent)) if parent is not None else None
    times = shape["times"]
    span = tracer.start_span(shape["name"], context=context, kind=shape["kind"], attributes=shape["attributes"],
                             links=[Link(c, a) for c, a in shape["links"]],
                             start_time=times[0] if times else None)
    for event_name, attributes, timestamp in shape["events"]:
        span.add_event(event_name, attributes, timestamp)
    if shape["status"] is not None:
        span.set_status(Status(*shape["status"]))
    span.end(end_time=times[0] + times[1] if times else None)
    provider.shutdown()
    (ended,) = collect.ended
    return ended


def _sdk_spans_are_packed() -> bool:
    """Whether this SDK release's ended spans have the class and fields ``pack_held`` knows
    (another release's are kept as they are: the tests then check that they are)."""
    provider = TracerProvider()
    collect = _Collect()
    provider.add_span_processor(collect)
    provider.get_tracer("t").start_span("s").end()
    return pack_held(collect.ended[0]) is not None


SDK_SPANS_PACKED = _sdk_spans_are_packed()


def _to_json(span: ReadableSpan) -> str:
    try:
        return span.to_json()
    except TypeError as e:  # (bytes values: the SDK's to_json cannot write them)
        return f"TypeError: {e}"


def _fields(span: ReadableSpan) -> tuple[Any, ...]:
    """What an exporter or a downstream processor reads of a span."""
    def ctx(c: SpanContext | None) -> Any:
        return None if c is None else (c.trace_id, c.span_id, c.is_remote, c.trace_flags, c.trace_state.to_header(),
                                       c.is_valid, type(c), type(c.trace_flags))

    return (
        type(span), span.name, ctx(span.context), ctx(span.parent), span.kind, span.start_time, span.end_time,
        dict(span.attributes), span.dropped_attributes, span.dropped_events, span.dropped_links,
        [(e.name, e.timestamp, dict(e.attributes or {}), e.dropped_attributes, type(e)) for e in span.events],
        [(ctx(link.context), dict(link.attributes or {}), link.dropped_attributes, type(link)) for link in span.links],
        span.status.status_code, span.status.description, span.resource, span.instrumentation_scope,
        span._instrumentation_info,  # (read by older exporters)
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_shapes)
def test_packed_then_rebuilt_span_exports_the_same(shape: dict[str, Any]) -> None:
    span = _make(shape)
    packed = pack_held(span)
    if not SDK_SPANS_PACKED:  # another SDK release: its spans are kept as they are
        assert packed is None
        return
    assert packed is not None  # every span of this SDK release is packed
    rebuilt = unpack_held(packed)
    assert rebuilt is not span
    assert encode_spans([rebuilt]).SerializeToString() == encode_spans([span]).SerializeToString()
    assert _to_json(rebuilt) == _to_json(span)
    assert _fields(rebuilt) == _fields(span)
    # the SDK's instance fields, all of them, in its order
    assert list(vars(rebuilt)) == list(vars(span))
    assert type(rebuilt._attributes) is type(span._attributes)
    assert vars(rebuilt._attributes).keys() == vars(span._attributes).keys()
    # and again from the same packed form (a release rebuilds it once, but nothing is consumed)
    assert encode_spans([unpack_held(packed)]).SerializeToString() == encode_spans([span]).SerializeToString()


_by_hand = st.fixed_dictionaries({
    "name": st.text(max_size=5),
    "context": _contexts,
    "parent": st.one_of(st.none(), _contexts),
    "attributes": st.one_of(st.none(), _attributes),
    "events": st.builds(lambda kind, events: kind(Event(n, a, t) for n, a, t in events), st.sampled_from([tuple, list]),
                        st.lists(st.tuples(st.text(max_size=3), st.one_of(st.none(), _attributes),
                                           st.integers(0, 2**62)), max_size=3)),
    "links": st.builds(lambda kind, links: kind(Link(c, a) for c, a in links), st.sampled_from([tuple, list]),
                       st.lists(st.tuples(_contexts, st.one_of(st.none(), _attributes)), max_size=2)),
    "kind": st.sampled_from(list(SpanKind)),
    "status": st.builds(Status, st.sampled_from(list(StatusCode)), st.one_of(st.none(), st.text(max_size=4))),
    "start_time": st.one_of(st.none(), st.integers(0, 2**62)),
    "end_time": st.one_of(st.none(), st.integers(0, 2**62)),
})


@settings(max_examples=100, deadline=None)
@given(_by_hand)
def test_a_span_made_by_hand_is_rebuilt_the_same(fields: dict[str, Any]) -> None:
    """ReadableSpans made without a tracer (tests, replays): plain dicts, tuples and lists."""
    span = ReadableSpan(**fields, resource=Resource({"service.name": "r"}))
    packed = pack_held(span)
    assert packed is not None
    rebuilt = unpack_held(packed)
    assert encode_spans([rebuilt]).SerializeToString() == encode_spans([span]).SerializeToString()
    assert _to_json(rebuilt) == _to_json(span)
    assert _fields(rebuilt) == _fields(span)
    assert type(rebuilt._events) is type(span._events) and type(rebuilt._links) is type(span._links)


def test_a_span_of_another_class_or_shape_is_not_packed() -> None:
    span = _make({"name": "a", "kind": SpanKind.INTERNAL, "attributes": {"a": 1}, "events": [], "links": [],
                  "status": None, "parent": None, "limits": None, "resource": {}, "scope": ("s", None, None, None),
                  "times": None})

    class Other(ReadableSpan):
        pass

    other = Other(name="x", context=span.context, attributes={"a": 1})
    assert pack_held(other) is None
    odd_flags = ReadableSpan(name="x", context=SpanContext(1, 2, False, 1))  # (an int, not TraceFlags)  # type: ignore[arg-type]
    assert pack_held(odd_flags) is None
    odd_events = ReadableSpan(name="x", context=span.context, events=deque())  # type: ignore[arg-type]
    assert pack_held(odd_events) is None
    span.__dict__["_extra"] = 1  # a field this SDK release does not set
    assert pack_held(span) is None


def _tracked(obj: Any, shared: set[int], seen: set[int]) -> int:
    """The objects the collector walks that this one keeps alive on its own."""
    if id(obj) in seen or id(obj) in shared or not gc.is_tracked(obj) or isinstance(obj, type):
        return 0
    seen.add(id(obj))
    return 1 + sum(_tracked(r, shared, seen) for r in gc.get_referents(obj))


def test_the_packed_form_is_what_the_collector_stops_walking() -> None:
    shape = {"name": "invoke_agent a", "kind": SpanKind.INTERNAL,
             "attributes": {"gen_ai.operation.name": "invoke_agent", "tags": ["a", "b"], "n": 3},
             "events": [], "links": [], "status": None,
             "parent": SpanContext(5, 6, True, TraceFlags(1)), "limits": None, "resource": {"service.name": "s"},
             "scope": ("s", "1", None, None), "times": None}
    span = _make(shape)
    with_event = _make({**shape, "events": [("e", {"k": 1}, None)]})
    # what spans share: the resource, scope, status, kinds and trace state
    shared = {id(x) for s in (span, with_event) for x in (
        s.resource, s.instrumentation_scope, s._instrumentation_info, s.status, s.kind, s.context.trace_state,
        s.status.status_code)}
    packed, packed_event = pack_held(span), pack_held(with_event)
    if not SDK_SPANS_PACKED:  # another SDK release: nothing packed, nothing to measure
        assert packed is None and packed_event is None
        return
    # the collector untracks a tuple once what it holds is untracked (a dict never is: the
    # SDK's attribute dicts sit in the tuples that hold them), a level per collection
    for _ in range(4):
        gc.collect()
    assert _tracked(span, shared, set()) >= 10
    assert _tracked(packed, shared, set()) == 1  # the outer tuple (it holds the shared objects)
    assert _tracked(with_event, shared, set()) >= 14
    assert _tracked(packed_event, shared, set()) == 3  # (+ the events' tuple and the event's own)


def test_a_packed_held_span_is_forwarded_once_rebuilt() -> None:
    span = _make({"name": "invoke_agent a", "kind": SpanKind.INTERNAL,
                  "attributes": {"gen_ai.operation.name": "invoke_agent"}, "events": [("e", {"k": 1}, 7)],
                  "links": [], "status": (StatusCode.ERROR, "boom"), "parent": None, "limits": None,
                  "resource": {"service.name": "s"}, "scope": ("s", "1", None, None), "times": None})
    down = _Collect()
    proc = ToolScoreSpanProcessor(down)
    try:
        held = _Held(span, span.context.span_id, time.monotonic() + 60)
        held.pack()
        # (another SDK release's span is kept as it is, and forwarded once all the same)
        assert type(held.span) is (tuple if SDK_SPANS_PACKED else type(span))
        assert proc._release(held) and not proc._release(held)  # exactly once, whoever comes second
        (out,) = down.ended
        assert encode_spans([out]).SerializeToString() == encode_spans([span]).SerializeToString()
        assert out.to_json() == span.to_json()
        held.pack()  # released: nothing left to pack
    finally:
        proc.shutdown()


def test_a_released_held_span_is_let_go_unless_its_run_is_still_to_be_scored() -> None:
    """The timer's list keeps a released hold until its deadline comes round: a span released
    with its scores (or with its run dropped) must not stay alive that long on the app's heap.
    One the timer released at its deadline is kept: its run is scored later, and ``_apply`` reads
    it then."""
    shape = {"name": "invoke_agent a", "kind": SpanKind.INTERNAL,
             "attributes": {"gen_ai.operation.name": "invoke_agent"}, "events": [], "links": [], "status": None,
             "parent": None, "limits": None, "resource": {"service.name": "s"}, "scope": ("s", "1", None, None),
             "times": None}
    down = _Collect()
    proc = ToolScoreSpanProcessor(down)
    try:
        for pack in (False, True):
            span = _make(shape)
            done = _Held(span, span.context.span_id, time.monotonic() + 60)
            expired = _Held(span, span.context.span_id, time.monotonic() + 60)
            if pack:
                done.pack()
                expired.pack()
            assert proc._release(done) and done.span is None and done.readable() is None
            assert not proc._release(done)  # still exactly once
            proc._release_expired(expired)
            kept = expired.readable()
            assert kept is not None and kept.to_json() == span.to_json()
            assert [out.to_json() for out in down.ended[-2:]] == [span.to_json()] * 2
        assert len(down.ended) == 4 and proc.stats["holds_expired"] == 2
    finally:
        proc.shutdown()
