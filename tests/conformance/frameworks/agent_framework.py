"""Microsoft Agent Framework stacks: ``Agent`` + ``@tool`` functions + the OpenAI clients on the scripted server.

Runs inside the ``agent_framework`` venv (see requirements/agent_framework.in).
``agent_framework_chat`` uses ``OpenAIChatCompletionClient`` (Chat Completions),
``agent_framework_responses`` uses ``OpenAIChatClient`` (the Responses API). The framework's
own OpenTelemetry instrumentation traces through the global tracer provider set by
runner.make_provider; ``ENABLE_INSTRUMENTATION`` / ``ENABLE_SENSITIVE_DATA`` come from the
stack's environment (generator.STACKS).
"""

from __future__ import annotations

import asyncio
import json

import scenarios as S


def instrument(stack: str, provider) -> None:
    if stack not in ("agent_framework_chat", "agent_framework_responses"):
        raise SystemExit(f"unknown stack {stack}")


def _value(result):
    if isinstance(result, str):
        try:
            return json.loads(result)
        except ValueError:
            return result
    return result


async def _run(stack: str, base_url: str, question: str) -> tuple[str, list]:
    from agent_framework import Agent, tool
    from agent_framework.openai import OpenAIChatClient, OpenAIChatCompletionClient

    client_cls = OpenAIChatCompletionClient if stack == "agent_framework_chat" else OpenAIChatClient
    client = client_cls(model=S.REQUEST_MODEL, api_key="sk-conformance", base_url=base_url)
    agent = Agent(
        client,
        instructions=S.SYSTEM_PROMPT,
        name=S.AGENT_NAME,
        tools=[tool(fn) for fn in S.TOOLS.values()],
        # Responses: store=False makes each request carry the whole conversation. By default the
        # client chains turns by previous_response_id and sends only the new function_call_output
        # items, which the stateless scripted server cannot follow (it counts the tool results in
        # the request to pick its turn).
        default_options={"store": False} if stack == "agent_framework_responses" else None,
    )
    response = await agent.run(question)
    calls: dict[str, tuple[str, dict]] = {}
    order: list[str] = []
    results: dict[str, object] = {}
    for message in response.messages:
        for content in message.contents:
            if content.type == "function_call":
                args = content.arguments
                calls[content.call_id] = (content.name, json.loads(args) if isinstance(args, str) else dict(args or {}))
                order.append(content.call_id)
            elif content.type == "function_result":
                results[content.call_id] = _value(content.result)
    executed = [{"id": i, "name": calls[i][0], "arguments": calls[i][1], "result": results.get(i)} for i in order]
    return response.text, executed


def run(stack: str, base_url: str, question: str, provider=None) -> tuple[str, list]:
    return asyncio.run(_run(stack, base_url, question))
