"""The originating app on the sidecar's evaluation events (issue 29): several apps behind one
``serve`` are told apart by ``toolscore.app.service.name`` / ``.namespace``, with at most
``serve_max_app_services`` distinct names (the rest ``_other``). Real SDK apps, OTLP/HTTP on
loopback."""

from __future__ import annotations

import http.client
from collections.abc import Iterable
from urllib.parse import urlsplit

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_toolscore.runtime.serve import ToolScoreServer
from tests.support.otlp_sink import OtlpSink
from tests.support.spans import pb_body, weather_run

pytestmark = pytest.mark.usefixtures("clean_otel_env")


def _app_run(service: str, namespace: str | None) -> list:
    memory = InMemorySpanExporter()
    attributes = {"service.name": service, **({"service.namespace": namespace} if namespace else {})}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    weather_run(provider.get_tracer("app"))
    return list(memory.get_finished_spans())


def _post_each(server: ToolScoreServer, runs: Iterable[list]) -> None:
    """Start the server and send each app's run as its own OTLP/HTTP request."""
    endpoint = server.start().http_endpoint
    assert endpoint is not None
    for spans in runs:
        conn = http.client.HTTPConnection(urlsplit(endpoint).netloc, timeout=10)
        conn.request("POST", "/v1/traces", body=pb_body(spans), headers={"Content-Type": "application/x-protobuf"})
        assert conn.getresponse().status == 200
        conn.close()


def test_each_event_names_the_app_it_came_from_up_to_the_cap(clean_otel_env: pytest.MonkeyPatch) -> None:
    clean_otel_env.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    clean_otel_env.setenv("OTEL_BLRP_SCHEDULE_DELAY", "100")
    upstream = OtlpSink()
    server = ToolScoreServer(upstream.url, http_port=0, grpc_port=None, decision_wait=0.2, metrics=False,
                             serve_max_app_services=2)
    apps = [("checkout", "shop"), ("search", None), ("billing", "shop")]  # the third is over the cap
    runs = {service: _app_run(service, namespace) for service, namespace in apps}
    try:
        _post_each(server, runs.values())
        assert server.stop(30)
    finally:
        server.stop(5)
        upstream.stop()
    seen: dict[int, set] = {}
    for record in upstream.log_records():
        if record.event_name != "gen_ai.evaluation.result":
            continue
        attributes = {a.key: a.value.string_value for a in record.attributes}
        seen.setdefault(int.from_bytes(record.trace_id, "big"), set()).add(
            (attributes.get("toolscore.app.service.name"), attributes.get("toolscore.app.service.namespace")))
    trace_of = {service: spans[0].context.trace_id for service, spans in runs.items()}
    assert seen[trace_of["checkout"]] == {("checkout", "shop")}
    assert seen[trace_of["search"]] == {("search", None)}
    assert seen[trace_of["billing"]] == {("_other", None)}  # a third distinct app: over the cap of 2


def test_each_score_metric_names_the_app_it_came_from_up_to_the_cap(clean_otel_env: pytest.MonkeyPatch) -> None:
    """The score histogram, the evaluations counter and the issues counter carry the app's
    service too (what a dashboard splits by), capped as the events are."""
    clean_otel_env.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    clean_otel_env.setenv("OTEL_BLRP_SCHEDULE_DELAY", "100")
    upstream = OtlpSink()
    server = ToolScoreServer(upstream.url, http_port=0, grpc_port=None, decision_wait=0.2, events=False,
                             serve_max_app_services=2)
    apps = [("checkout", "shop"), ("search", None), ("billing", "shop")]
    runs = {service: _app_run(service, namespace) for service, namespace in apps}
    try:
        _post_each(server, runs.values())
        assert server.stop(30)  # a stop exports the metrics collected so far
    finally:
        server.stop(5)
        upstream.stop()
    apps_by_metric: dict[str, set] = {}
    for message in upstream.messages("metrics"):
        for rm in message.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    points = list(metric.histogram.data_points) + list(metric.sum.data_points)
                    for point in points:
                        attributes = {a.key: a.value.string_value for a in point.attributes}
                        apps_by_metric.setdefault(metric.name, set()).add(
                            (attributes.get("toolscore.app.service.name"),
                             attributes.get("toolscore.app.service.namespace")))
    expected = {("checkout", "shop"), ("search", None), ("_other", None)}
    assert apps_by_metric["gen_ai.evaluation.score"] == expected
    assert apps_by_metric["toolscore.evaluations"] >= expected
