"""otel_toolscore.ingest: OTLP JSON / JSON lines / protobuf → ReadableSpan, and lenience on garbage."""

from __future__ import annotations

import base64
import gzip
import io
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from google.protobuf.json_format import MessageToJson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from otel_toolscore import semconv
from otel_toolscore.ingest import (
    MAX_PROBLEMS,
    OtlpBatch,
    OtlpDecodeError,
    decode_export_request,
    format_span_id,
    format_trace_id,
    load_otlp,
    read_otlp_json,
    spans_from_otlp_dict,
)
from tests.support.paths import FIXTURES, traces

FIXTURE_FILES = traces(FIXTURES)

TRACE_HEX = "5b8efff798038103d269b633813fc60c"
SPAN_HEX = "eee19b7ec3c1b174"
PARENT_HEX = "eee19b7ec3c1b173"
OTLP_KINDS = {
    0: SpanKind.INTERNAL,
    1: SpanKind.INTERNAL,
    2: SpanKind.SERVER,
    3: SpanKind.CLIENT,
    4: SpanKind.PRODUCER,
    5: SpanKind.CONSUMER,
}


# --- helpers -----------------------------------------------------------------------------------


def _request(*spans: dict[str, Any], resource_attrs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": resource_attrs or []},
                "scopeSpans": [{"scope": {"name": "test.scope", "version": "1.0"}, "spans": list(spans)}],
            }
        ]
    }


def _span(**fields: Any) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": TRACE_HEX,
        "spanId": SPAN_HEX,
        "name": "op",
        "kind": 1,
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
    }
    span.update(fields)
    return {k: v for k, v in span.items() if v is not None}


