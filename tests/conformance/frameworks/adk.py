"""Google ADK stacks: ``LlmAgent`` + Python function tools + ``LiteLlm("openai/...")`` run by ``InMemoryRunner``.

The ``*_sse`` stacks run with ``RunConfig(streaming_mode=StreamingMode.SSE)``: LiteLLM streams
the model's answer and ADK yields (and traces) a partial response per chunk, then the whole one.

Runs inside the ``adk`` venv (see requirements/adk.in). The tracing is either ADK's own
OpenTelemetry tracing (``adk_native*``: ADK reads the global tracer provider set by
runner.make_provider) or openinference-instrumentation-google-adk (``adk_openinference*``),
which replaces ADK's own spans with OpenInference ones.
"""

from __future__ import annotations

import asyncio

import scenarios as S


def instrument(stack: str, provider) -> None:
    if stack.startswith("adk_openinference"):
        from openinference.instrumentation.google_adk import GoogleADKInstrumentor

        GoogleADKInstrumentor().instrument(tracer_provider=provider)
    elif stack.startswith("adk_native"):
        pass  # ADK traces through the global tracer provider by itself
    else:
        raise SystemExit(f"unknown stack {stack}")


async def _run(base_url: str, question: str, sse: bool) -> tuple[str, list]:
    from google.adk.agents import LlmAgent
    from google.adk.agents.run_config import RunConfig, StreamingMode
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    model = LiteLlm(model=f"openai/{S.REQUEST_MODEL}", api_base=base_url, api_key="sk-conformance")
    agent = LlmAgent(
        name=S.AGENT_NAME.replace("-", "_"),  # ADK agent names must be Python identifiers
        model=model,
        instruction=S.SYSTEM_PROMPT,
        tools=list(S.TOOLS.values()),
    )
    runner = InMemoryRunner(agent=agent, app_name="conformance")
    session = await runner.session_service.create_session(app_name="conformance", user_id="user-1")
    message = types.Content(role="user", parts=[types.Part(text=question)])
    calls: dict[str, tuple[str, dict]] = {}
    order: list[str] = []
    results: dict[str, object] = {}
    final = ""
    run_config = RunConfig(streaming_mode=StreamingMode.SSE if sse else StreamingMode.NONE)
    async for event in runner.run_async(user_id="user-1", session_id=session.id, new_message=message,
                                        run_config=run_config):
        if event.partial:  # a streamed chunk: the whole response follows as its own event
            continue
        for fc in event.get_function_calls():
            calls[fc.id] = (fc.name, dict(fc.args or {}))
            order.append(fc.id)
        for fr in event.get_function_responses():
            results[fr.id] = fr.response
        if event.is_final_response() and event.content and event.content.parts:
            text = "".join(p.text or "" for p in event.content.parts if p.text)
            if text:
                final = text
    executed = [
        {"id": cid, "name": calls[cid][0], "arguments": calls[cid][1], "result": results.get(cid)}
        for cid in order
    ]
    await runner.close()
    return final, executed


def run(stack: str, base_url: str, question: str, provider=None) -> tuple[str, list]:
    return asyncio.run(_run(base_url, question, sse=stack.endswith("_sse")))
