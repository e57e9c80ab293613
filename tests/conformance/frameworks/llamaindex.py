"""llama-index: FunctionAgent with FunctionTool tools and llama-index's OpenAI LLM.

Stack ``llamaindex_openinference``: openinference-instrumentation-llama-index, which hooks
llama-index's own instrumentation dispatcher (spans for the workflow, its steps, the LLM
calls and the tool calls).  The agent streams its LLM calls (FunctionAgent's default,
``streaming=True``), as users get it.
"""

from __future__ import annotations

import asyncio

import scenarios as S


def instrument(stack: str, provider) -> None:
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=provider)


def run(stack: str, base_url: str, question: str, provider) -> tuple[str, list]:
    from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai import OpenAI

    llm = OpenAI(model=S.REQUEST_MODEL, api_base=base_url, api_key="sk-conformance", max_retries=0)
    agent = FunctionAgent(
        name=S.AGENT_NAME,
        description="Answers questions with the six conformance tools.",
        system_prompt=S.SYSTEM_PROMPT,
        tools=[FunctionTool.from_defaults(fn) for fn in S.TOOLS.values()],
        llm=llm,
    )

    async def go() -> tuple[str, list]:
        handler = agent.run(user_msg=question)
        executed = []
        async for ev in handler.stream_events():
            if isinstance(ev, ToolCallResult):
                executed.append({
                    "id": ev.tool_id,
                    "name": ev.tool_name,
                    "arguments": dict(ev.tool_kwargs),
                    "result": ev.tool_output.raw_output,
                })
        output = await handler
        return str(output.response.content or ""), executed

    return asyncio.run(go())
