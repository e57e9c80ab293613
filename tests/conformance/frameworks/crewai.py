"""CrewAI: one Agent with @tool tools, one Task, a Crew, ``crew.kickoff()``.

The LLM is ``crewai.LLM(model="gpt-4o-mini", base_url=<scripted server>)``, which crewai 1.x
routes to its native OpenAI provider (the ``openai`` SDK; litellm is not installed).
crewai's own telemetry and its run tracing are turned off by the stack's env
(``CREWAI_DISABLE_TELEMETRY``, ``CREWAI_DISABLE_TRACKING``, ``CREWAI_TRACING_ENABLED=false``,
``CREWAI_DISABLE_VERSION_CHECK``); ``OTEL_SDK_DISABLED`` is not used because it would turn
off the conformance runner's own SDK provider too.

Stacks:

* ``crewai_openinference``: openinference-instrumentation-crewai (crew, task, agent and tool
  spans; its default wrapper mode) + openinference-instrumentation-openai for the LLM spans
  (the OpenAI SDK calls of crewai's native provider).
* ``crewai_openllmetry``: opentelemetry-instrumentation-crewai (Traceloop) +
  opentelemetry-instrumentation-openai for the LLM spans, as ``Traceloop.init()`` would set up.
"""

from __future__ import annotations

import functools
import json
import threading

import scenarios as S


def instrument(stack: str, provider) -> None:
    if stack == "crewai_openinference":
        from openinference.instrumentation.crewai import CrewAIInstrumentor
        from openinference.instrumentation.openai import OpenAIInstrumentor

        CrewAIInstrumentor().instrument(tracer_provider=provider)
        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif stack == "crewai_openllmetry":
        from opentelemetry.instrumentation.crewai import CrewAIInstrumentor
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

        CrewAIInstrumentor().instrument(tracer_provider=provider)
        OpenAIInstrumentor().instrument(tracer_provider=provider)
    else:
        raise SystemExit(f"unknown stack {stack}")


def run(stack: str, base_url: str, question: str, provider) -> tuple[str, list]:
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    ran: list[dict] = []  # in the order the tools ran (crewai runs parallel calls concurrently)
    lock = threading.Lock()

    def recorded(fn):
        @functools.wraps(fn)
        def wrapper(**arguments):
            result = fn(**arguments)
            with lock:
                ran.append({"id": None, "name": fn.__name__, "arguments": dict(arguments), "result": result})
            return result

        return wrapper

    llm = LLM(model=S.REQUEST_MODEL, base_url=base_url, api_key="sk-conformance", max_retries=0)
    agent = Agent(
        role=S.AGENT_NAME,
        goal=S.SYSTEM_PROMPT,
        backstory="You answer the user's requests, using the available tools when they help.",
        tools=[tool(recorded(fn)) for fn in S.TOOLS.values()],
        llm=llm,
        allow_delegation=False,
        max_iter=8,
        verbose=False,
    )
    task = Task(description=question, expected_output="A direct answer to the user's request.", agent=agent)
    crew = Crew(agents=[agent], tasks=[task], verbose=False)
    output = crew.kickoff()
    return str(output.raw), _in_call_order(agent, ran)


def _in_call_order(agent, ran: list[dict]) -> list[dict]:
    """The tools that ran, in the model's call order (from the executor's message history)."""
    calls = []
    for message in getattr(agent.agent_executor, "messages", None) or []:
        for tc in (message.get("tool_calls") if isinstance(message, dict) else None) or []:
            fn = tc.get("function") or {}
            args = fn.get("arguments")
            calls.append((tc.get("id"), fn.get("name"), json.loads(args) if isinstance(args, str) else args))
    pending = list(ran)
    ordered = []
    for call_id, name, args in calls:
        match = next((r for r in pending if r["name"] == name and r["arguments"] == args), None)
        if match is not None:
            pending.remove(match)
            ordered.append(dict(match, id=call_id))
    return ordered + pending
