"""smolagents: ToolCallingAgent with @tool functions and OpenAIServerModel.

Stack ``smolagents_openinference``: openinference-instrumentation-smolagents.

Two things differ from the other stacks, both handled here and not in the scenarios:

* smolagents ends a run only when the model calls its built-in ``final_answer`` tool, so
  :func:`server_script` turns the script's final text turn into a ``final_answer(answer=<text>)``
  tool call.  The ground truth stays "the answer is the scripted text": the agent returns it.
* smolagents does not send tool results as ``role: tool`` messages: the model's calls go back
  as an assistant message ``Calling tools:\\n[{'id': ..., 'function': {...}}, ...]`` and the
  results as a user message ``Observation:\\n...`` (its default ``tool_role_conversions``).
  The scripted server picks its reply by counting tool results, so :func:`start_server` gives
  it a server whose count is the number of tool calls listed in those ``Calling tools``
  messages (every listed call has its observation by the time the next request is sent).
  The requests themselves are not changed.

The module's top level is stdlib only: the generator imports it for those two hooks.
"""

from __future__ import annotations

import ast
import json
import threading

import scenarios as S

FINAL_ANSWER_TOOL = "final_answer"


# ---------------------------------------------------------------------------------------
# generator side (stdlib): the scripted server for this framework
# ---------------------------------------------------------------------------------------
def server_script(script: dict) -> dict:
    """The scenario script with its final text turn played as a ``final_answer`` tool call."""
    turns = []
    for turn in script["turns"]:
        if turn.get("text") is not None and not turn.get("tool_calls"):
            turn = {"tool_calls": [{"name": FINAL_ANSWER_TOOL, "arguments": {"answer": turn["text"]}}]}
        turns.append(turn)
    return dict(script, turns=turns)


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def count_tool_results(messages: list) -> int:
    """Tool calls smolagents has already run: those listed in its ``Calling tools:`` messages."""
    n = 0
    for m in messages or []:
        text = _text(m.get("content"))
        if m.get("role") == "assistant" and text.startswith("Calling tools:"):
            try:
                n += len(ast.literal_eval(text.split("\n", 1)[1]))
            except (ValueError, SyntaxError, IndexError):
                pass
    return n


def start_server(script: dict):
    from scripted_model_server import ScriptedModelServer  # generator process only

    local = threading.local()

    class SmolagentsScriptedServer(ScriptedModelServer):
        def record(self, entry: dict) -> None:
            body = entry.get("body") or {}
            local.n_results = count_tool_results(body.get("messages")) if isinstance(body, dict) else None
            super().record(entry)

        def pick_turn(self, scenario: dict, n_tool_results: int):  # see module docstring
            n = getattr(local, "n_results", None)
            return ScriptedModelServer.pick_turn(scenario, n_tool_results if n is None else n)

    server = SmolagentsScriptedServer([server_script(script)]).start()
    return server, server.base_url


# ---------------------------------------------------------------------------------------
# runner side (in the venv)
# ---------------------------------------------------------------------------------------
def instrument(stack: str, provider) -> None:
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    SmolagentsInstrumentor().instrument(tracer_provider=provider)


def _tools(record):
    """The six scenario tools as smolagents @tool functions (smolagents needs an ``Args:`` docstring)."""
    from smolagents import tool

    @tool
    def get_weather(location: str) -> dict:
        """Get the current weather for a city.

        Args:
            location: The city.
        """
        return record("get_weather", location=location)

    @tool
    def search_web(query: str) -> dict:
        """Search the web and return the top results.

        Args:
            query: The search query.
        """
        return record("search_web", query=query)

    @tool
    def auth(token: str) -> dict:
        """Authenticate with an API token and open a session.

        Args:
            token: The API token.
        """
        return record("auth", token=token)

    @tool
    def fetch_data(endpoint: str) -> dict:
        """Fetch data from an internal API endpoint.

        Args:
            endpoint: The endpoint path.
        """
        return record("fetch_data", endpoint=endpoint)

    @tool
    def log_event(message: str) -> dict:
        """Write an entry to the audit log.

        Args:
            message: The log message.
        """
        return record("log_event", message=message)

    @tool
    def send_email(to: str, subject: str) -> dict:
        """Send an email.

        Args:
            to: The recipient's email address.
            subject: The subject line.
        """
        return record("send_email", to=to, subject=subject)

    return [get_weather, search_web, auth, fetch_data, log_event, send_email]


def run(stack: str, base_url: str, question: str, provider) -> tuple[str, list]:
    from smolagents import OpenAIServerModel, ToolCallingAgent
    from smolagents.memory import ActionStep

    results: dict[tuple, list] = {}
    lock = threading.Lock()

    def record(name: str, **arguments):
        result = S.TOOLS[name](**arguments)
        with lock:
            results.setdefault((name, json.dumps(arguments, sort_keys=True)), []).append(result)
        return result

    model = OpenAIServerModel(model_id=S.REQUEST_MODEL, api_base=base_url, api_key="sk-conformance",
                              client_kwargs={"max_retries": 0})
    agent = ToolCallingAgent(
        tools=_tools(record),
        model=model,
        name=S.AGENT_NAME.replace("-", "_"),  # smolagents wants a Python identifier
        instructions=S.SYSTEM_PROMPT,
        max_steps=8,
        verbosity_level=0,
    )
    final = agent.run(question)
    executed = []
    for step in agent.memory.steps:
        if not isinstance(step, ActionStep):
            continue
        for tc in step.tool_calls or []:
            if tc.name == FINAL_ANSWER_TOOL:
                continue
            args = tc.arguments if isinstance(tc.arguments, dict) else json.loads(tc.arguments)
            got = results.get((tc.name, json.dumps(args, sort_keys=True))) or [None]
            executed.append({"id": tc.id, "name": tc.name, "arguments": args, "result": got.pop(0)})
    return str(final), executed