def _attr(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": value}


def _attrs(item: ReadableSpan | Event | trace_api.Link) -> dict[str, Any]:
    return dict(item.attributes or {})


def _is_sdk_attribute(value: object) -> bool:
    """What SDK attributes allow in every supported SDK version."""
    primitive = (str, bool, int, float)
    if isinstance(value, primitive):
        return True
    if not isinstance(value, tuple):
        return False
    kinds = {type(v) for v in value if v is not None}
    return len(kinds) <= 1 and all(k in primitive for k in kinds)


def _assert_reexportable(spans: Sequence[ReadableSpan]) -> None:
    """The sidecar re-exports decoded spans with the SDK's encoder; nothing may be lost there."""
    for span in spans:
        for attrs in (span.attributes, *(e.attributes for e in span.events), *(ln.attributes for ln in span.links)):
            for key, value in (attrs or {}).items():
                assert isinstance(key, str)
                assert _is_sdk_attribute(value), (key, value)
    request = encode_spans(spans)
    encoded = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert len(encoded) == len(spans)
    by_id = {(s.trace_id, s.span_id): s for s in encoded}
    for span in spans:
        pb = by_id[(span.context.trace_id.to_bytes(16, "big"), span.context.span_id.to_bytes(8, "big"))]
        assert len(pb.attributes) == len(_attrs(span))  # the encoder logs and drops bad values
    if spans:
        assert len(load_otlp(request.SerializeToString()).spans) == len(spans)  # and it decodes again


def _decode_or_error(data: bytes) -> OtlpBatch | OtlpDecodeError:
    try:
        return load_otlp(data)
    except OtlpDecodeError as exc:
        assert "<bytes>" in str(exc)
        return exc


# --- real fixtures -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_decodes_faithfully(path: Path) -> None:
    raw = json.loads(path.read_text())
    raw_spans = [
        (rs, ss, sp) for rs in raw["resourceSpans"] for ss in rs.get("scopeSpans", []) for sp in ss.get("spans", [])
    ]
    batch = load_otlp(path)

    assert batch.problems == []
    assert len(batch.spans) == len(raw_spans)
    decoded = {(format_trace_id(s.context.trace_id), format_span_id(s.context.span_id)): s for s in batch.spans}
    assert len(decoded) == len(raw_spans)
    for rs, ss, sp in raw_spans:
        span = decoded[(sp["traceId"], sp["spanId"])]
        assert span.name == sp["name"]
        assert span.kind is OTLP_KINDS[sp.get("kind", 0)]
        assert span.start_time == int(sp["startTimeUnixNano"])
        assert span.end_time == int(sp["endTimeUnixNano"])
        assert span.context.trace_flags.sampled
        if sp.get("parentSpanId"):
            assert span.parent is not None
            assert format_span_id(span.parent.span_id) == sp["parentSpanId"]
            assert span.parent.trace_id == span.context.trace_id
        else:
            assert span.parent is None
        status = sp.get("status", {})
        assert span.status.status_code.value == status.get("code", 0)
        if status.get("code") == 2:
            assert span.status.description == (status.get("message") or None)
        assert set(_attrs(span)) == {a["key"] for a in sp.get("attributes", [])}
        for item in sp.get("attributes", []):
            value = item["value"]
            if "stringValue" in value:
                assert _attrs(span)[item["key"]] == value["stringValue"]
            elif "intValue" in value:
                assert _attrs(span)[item["key"]] == int(value["intValue"])
            elif "arrayValue" in value:
                assert isinstance(_attrs(span)[item["key"]], tuple)
        assert [(e.name, e.timestamp) for e in span.events] == [
            (e["name"], int(e["timeUnixNano"])) for e in sp.get("events", [])
        ]
        for event, raw_event in zip(span.events, sp.get("events", []), strict=True):
            assert set(_attrs(event)) == {a["key"] for a in raw_event.get("attributes", [])}
        resource_attrs = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
        assert span.resource.attributes[SERVICE_NAME] == resource_attrs[SERVICE_NAME]["stringValue"]
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == ss["scope"]["name"]
        assert span.instrumentation_scope.version == ss["scope"].get("version", "")
    _assert_reexportable(batch.spans)


def test_fixture_error_status_and_exception_event() -> None:
    path = FIXTURES / "E_langgraph_openinference" / "bad_arguments.json"
    if not path.exists():
        pytest.skip(f"{path} not found")
    spans = read_otlp_json(path)
    with_exception = [s for s in spans if any(e.name == semconv.EXCEPTION_EVENT for e in s.events)]
    assert with_exception
    event = next(e for e in with_exception[0].events if e.name == semconv.EXCEPTION_EVENT)
    assert "ValidationError" in str(_attrs(event)[semconv.EXCEPTION_TYPE])
    assert any(s.status.status_code is StatusCode.ERROR for s in spans)


def test_fixture_collection_as_json_lines_and_array() -> None:
    docs = [json.loads(p.read_text()) for p in FIXTURE_FILES]
    expected = sum(
        len(ss.get("spans", [])) for d in docs for rs in d["resourceSpans"] for ss in rs.get("scopeSpans", [])
    )
    lines = "\n".join(json.dumps(d) for d in docs).encode()
    assert len(load_otlp(lines).spans) == expected
    assert len(load_otlp(json.dumps(docs).encode()).spans) == expected


# --- round trip through the SDK's own encoder --------------------------------------------------


@pytest.fixture()
def sdk_spans() -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource({SERVICE_NAME: "svc", SERVICE_VERSION: "1.2.3", "k.int": 7}, "https://schema/1")
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("my.lib", "0.9", schema_url="https://schema/scope", attributes={"scope.attr": "x"})
    other = provider.get_tracer("other.lib")
    remote_parent = trace_api.SpanContext(
        0x1234567890ABCDEF1234567890ABCDEF,
        0x1122334455667788,
        is_remote=True,
        trace_flags=trace_api.TraceFlags(1),
    )
    with tracer.start_as_current_span(
        "root",
        context=trace_api.set_span_in_context(trace_api.NonRecordingSpan(remote_parent)),
        kind=SpanKind.SERVER,
        attributes={
            "s": "text",
            "b": True,
            "i": -42,
            "big": 2**62,
            "f": 1.5,
            "strs": ("a", "b"),
            "ints": (1, 2, 3),
            "floats": (0.5, 2.0),
            "bools": (True, False),
            "empty": (),
        },
    ) as root:
        root.add_event("started", {"step": 1, "tags": ("x", "y")}, timestamp=1_000)
        with tracer.start_as_current_span("child", kind=SpanKind.CLIENT) as child:
            child.set_status(trace_api.Status(StatusCode.ERROR, "boom"))
            child.add_event("no attrs", timestamp=2_000)
        with other.start_as_current_span(
            "linked", kind=SpanKind.PRODUCER, links=[trace_api.Link(root.get_span_context(), {"why": "because"})]
        ) as linked:
            linked.set_status(trace_api.Status(StatusCode.OK))
        with tracer.start_as_current_span("consumer", kind=SpanKind.CONSUMER):
            pass
    provider.shutdown()
    spans = list(exporter.get_finished_spans())
    assert len(spans) == 4
    return spans


def _assert_same_spans(decoded: Sequence[ReadableSpan], originals: Sequence[ReadableSpan]) -> None:
    assert len(decoded) == len(originals)
    by_id = {(s.context.trace_id, s.context.span_id): s for s in decoded}
    for orig in originals:
        span = by_id[(orig.context.trace_id, orig.context.span_id)]
        assert span.name == orig.name
        assert span.kind is orig.kind
        assert span.start_time == orig.start_time and span.end_time == orig.end_time
        assert _attrs(span) == _attrs(orig)
        assert span.status.status_code is orig.status.status_code
        assert span.status.description == orig.status.description
        assert [(e.name, e.timestamp, _attrs(e)) for e in span.events] == [
            (e.name, e.timestamp, _attrs(e)) for e in orig.events
        ]
        assert [(ln.context.trace_id, ln.context.span_id, _attrs(ln)) for ln in span.links] == [
            (ln.context.trace_id, ln.context.span_id, _attrs(ln)) for ln in orig.links
        ]
        if orig.parent is None:
            assert span.parent is None
        else:
            assert span.parent is not None
            assert span.parent.span_id == orig.parent.span_id
            assert span.parent.is_remote == orig.parent.is_remote
        assert span.resource == orig.resource
        assert span.resource.schema_url == orig.resource.schema_url
        assert span.instrumentation_scope == orig.instrumentation_scope
        assert orig.instrumentation_scope is not None and span.instrumentation_scope is not None
        assert dict(span.instrumentation_scope.attributes or {}) == dict(orig.instrumentation_scope.attributes or {})


def test_round_trip_protobuf(sdk_spans: list[ReadableSpan]) -> None:
    data = encode_spans(sdk_spans).SerializeToString()
    batch = load_otlp(data)
    assert batch.problems == []
    _assert_same_spans(batch.spans, sdk_spans)
    _assert_same_spans(load_otlp(gzip.compress(data)).spans, sdk_spans)
    _assert_reexportable(batch.spans)


@pytest.mark.parametrize("snake_case", [False, True], ids=["camelCase", "snake_case"])
def test_round_trip_protobuf_json_mapping(sdk_spans: list[ReadableSpan], snake_case: bool) -> None:
    # protobuf's generic JSON mapping writes ids as base64 and enums as names, unlike OTLP/JSON.
    text = MessageToJson(encode_spans(sdk_spans), preserving_proto_field_name=snake_case)
    assert ("trace_id" in text) is snake_case
    batch = load_otlp(text.encode())
    assert batch.problems == []
    _assert_same_spans(batch.spans, sdk_spans)
    _assert_reexportable(batch.spans)


def test_decode_export_request_and_dict(sdk_spans: list[ReadableSpan]) -> None:
    request = encode_spans(sdk_spans)
    problems: list[str] = []
    _assert_same_spans(decode_export_request(request, problems), sdk_spans)
    assert problems == []
    _assert_same_spans(spans_from_otlp_dict(json.loads(MessageToJson(request))).spans, sdk_spans)


def test_decode_export_request_records_problems() -> None:
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 3, name="bad id")
    good = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, parent_span_id=b"\x03" * 5, name="good", kind=cast(Any, 9))
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span, good])])])
    problems: list[str] = []
    spans = decode_export_request(request, problems)
    assert [s.name for s in spans] == ["good"]
    assert spans[0].parent is None and spans[0].kind is SpanKind.INTERNAL
    assert any("span #0" in p and "invalid id" in p for p in problems)
    assert any("parentSpanId" in p and "kept as a root" in p for p in problems)
    assert any("unknown kind" in p for p in problems)
    assert [s.name for s in decode_export_request(request)] == ["good"]  # problems are optional


