"""Scenarios, tools and ground truth for the conformance captures (stdlib only).

Imported both by the generator (which runs on any Python) and by the per-stack runner
(which runs inside a stack's venv), so it must not import anything outside the stdlib.
"""

from __future__ import annotations

import hashlib
import inspect
import json

AGENT_NAME = "tool-assistant"
SYSTEM_PROMPT = "You are a helpful assistant. Use the available tools when they help answer the user's request."
REQUEST_MODEL = "gpt-4o-mini"
RESPONSE_MODEL = "gpt-4o-mini-2024-07-18"


# ---------------------------------------------------------------------------------------
# Tools: real Python functions with deterministic results.  Their JSON schemas are the
# ones of the shared fixtures' labels.json (tool_schemas).
# ---------------------------------------------------------------------------------------

_WEATHER = {
    "New York": ("68°F", "partly cloudy"),
    "London": ("57°F", "overcast"),
    "Berlin": ("64°F", "sunny"),
    "Paris": ("61°F", "light rain"),
    "Tokyo": ("75°F", "humid"),
    "Lima": ("66°F", "cloudy"),
    "Madrid": ("72°F", "sunny"),
}

_SEARCH = {
    "chicago weather today": [
        {
            "title": "Chicago weather today",
            "url": "https://weather.example.com/chicago",
            "snippet": "Chicago: 48°F, windy with scattered showers.",
        }
    ],
}

_DATA = {
    "/v1/orders/latest": {"order_id": "A-1042", "status": "shipped", "total": "$129.50"},
}

_FAILING_ENDPOINTS = {
    "/v1/reports/q3": "503 Service Unavailable: the reports backend timed out",
}


def _digest(*parts: str) -> str:
    return hashlib.sha1("|".join(parts).encode("utf-8")).hexdigest()[:8]


def get_weather(location: str) -> dict:
    """Get the current weather for a city."""
    if location in _WEATHER:
        temperature, condition = _WEATHER[location]
        return {"temperature": temperature, "condition": condition}
    return {"error": f"no weather data for {location!r}"}


def search_web(query: str) -> dict:
    """Search the web and return the top results."""
    results = _SEARCH.get(query.strip().lower())
    if results is None:
        results = [{"title": f"Results for {query}", "url": "https://search.example.com/", "snippet": "No summary available."}]
    return {"results": results}


def auth(token: str) -> dict:
    """Authenticate with an API token and open a session."""
    if token.startswith("tok-"):
        return {"authenticated": True, "session_id": f"sess-{token[4:]}"}
    return {"error": "invalid token"}


def fetch_data(endpoint: str) -> dict:
    """Fetch data from an internal API endpoint."""
    if endpoint in _FAILING_ENDPOINTS:
        return {"error": _FAILING_ENDPOINTS[endpoint]}
    if endpoint in _DATA:
        return dict(_DATA[endpoint])
    return {"error": f"404 Not Found: {endpoint}"}


def log_event(message: str) -> dict:
    """Write an entry to the audit log."""
    return {"logged": True, "event_id": f"evt-{_digest(message)}"}


def send_email(to: str, subject: str) -> dict:
    """Send an email."""
    return {"sent": True, "message_id": f"msg-{_digest(to, subject)}"}


TOOLS = {f.__name__: f for f in (get_weather, search_web, auth, fetch_data, log_event, send_email)}


def _obj(**props: dict) -> dict:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


TOOL_SCHEMAS = {
    "get_weather": _obj(location={"type": "string"}),
    "search_web": _obj(query={"type": "string"}),
    "auth": _obj(token={"type": "string"}),
    "fetch_data": _obj(endpoint={"type": "string"}),
    "log_event": _obj(message={"type": "string"}),
    "send_email": _obj(to={"type": "string", "format": "email"}, subject={"type": "string"}),
}


def tool_description(name: str) -> str:
    return inspect.getdoc(TOOLS[name]) or ""


def openai_tools() -> list[dict]:
    """The six tools as Chat Completions ``tools`` (function definitions)."""
    return [
        {
            "type": "function",
            "function": {"name": name, "description": tool_description(name), "parameters": TOOL_SCHEMAS[name]},
        }
        for name in TOOLS
    ]


def run_tool(name: str, arguments: dict) -> dict:
    """Run a tool the way the hand-written loops do: errors become an ``{"error": ...}`` result."""
    fn = TOOLS.get(name)
    if fn is None:
        return {"error": f"unknown tool {name!r}"}
    try:
        return fn(**arguments)
    except Exception as exc:  # noqa: BLE001 - reported back to the model, like a real loop
        return {"error": f"{type(exc).__name__}: {exc}"}


# ---------------------------------------------------------------------------------------
# Scenarios.  ``turns`` is the script the scripted model server plays; the rest is
# ground truth for labels.json.
# ---------------------------------------------------------------------------------------

