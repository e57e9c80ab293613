"""The sidecar's answers to bad, oversized, unauthenticated and untimely requests, over HTTP and
gRPC; after each of them it still serves a good request."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import status_pb2
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import (
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_toolscore.config import ConfigError
from otel_toolscore.runtime.serve import ToolScoreServer, Upstream
from otel_toolscore.runtime.serve._http import inflate
from tests.support import paths
from tests.support.otlp_sink import GRPC_LOGS, GRPC_TRACES, PB
from tests.support.spans import pb_body, plain_spans

FIXTURE = min(paths.FIXTURES.glob("*/correct_single.json"))
TOKEN = "s3cret"
pytestmark = pytest.mark.usefixtures("clean_otel_env")


class Blocking(SpanExporter):
    """An upstream that hangs until released (the export queue backs up)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.memory = InMemorySpanExporter()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(30)
        return self.memory.export(spans)

    def shutdown(self) -> None:
        self.release.set()


@pytest.fixture
def server() -> Iterator[ToolScoreServer]:
    srv = ToolScoreServer(grpc_port=0, http_port=0, span_exporter=InMemorySpanExporter(), metrics=False,
                          events=False, auth_token=TOKEN, max_request_bytes=1 << 20, decision_wait=0.2)
    srv.start()
    yield srv
    srv.stop(10)


def post(srv: ToolScoreServer, body: bytes, content_type: str | None = PB, path: str = "/v1/traces",
         token: str | None = TOKEN, method: str = "POST", **headers: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.addresses.http_port, timeout=10)
    hdrs = {k.replace("_", "-"): v for k, v in headers.items()}
    if content_type:
        hdrs["Content-Type"] = content_type
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=body, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def status_message(body: bytes) -> status_pb2.Status:
    status = status_pb2.Status()
    status.ParseFromString(body)
    return status


def assert_still_serving(srv: ToolScoreServer) -> None:
    status, _, body = post(srv, gzip.compress(pb_body(plain_spans(2))), Content_Encoding="gzip")
    assert status == 200 and body == b""


@pytest.mark.parametrize(
    ("kwargs", "status", "needle"),
    [
        ({"body": b"\xff\xfe\x00garbage\x01"}, 400, "not an OTLP protobuf trace request"),
        ({"body": b"\x62\x03abc"}, 400, "no resourceSpans"),  # parses, but only unknown fields
        ({"body": b'{"hello": "world"}', "content_type": "application/json"}, 400, "no resourceSpans"),
        ({"body": b"[1, 2]", "content_type": "application/json"}, 400, "not an object"),
        ({"body": b"{not json", "content_type": "application/json"}, 400, "not JSON"),
        ({"body": b"{}", "content_type": "text/plain"}, 415, "Content-Type"),
        ({"body": b"{}", "content_type": None}, 415, "Content-Type"),
        ({"body": b"x", "Content_Encoding": "br"}, 415, "Content-Encoding"),
        ({"body": gzip.compress(b"x" * 100)[:-12], "Content_Encoding": "gzip"}, 400, "truncated"),
        ({"body": b"\x1f\x8bnot gzip at all", "Content_Encoding": "gzip"}, 400, "decompress"),
        ({"body": b"x" * (3 << 19)}, 413, "limit"),  # 1.5 MiB > 1 MiB
        ({"body": gzip.compress(b"\0" * (64 << 20)), "Content_Encoding": "gzip"}, 413, "decompressed"),
        ({"body": b"{}", "token": None}, 401, "bearer token"),
        ({"body": b"{}", "token": "wrong"}, 401, "bearer token"),
        ({"body": b"{}", "path": "/v1/other"}, 404, "no such path"),
        ({"body": b"", "method": "GET"}, 405, "use POST"),
        ({"body": b"{}", "path": "/v1/logs"}, 404, "no such path"),  # nothing to forward to
    ],
    ids=["garbage", "unknown-fields", "json-not-otlp", "json-array", "not-json", "text-plain", "no-type",
         "brotli", "truncated-gzip", "bad-gzip", "oversized", "gzip-bomb", "no-token", "wrong-token",
         "other-path", "get", "logs-without-upstream"],
)
def test_http_bad_requests_get_their_status_and_the_server_keeps_serving(
    server: ToolScoreServer, kwargs: dict[str, Any], status: int, needle: str
) -> None:
    got, headers, body = post(server, **kwargs)
    assert got == status
    ctype = headers["content-type"]
    text = json.loads(body)["message"] if ctype == "application/json" else status_message(body).message
    assert needle in text
    if status == 401:
        assert headers["www-authenticate"].startswith("Bearer")
    if status == 405:
        assert headers["allow"] == "POST"
    assert_still_serving(server)


def test_http_partial_success_counts_undecodable_spans(server: ToolScoreServer) -> None:
    request = encode_spans(plain_spans(3))
    request.resource_spans[0].scope_spans[0].spans[1].trace_id = b"\x01\x02\x03"  # not 16 bytes
    status, headers, body = post(server, request.SerializeToString())
    assert status == 200 and headers["content-type"] == PB
    response = ExportTraceServiceResponse()
    response.ParseFromString(body)
    assert response.partial_success.rejected_spans == 1
    assert "1 of 3 spans could not be decoded" in response.partial_success.error_message
    assert "invalid id" in response.partial_success.error_message
    assert server.stats["spans"] == 2 and server.stats["spans_rejected"] == 1