def test_protobuf_values_and_dropped_counts() -> None:
    values = [
        KeyValue(key="bytes", value=AnyValue(bytes_value=b"\x00\xff")),
        KeyValue(
            key="kv",
            value=AnyValue(
                kvlist_value=KeyValueList(
                    values=[
                        KeyValue(key="a", value=AnyValue(int_value=1)),
                        KeyValue(key="b", value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="x")]))),
                    ]
                )
            ),
        ),
        KeyValue(
            key="mixed",
            value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="x"), AnyValue(int_value=2)])),
        ),
        KeyValue(key="empty"),
    ]
    span = Span(
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        name="s",
        attributes=values,
        dropped_attributes_count=3,
        dropped_events_count=2,
        dropped_links_count=1,
    )
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])])
    (decoded,) = decode_export_request(request)
    assert _attrs(decoded)["bytes"] == base64.b64encode(b"\x00\xff").decode()
    assert json.loads(str(_attrs(decoded)["kv"])) == {"a": 1, "b": ["x"]}
    assert json.loads(str(_attrs(decoded)["mixed"])) == ["x", 2]
    assert "empty" not in _attrs(decoded)
    assert (decoded.dropped_attributes, decoded.dropped_events, decoded.dropped_links) == (3, 2, 1)
    pb = encode_spans([decoded]).resource_spans[0].scope_spans[0].spans[0]
    assert (pb.dropped_attributes_count, pb.dropped_events_count, pb.dropped_links_count) == (3, 2, 1)


# --- JSON value mapping ------------------------------------------------------------------------


