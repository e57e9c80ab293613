"""``serve`` never acknowledges a span it then drops: while the upstream fails it accepts as long
as its buffer has room, pushes back (HTTP 503 + Retry-After, gRPC UNAVAILABLE) once it is full,
keeps what it accepted and retries it until it is delivered; what a stop past its deadline cannot deliver is counted. Real HTTP and gRPC on
loopback, the SDK's own OTLP exporter towards an upstream that answers 503."""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext

from otel_toolscore.runtime.serve import ToolScoreServer
from tests.support.otlp_sink import OtlpSink


class FlakyUpstream(OtlpSink):
    """An OTLP/HTTP trace receiver answering 503 until ``recover()``; keeps the span ids of what it
    accepted."""

    def __init__(self) -> None:
        self.recovered = threading.Event()
        super().__init__(answer=lambda request: 200 if self.recovered.is_set() else 503)

    def recover(self) -> None:
        self.recovered.set()

    @property
    def delivered(self) -> Counter[int]:
        """How many times each span id was accepted."""
        return Counter(span_id for _, span_id in self.span_ids())


def _batch(first_id: int, n: int) -> tuple[bytes, list[int]]:
    """n root spans (one trace each), OTLP protobuf."""
    spans = [ReadableSpan(name="GET /", context=SpanContext(0xABC000 + i, i, False), parent=None,
                          attributes={"http.method": "GET"}, start_time=1, end_time=2)
             for i in range(first_id, first_id + n)]
    return encode_spans(spans).SerializeToString(), list(range(first_id, first_id + n))


def _post(endpoint: str, body: bytes) -> tuple[int, str | None]:
    host = endpoint.removeprefix("http://")
    conn = http.client.HTTPConnection(host, timeout=30)
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"})
        resp = conn.getresponse()
        resp.read()
        return resp.status, resp.getheader("Retry-After")
    finally:
        conn.close()


def _serve(upstream: FlakyUpstream, grpc_port: int | None = None, max_queued_spans: int = 20_000) -> ToolScoreServer:
    # The SDK exporter as serve builds it, with a short timeout so that its own retries give
    # up within a second and serve's delivery takes over.
    exporter = OTLPSpanExporter(endpoint=f"{upstream.url}/v1/traces", timeout=1)
    return ToolScoreServer(upstream.url, upstream_protocol="http/protobuf", http_port=0, grpc_port=grpc_port,
                           span_exporter=exporter, decision_wait=0.2, metrics=False, events=False,
                           max_queued_spans=max_queued_spans)


@pytest.fixture(autouse=True)
def _quick_batches(clean_otel_env: pytest.MonkeyPatch) -> None:
    clean_otel_env.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # export every 100 ms, inside the failure


def test_spans_accepted_while_the_upstream_fails_are_all_delivered_and_pushed_back_only_when_full() -> None:
    upstream = FlakyUpstream()
    server = _serve(upstream, grpc_port=0, max_queued_spans=300)
    accepted: list[int] = []
    accepted_at_first_pushback: int | None = None
    pushed_back: list[str | None] = []
    grpc_codes: list[Any] = []
    try:
        addresses = server.start()
        deadline = time.monotonic() + 60
        for request in range(20):  # 1,000 spans, 50 a request, as a client with retries sends them
            body, ids = _batch(1 + 50 * request, 50)
            if request == 1:  # the upstream has refused, and serve knows it is failing
                while upstream.refused < 2 or not server.upstream_failing():
                    assert time.monotonic() < deadline, "the upstream never refused"
                    time.sleep(0.05)
            while True:
                assert time.monotonic() < deadline, "never accepted"
                status, retry_after = _post(addresses.http_endpoint, body)
                if status == 200:
                    accepted.extend(ids)
                    break
                assert status == 503, status
                pushed_back.append(retry_after)
                if len(pushed_back) == 1:  # the buffer is full: the gRPC receiver pushes back too
                    accepted_at_first_pushback = len(accepted)
                    channel = grpc.insecure_channel(addresses.grpc_endpoint.removeprefix("http://"))
                    call = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
                    try:
                        call(_batch(100_000, 5)[0], timeout=10)
                        grpc_codes.append("OK")
                    except grpc.RpcError as exc:
                        grpc_codes.append(exc.code())
                    channel.close()
                    upstream.recover()
                time.sleep(0.3)
        assert server.stop(30)
    finally:
        server.stop(5)
        upstream.stop()
    assert upstream.refused >= 1  # the upstream did fail while spans were coming
    # accepted while there was room (300 spans waiting), pushed back only then
    assert accepted_at_first_pushback == 300
    assert pushed_back and all(r is not None and int(r) >= 1 for r in pushed_back)
    assert grpc_codes[:1] == [grpc.StatusCode.UNAVAILABLE]
    assert len(accepted) == 1000
    # every span answered 200 reached the upstream, once
    delivered = upstream.delivered
    assert {i: delivered[i] for i in accepted} == {i: 1 for i in accepted}
    assert server.stats["spans_undelivered"] == 0


def test_a_stop_while_the_upstream_still_fails_counts_what_it_could_not_deliver() -> None:
    upstream = FlakyUpstream()
    server = _serve(upstream)
    try:
        addresses = server.start()
        body, ids = _batch(1, 50)
        assert _post(addresses.http_endpoint, body)[0] == 200
        # the stop's deadline gives the retrying delivery up (a timer, not the export's own end):
        # what was accepted is counted, not silently lost, and the stop says it failed
        assert not server.stop(3)
    finally:
        server.stop(5)
        upstream.stop()
    assert not upstream.delivered
    assert upstream.refused >= 1
    assert server.stats["spans_undelivered"] == 50
