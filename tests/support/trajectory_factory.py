"""Builders of small trajectories for the scorer tests (checked by tests/test_trajectory_factory.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from otel_toolscore.trajectory import LLMCall, Message, ToolCall, ToolDefinition, Trajectory

#: "the call has no recorded result"
NO_RESULT = object()


def make_call(
    name: str | None,
    args: Any = None,
    result: Any = NO_RESULT,
    *,
    error: str | None = None,
    index: int = 0,
    **fields: Any,
) -> ToolCall:
    """One tool call. ``args``: a dict (raw JSON text derived), a str (taken as the raw text,
    parsed when it is a JSON object), or None (no arguments recorded)."""
    arguments: Any = None
    raw: str | None = None
    arguments_error: str | None = None
    if isinstance(args, str):
        raw = args
        try:
            decoded = json.loads(args)
        except ValueError:
            arguments_error = "arguments are not JSON"
        else:
            if isinstance(decoded, dict):
                arguments = decoded
            else:
                arguments_error = f"arguments are a JSON {type(decoded).__name__}, not an object"
    elif args is not None:
        arguments = args
        raw = json.dumps(args)
    has_result = result is not NO_RESULT
    values: dict[str, Any] = {
        "id": f"call_{index}",
        "name": name,
        "arguments": arguments,
        "arguments_raw": raw,
        "arguments_error": arguments_error,
        "result": result if has_result else None,
        "result_raw": (result if isinstance(result, str) else json.dumps(result))
        if has_result
        else None,
        "has_result": has_result,
        "error": error,
        "span_id": f"span{index:012d}",
    }
    values.update(fields)
    return ToolCall(**values)


CallSpec = tuple[Any, ...] | ToolCall


def make_trajectory(
    calls: Iterable[CallSpec] = (),
    *,
    output: str | None = None,
    input: str | None = "Please help.",
    system_instructions: str | None = None,
    tool_definitions: Sequence[ToolDefinition] = (),
    expectations: dict[str, Any] | None = None,
    steps: Sequence[Any] | None = None,
) -> Trajectory:
    """A trajectory from ``(name, args, result)`` / ``(name, args, result, error)`` tuples or
    ready ``ToolCall``s; ``steps`` replaces the calls entirely (for interleaved LLM calls)."""
    if steps is None:
        built: list[Any] = []
        for index, spec in enumerate(calls):
            if isinstance(spec, ToolCall):
                built.append(spec)
                continue
            name, args, *rest = spec
            result = rest[0] if rest else NO_RESULT
            error = rest[1] if len(rest) > 1 else None
            built.append(make_call(name, args, result, error=error, index=index))
        steps = built
    return Trajectory(
        trace_id="0" * 32,
        span_id="a" * 16,
        agent_name="test-agent",
        input=input,
        output=output,
        system_instructions=system_instructions,
        steps=list(steps),
        tool_definitions=list(tool_definitions),
        expectations=expectations or {},
    )


def llm(
    span_id: str,
    *,
    user_messages: int = 1,
    text: str | None = None,
    tools: Sequence[str] = (),
) -> LLMCall:
    """An LLM call whose request carried ``user_messages`` user messages."""
    return LLMCall(
        span_id=span_id,
        input_messages=[
            Message(role="user", content=f"question {i}") for i in range(user_messages)
        ],
        output_messages=[Message(role="assistant", content=text)] if text else [],
        tool_definitions=[ToolDefinition(name=name) for name in tools],
    )


def names(trajectory: Trajectory) -> list[str | None]:
    return [call.name for call in trajectory.tool_calls]
