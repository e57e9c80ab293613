"""What the example agents share: their tools, the demo runs, and a small tool-calling loop.

Imports only the standard library and the OpenTelemetry API, so that ``otel-toolscore demo`` can
use it with the core dependencies alone; it lives in the package (not in ``examples/``, which
re-exports it) so that the demo runs from an installed wheel. The model is
``scripted_model_server.py`` beside it,
an OpenAI-compatible server on 127.0.0.1 that plays a script: nothing leaves the machine.

The loop is what a hand-written agent looks like: ask the model (through whatever client the
caller passes as ``complete``), run the tool calls it asks for, send the results back, stop at
the first answer without tool calls. The model call is traced by the caller's instrumentation
(openai-v2, OpenInference, …); the app itself opens the agent span and one span per tool
execution, in the convention the caller names ("genai" or "openinference").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

AGENT_NAME = "weather-assistant"
MODEL = "gpt-4o-mini"
SYSTEM_PROMPT = "You are a helpful assistant. Use the available tools when they help answer the user's request."

# --- tools: real functions, deterministic results -------------------------------------------

_WEATHER = {"Paris": ("61°F", "light rain"), "Madrid": ("72°F", "sunny"), "Berlin": ("64°F", "sunny")}
_SEARCH = {"chicago weather today": "Chicago: 48°F, windy with scattered showers."}


class ToolFailure(RuntimeError):
    """A tool that could not do its job (the backend behind it failed)."""


def get_weather(location: str) -> dict:
    """Get the current weather for a city."""
    if location not in _WEATHER:
        return {"error": f"no weather data for {location!r}"}
    temperature, condition = _WEATHER[location]
    return {"temperature": temperature, "condition": condition}


def search_web(query: str) -> dict:
    """Search the web and return the top result."""
    snippet = _SEARCH.get(query.strip().lower(), "No summary available.")
    return {"results": [{"title": query, "snippet": snippet}]}


def fetch_data(endpoint: str) -> dict:
    """Fetch data from an internal API endpoint."""
    if endpoint == "/v1/reports/q3":
        raise ToolFailure("503 Service Unavailable: the reports backend timed out")
    return {"endpoint": endpoint, "status": "ok"}


def send_email(to: str, subject: str) -> dict:
    """Send an email."""
    return {"sent": True, "to": to, "subject": subject}


TOOLS: dict[str, Callable[..., dict]] = {f.__name__: f for f in (get_weather, search_web, fetch_data, send_email)}


def _params(**props: dict) -> dict:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


TOOL_SCHEMAS: dict[str, dict] = {
    "get_weather": _params(location={"type": "string"}),
    "search_web": _params(query={"type": "string"}),
    "fetch_data": _params(endpoint={"type": "string"}),
    "send_email": _params(to={"type": "string", "format": "email"}, subject={"type": "string"}),
}


def openai_tools() -> list[dict]:
    """The tools as Chat Completions ``tools``."""
    return [
        {"type": "function",
         "function": {"name": name, "description": fn.__doc__ or "", "parameters": TOOL_SCHEMAS[name]}}
        for name, fn in TOOLS.items()
    ]


# --- the demo runs: what the scripted model does, and what the app expected ------------------

SCENARIOS: list[dict[str, Any]] = [
    {"name": "good", "what": "right tool, right arguments, faithful answer",
     "user_question": "What's the weather in Paris?", "expected_tool": "get_weather",
     "turns": [{"tool_calls": [{"name": "get_weather", "arguments": {"location": "Paris"}}]},
               {"text": "It's 61°F with light rain in Paris."}]},
    {"name": "wrong_tool", "what": "searched the web instead of calling get_weather",
     "user_question": "What's the weather in Chicago today?", "expected_tool": "get_weather",
     "turns": [{"tool_calls": [{"name": "search_web", "arguments": {"query": "Chicago weather today"}}]},
               {"text": "According to a web search, Chicago is 48°F today, windy with scattered showers."}]},
    {"name": "bad_arguments", "what": "send_email with a recipient that is not an email address",
     "user_question": "Email Bob the Q3 summary.", "expected_tool": "send_email",
     "turns": [{"tool_calls": [{"name": "send_email", "arguments": {"to": "bob", "subject": "Q3 summary"}}]},
               {"text": "Done: I sent the Q3 summary to bob."}]},
    {"name": "hallucinated", "what": "the answer contradicts what get_weather returned",
     "user_question": "What's the weather like in Madrid today?", "expected_tool": "get_weather",
     "turns": [{"tool_calls": [{"name": "get_weather", "arguments": {"location": "Madrid"}}]},
               {"text": "It's 55°F and raining in Madrid today."}]},
    {"name": "failing_tool", "what": "fetch_data raised; the answer claims success anyway",
     "user_question": "Pull the Q3 sales report from /v1/reports/q3.", "expected_tool": "fetch_data",
     "turns": [{"tool_calls": [{"name": "fetch_data", "arguments": {"endpoint": "/v1/reports/q3"}}]},
               {"text": "Here is the Q3 sales report: revenue grew 12% to $4.2M."}]},
]


def server_scripts() -> list[dict]:
    """The scripts for the scripted model server (one per demo run)."""
    return [{"name": s["name"], "user_question": s["user_question"], "turns": s["turns"]} for s in SCENARIOS]


def start_model_server() -> tuple[Any, str]:
    """Start the scripted model server of this directory on 127.0.0.1; ``(server, base_url)``."""
    from otel_toolscore.demo_agent.scripted_model_server import start_server

    return start_server(server_scripts())


# --- the agent loop ---------------------------------------------------------------------------

#: ``complete(messages, tools) -> assistant message`` as a Chat Completions dict
Complete = Callable[[list[dict], list[dict]], dict]


def _agent_attributes(convention: str, expected_tool: str | None) -> dict[str, Any]:
    if convention == "openinference":
        attrs: dict[str, Any] = {"openinference.span.kind": "AGENT", "agent.name": AGENT_NAME}
    else:
        # (no gen_ai.tool.definitions: as with stock instrumentation, the app passes its tool
        # schemas to the scoring instead, install(tool_schemas=TOOL_SCHEMAS))
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT_NAME}
    if expected_tool:
        attrs["toolscore.expected_tool"] = expected_tool  # ground truth for tool_call_accuracy
    return attrs


def _execute_tool(tracer: trace.Tracer, call: dict, convention: str) -> str:
    """Run one tool call in its own span; a tool that raises gives the model an error result."""
    name = call["function"]["name"]
    raw_args = call["function"].get("arguments") or "{}"
    if convention == "openinference":
        attrs = {"openinference.span.kind": "TOOL", "tool.name": name, "tool_call.id": call["id"],
                 "input.value": raw_args, "input.mime_type": "application/json"}
    else:
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                 "gen_ai.tool.call.id": call["id"], "gen_ai.tool.call.arguments": raw_args}
    with tracer.start_as_current_span(f"execute_tool {name}", attributes=attrs,
                                      record_exception=False, set_status_on_exception=False) as span:
        try:
            result = TOOLS[name](**json.loads(raw_args))
        except Exception as exc:  # noqa: BLE001 - like a real loop: report it to the model
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            span.set_attribute("error.type", type(exc).__name__)
            result = {"error": f"{type(exc).__name__}: {exc}"}
        content = json.dumps(result, ensure_ascii=False)
        if convention == "openinference":
            span.set_attribute("output.value", content)
            span.set_attribute("output.mime_type", "application/json")
        else:
            span.set_attribute("gen_ai.tool.call.result", content)
    return content


def run_agent(question: str, complete: Complete, *, tracer: trace.Tracer | None = None,
              convention: str = "genai", expected_tool: str | None = None, max_turns: int = 6) -> str:
    """One agent run: an agent span around the model calls and tool executions; the answer."""
    tracer = tracer or trace.get_tracer("examples.agent")
    attrs = _agent_attributes(convention, expected_tool)
    with tracer.start_as_current_span(f"invoke_agent {AGENT_NAME}", attributes=attrs) as span:
        if convention == "openinference":
            span.set_attribute("input.value", question)
        messages: list[dict] = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
        for _ in range(max_turns):
            message = complete(messages, openai_tools())
            calls = message.get("tool_calls") or []
            if not calls:
                answer = message.get("content") or ""
                if convention == "openinference":
                    span.set_attribute("output.value", answer)
                return answer
            messages.append({"role": "assistant", "content": message.get("content"), "tool_calls": calls})
            for call in calls:
                content = _execute_tool(tracer, call, convention)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        raise RuntimeError(f"no answer after {max_turns} model calls")


def openai_complete(client: Any) -> Complete:
    """``complete`` for the real ``openai`` client (traced by whichever instrumentation is on)."""

    def complete(messages: list[dict], tools: list[dict]) -> dict:
        response = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
        return response.choices[0].message.model_dump(exclude_none=True)

    return complete
