"""A tiny instrumented app: otel_toolscore.install() in one line, one agent run, then exit."""

import json
import sys

from opentelemetry import trace

import otel_toolscore

processor = otel_toolscore.install(scorers=["tool_call_accuracy", "tool_call_validation"],
                                   scorer_options={"tool_call_accuracy": {"expected_tool": "get_weather"}})
tracer = trace.get_tracer("app")
with tracer.start_as_current_span("invoke_agent weather-bot", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather-bot"}):
    with tracer.start_as_current_span("chat m", attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}]}])}):
        pass
    with tracer.start_as_current_span("execute_tool get_weather", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.call.result": '{"temp": 5}'}):
        pass

processor.force_flush()
trace.get_tracer_provider().shutdown()
from opentelemetry import metrics  # noqa: E402
from opentelemetry._logs import get_logger_provider  # noqa: E402

metrics.get_meter_provider().shutdown()
get_logger_provider().shutdown()
print(json.dumps({"litellm_imported": any(m.startswith("litellm") for m in sys.modules)}))
