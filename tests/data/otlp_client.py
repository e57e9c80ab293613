"""An agent in another process: sends traces, logs and metrics to an OTLP endpoint with the SDK.

Usage: otlp_client.py grpc|http ENDPOINT FILE...  (gRPC: host:port; HTTP: base URL)
Each trace file is exported with the SDK's own OTLP exporter in two requests (children first,
then the roots), then one live agent run goes through TracerProvider + BatchSpanProcessor, then
one log record and one metric. Prints {"sent": [[trace_id, span_id], ...]} (hex) as JSON.
"""

import json
import sys

from opentelemetry._logs import LogRecord
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_toolscore.ingest import read_otlp_json

protocol, endpoint, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
if protocol == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
        OTLPMetricExporter,
    )
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    span_exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    log_exporter = OTLPLogExporter(endpoint=endpoint, insecure=True)
    metric_exporter = OTLPMetricExporter(endpoint=endpoint, insecure=True)
else:
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    span_exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")
    log_exporter = OTLPLogExporter(endpoint=f"{endpoint}/v1/logs")
    metric_exporter = OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics")


def ids(spans):
    return [[format(s.context.trace_id, "032x"), format(s.context.span_id, "016x")] for s in spans]


sent = []
for path in paths:
    spans = read_otlp_json(path)
    children = [s for s in spans if s.parent is not None]
    roots = [s for s in spans if s.parent is None]
    for batch in (children, roots):
        if batch:
            result = span_exporter.export(batch)
            if result is not SpanExportResult.SUCCESS:
                sys.exit(f"export of {path} failed: {result}")
    sent += ids(spans)

# A live agent run, as an instrumented app would emit it.
provider = TracerProvider(resource=Resource.create({"service.name": "otlp-client"}))
memory = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(memory))
provider.add_span_processor(BatchSpanProcessor(span_exporter))
tracer = provider.get_tracer("client")
with tracer.start_as_current_span("invoke_agent weather-bot", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather-bot",
        "toolscore.expected_tool": "get_weather"}):
    with tracer.start_as_current_span("chat m", attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}]}])}):
        pass
    with tracer.start_as_current_span("execute_tool get_weather", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.call.arguments": '{"city": "Oslo"}', "gen_ai.tool.call.result": '{"temp": 5}'}):
        pass
provider.shutdown()
sent += ids(memory.get_finished_spans())

# Logs and metrics go through the sidecar to the upstream unchanged.
logger_provider = LoggerProvider(resource=Resource.create({"service.name": "otlp-client"}))
logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter))
logger_provider.get_logger("client").emit(LogRecord(body="client-log", event_name="client.event"))
logger_provider.shutdown()
meter_provider = MeterProvider(resource=Resource.create({"service.name": "otlp-client"}),
                               metric_readers=[PeriodicExportingMetricReader(metric_exporter)])
meter_provider.get_meter("client").create_counter("client.requests").add(3)
meter_provider.shutdown()

print(json.dumps({"sent": sent}))
