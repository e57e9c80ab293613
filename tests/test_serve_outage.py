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
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_toolscore.runtime.serve import ServerAddresses, ToolScoreServer
from tests.support.otlp_sink import OtlpSink, Received
from tests.support.spans import weather_run

#: s; the sender's export timeout: it drops a batch not accepted within it (the SDK's default is 10)
SENDER_TIMEOUT_S = 2
SPANS = 300


class Outage:
    """The upstream's answers: 503 until ``recover()``; ``refused`` counts them by signal."""

    def __init__(self) -> None:
        self.recovered = threading.Event()
        self.refused: Counter[str] = Counter()

    def __call__(self, request: Received) -> int:
        if self.recovered.is_set():
            return 200
        self.refused[request.signal] += 1
        return 503

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


def test_evaluation_records_and_metrics_made_during_an_outage_are_all_delivered_after_it(
    clean_otel_env: pytest.MonkeyPatch,
) -> None:
    """serve's own outputs go through the same retrying delivery as spans: the evaluation records
    of runs scored while the upstream refuses everything arrive once each after it recovers."""
    for variable, value in (("OTEL_BSP_SCHEDULE_DELAY", "100"), ("OTEL_BLRP_SCHEDULE_DELAY", "100"),
                            ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
                            # serve's own exporters give an attempt up after 1 s (the SDK's default
                            # is 10): without a retry around them, their batch would be dropped
                            ("OTEL_EXPORTER_OTLP_TIMEOUT", "1")):
        clean_otel_env.setenv(variable, value)
    outage = Outage()
    upstream = OtlpSink(answer=outage)
    server = ToolScoreServer(upstream.url, http_port=0, grpc_port=None, decision_wait=0.2)
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-app"}))
    kept = InMemorySpanExporter()
    runs = 6
    try:
        addresses = server.start()
        provider.add_span_processor(SimpleSpanProcessor(kept))
        provider.add_span_processor(BatchSpanProcessor(_sender("http", addresses), schedule_delay_millis=100))
        tracer = provider.get_tracer("weather")
        for _ in range(runs):
            weather_run(tracer)
        assert provider.force_flush(30_000)
        # the runs are scored and their records and metrics refused, more than once
        _wait_for(lambda: outage.refused["logs"] >= 2 and outage.refused["metrics"] >= 2)
        outage.recover()
        assert server.stop(60)
    finally:
        provider.shutdown()
        server.stop(5)
        upstream.stop()
    run_traces = {s.context.trace_id for s in kept.get_finished_spans() if s.parent is None}
    assert len(run_traces) == runs
    events = [r for r in upstream.log_records() if r.event_name == "gen_ai.evaluation.result"]
    per_score = Counter((int.from_bytes(r.trace_id, "big"), a.value.string_value)
                        for r in events for a in r.attributes if a.key == "gen_ai.evaluation.name")
    assert {trace for trace, _ in per_score} == run_traces  # every run's records arrived
    assert set(per_score.values()) == {1}  # once each
    assert server.stats["log_records_delivered"] == server.stats["log_records_emitted"] == len(events)
    assert not server.undelivered
    assert "gen_ai.evaluation.score" in upstream.metric_names()


def test_a_stop_during_an_outage_counts_what_it_leaves_by_signal_and_reason(
    clean_otel_env: pytest.MonkeyPatch,
) -> None:
    for variable, value in (("OTEL_BSP_SCHEDULE_DELAY", "100"), ("OTEL_BLRP_SCHEDULE_DELAY", "100"),
                            ("OTEL_METRIC_EXPORT_INTERVAL", "200"), ("OTEL_EXPORTER_OTLP_TIMEOUT", "1")):
        clean_otel_env.setenv(variable, value)
    outage = Outage()
    upstream = OtlpSink(answer=outage)
    server = ToolScoreServer(upstream.url, http_port=0, grpc_port=None, decision_wait=0.2)
    provider = TracerProvider()
    try:
        addresses = server.start()
        provider.add_span_processor(BatchSpanProcessor(_sender("http", addresses), schedule_delay_millis=100))
        weather_run(provider.get_tracer("weather"))
        assert provider.force_flush(30_000)
        _wait_for(lambda: outage.refused["logs"] >= 1 and outage.refused["metrics"] >= 1)
        assert not server.stop(3)  # the upstream never recovers: the stop says it failed
    finally:
        provider.shutdown()
        server.stop(5)
        upstream.stop()
    undelivered = {signal for signal, _ in server.undelivered}
    assert {"spans", "log_records", "metric_points"} <= undelivered
    assert server.undelivered["spans", "stop_deadline"] == server.stats["spans_undelivered"] > 0
    assert server.stats["log_records_undelivered"] == server.stats["log_records_emitted"] > 0
    assert server.undelivered_total() == sum(server.undelivered.values())
