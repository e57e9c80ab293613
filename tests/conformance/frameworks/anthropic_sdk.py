"""Anthropic SDK stacks (``anthropic_*``): runs inside the stack's venv, started by ``runner.py``.

A hand-written tool loop over the Messages API with the real ``anthropic.Anthropic`` client, pointed at the
scripted server's ``POST /v1/messages``: ``client.messages.create(tools=six tools)`` (or ``client.messages.stream``
and ``get_final_message()`` with ``--stream``), the ``tool_use`` blocks are executed, and each result goes back in
one user message as a ``tool_result`` block whose ``content`` is ``json.dumps(result)`` (a string). The assistant
turn goes back as ``response.content``, the SDK's own block objects, as the SDK's docs do it.

* ``anthropic_openinference*``: openinference-instrumentation-anthropic.
* ``anthropic_openllmetry*``: opentelemetry-instrumentation-anthropic (Traceloop); content per TRACELOOP_TRACE_CONTENT.
* ``anthropic_native*``: no instrumentation package; the SDK's own OpenTelemetry tracing (``anthropic._tracing``),
  which is on whenever a global tracer provider is set, content per ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE.
* ``anthropic_native_tool_runner``: the SDK's own agent loop, ``client.beta.messages.tool_runner`` with
  ``beta_tool`` functions; the SDK makes the root span (``anthropic.messages.tool_runner``).

In the hand-written loops the app opens the root ``invoke_agent tool-assistant`` span, as the OpenAI loops do.
"""

from __future__ import annotations

import functools
import json

import scenarios as S

REQUEST_MODEL = "claude-haiku-4-5"
MAX_TOKENS = 1024


def anthropic_tools() -> list[dict]:
    """The six tools as Messages API ``tools`` (custom tools with an ``input_schema``)."""
    return [
        {"name": name, "description": S.tool_description(name), "input_schema": S.TOOL_SCHEMAS[name]}
        for name in S.TOOLS
    ]


def _client(base_url: str):
    from anthropic import Anthropic

    # The SDK appends /v1/messages to its base URL; the scripted server's base URL ends in /v1.
    root = base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url
    return Anthropic(base_url=root, api_key="sk-ant-conformance", max_retries=0)


def instrument(stack: str, provider) -> None:
    if stack.startswith("anthropic_openinference"):
        from openinference.instrumentation.anthropic import AnthropicInstrumentor

        AnthropicInstrumentor().instrument(tracer_provider=provider)
    elif stack.startswith("anthropic_openllmetry"):
        from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

        AnthropicInstrumentor().instrument(tracer_provider=provider)
    elif stack.startswith("anthropic_native"):
        pass  # the SDK traces itself through the global tracer provider (runner.make_provider sets it)
    else:
        raise SystemExit(f"unknown stack {stack}")


def _root_span(provider, stack: str):
    tracer = provider.get_tracer("conformance.app")
    if stack.startswith("anthropic_openinference"):
        attrs = {"openinference.span.kind": "AGENT", "agent.name": S.AGENT_NAME}
    else:
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": S.AGENT_NAME}
    return tracer.start_as_current_span(f"invoke_agent {S.AGENT_NAME}", attributes=attrs)


def messages_loop(base_url: str, question: str, stream: bool) -> tuple[str, list]:
    client = _client(base_url)
    messages: list[dict] = [{"role": "user", "content": question}]
    executed = []
    for _ in range(8):
        kwargs = dict(model=REQUEST_MODEL, max_tokens=MAX_TOKENS, system=S.SYSTEM_PROMPT, messages=messages,
                      tools=anthropic_tools())
        if stream:
            with client.messages.stream(**kwargs) as events:
                response = events.get_final_message()
        else:
            response = client.messages.create(**kwargs)
        tool_uses = [b for b in response.content if b.type == "tool_use"]
        if not tool_uses:
            return "".join(b.text for b in response.content if b.type == "text"), executed
        messages.append({"role": "assistant", "content": response.content})
        results = []
        for block in tool_uses:
            arguments = dict(block.input)
            result = S.run_tool(block.name, arguments)
            executed.append({"id": block.id, "name": block.name, "arguments": arguments, "result": result})
            results.append({"type": "tool_result", "tool_use_id": block.id, "content": json.dumps(result)})
        messages.append({"role": "user", "content": results})
    raise RuntimeError("no final answer after 8 model calls")


def tool_runner_loop(base_url: str, question: str) -> tuple[str, list]:
    """The SDK's own agent loop: ``client.beta.messages.tool_runner`` with ``beta_tool`` functions."""
    from anthropic import beta_tool

    executed: list[dict] = []

    def recorded(fn):
        @functools.wraps(fn)
        def wrapper(**arguments):
            result = fn(**arguments)
            executed.append({"name": fn.__name__, "arguments": arguments, "result": result})
            # beta_tool sends a str result as the tool_result content; the same json.dumps as the hand loops
            return json.dumps(result)
        return wrapper

    client = _client(base_url)
    runner = client.beta.messages.tool_runner(
        model=REQUEST_MODEL,
        max_tokens=MAX_TOKENS,
        system=S.SYSTEM_PROMPT,
        tools=[beta_tool(recorded(fn)) for fn in S.TOOLS.values()],
        messages=[{"role": "user", "content": question}],
        max_iterations=8,
    )
    final = runner.until_done()
    return "".join(b.text for b in final.content if b.type == "text"), executed


def run(stack: str, provider, base_url: str, question: str, stream: bool) -> tuple[str, list]:
    """The agent run (``instrument`` has been applied by the runner)."""
    if stack == "anthropic_native_tool_runner":
        return tool_runner_loop(base_url, question)
    with _root_span(provider, stack):
        return messages_loop(base_url, question, stream)