SCENARIOS: dict[str, dict] = {
    "sequential_chain": {
        "id": 101,
        "user_question": "Log in with my API token tok-4821, then fetch my latest order from /v1/orders/latest.",
        "description": (
            "Two dependent tool turns: auth(token) first, then, in a separate model turn after the auth "
            "result, fetch_data(endpoint). The answer uses the fetched order."
        ),
        "expected_tools": ["auth", "fetch_data"],
        "expected_order": ["auth", "fetch_data"],
        "turns": [
            {"tool_calls": [{"name": "auth", "arguments": {"token": "tok-4821"}}]},
            {"tool_calls": [{"name": "fetch_data", "arguments": {"endpoint": "/v1/orders/latest"}}]},
            {"text": "You're logged in, and your latest order A-1042 has shipped; the total was $129.50."},
        ],
        "hallucinated": False,
    },
    "tool_error": {
        "id": 102,
        "user_question": "Pull the Q3 sales report from the /v1/reports/q3 endpoint.",
        "description": (
            "fetch_data(/v1/reports/q3) returns an error payload {error: '503 Service Unavailable: ...'} "
            "(the tool returns it; nothing raises, so no span need have status ERROR). The answer reports the failure."
        ),
        "expected_tools": ["fetch_data"],
        "expected_order": None,
        "turns": [
            {"tool_calls": [{"name": "fetch_data", "arguments": {"endpoint": "/v1/reports/q3"}}]},
            {"text": "I couldn't get the Q3 report: the data service returned an error (503 Service Unavailable, the reports backend timed out). Please try again later."},
        ],
        "hallucinated": False,
    },
    "hallucinated_answer": {
        "id": 103,
        "user_question": "What's the weather like in Madrid today?",
        "description": (
            "get_weather(Madrid) returns 72°F and sunny, but the scripted final answer says 55°F and raining: "
            "the answer contradicts the tool result."
        ),
        "expected_tools": ["get_weather"],
        "expected_order": None,
        "turns": [
            {"tool_calls": [{"name": "get_weather", "arguments": {"location": "Madrid"}}]},
            {"text": "It's 55°F and raining in Madrid today."},
        ],
        "hallucinated": True,
    },
    "no_tool": {
        "id": 104,
        "user_question": "What is the capital of France?",
        "description": "The model answers directly from its own knowledge; no tool is called.",
        "expected_tools": [],
        "expected_order": None,
        "turns": [
            {"text": "The capital of France is Paris."},
        ],
        "hallucinated": False,
    },
    "three_parallel": {
        "id": 105,
        "user_question": "What's the weather in Paris, Tokyo and Lima?",
        "description": "One assistant turn with three get_weather calls (Paris, Tokyo, Lima); the answer uses all three results.",
        "expected_tools": ["get_weather"],
        "expected_order": None,
        "turns": [
            {"tool_calls": [
                {"name": "get_weather", "arguments": {"location": "Paris"}},
                {"name": "get_weather", "arguments": {"location": "Tokyo"}},
                {"name": "get_weather", "arguments": {"location": "Lima"}},
            ]},
            {"text": "Paris is 61°F with light rain, Tokyo is 75°F and humid, and Lima is 66°F and cloudy."},
        ],
        "hallucinated": False,
    },
    "wrong_tool": {
        "id": 106,
        "user_question": "What's the weather in Chicago today?",
        "description": (
            "The user asks for the weather but the model calls search_web instead of get_weather. "
            "The answer faithfully repeats the search snippet (not a hallucination, but the wrong tool)."
        ),
        "expected_tools": ["get_weather"],
        "expected_order": None,
        "turns": [
            {"tool_calls": [{"name": "search_web", "arguments": {"query": "Chicago weather today"}}]},
            {"text": "According to a web search, Chicago is 48°F today, windy with scattered showers."},
        ],
        "hallucinated": False,
    },
}


def server_script(name: str) -> dict:
    sc = SCENARIOS[name]
    return {"name": name, "user_question": sc["user_question"], "turns": sc["turns"]}


def final_answer(name: str) -> str:
    return SCENARIOS[name]["turns"][-1]["text"]


def _expected_scores(expected: list[str], order: list[str] | None, sequence: list[str]) -> dict:
    called = set(sequence)
    if expected:
        non_strict = int(all(t in called for t in expected))
    else:
        non_strict = int(not called)
    strict = int(called == set(expected))
    if order is None:
        flex = strict_order = None
    else:
        it = iter(sequence)
        flex = int(all(any(x == t for x in it) for t in order))
        strict_order = int(sequence == order)
    return {
        "tool_selection_non_strict": non_strict,
        "tool_selection_strict": strict,
        "order_flexible": flex,
        "order_strict": strict_order,
    }


def label(name: str, stacks: list[str]) -> dict:
    """The labels.json entry of one scenario (same shape as the shared fixtures' entries)."""
    sc = SCENARIOS[name]
    by_turn = [[dict(c) for c in t["tool_calls"]] for t in sc["turns"] if t.get("tool_calls")]
    sequence = [c["name"] for turn in by_turn for c in turn]
    results = [
        {"name": c["name"], "arguments": c["arguments"], "result": run_tool(c["name"], c["arguments"])}
        for turn in by_turn
        for c in turn
    ]
    expected = sc["expected_tools"]
    return {
        "id": sc["id"],
        "user_question": sc["user_question"],
        "description": sc["description"],
        "expected_tool": expected[0] if len(expected) == 1 else (None if not expected else expected),
        "expected_tools": expected,
        "expected_order": sc["expected_order"],
        "actual_tool_calls_by_turn": by_turn,
        "actual_tool_sequence": sequence,
        "parallel_tool_calls": any(len(t) > 1 for t in by_turn),
        "tool_results": results,
        "final_answer": final_answer(name),
        "expected_scores": _expected_scores(expected, sc["expected_order"], sequence),
        "arguments_valid": True,
        "argument_violations": {},
        "tool_call_failed": any(isinstance(r["result"], dict) and "error" in r["result"] for r in results),
        "hallucinated": sc["hallucinated"],
        "asks_clarification": False,
        "retrieved_context": None,
        "stacks": list(stacks),
    }


if __name__ == "__main__":  # handy for eyeballing the ground truth
    print(json.dumps({n: label(n, []) for n in SCENARIOS}, indent=1, ensure_ascii=False))
