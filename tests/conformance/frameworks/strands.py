"""Strands Agents stacks: ``Agent`` + ``@tool`` functions + ``OpenAIModel`` (Chat Completions) on the scripted server.

Runs inside the ``strands`` venv (see requirements/strands.in). Strands traces by itself through
the global tracer provider set by runner.make_provider (its ``Tracer`` reads
``trace.get_tracer_provider()`` and ``OTEL_SEMCONV_STABILITY_OPT_IN``); no instrumentor is applied.
"""

from __future__ import annotations

import json

import scenarios as S


def instrument(stack: str, provider) -> None:
    if not stack.startswith("strands_"):
        raise SystemExit(f"unknown stack {stack}")


def run(stack: str, base_url: str, question: str, provider=None) -> tuple[str, list]:
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    model = OpenAIModel(
        client_args={"api_key": "sk-conformance", "base_url": base_url, "max_retries": 0},
        model_id=S.REQUEST_MODEL,
    )
    agent = Agent(
        model=model,
        name=S.AGENT_NAME,
        system_prompt=S.SYSTEM_PROMPT,
        tools=[tool(fn) for fn in S.TOOLS.values()],
        callback_handler=None,  # no printing of the streamed text
    )
    result = agent(question)
    calls: dict[str, tuple[str, dict]] = {}
    order: list[str] = []
    results: dict[str, object] = {}
    for message in agent.messages:
        for block in message.get("content", []):
            if "toolUse" in block:
                use = block["toolUse"]
                calls[use["toolUseId"]] = (use["name"], dict(use["input"]))
                order.append(use["toolUseId"])
            elif "toolResult" in block:
                res = block["toolResult"]
                text = "".join(c.get("text", "") for c in res.get("content", []))
                results[res["toolUseId"]] = json.loads(text)  # the @tool wrapper sends json.dumps(return value)
    executed = [{"id": i, "name": calls[i][0], "arguments": calls[i][1], "result": results.get(i)} for i in order]
    return str(result).strip(), executed