def test_json_attribute_value_mapping() -> None:
    attrs = [
        _attr("s", {"stringValue": "x"}),
        _attr("b", {"boolValue": False}),
        _attr("i", {"intValue": "-12"}),
        _attr("i_num", {"intValue": 12}),
        _attr("d", {"doubleValue": 0.25}),
        _attr("d_int", {"doubleValue": 3}),
        _attr("nan", {"doubleValue": "NaN"}),
        _attr("inf", {"doubleValue": "-Infinity"}),
        _attr("bytes", {"bytesValue": "AP8="}),
        _attr("arr", {"arrayValue": {"values": [{"stringValue": "a"}, {"stringValue": "b"}]}}),
        _attr("arr_int", {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": 2}]}}),
        _attr("arr_empty", {"arrayValue": {}}),
        _attr("arr_mixed", {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}]}}),
        _attr("arr_nested", {"arrayValue": {"values": [{"arrayValue": {"values": [{"boolValue": True}]}}]}}),
        _attr("arr_kv", {"arrayValue": {"values": [{"kvlistValue": {"values": [_attr("k", {"intValue": "5"})]}}]}}),
        _attr("kv", {"kvlistValue": {"values": [_attr("k", {"stringValue": "v"}), _attr("n", {})]}}),
        _attr("snake", {"string_value": "from snake"}),
        _attr("empty_value", {}),
        {"key": "no_value"},
        _attr("null_string", {"stringValue": None}),
    ]
    batch = spans_from_otlp_dict(_request(_span(attributes=attrs)))
    assert batch.problems == []
    a = _attrs(batch.spans[0])
    assert a["s"] == "x" and a["b"] is False and a["i"] == -12 and a["i_num"] == 12
    assert a["d"] == 0.25 and isinstance(a["d_int"], float) and a["d_int"] == 3.0
    assert math.isnan(float(a["nan"])) and a["inf"] == -math.inf
    assert a["bytes"] == "AP8="
    assert a["arr"] == ("a", "b") and a["arr_int"] == (1, 2) and a["arr_empty"] == ()
    assert json.loads(str(a["arr_mixed"])) == ["a", 1]
    assert json.loads(str(a["arr_nested"])) == [[True]]
    assert json.loads(str(a["arr_kv"])) == [{"k": 5}]
    assert json.loads(str(a["kv"])) == {"k": "v", "n": None}
    assert a["snake"] == "from snake"
    for skipped in ("empty_value", "no_value", "null_string"):
        assert skipped not in a
    _assert_reexportable(batch.spans)


def test_ids_hex_uppercase_and_base64() -> None:
    trace_b64 = base64.b64encode(bytes.fromhex(TRACE_HEX)).decode()
    span_b64url = base64.urlsafe_b64encode(bytes.fromhex(SPAN_HEX)).decode().rstrip("=")
    for trace_id, span_id in ((TRACE_HEX.upper(), SPAN_HEX), (trace_b64, span_b64url)):
        (span,) = spans_from_otlp_dict(_request(_span(traceId=trace_id, spanId=span_id))).spans
        assert format_trace_id(span.context.trace_id) == TRACE_HEX
        assert format_span_id(span.context.span_id) == SPAN_HEX


def test_format_ids() -> None:
    assert format_trace_id(1) == "0" * 31 + "1"
    assert format_span_id(0xABC) == "0000000000000abc"
    assert format_trace_id(int(TRACE_HEX, 16)) == TRACE_HEX


def test_span_flags_remote_parent_and_trace_state() -> None:
    span = _span(parentSpanId=PARENT_HEX, flags=0x300, traceState="vendor=abc")
    (decoded,) = spans_from_otlp_dict(_request(span)).spans
    assert decoded.parent is not None and decoded.parent.is_remote
    assert decoded.context.trace_flags.sampled  # exported, so sampled, though the flags lack the bit
    assert decoded.context.trace_state.get("vendor") == "abc"
    assert encode_spans([decoded]).resource_spans[0].scope_spans[0].spans[0].trace_state == "vendor=abc"


# --- JSON lines, log records as events, gzip, sources ------------------------------------------


def _log_line(*records: dict[str, Any]) -> dict[str, Any]:
    return {"resourceLogs": [{"resource": {}, "scopeLogs": [{"scope": {"name": "logs"}, "logRecords": list(records)}]}]}


