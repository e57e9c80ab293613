"""install() under the SDK's OTEL_* variables (set by the test): one agent run, then what it did.

Prints one JSON line: what install() returned, the threads it started, and the providers it set.
"""

import json
import sys
import threading

from opentelemetry import metrics, trace
from opentelemetry._logs import get_logger_provider

import otel_toolscore

before = {t.name for t in threading.enumerate()}
# never raises for an OTEL_* value it cannot use: it warns and ignores it, as the specification asks
processor = otel_toolscore.install(scorers=["tool_call_accuracy"],
                                   scorer_options={"tool_call_accuracy": {"expected_tool": "get_weather"}})
started = sorted({t.name for t in threading.enumerate()} - before)
tracer = trace.get_tracer("app")
with tracer.start_as_current_span("invoke_agent weather-bot", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather-bot"}):
    with tracer.start_as_current_span("execute_tool get_weather", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": "c1"}):
        pass
if processor is not None:
    processor.force_flush()
for provider in (trace.get_tracer_provider(), metrics.get_meter_provider(), get_logger_provider()):
    if hasattr(provider, "shutdown"):
        provider.shutdown()
sys.stdout.flush()
print(json.dumps({
    "returned": type(processor).__name__,
    "threads_started": started,
    "tracer_provider": type(trace.get_tracer_provider()).__name__,
    "meter_provider": type(metrics.get_meter_provider()).__name__,
    "logger_provider": type(get_logger_provider()).__name__,
}))
