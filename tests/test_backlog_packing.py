"""A run packed in a thread-mode backlog (``_handoff.pack``) is rebuilt (``unpack``) as the spans
the scoring process gets across the pipe (``encode_runs``/``decode_runs``), on SDK spans of every
shape, with the SDK's own attribute dicts (no copy); and what the packed run keeps for the app's
garbage collector is one tuple: its rows hold plain values only and are untracked once the
collector has seen them (a few times: nested tuples one level a pass). The same for what a waiting run keeps of its spans' contexts
(``_Anchors``)."""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore.runtime import _handoff
from otel_toolscore.runtime.processor import _Anchors
from tests.test_held_packing import _make, _shapes


def _read(span: ReadableSpan) -> tuple[Any, ...]:
    """What reading and assembly (and the anchors) take of a span."""
    def ctx(c: Any) -> Any:
        return None if c is None else (c.trace_id, c.span_id, c.is_remote, c.trace_flags, c.trace_state.to_header())

    return (type(span), span.name, ctx(span.context), ctx(span.parent), span.kind, span.start_time, span.end_time,
            dict(span.attributes), [(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events],
            span.status.status_code, span.status.description, dict(span.resource.attributes))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_shapes, min_size=1, max_size=4), st.integers(1, 2**128 - 1))
def test_a_packed_run_is_unpacked_as_the_child_decodes_it(shapes: list[dict[str, Any]], trace_id: int) -> None:
    spans = [_make(shape) for shape in shapes]
    packed = _handoff.pack(spans)
    unpacked = _handoff.unpack(trace_id, packed)
    (decoded,) = _handoff.decode_runs(_handoff.encode_runs([(0, trace_id, False, spans)]))
    assert [_read(s) for s in unpacked] == [_read(s) for s in decoded.spans]
    # the SDK's own attribute dicts, by reference (an ended span's attributes no longer change);
    # older SDK releases keep an OrderedDict, which is copied (and compared above)
    for original, rebuilt in zip(spans, unpacked, strict=True):
        own = original._attributes._dict  # type: ignore[attr-defined]
        assert rebuilt._attributes is own or (type(own) is not dict and rebuilt._attributes == own)
        for event, rebuilt_event in zip(original.events, rebuilt.events, strict=True):
            own = event.attributes._dict  # type: ignore[union-attr]
            assert rebuilt_event.attributes is own or (type(own) is not dict and rebuilt_event.attributes == own)
    # and again from the same packed form: nothing is consumed
    assert [_read(s) for s in _handoff.unpack(trace_id, packed)] == [_read(s) for s in decoded.spans]

    for _ in range(4):  # (a tuple is untracked once what it holds is: nested ones over a few passes)
        gc.collect()
    rows = packed[0]
    assert not gc.is_tracked(rows) and not any(gc.is_tracked(row) for row in rows)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_shapes, min_size=1, max_size=4))
def test_anchors_are_one_tuple_for_the_collector(shapes: list[dict[str, Any]]) -> None:
    spans = [_make(shape) for shape in shapes]
    anchors = _Anchors(spans)
    gc.collect()
    assert not gc.is_tracked(anchors[0])  # span id -> entry: ints only
    # no TraceFlags or other per-span object kept: only the shared trace states and resources
    assert all(type(v) in (int, bool) or v is None or gc.is_tracked(v) is False
               or any(v is s.context.trace_state or v is s.resource for s in spans) for v in anchors[1:])
    for span in spans:
        stand_in = anchors.span(span.context.span_id)
        assert stand_in is not None
        assert stand_in.context == span.context and type(stand_in.context.trace_flags) is type(span.context.trace_flags)
        assert stand_in.context.trace_state is span.context.trace_state and stand_in.resource is span.resource
