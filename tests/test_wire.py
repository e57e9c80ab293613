"""The sidecar forwards spans that arrived as protobuf as the bytes they came in
(``ingest._wire``): the request it sends must be the very message the SDK's exporter would send
for the same spans (``encode_spans``), field for field, for every span, resource and scope.

Checked on the fixtures and captures and the synthetic workload (sent as an SDK exporter sends
them, so every span must keep its bytes), on protobuf spans hypothesis makes up (every shape the
decoder reads leniently: kvlists, bytes, mixed arrays, duplicate or empty attributes, odd flags,
kinds, statuses, trace states, links, unknown fields), and through the upstream exporters over
HTTP (gzip) and gRPC, where the body sent must be ``encode_request``'s, byte for byte."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common._internal.trace_encoder import _encode_span
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.util.types import AttributeValue

from benchmarks.throughput import synthetic
from otel_toolscore.ingest import copy_span, decode_export_request, load_otlp, parse_export_request
from otel_toolscore.ingest._encode import encode_span
from otel_toolscore.ingest._wire import encode_request
from otel_toolscore.runtime.processor import with_attributes
from tests.support import paths
from tests.support.otlp_sink import GrpcOtlpSink, OtlpSink

_SCORES: dict[str, AttributeValue] = {
    "toolscore.tool_call_validation.score": 0.75,
    "toolscore.tool_call_validation.label": "pass",
    "toolscore.tool_calls": 3,
    "toolscore.flags": ("a", "b"),
    "toolscore.ok": True,
}


def _canonical(body: bytes) -> bytes:
    # deterministic serialization of the parsed message: equal iff every field is equal
    return ExportTraceServiceRequest.FromString(body).SerializeToString(deterministic=True)  # type: ignore[no-any-return]


def assert_same_request(spans: Sequence[ReadableSpan]) -> None:
    sdk = encode_spans(spans).SerializeToString()
    assert _canonical(encode_request(spans)) == _canonical(sdk)


def _through_serve(body: bytes) -> list[ReadableSpan]:
    """What serve does to a request: decode keeping bytes, then score attributes on each root."""
    decoded = decode_export_request(parse_export_request(body), keep_wire=True)
    return [with_attributes(s, _SCORES) if s.parent is None else s for s in decoded]


def _kept(spans: Sequence[ReadableSpan]) -> int:
    return sum(getattr(s, "wire", None) is not None for s in spans)


_TRACE_FILES = paths.traces(paths.FIXTURES) + paths.traces(paths.CAPTURES)


@pytest.mark.parametrize("path", _TRACE_FILES, ids=[paths.trace_id(p) for p in _TRACE_FILES])
def test_recorded_traces_forwarded_as_the_sdk_would_send_them(path: Path) -> None:
    spans = load_otlp(path).spans
    forwarded = _through_serve(encode_spans(spans).SerializeToString())
    assert len(forwarded) == len(spans)
    # what an SDK exporter sends is canonical: every span keeps its bytes
    assert _kept(forwarded) == len(forwarded)
    assert_same_request(forwarded)


def test_synthetic_workload_forwarded_as_the_sdk_would_send_it() -> None:
    spans = [s for run in synthetic(10, 40, seed0=7) for s in run]
    forwarded = _through_serve(encode_spans(spans).SerializeToString())
    assert _kept(forwarded) == len(spans)
    assert_same_request(forwarded)
    # with evaluation-like spans of our own (no bytes) mixed in, and the order kept
    mixed = [*forwarded[:5], *spans[:3], *forwarded[5:]]
    assert_same_request(mixed)


def test_changed_span_is_encoded_again() -> None:
    spans = [s for run in synthetic(10, 2, seed0=3) for s in run]
    root = next(s for s in _through_serve(encode_spans(spans).SerializeToString()) if s.parent is None)
    key = next(iter(root.attributes or {}))
    rescored = with_attributes(root, {key: "changed"})  # an added key that is already on the span
    assert getattr(rescored, "wire", "absent") is None
    assert dict(rescored.attributes or {})[key] == "changed"
    assert getattr(copy_span(root, events=()), "wire", "absent") is None
    assert_same_request([rescored, root])


# --- protobuf spans made up by hypothesis ---------------------------------------------------------

# few keys, so that repeated keys are frequent; "" only on spans (a Resource drops it, noisily)
_KEYS = st.sampled_from(["a", "b", "gen_ai.operation.name", "toolscore.tool_calls"])
_SPAN_KEYS = st.one_of(_KEYS, st.just(""))
_scalars = st.one_of(
    st.builds(lambda v: AnyValue(string_value=v), st.text(max_size=8)),
    st.builds(lambda v: AnyValue(int_value=v), st.integers(-(2**63), 2**63 - 1)),
    st.builds(lambda v: AnyValue(bool_value=v), st.booleans()),
    st.builds(lambda v: AnyValue(double_value=v), st.floats(allow_nan=False)),
    st.builds(lambda v: AnyValue(bytes_value=v), st.binary(max_size=6)),
    st.just(AnyValue()),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.builds(lambda vs: AnyValue(array_value=ArrayValue(values=vs)), st.lists(inner, max_size=3)),
        st.builds(lambda kvs: AnyValue(kvlist_value=KeyValueList(values=kvs)),
                  st.lists(st.builds(lambda k, v: KeyValue(key=k, value=v), _KEYS, inner), max_size=3)),
    ),
    max_leaves=6,
)
# arrays of one scalar kind are kept as SDK sequences: make them likely
_homogeneous = st.one_of(
    st.builds(lambda vs: AnyValue(array_value=ArrayValue(values=[AnyValue(string_value=v) for v in vs])),
              st.lists(st.text(max_size=4), max_size=3)),
    st.builds(lambda vs: AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=v) for v in vs])),
              st.lists(st.integers(-5, 5), max_size=3)),
)


def _attribute_lists(keys: st.SearchStrategy[str]) -> st.SearchStrategy[list[KeyValue]]:
    values = st.one_of(_scalars, _scalars, _homogeneous, _values)
    return st.lists(st.builds(lambda k, v: KeyValue(key=k, value=v), keys, values), max_size=4)


_attributes = _attribute_lists(_SPAN_KEYS)
_other_attributes = _attribute_lists(_KEYS)


def _valid_id(size: int) -> st.SearchStrategy[bytes]:
    # hypothesis favours zero bytes, which make an absent id
    return st.integers(1, 2 ** (8 * size) - 1).map(lambda v: v.to_bytes(size, "big"))


def _id(size: int) -> st.SearchStrategy[bytes]:
    """Mostly valid ids, some absent or malformed."""
    valid = _valid_id(size)
    return st.one_of(valid, valid, valid, valid, st.just(b""), st.just(bytes(size)), st.binary(max_size=size + 2))


_ids = _id(16)
_span_ids = _id(8)
_FLAGS = st.sampled_from([0x100, 0x300, 0, 1, 0x101, 0x301, 0x200, 0x1FF])
_TRACE_STATES = st.sampled_from(["", "", "a=1", "a=1,b=2", "a=1 , b=2", "not a trace state", "A=1"])


_clean_values = st.one_of(_scalars.filter(lambda v: v.WhichOneof("value") not in (None, "bytes_value")), _homogeneous)
_clean_attributes = st.dictionaries(_SPAN_KEYS, _clean_values, max_size=4).map(
    lambda d: [KeyValue(key=k, value=v) for k, v in d.items()])


@st.composite
def _pb_spans(draw: st.DrawFn) -> PbSpan:
    # Half of them as an SDK writes spans (forwarded as their bytes), half anything the decoder reads.
    clean = draw(st.booleans())
    attributes = _clean_attributes if clean else _attributes
    zero_or = (lambda *others: st.just(0)) if clean else (lambda *others: st.sampled_from([0, 0, *others]))
    span = PbSpan(
        trace_id=draw(_valid_id(16) if clean else _ids),
        span_id=draw(_valid_id(8) if clean else _span_ids),
        parent_span_id=draw(st.one_of(st.just(b""), _valid_id(8)) if clean else _span_ids),
        trace_state=draw(st.sampled_from(["", "a=1", "a=1,b=2"]) if clean else _TRACE_STATES),
        name=draw(st.text(max_size=6)),
        kind=draw(st.integers(1, 5) if clean else st.integers(0, 6)),
        start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
        end_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
        attributes=draw(attributes),
        dropped_attributes_count=draw(st.sampled_from([0, 0, 3])),
        dropped_events_count=draw(st.sampled_from([0, 0, 1])),
        dropped_links_count=draw(st.sampled_from([0, 0, 2])),
        flags=draw(_FLAGS),
    )
    if clean or draw(st.booleans()):
        code = draw(st.integers(0, 2) if clean else st.integers(0, 3))
        message = draw(st.sampled_from(["", "why"])) if code == 2 or not clean else ""
        span.status.CopyFrom(PbStatus(code=code, message=message))
    for _ in range(draw(st.integers(0, 2))):
        span.events.add(name=draw(st.text(max_size=4)), time_unix_nano=draw(st.integers(0, 2**40)),
                        attributes=draw(attributes), dropped_attributes_count=draw(zero_or(1)))
    for _ in range(draw(st.integers(0, 2))):
        span.links.add(trace_id=draw(_valid_id(16) if clean else _ids),
                       span_id=draw(_valid_id(8) if clean else _span_ids),
                       trace_state=draw(st.just("") if clean else _TRACE_STATES), attributes=draw(attributes),
                       flags=draw(st.sampled_from([0x100, 0x300]) if clean else _FLAGS),
                       dropped_attributes_count=draw(zero_or(1)))
    if draw(st.integers(0, 4)) == 0:
        # a field this OTLP version does not know (number 99, a varint), as a newer sender writes it
        span = PbSpan.FromString(span.SerializeToString() + b"\x98\x06\x07")
    return span


@st.composite
def _requests(draw: st.DrawFn) -> bytes:
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(1, 2))):
        entry = request.resource_spans.add(schema_url=draw(st.sampled_from(["", "https://x/1"])))
        entry.resource.attributes.extend(draw(_other_attributes))
        entry.resource.dropped_attributes_count = draw(st.sampled_from([0, 1]))
        for _ in range(draw(st.integers(1, 2))):
            group = entry.scope_spans.add(schema_url=draw(st.sampled_from(["", "https://s/1"])))
            group.scope.name = draw(st.sampled_from(["", "lib"]))
            group.scope.version = draw(st.sampled_from(["", "1.0"]))
            group.scope.attributes.extend(draw(_other_attributes))
            group.spans.extend(draw(st.lists(_pb_spans(), min_size=1, max_size=3)))
    return request.SerializeToString()  # type: ignore[no-any-return]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_requests(), extra=st.dictionaries(_KEYS, st.one_of(st.text(max_size=3), st.integers(), st.floats(
    allow_nan=False), st.booleans(), st.tuples(st.text(max_size=2))), max_size=3))
def test_made_up_spans_forwarded_as_the_sdk_would_send_them(body: bytes, extra: dict[str, AttributeValue]) -> None:
    problems: list[str] = []
    decoded = decode_export_request(parse_export_request(body), problems, keep_wire=True)
    plain_problems: list[str] = []
    plain = decode_export_request(parse_export_request(body), plain_problems)
    assert [s.to_json() for s in decoded] == [s.to_json() for s in plain]
    assert problems == plain_problems
    assert_same_request(decoded)
    # attributes added to every span, new keys or keys the span has already
    assert_same_request([with_attributes(s, extra) for s in decoded])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_requests())
def test_spans_without_bytes_are_written_as_the_sdk_writes_them(body: bytes) -> None:
    # byte for byte, not only the same message: _encode writes fields in protobuf's order
    for span in decode_export_request(parse_export_request(body)):
        assert encode_span(span) == _encode_span(span).SerializeToString()


def _sdk_span(attributes: dict[str, object], **kwargs: object) -> ReadableSpan:
    context = SpanContext(7, 8, False, TraceFlags(1))
    fields: dict[str, object] = {"name": "s", "context": context, "attributes": attributes, "kind": SpanKind.CLIENT}
    fields.update(kwargs)
    return ReadableSpan(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [
    "", "é 中", "\ud800 lone surrogate", 0, -1, 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 0.0, -0.0, 1e308,
    float("inf"), True, False, ("a", "b"), (1, None, 2), (), b"raw", {"k": "v"}, None, [1.5, 2.5],
])
def test_attribute_values_are_written_as_the_sdk_writes_them(value: object) -> None:
    # plain values written directly; the others (and what the SDK cannot encode) through the SDK
    span = _sdk_span({"before": 1, "key": value, "after": "x", "\udc80": 1, 5: "not a str key", "": 2})
    assert encode_span(span) == _encode_span(span).SerializeToString()


def test_attributes_met_again_are_written_as_the_sdk_writes_them() -> None:
    # encode_attributes keeps the fields it wrote by key, type and value: values that compare
    # equal but encode differently (True, 1, 1.0; 0.0, -0.0; nan) must each keep their own bytes,
    # on a span's attributes and on an event's, however often and in whatever order they come
    values: list[object] = [True, 1, 1.0, 0.0, -0.0, float("nan"), False, 0, "1", "x" * 300, 2**63, ("a",)]
    for value in [*values, *reversed(values), *values]:
        span = _sdk_span({"k": value, "same": value}, events=[Event("e", {"k": value}, 1)])
        assert encode_span(span) == _encode_span(span).SerializeToString(), repr(value)


def test_span_parts_are_written_as_the_sdk_writes_them() -> None:
    remote = SpanContext(7, 9, True, TraceFlags(1))
    linked = SpanContext(5, 6, True, TraceFlags(0), TraceState([("a", "1"), ("b", "2")]))
    span = _sdk_span(
        {"a": 1}, name="x" * 200, parent=remote, start_time=None, end_time=2**64 - 1,
        context=SpanContext(7, 8, False, TraceFlags(1), TraceState([("k", "v")])),
        events=[Event("e", {"n": 1.5}, 3), Event("", None, 0)], links=[Link(linked, {"l": True}), Link(remote)],
        status=Status(StatusCode.ERROR, "why"))
    assert encode_span(span) == _encode_span(span).SerializeToString()
    for kind in SpanKind:
        for status in (Status(StatusCode.OK), Status(StatusCode.UNSET), Status(StatusCode.ERROR)):
            span = _sdk_span({}, kind=kind, status=status)
            assert encode_span(span) == _encode_span(span).SerializeToString()
    bad_name = _sdk_span({}, name="\ud800")  # the SDK's encoder says what is wrong with it
    with pytest.raises(ValueError):
        _encode_span(bad_name).SerializeToString()
    with pytest.raises(ValueError):
        encode_span(bad_name)


def test_decoding_with_or_without_bytes_reads_the_same_spans() -> None:
    spans = [s for run in synthetic(10, 5, seed0=5) for s in run]
    body = encode_spans(spans).SerializeToString()
    with_wire = decode_export_request(parse_export_request(body), keep_wire=True)
    without = decode_export_request(parse_export_request(body))
    assert [s.to_json() for s in with_wire] == [s.to_json() for s in without]
    assert _kept(without) == 0


# --- through the upstream exporters ---------------------------------------------------------------


def _forwarded() -> list[ReadableSpan]:
    spans = [s for run in synthetic(10, 3, seed0=9) for s in run]
    forwarded = _through_serve(encode_spans(spans).SerializeToString())
    return [*forwarded, *spans[:2]]  # with spans that have no bytes (the serve's own)


def test_http_exporter_sends_the_request_body_built_from_the_bytes(clean_otel_env: pytest.MonkeyPatch) -> None:
    from opentelemetry.exporter.otlp.proto.http import Compression

    from otel_toolscore.runtime.serve._export import WireHttpSpanExporter

    spans = _forwarded()
    with OtlpSink() as sink:
        exporter = WireHttpSpanExporter(endpoint=f"{sink.url}/v1/traces", compression=Compression.Gzip)
        try:
            assert exporter.export(spans).name == "SUCCESS"
        finally:
            exporter.shutdown()
        (received,) = sink.received("traces")
    assert {k.lower(): v for k, v in received.headers.items()}.get("content-encoding") == "gzip"
    assert received.body == encode_request(spans)
    assert _canonical(received.body) == _canonical(encode_spans(spans).SerializeToString())


def test_grpc_exporter_sends_the_request_body_built_from_the_bytes(clean_otel_env: pytest.MonkeyPatch) -> None:
    from grpc import Compression

    from otel_toolscore.runtime.serve._export import wire_grpc_span_exporter

    spans = _forwarded()
    with GrpcOtlpSink() as sink:
        exporter = wire_grpc_span_exporter(endpoint=sink.url, insecure=True, compression=Compression.Gzip)
        try:
            assert exporter.export(spans).name == "SUCCESS"
        finally:
            exporter.shutdown()
        (received,) = sink.received("traces")
    assert received.body == encode_request(spans)
    assert _canonical(received.body) == _canonical(encode_spans(spans).SerializeToString())


# --- the decoded span's construction ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    trace_id=st.integers(1, 2**128 - 1), span_id=st.integers(1, 2**64 - 1),
    parent_id=st.one_of(st.just(0), st.integers(1, 2**64 - 1)), flags=st.integers(0, 2**32 - 1),
    state=st.sampled_from([None, TraceState([("a", "1")])]), name=st.text(max_size=4),
    kind=st.sampled_from(list(SpanKind)), code=st.sampled_from(list(StatusCode)),
    times=st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
    dropped=st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9)),
    wire=st.one_of(st.none(), st.binary(max_size=4)),
)
def test_decoded_spans_are_what_the_sdk_constructors_build(
    trace_id: int, span_id: int, parent_id: int, flags: int, state: TraceState | None, name: str, kind: SpanKind,
    code: StatusCode, times: tuple[int, int], dropped: tuple[int, int, int], wire: bytes | None,
) -> None:
    # decode builds spans without the SDK's constructors (ingest.spans._fast_span): field for
    # field what DecodedSpan(...) with SpanContext(...) builds, the types of every part included
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    from otel_toolscore.ingest import spans as decoded

    assert decoded.decoded_span is decoded._fast_span  # this SDK release: the fast construction
    args = (name, trace_id, span_id, parent_id, flags, state, Resource({"r": 1}), {"a": name}, [], [], kind,
            Status(code), *times, InstrumentationScope("s"), dropped, wire)
    fast, slow = decoded._fast_span(*args), decoded._slow_span(*args)
    assert list(vars(fast)) == list(vars(slow))
    for key, value in vars(slow).items():
        other = vars(fast)[key]
        assert type(other) is type(value) and other == value, key
        if isinstance(value, SpanContext):
            assert tuple(map(type, other)) == tuple(map(type, value)), key
    assert fast.to_json() == slow.to_json()
    assert encode_span(fast) == encode_span(slow)
