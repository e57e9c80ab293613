"""Agno: ``Agent`` with plain-function tools and ``OpenAIChat`` at the scripted server.

Stack ``agno_openinference``: openinference-instrumentation-agno.  Agno's own telemetry is
off (``AGNO_TELEMETRY=false`` in the stack's env, and ``telemetry=False`` on the agent).
"""

from __future__ import annotations

import functools
import json
import threading

import scenarios as S


def instrument(stack: str, provider) -> None:
    from openinference.instrumentation.agno import AgnoInstrumentor

    AgnoInstrumentor().instrument(tracer_provider=provider)


def run(stack: str, base_url: str, question: str, provider) -> tuple[str, list]:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    ran: list[dict] = []
    lock = threading.Lock()

    def recorded(fn):
        @functools.wraps(fn)
        def wrapper(**arguments):
            result = fn(**arguments)
            with lock:
                ran.append({"name": fn.__name__, "arguments": dict(arguments), "result": result})
            return result

        return wrapper

    agent = Agent(
        name=S.AGENT_NAME,
        model=OpenAIChat(id=S.REQUEST_MODEL, base_url=base_url, api_key="sk-conformance", max_retries=0),
        instructions=S.SYSTEM_PROMPT,
        tools=[recorded(fn) for fn in S.TOOLS.values()],
        telemetry=False,
    )
    response = agent.run(question)
    executed, pending = [], list(ran)
    for te in response.tools or []:  # the model's calls, in its order
        args = te.tool_args if isinstance(te.tool_args, dict) else json.loads(te.tool_args or "{}")
        match = next((r for r in pending if r["name"] == te.tool_name and r["arguments"] == args), None)
        if match is not None:
            pending.remove(match)
            executed.append(dict(match, id=te.tool_call_id))
    executed += [dict(r, id=None) for r in pending]
    return str(response.content), executed
