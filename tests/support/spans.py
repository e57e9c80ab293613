"""Spans of agent runs for the tests: a weather-bot run emitted through a real SDK tracer (GenAI
conventions), ``ReadableSpan``s with chosen ids, and plain spans with nothing to score."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, Status, StatusCode

#: the trace of ``span()`` unless told
TRACE = 0xABC
#: the instrumentation scope of what otel-toolscore itself emits (evaluation spans)
TOOLSCORE_SCOPE = "otel_toolscore"

WEATHER_TOOL = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def weather_run(tracer: Any, name: str = "weather-bot", *, question: str = "Oslo?", expected: str | None = None,
                definitions: bool = True, straggler: bool = False) -> Any:
    """One agent run: ``invoke_agent <name>`` around a chat that calls get_weather (offering its
    definition unless ``definitions`` is false), the tool call, and a chat that answers. With
    ``expected``, the span carries ``toolscore.expected_tool``; with ``straggler``, a child of the
    agent span is left open and returned, so the run waits for its completion grace."""
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
    if expected:
        attrs["toolscore.expected_tool"] = expected
    left_open = None
    with tracer.start_as_current_span(f"invoke_agent {name}", attributes=attrs):
        if straggler:
            left_open = tracer.start_span("background task")
        chat = {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": question}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}]}]),
        }
        if definitions:
            chat["gen_ai.tool.definitions"] = json.dumps([WEATHER_TOOL])
        with tracer.start_as_current_span("chat m", attributes=chat):
            pass
        with tracer.start_as_current_span("execute_tool get_weather", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.call.arguments": '{"city": "Oslo"}', "gen_ai.tool.call.result": '{"temp": "5°C"}',
        }):
            pass
        with tracer.start_as_current_span("chat m", attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": "It is 5°C in Oslo."}]}]),
        }):
            pass
    return left_open


def span(
    sid: int,
    name: str,
    parent: int | None = None,
    attrs: dict[str, Any] | None = None,
    start: int = 0,
    events: list[Event] | None = None,
    status: Status | None = None,
    trace: int = TRACE,
) -> ReadableSpan:
    """An ended span with the ids given, lasting 1 ns from ``start``."""
    return ReadableSpan(
        name=name,
        context=SpanContext(trace, sid, False),
        parent=SpanContext(trace, parent, False) if parent is not None else None,
        attributes=attrs or {},
        events=events or [],
        status=status or Status(StatusCode.UNSET),
        start_time=start,
        end_time=start + 1,
    )


def scope_of(span: ReadableSpan) -> str | None:
    """The name of the instrumentation scope that made ``span``."""
    return span.instrumentation_scope.name if span.instrumentation_scope else None


def plain_spans(n: int) -> list[ReadableSpan]:
    """n ended spans of one trace, no GenAI content (nothing is held)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("root"):
        for i in range(n - 1):
            with tracer.start_as_current_span(f"child {i}"):
                pass
    return list(memory.get_finished_spans())


def pb_body(spans: Sequence[ReadableSpan]) -> bytes:
    """An OTLP/HTTP protobuf trace request, as the SDK's exporter encodes it."""
    return encode_spans(spans).SerializeToString()
