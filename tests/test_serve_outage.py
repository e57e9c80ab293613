"""``serve`` through an upstream outage (issue 29): it accepts while its buffer has room, so a
stock OTel SDK sender, whose exporter gives up on a batch after its own timeout, loses nothing.
The sender is the SDK's own OTLP exporter (http/protobuf and gRPC) on a real TracerProvider; the
upstream is a loopback receiver that answers 503 until the test lets it recover, and the outage
lasts longer than the sender's export timeout."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_toolscore.runtime.serve import ServerAddresses, ToolScoreServer
from tests.support.otlp_sink import OtlpSink, Received

#: s; the sender's export timeout: it drops a batch not accepted within it (the SDK's default is 10)
SENDER_TIMEOUT_S = 2
SPANS = 300


class Outage:
    """The upstream's answers: 503 until ``recover()``."""

    def __init__(self) -> None:
        self.recovered = threading.Event()

    def __call__(self, request: Received) -> int:
        return 200 if self.recovered.is_set() else 503

    def recover(self) -> None:
        self.recovered.set()


def _wait_for(condition: Any, limit_s: float = 30.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.05)


def _sender(transport: str, addresses: ServerAddresses) -> Any:
    if transport == "http":
        return HttpSpanExporter(endpoint=f"{addresses.http_endpoint}/v1/traces", timeout=SENDER_TIMEOUT_S)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

    return GrpcSpanExporter(endpoint=addresses.grpc_endpoint, insecure=True, timeout=SENDER_TIMEOUT_S)


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_a_stock_sdk_sender_loses_nothing_through_an_upstream_outage(
    transport: str, clean_otel_env: pytest.MonkeyPatch
) -> None:
    clean_otel_env.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # serve exports inside the outage
    outage = Outage()
    upstream = OtlpSink(answer=outage)
    # serve's exporter as it builds it, with a short timeout so that its own retries end quickly
    # and serve's delivery takes over
    server = ToolScoreServer(upstream.url, http_port=0, grpc_port=0, decision_wait=0.2, metrics=False, events=False,
                             span_exporter=HttpSpanExporter(endpoint=f"{upstream.url}/v1/traces", timeout=1))
    provider = TracerProvider(resource=Resource.create({"service.name": "outage-app"}))
    sent: list[tuple[int, int]] = []
    try:
        addresses = server.start()
        provider.add_span_processor(BatchSpanProcessor(_sender(transport, addresses), schedule_delay_millis=100))
        tracer = provider.get_tracer("app")

        def send(n: int) -> None:
            for i in range(n):
                with tracer.start_as_current_span("GET /orders") as span:
                    context = span.get_span_context()
                    sent.append((context.trace_id, context.span_id))
                if i % 50 == 49:
                    time.sleep(0.2)  # a stream, not one batch

        send(50)
        _wait_for(lambda: upstream.refused >= 2)  # the upstream is failing, serve knows it
        send(SPANS - 50)
        assert provider.force_flush(60_000)
        # the outage outlasts the sender's own retries: it would have dropped what serve refused
        time.sleep(SENDER_TIMEOUT_S + 1)
        refused_during_outage = upstream.refused
        outage.recover()
        provider.shutdown()
        assert server.stop(60)
    finally:
        provider.shutdown()
        server.stop(5)
        upstream.stop()
    assert refused_during_outage >= 2
    assert server.stats["spans"] == SPANS
    delivered = Counter(upstream.span_ids())
    assert {k: delivered[k] for k in sent} == {k: 1 for k in sent}  # 0 lost, 0 duplicated
    assert server.stats["throttled"] == 0  # never pushed back: the buffer had room
    assert server.stats["spans_undelivered"] == 0
