"""An app on stock instrumentation: the real ``openai`` client traced by
``opentelemetry-instrumentation-openai-v2`` (which records no offered tools), the demo's agent
loop making tool calls against the scripted local model server, scored by ``install()``.

    python openai_v2_tools_app.py none|dict|helper SCENARIO...

``none``: no tool schemas given; ``dict``: the app's TOOL_SCHEMAS; ``helper``:
``otel_toolscore.tool_schemas`` of the app's tool functions. Prints, per scenario, the
tool_call_validation attributes of its agent span, the per-call events' scores and whether the
score histogram got a tool_call_validation point, as one JSON object.
"""

import json
import os
import sys

# Latest GenAI conventions, message content on the spans (util-genai reads these at import).
os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"

from openai import OpenAI
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_toolscore
from otel_toolscore.demo_agent import agent_common
from tests.support.pipeline import InMemoryLogExporter

mode, *scenarios = sys.argv[1:]
schemas = {"none": None, "dict": agent_common.TOOL_SCHEMAS,
           "helper": otel_toolscore.tool_schemas(*agent_common.TOOLS.values())}[mode]

spans = InMemorySpanExporter()
tracer_provider = TracerProvider()
tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
reader = InMemoryMetricReader()
meter_provider = MeterProvider(metric_readers=[reader])
logs = InMemoryLogExporter()
logger_provider = LoggerProvider()
logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
processor = otel_toolscore.install(tracer_provider, scorers=["tool_call_validation"], tool_schemas=schemas,
                                   call_events="all", meter_provider=meter_provider,
                                   logger_provider=logger_provider, set_global=False)
assert processor is not None
OpenAIInstrumentor().instrument(tracer_provider=tracer_provider)

server, base_url = agent_common.start_model_server()
client = OpenAI(base_url=base_url, api_key="sk-local", max_retries=0)
try:
    for scenario in agent_common.SCENARIOS:
        if scenario["name"] in scenarios:
            agent_common.run_agent(scenario["user_question"], agent_common.openai_complete(client),
                                   tracer=tracer_provider.get_tracer("app"))
finally:
    server.stop()
assert processor.force_flush(30_000)

finished = spans.get_finished_spans()
out: dict = {"chat_spans_offer_tools": any("gen_ai.tool.definitions" in (s.attributes or {})
                                           for s in finished if s.name.startswith("chat"))}
# one agent span per scenario run, the runs one after the other
agents = sorted((s for s in finished if s.name.startswith("invoke_agent")), key=lambda s: s.start_time or 0)
ran = [s["name"] for s in agent_common.SCENARIOS if s["name"] in scenarios]
assert len(agents) == len(ran), (len(agents), ran)
for name, span in zip(ran, agents):
    out[name] = {key.removeprefix("toolscore.tool_call_validation."): value
                 for key, value in (span.attributes or {}).items()
                 if key.startswith("toolscore.tool_call_validation.")}
events = [dict(r.log_record.attributes or {}) for r in logs.get_finished_logs()]
out["call_event_scores"] = [e.get("gen_ai.evaluation.score.value") for e in events
                            if e.get("gen_ai.evaluation.name") == "tool_call_validation" and "gen_ai.tool.call.id" in e]
data = reader.get_metrics_data()
histogram = [p for rm in (data.resource_metrics if data else []) for sm in rm.scope_metrics for m in sm.metrics
             if m.name == "gen_ai.evaluation.score" for p in m.data.data_points
             if dict(p.attributes or {}).get("gen_ai.evaluation.name") == "tool_call_validation"]
out["histogram_points"] = sum(p.count for p in histogram)
print(json.dumps(out))