def test_json_lines_with_log_records_as_events(tmp_path: Path) -> None:
    span = _span(events=[{"name": "own", "timeUnixNano": "1500"}])
    lines = [
        # A log record may come before its span: the Collector writes signals in any order.
        _log_line(
            {
                "timeUnixNano": "1900",
                "traceId": TRACE_HEX,
                "spanId": SPAN_HEX,
                "eventName": semconv.EVENT_CHOICE,
                "body": {"kvlistValue": {"values": [_attr("index", {"intValue": "0"})]}},
                "attributes": [_attr(semconv.GEN_AI_SYSTEM, {"stringValue": "openai"})],
            }
        ),
        _request(span),
        _log_line(
            {
                "observedTimeUnixNano": "1100",
                "traceId": TRACE_HEX,
                "spanId": SPAN_HEX,
                "attributes": [_attr(semconv.EVENT_NAME_ATTR, {"stringValue": semconv.EVENT_USER_MESSAGE})],
                "body": {"stringValue": "hello"},
            },
            {"timeUnixNano": "1200", "traceId": TRACE_HEX, "spanId": SPAN_HEX, "body": {"stringValue": "nameless"}},
            {"timeUnixNano": "1300", "traceId": TRACE_HEX, "spanId": "00000000000000aa", "eventName": "orphan"},
            {"timeUnixNano": "1400", "body": {"stringValue": "an application log"}},
        ),
        {"resourceMetrics": []},
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\n\nthis line is not json\n"
    path = tmp_path / "otel.jsonl"
    path.write_text(text)
    batch = load_otlp(path)

    (decoded,) = batch.spans
    assert [e.name for e in decoded.events] == ["own", semconv.EVENT_USER_MESSAGE, semconv.EVENT_CHOICE]
    assert [e.timestamp for e in decoded.events] == [1500, 1100, 1900]
    user, choice = _attrs(decoded.events[1]), _attrs(decoded.events[2])
    assert user[semconv.EVENT_BODY] == "hello"
    assert json.loads(str(choice[semconv.EVENT_BODY])) == {"index": 0}
    assert choice[semconv.GEN_AI_SYSTEM] == "openai"
    problems = "\n".join(batch.problems)
    assert "line 6: not JSON" in problems
    assert "log record #1 in resourceLogs[0].scopeLogs[0]" in problems and "no eventName" in problems
    assert "00000000000000aa" in problems and "'orphan' skipped" in problems
    assert "1 log record(s) without a spanId ignored" in problems
    assert "1 resourceMetrics request(s) ignored" in problems
    _assert_reexportable(batch.spans)


def test_gzip_and_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = json.dumps(_request(_span())).encode()
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(data))
    assert len(load_otlp(path).spans) == 1
    assert len(load_otlp(str(path)).spans) == 1
    assert len(load_otlp(bytearray(data)).spans) == 1
    assert len(load_otlp(io.BytesIO(data)).spans) == 1
    assert len(load_otlp(b"\xef\xbb\xbf\n  " + data).spans) == 1  # BOM and leading whitespace

    class _Stdin:
        buffer = io.BytesIO(gzip.compress(data))

    monkeypatch.setattr(sys, "stdin", _Stdin())
    assert len(load_otlp("-").spans) == 1
    monkeypatch.setattr(sys, "stdin", type("S", (), {"buffer": io.BytesIO(b"nonsense")})())
    with pytest.raises(OtlpDecodeError, match="<stdin>"):
        load_otlp("-")


def test_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "resourceSpans": [\n    oops\n')
    with pytest.raises(OtlpDecodeError) as info:
        load_otlp(path)
    assert str(path) in str(info.value)
    assert "not JSON (line 3" in str(info.value)
    with pytest.raises(FileNotFoundError):
        load_otlp(tmp_path / "missing.json")


# --- garbage -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty input"),
        (b"  \n\t ", "empty input"),
        (b"not json at all", "not JSON (line 1 column 1"),
        (b"{", "not JSON"),
        (b'{"foo": 1}', "JSON but not OTLP: no resourceSpans/resourceLogs"),
        (b"[1, 2]", "JSON but not OTLP"),
        (b"42", "JSON but not OTLP"),
        (b'"text"', "JSON but not OTLP"),
        (b"null", "JSON but not OTLP"),
        (b'{"resourceSpans": [\xff\xfe]}', "not UTF-8"),
        (b"\xff\xfe\x00\x01garbage\x00", "protobuf decode failed"),
        (b"\x1f\x8bnot really gzip", "gzip decompression failed"),
        (b"[" * 200_000, "not JSON"),
        (b"\n\x05hello", "protobuf decode failed"),
        (b"\n{ not protobuf and not json", "not JSON"),
    ],
)
def test_garbage_raises_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(OtlpDecodeError) as info:
        load_otlp(data)
    assert str(info.value).startswith("<bytes>: ")
    assert message in str(info.value)


def test_spans_from_dict_rejects_non_otlp() -> None:
    with pytest.raises(OtlpDecodeError, match="<dict>: JSON but not OTLP"):
        spans_from_otlp_dict({"data": []})


