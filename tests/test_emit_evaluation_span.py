"""Evaluation spans are built without ReadableSpan's constructors (``outputs.otel._fast_evaluation_span``):
the same span, field for field and byte for byte through the OTLP encoder, as the constructors
build (``_slow_evaluation_span``), for every parent context, resource, scope and attribute set."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, TraceFlags
from opentelemetry.trace.span import TraceState

from otel_toolscore.outputs import otel


def test_this_sdk_release_takes_the_fast_build() -> None:
    assert otel._check_evaluation_span()
    assert otel._evaluation_span is otel._fast_evaluation_span


_attributes = st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.text(max_size=5), st.integers(-9, 9),
                                                                         st.floats(allow_nan=False), st.booleans()),
                              max_size=4)


@settings(max_examples=100, deadline=None)
@given(name=st.text(max_size=8), trace_id=st.integers(1, 2**128 - 1), parent_id=st.integers(1, 2**64 - 1),
       span_id=st.integers(0, 2**64), remote=st.booleans(), flags=st.sampled_from([0, 1]),
       state=st.sampled_from([None, TraceState([("v", "1")])]), attributes=_attributes,
       resource=_attributes, scope=st.tuples(st.text(max_size=3), st.one_of(st.none(), st.text(max_size=3))),
       now=st.integers(0, 2**62))
def test_fast_evaluation_spans_are_the_constructors_spans(name: str, trace_id: int, parent_id: int, span_id: int,
                                                          remote: bool, flags: int, state: Any,
                                                          attributes: dict[str, Any], resource: dict[str, Any],
                                                          scope: tuple[str, str | None], now: int) -> None:
    parent = SpanContext(trace_id, parent_id, remote, TraceFlags(flags), state)
    args = (name, trace_id, span_id, parent.trace_flags, parent.trace_state, parent, Resource(resource),
            attributes, (Link(parent),), now, InstrumentationScope(*scope))
    fast, slow = otel._fast_evaluation_span(*args), otel._slow_evaluation_span(*args)
    assert type(fast) is type(slow)
    assert list(vars(fast)) == list(vars(slow))
    for key, value in vars(fast).items():
        assert type(value) is type(vars(slow)[key]) and value == vars(slow)[key], key
    assert fast.context.is_valid == slow.context.is_valid
    assert fast.status is slow.status and fast.events == slow.events
    assert fast.to_json() == slow.to_json()
    if fast.context.is_valid:  # (the encoder refuses no span, but an invalid id is not one we make)
        assert encode_spans([fast]).SerializeToString() == encode_spans([slow]).SerializeToString()