def test_http_json_in_json_out_and_partial_success(server: ToolScoreServer) -> None:
    doc = json.loads(FIXTURE.read_text())
    status, headers, body = post(server, json.dumps(doc).encode(), "application/json; charset=utf-8")
    assert status == 200 and headers["content-type"] == "application/json" and json.loads(body) == {}
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].append({"name": "broken", "spanId": "zz", "traceId": "x"})
    status, _, body = post(server, json.dumps(doc).encode(), "application/json")
    partial = json.loads(body)["partialSuccess"]
    assert status == 200 and int(partial["rejectedSpans"]) == 1 and partial["errorMessage"]
    status, _, body = post(server, b"{}", "application/json")  # an empty request is a valid one
    assert status == 200


def test_http_empty_chunked_and_keep_alive(server: ToolScoreServer) -> None:
    assert post(server, b"")[0] == 200
    conn = http.client.HTTPConnection("127.0.0.1", server.addresses.http_port, timeout=10)
    body = pb_body(plain_spans(3))
    headers = {"Content-Type": PB, "Authorization": f"Bearer {TOKEN}"}
    conn.request("POST", "/v1/traces", body=iter([body[:10], body[10:]]), headers=headers, encode_chunked=True)
    assert conn.getresponse().read() == b""
    # same connection, bad request whose body was read: the connection stays usable
    conn.request("POST", "/v1/traces", body=b"\xff\xff", headers=headers)
    resp = conn.getresponse()
    assert resp.status == 400 and resp.getheader("Connection") != "close"
    resp.read()
    conn.request("POST", "/v1/traces", body=body, headers=headers)
    assert conn.getresponse().status == 200
    conn.close()


def test_http_concurrency_limit() -> None:
    # The request in flight is a logs request forwarded to an upstream that never answers (a
    # body still arriving takes no slot: see test_serve_limits.py).
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(8)
    srv = ToolScoreServer(f"http://127.0.0.1:{hole.getsockname()[1]}", grpc_port=None, http_port=0,
                          span_exporter=InMemorySpanExporter(), metrics=False, events=False, max_concurrent_requests=1)
    srv.start()
    try:
        stalled = threading.Thread(target=post, args=(srv, b"{}", "application/json"),
                                   kwargs={"path": "/v1/logs", "token": None})
        stalled.start()
        deadline = time.monotonic() + 5
        while srv._inflight == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        status, headers, body = post(srv, pb_body(plain_spans(2)), token=None)
        assert status == 503 and headers["retry-after"] == "1"
        assert "too many concurrent requests" in status_message(body).message
        hole.close()  # resets the forwarded request: its slot is freed
        stalled.join(15)
        deadline = time.monotonic() + 5
        while srv._inflight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert post(srv, pb_body(plain_spans(2)), token=None)[0] == 200
    finally:
        srv.stop(5)


def test_backpressure_503_and_unavailable_when_the_upstream_is_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
    upstream = Blocking()
    srv = ToolScoreServer(grpc_port=0, http_port=0, span_exporter=upstream, metrics=False, events=False,
                          max_queued_spans=10)
    srv.start()
    channel = grpc.insecure_channel(srv.addresses.grpc_endpoint)
    export = channel.unary_unary(GRPC_TRACES)
    try:
        assert post(srv, pb_body(plain_spans(8)), token=None)[0] == 200
        status, headers, body = post(srv, pb_body(plain_spans(8)), token=None)
        assert status == 503 and headers["retry-after"] == "1"
        assert "waiting for the upstream" in status_message(body).message
        with pytest.raises(grpc.RpcError) as err:
            export(pb_body(plain_spans(8)), timeout=10)
        assert err.value.code() is grpc.StatusCode.UNAVAILABLE
        retry = RetryInfo()
        retry.ParseFromString(dict(err.value.trailing_metadata())["google.rpc.retryinfo-bin"])
        assert retry.retry_delay.seconds == 1
        # more spans than can ever be queued: not retryable
        status, _, _ = post(srv, pb_body(plain_spans(11)), token=None)
        assert status == 413
        upstream.release.set()
        deadline = time.monotonic() + 10
        while srv._backlog.queued() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert post(srv, pb_body(plain_spans(8)), token=None)[0] == 200
    finally:
        upstream.release.set()
        channel.close()
        srv.stop(10)
    assert len(upstream.memory.get_finished_spans()) == 16  # exactly the accepted ones