def test_wrong_types_are_skipped_with_problems() -> None:
    spans: list[Any] = [
        _span(spanId=None),  # missing spanId
        _span(traceId="xyz"),  # invalid traceId
        _span(traceId="0" * 32),  # all-zero traceId
        _span(spanId=5),
        _span(
            spanId="00000000000000b1",
            parentSpanId="not-an-id",
            kind=42,
            startTimeUnixNano="yesterday",
            endTimeUnixNano=-5,
            name=17,
            attributes={"a": "dict instead of list"},
            events=[{"name": "ok", "timeUnixNano": "5", "attributes": [_attr("x", {"intValue": "nope"})]}, 7],
            links=[{"traceId": TRACE_HEX, "spanId": "zz"}, "link"],
            status={"code": "MAYBE", "message": 1},
            flags="lots",
        ),
        _span(
            spanId="00000000000000b2",
            attributes=[
                _attr("good", {"stringValue": "kept"}),
                _attr("bad_type", {"stringValue": 5}),
                _attr("unknown", {"fancyValue": 1}),
                _attr("bool_as_int", {"intValue": True}),
                _attr("huge", {"intValue": str(2**70)}),
                _attr("not_object", "plain string"),
                {"key": 5, "value": {"stringValue": "x"}},
                "entry",
                _attr("bad_array", {"arrayValue": {"values": 3}}),
                _attr("bad_kv", {"kvlistValue": {"values": [{"value": {}}]}}),
            ],
            status=[],
            events=5,
            links={"x": 1},
            parentSpanId="0000000000000000",
        ),
        "a string span",
    ]
    doc = _request(*spans)
    doc["resourceSpans"].append({"resource": 3, "scopeSpans": [{"scope": [], "spans": 5}, 9]})
    doc["resourceSpans"].append(None)
    batch = spans_from_otlp_dict(doc)

    assert [format_span_id(s.context.span_id) for s in batch.spans] == ["00000000000000b1", "00000000000000b2"]
    first, second = batch.spans
    assert first.parent is None and first.kind is SpanKind.INTERNAL and first.name == ""
    assert first.start_time == 0 and first.end_time == 0
    assert first.status.status_code is StatusCode.UNSET
    assert _attrs(first) == {} and [e.name for e in first.events] == ["ok"] and first.links == ()
    assert _attrs(second) == {"good": "kept"}
    assert second.parent is None and second.status.status_code is StatusCode.UNSET
    problems = "\n".join(batch.problems)
    for expected in (
        "span #0 in resourceSpans[0].scopeSpans[0]: missing spanId, skipped",
        "span #1 in resourceSpans[0].scopeSpans[0]: invalid traceId",
        "span #2 in resourceSpans[0].scopeSpans[0]: missing traceId",
        "span #3 in resourceSpans[0].scopeSpans[0]: invalid spanId",
        "span 00000000000000b1: invalid parentSpanId",
        "kept as a root",
        "unknown kind '42'",
        "startTimeUnixNano 'yesterday' is not an integer; read as 0",
        "endTimeUnixNano -5 is out of range; read as 0",
        "name is a number",
        "attributes is an object, not an array",
        "attribute 'x' has an unsupported value",
        "event #1 is a number",
        "link #0 has an invalid id",
        "link #1 is a string",
        "unknown status code 'MAYBE'",
        "attribute 'bad_type' has an unsupported value (stringValue is a number)",
        "attribute 'unknown' has an unsupported value (unknown value field 'fancyValue')",
        "attribute 'bool_as_int'",
        "attribute 'huge' has an unsupported value (intValue 1180591620717411303424 is out of the int64 range)",
        "attribute 'not_object'",
        "attribute entry without a string key",
        "attribute 'bad_array'",
        "attribute 'bad_kv'",
        "status is an array",
        "events is a number",
        "links is an object",
        "span #6 in resourceSpans[0].scopeSpans[0]: is a string",
        "resourceSpans[1].resource is a number",
        "resourceSpans[1].scopeSpans[0].scope is an array",
        "resourceSpans[1].scopeSpans[0].spans is a number",
        "resourceSpans[1].scopeSpans[1] is a number",
        "resourceSpans[2] is null",
    ):
        assert expected in problems, expected
    _assert_reexportable(batch.spans)


def test_top_level_wrong_types_give_problems_not_errors() -> None:
    batch = load_otlp(b'{"resourceSpans": 5, "resourceLogs": {"x": 1}}')
    assert batch.spans == []
    assert any("resourceSpans is a number" in p for p in batch.problems)
    assert any("resourceLogs is an object" in p for p in batch.problems)
    batch = load_otlp(b'[{"resourceSpans": []}, {"nope": 1}, 3]')
    assert batch.problems == [
        "request[1]: JSON but not OTLP: no resourceSpans/resourceLogs, skipped",
        "request[2]: JSON but not OTLP: no resourceSpans/resourceLogs, skipped",
    ]