def test_grpc_errors(server: ToolScoreServer) -> None:
    channel = grpc.insecure_channel(server.addresses.grpc_endpoint)
    export = channel.unary_unary(GRPC_TRACES)
    auth = (("authorization", f"Bearer {TOKEN}"),)

    def code_of(body: bytes, metadata: Any = auth, **kw: Any) -> grpc.StatusCode:
        with pytest.raises(grpc.RpcError) as err:
            export(body, metadata=metadata, timeout=10, **kw)
        return err.value.code()

    try:
        assert code_of(b"\xff\xfe\x00garbage") is grpc.StatusCode.INVALID_ARGUMENT
        assert code_of(pb_body(plain_spans(2)), metadata=None) is grpc.StatusCode.UNAUTHENTICATED
        assert code_of(pb_body(plain_spans(2)), metadata=(("authorization", "Bearer nope"),)) \
            is grpc.StatusCode.UNAUTHENTICATED
        assert code_of(b"\0" * (3 << 19)) is grpc.StatusCode.RESOURCE_EXHAUSTED
        bomb = pb_body(plain_spans(1)) + b"\x62" + b"\x80\x80\x80\x02" + b"\0" * (4 << 20)  # 4 MiB unknown field
        assert code_of(bomb, compression=grpc.Compression.Gzip) is grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(GRPC_LOGS)(b"", metadata=auth, timeout=10)
        assert err.value.code() is grpc.StatusCode.UNIMPLEMENTED  # no upstream to forward logs to
        # partial success, then plain success
        request = encode_spans(plain_spans(3))
        request.resource_spans[0].scope_spans[0].spans[0].span_id = b""
        response = ExportTraceServiceResponse()
        response.ParseFromString(export(request.SerializeToString(), metadata=auth, timeout=10))
        assert response.partial_success.rejected_spans == 1
        assert "missing spanId" in response.partial_success.error_message
        assert export(pb_body(plain_spans(2)), metadata=auth, timeout=10,
                      compression=grpc.Compression.Gzip) == b""
    finally:
        channel.close()


def test_stop_forwards_held_spans_scored_and_refuses_new_requests() -> None:
    memory = InMemorySpanExporter()
    srv = ToolScoreServer(grpc_port=0, http_port=0, span_exporter=memory, metrics=False, events=False,
                          decision_wait=30)
    srv.start()
    status, _, _ = post(srv, FIXTURE.read_bytes(), "application/json", token=None)
    assert status == 200
    time.sleep(0.2)
    assert not [s for s in memory.get_finished_spans() if s.name.startswith("invoke_agent")]  # held
    assert srv.stop(10)
    out = memory.get_finished_spans()
    sent = {(s.context.trace_id, s.context.span_id) for s in json_spans(FIXTURE)}
    app = [s for s in out if (s.context.trace_id, s.context.span_id) in sent]
    assert len(app) == len(sent) == len({(s.context.trace_id, s.context.span_id) for s in app})
    assert any("toolscore.tool_call_validation.label" in s.attributes for s in app)
    with pytest.raises(OSError):
        post(srv, b"", token=None)
    assert srv.stop(1)  # idempotent


def json_spans(path: Path) -> list[ReadableSpan]:
    from otel_toolscore.ingest import read_otlp_json

    return read_otlp_json(path)


def test_hold_timeout_defaults_to_decision_wait_plus_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    def make(**kw: Any) -> ToolScoreServer:
        return ToolScoreServer(span_exporter=InMemorySpanExporter(), metrics=False, events=False, **kw)

    assert make(decision_wait=0.3).settings.hold_timeout == pytest.approx(5.3)
    assert make().settings.hold_timeout == pytest.approx(7.0)
    assert make(decision_wait=0.3, hold_timeout=1).settings.hold_timeout == 1
    monkeypatch.setenv("OTEL_TOOLSCORE_HOLD_TIMEOUT", "4")
    assert make(decision_wait=0.3).settings.hold_timeout == 4  # set in the environment: kept
    # the app's bound, from the environment both share: counted from the end of the quiet wait
    assert make(decision_wait=5).settings.hold_timeout == pytest.approx(9)
    with pytest.raises(ConfigError, match="must exceed decision_wait"):
        make(decision_wait=5, hold_timeout=4)  # the sidecar's own argument: its whole hold
    with pytest.raises(ConfigError, match="at least one receiver"):
        make(grpc_port=None, http_port=None)


def test_upstream_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    assert Upstream.resolve(None) is None
    up = Upstream.resolve("collector:4318/v1/traces")
    assert up.url == "http://collector:4318" and up.signal_url("logs") == "http://collector:4318/v1/logs"
    assert Upstream.resolve("https://x.example/otlp/", "grpc").secure
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=abc")
    up = Upstream.resolve(None)
    assert (up.url, up.protocol, dict(up.headers)) == ("http://env:4317", "grpc", {"api-key": "abc"})
    with pytest.raises(ConfigError):
        Upstream.resolve("ftp://x")


def test_inflate_bounds() -> None:
    data = b"abc" * 1000
    assert inflate(gzip.compress(data), "gzip", len(data)) == data
    assert inflate(gzip.compress(data[:10]) + gzip.compress(data[10:]), "gzip", len(data)) == data  # 2 members
    import zlib

    assert inflate(zlib.compress(data), "deflate", len(data)) == data
    raw = zlib.compressobj(wbits=-15)
    assert inflate(raw.compress(data) + raw.flush(), "deflate", len(data)) == data
    with pytest.raises(Exception, match="limit"):
        inflate(gzip.compress(data), "gzip", len(data) - 1)