def test_json_lines_with_bad_lines() -> None:
    good = json.dumps(_request(_span())).encode()
    data = b"\n".join([b"\xc3\x28 not utf-8", good, b"[1]", b'{"other": true}', b"[" * 100_000, good])
    batch = load_otlp(data)
    assert len(batch.spans) == 2
    problems = "\n".join(batch.problems)
    assert "line 1: not JSON (not UTF-8" in problems
    assert "line 3: request[0]: JSON but not OTLP" in problems
    assert "line 4: JSON but not OTLP" in problems
    assert "line 5: not JSON" in problems


def test_deeply_nested_attribute_value() -> None:
    value: dict[str, Any] = {"stringValue": "leaf"}
    for _ in range(3_000):
        value = {"arrayValue": {"values": [value]}}
    doc = _request(_span(attributes=[_attr("deep", value), _attr("ok", {"boolValue": True})]))
    batch = spans_from_otlp_dict(doc)
    assert _attrs(batch.spans[0]) == {"ok": True}
    assert any("'deep' is nested too deeply" in p for p in batch.problems)


def test_problem_list_is_capped() -> None:
    spans = [_span(spanId=None) for _ in range(MAX_PROBLEMS + 5)]
    batch = spans_from_otlp_dict(_request(*spans))
    assert len(batch.problems) == MAX_PROBLEMS + 1
    assert batch.problems[-1] == "... and 5 more problems not listed"


# Random JSON dropped into every place of a request: the decoder must note and skip, never raise.
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
_any_values = st.dictionaries(
    st.sampled_from(["stringValue", "intValue", "doubleValue", "boolValue", "arrayValue", "kvlistValue", "bytesValue"]),
    _json_values,
    max_size=2,
)


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(strategy, _json_values)


def _id(size: int) -> st.SearchStrategy[Any]:
    return st.one_of(st.binary(min_size=size, max_size=size).map(bytes.hex), _json_values)


_attributes = st.lists(
    st.fixed_dictionaries({"key": _maybe(st.text(max_size=8)), "value": _maybe(_any_values)}), max_size=4
)
_events = st.lists(
    _maybe(st.fixed_dictionaries({"name": _json_values, "timeUnixNano": _json_values, "attributes": _json_values})),
    max_size=3,
)
_links = st.lists(
    _maybe(st.fixed_dictionaries({"traceId": _id(16), "spanId": _id(8), "attributes": _json_values})), max_size=3
)
_random_span = st.fixed_dictionaries(
    {},
    optional={
        "traceId": _id(16),
        "spanId": _id(8),
        "parentSpanId": _id(8),
        "name": _maybe(st.text(max_size=10)),
        "kind": _maybe(st.integers(-1, 7)),
        "startTimeUnixNano": _maybe(st.integers(-5, 2**65).map(str)),
        "endTimeUnixNano": _json_values,
        "flags": _json_values,
        "traceState": _json_values,
        "attributes": _maybe(_attributes),
        "events": _maybe(_events),
        "links": _maybe(_links),
        "status": _maybe(st.fixed_dictionaries({"code": _json_values, "message": _json_values})),
        "droppedAttributesCount": _json_values,
    },
)
_random_record = st.fixed_dictionaries(
    {},
    optional={
        "traceId": _id(16),
        "spanId": _id(8),
        "eventName": _json_values,
        "body": _maybe(_any_values),
        "attributes": _json_values,
        "timeUnixNano": _json_values,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spans=_maybe(st.lists(_maybe(_random_span), max_size=4)),
    records=_maybe(st.lists(_maybe(_random_record), max_size=3)),
    resource=_json_values,
    scope=_json_values,
)
def test_random_json_never_raises(spans: Any, records: Any, resource: Any, scope: Any) -> None:
    doc = {
        "resourceSpans": [{"resource": resource, "scopeSpans": [{"scope": scope, "spans": spans}]}],
        "resourceLogs": [{"scopeLogs": [{"logRecords": records}]}],
    }
    batch = load_otlp(json.dumps(doc).encode())
    assert not any("could not be decoded" in p for p in batch.problems), batch.problems
    _assert_reexportable(batch.spans)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_never_raise_anything_else(data: bytes) -> None:
    result = _decode_or_error(data)
    if isinstance(result, OtlpBatch):
        _assert_reexportable(result.spans)


# --- found by the atheris harness (tests/fuzz/fuzz_otlp.py) --------------------------------------


def test_lone_surrogates_become_replacement_characters() -> None:
    # JSON may escape a lone surrogate, and json.loads lets its raw UTF-8 form through too; the
    # OTLP encoder cannot encode one: it dropped such an attribute, and a span name failed the
    # whole re-export.
    span = _span(
        name="tool \\ud800",
        attributes=[
            _attr("k\\udfff", {"stringValue": "v\\ud800"}),
            _attr("list", {"arrayValue": {"values": [{"stringValue": "\\udc00"}]}}),
            _attr("map", {"kvlistValue": {"values": [{"key": "\\ud800", "value": {"stringValue": "x"}}]}}),
            _attr("emoji", {"stringValue": "\\ud83d\\ude00"}),
        ],
        events=[{"name": "e\\ud800", "timeUnixNano": "1500"}],
        status={"code": 2, "message": "boom \\ud800"},
    )
    text = json.dumps(_request(span, resource_attrs=[_attr("service.name", {"stringValue": "s\\udfff"})]))
    escaped = text.replace("\\\\u", "\\u").encode()  # "\\ud800" in the JSON text: a JSON escape
    raw = escaped.replace(b"boom", b"boom \xed\xa0\x80")  # a surrogate's raw UTF-8 bytes
    for data, message in ((escaped, "boom \ufffd"), (raw, "boom \ufffd \ufffd")):
        batch = load_otlp(data)
        assert batch.problems == []
        [decoded] = batch.spans
        assert decoded.name == "tool \ufffd"
        assert _attrs(decoded) == {
            "k\ufffd": "v\ufffd",
            "list": ("\ufffd",),
            "map": '{"\ufffd":"x"}',
            "emoji": "\U0001f600",
        }
        assert decoded.events[0].name == "e\ufffd"
        assert decoded.status.description == message
        assert decoded.resource.attributes["service.name"] == "s\ufffd"
        _assert_reexportable(batch.spans)


def test_dropped_count_beyond_uint32_is_a_problem() -> None:
    # OTLP dropped counts are uint32: a larger one made the OTLP encoder fail the whole re-export.
    batch = spans_from_otlp_dict(
        _request(_span(droppedAttributesCount=str(2**32), droppedEventsCount=2**32 - 1, droppedLinksCount="7"))
    )
    [span] = batch.spans
    assert (span.dropped_attributes, span.dropped_events, span.dropped_links) == (0, 2**32 - 1, 7)
    assert batch.problems == [f"span {SPAN_HEX}: dropped count {2**32} is out of the uint32 range; read as 0"]
    _assert_reexportable(batch.spans)


def test_double_value_beyond_double_range_is_skipped() -> None:
    # A JSON number has no size limit; float() of a huge one raised OverflowError, which lost the span.
    attributes = [_attr("big", {"doubleValue": 10**400}), _attr("ok", {"doubleValue": 2})]
    batch = load_otlp(json.dumps(_request(_span(attributes=attributes))).encode())
    [span] = batch.spans
    assert _attrs(span) == {"ok": 2.0}
    assert batch.problems == [
        f"span {SPAN_HEX}: attribute 'big' has an unsupported value "
        "(doubleValue is a number out of the double range), skipped"
    ]


def test_protobuf_strings_that_are_not_utf8_are_repaired_not_fatal() -> None:
    """protobuf's parser refuses a whole request for one non-UTF-8 string (the Collector does not):
    the request is re-read with the bad strings as U+FFFD, and the repair is a problem."""
    from otel_toolscore.ingest import load_otlp, parse_export_request

    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[
        Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="NAME@@", attributes=[
            KeyValue(key="tool", value=AnyValue(string_value="VALUE@@")),
            KeyValue(key="nested", value=AnyValue(kvlist_value=KeyValueList(values=[
                KeyValue(key="KEY@@", value=AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="DEEP@@")]))),
            ]))),
        ]),
        Span(trace_id=b"\x01" * 16, span_id=b"\x03" * 8, name="clean"),
    ])])])
    data = request.SerializeToString()
    for word in (b"NAME", b"VALUE", b"KEY", b"DEEP"):
        data = data.replace(word + b"@@", word + b"\xff\xfe")  # same length: no framing changes
    with pytest.raises(Exception):  # noqa: B017 - what protobuf itself does with it
        ExportTraceServiceRequest().ParseFromString(data)
    problems: list[str] = []
    message = parse_export_request(data, problems)
    assert problems == ["4 string field(s) not valid UTF-8, repaired with U+FFFD"]
    batch = load_otlp(data)
    names = sorted(span.name for span in batch.spans)
    assert names == ["NAME\ufffd\ufffd", "clean"]
    bad = next(span for span in batch.spans if span.name.startswith("NAME"))
    assert bad.attributes["tool"] == "VALUE\ufffd\ufffd"
    assert any("UTF-8" in problem for problem in batch.problems)
    assert message.resource_spans[0].scope_spans[0].spans[0].name == "NAME\ufffd\ufffd"
    # Data that is not protobuf at all still fails as before.
    with pytest.raises(Exception):  # noqa: B017
        parse_export_request(b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")
