"""What belongs to a run, the one set of rules both ways of assembling follow (the general way,
``_general``, and the direct path for the usual GenAI trace, ``_direct``).

- Its own part of each model input (``_Scope``): what comes after its last user message; the
  conversation's earlier turns are context, never its calls.
- Its tool calls (``run_calls``): every call it made but its framework's answer-tool calls, which
  are how it returns its answer; a call keeps the first result it is given (``give_result``) and an
  error read from its result when nothing else said one (``settle_errors``).
- Its steps in call order (``in_call_order``), its tool definitions by name (``add_definitions``),
  its question and its answer (``last_user_text``, ``last_output``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from otel_toolscore import semconv as sc
from otel_toolscore.conventions.parsing import as_text, result_error
from otel_toolscore.trajectory import LLMCall, Message, ToolCall, ToolDefinition, ToolResultPart

# --- the run's own part of each model input -----------------------------------------------------


class _Scope:
    """Where a run's own part of each model input starts (docs/design.md, "Runs in conversations").

    A chat app sends the whole conversation with every model call. The run's own calls are
    those after its last user message, as the first of its LLM spans that carries a user
    message shows it; later spans repeat that message (and may add user-role messages of the
    framework's own after it), so the boundary there is the last user message with the same
    text, else their own last user message. Everything before is context: it grounds the
    answer, it is never this run's calls.
    """

    __slots__ = ("_anchor", "_anchored", "_inputs", "_start")

    def __init__(self) -> None:
        self._anchor: str | None = None
        self._anchored = False
        #: the last input asked about, and where its own part started
        self._inputs: list[Message] | None = None
        self._start = 0

    def own_history(self, inputs: list[Message]) -> tuple[list[Message], bool]:
        """The run's own part of ``inputs``, and True when it continues the last input's own
        part: the last input (the same message objects) with only messages after it that are no
        user's, so the boundary has not moved (the last user message is the one it was)."""
        prev = self._inputs
        self._inputs = inputs
        if (prev is not None and len(prev) <= len(inputs) and all(map(operator.is_, prev, inputs))
                and _last_user(inputs, len(prev)) < 0):
            return (inputs[self._start :] if self._start else inputs), True
        start = self._start = self._boundary(inputs)
        return (inputs[start:] if start else inputs), False

    def _boundary(self, inputs: list[Message]) -> int:
        last_user = _last_user(inputs)
        if last_user < 0:
            return 0
        if not self._anchored:
            self._anchored = True
            self._anchor = inputs[last_user].content
            return last_user + 1
        for i in range(last_user, -1, -1):
            m = inputs[i]
            if m.role == "user" and m.content == self._anchor:
                return i + 1
        return last_user + 1


def _last_user(inputs: list[Message], stop: int = 0) -> int:
    """Index of the last user message with content, looking no further back than ``stop``; -1: none."""
    for i in range(len(inputs) - 1, stop - 1, -1):
        m = inputs[i]
        if m.role == "user" and m.content:
            return i
    return -1


# --- the run's calls ----------------------------------------------------------------------------


def is_answer_tool(name: str | None, named: Iterable[str] = ()) -> bool:
    """True for a framework's answer tool: ``semconv.ANSWER_TOOLS``, its prefixes, or a tool a span
    of the run names as its answer tool (``named``)."""
    return name is not None and (name in sc.ANSWER_TOOLS or name in named or name.startswith(sc.ANSWER_TOOL_PREFIXES))


def run_calls(calls: list[ToolCall], named: set[str]) -> tuple[list[ToolCall], list[ToolCall]]:
    """The run's tool calls, and apart from them the calls of its framework's answer tools.

    A framework that has the model answer through a tool (``semconv.ANSWER_TOOLS``, or a tool a
    span of the run names as its answer tool) ends the run with that call: it is how the run
    returns its answer, not a tool use, so it is no call of the run, and what it "returns" (the
    answer again, or a receipt) is no tool result that could ground the answer. ``named``: the
    answer tools the run's spans name.
    """
    answers = [c for c in calls if is_answer_tool(c.name, named)]
    if not answers:
        return calls, answers
    dropped = {id(c) for c in answers}
    return [c for c in calls if id(c) not in dropped], answers


def give_result(call: ToolCall, part: ToolResultPart) -> None:
    """A result message's part, to the call it answers: the first one it is given (the same result
    is echoed in every later model input; a tool span's result, taken before, stays)."""
    if "result_message" in call.sources:
        return
    call.sources.append("result_message")
    if not call.has_result:
        call.result, call.result_raw, call.has_result = part.content, part.content_raw, True
    if part.is_error and call.error is None:
        call.error = as_text(part.content) or "error"


def settle_errors(calls: Iterable[ToolCall]) -> None:
    """A call nothing said failed, whose result says it did (``result_error``), failed."""
    for call in calls:
        if call.error is None and call.has_result:
            call.error = result_error(call.result)


def in_call_order(steps: list[Any], calls: Sequence[ToolCall], key: Callable[[ToolCall], tuple[int, int]]) -> list[Any]:
    """The run's steps with its calls: an LLM call or retrieval sorts at its start, the calls an LLM
    call requested just after it (``key``: (anchor, creation order) of each call)."""
    keys: list[tuple[int, int]] = [(s.start_time or 0, -1) for s in steps]
    keys.extend(map(key, calls))
    steps = [*steps, *calls]
    return [steps[i] for i in sorted(range(len(steps)), key=keys.__getitem__)]


def add_definitions(out: dict[str, ToolDefinition], definitions: Iterable[ToolDefinition]) -> None:
    """Every tool offered in the run, by name: a definition with a schema beats a bare name."""
    for d in definitions:
        have = out.get(d.name)
        if have is None or (have.parameters is None and d.parameters is not None):
            out[d.name] = d


# --- the run's question and answer --------------------------------------------------------------


def last_user_text(messages: list[Message] | None) -> str | None:
    for m in reversed(messages or ()):
        if m.role == "user" and m.content:
            return m.content
    return None


def last_output(steps: list[Any], answers: Sequence[ToolCall] = ()) -> str | None:
    """The text of the run's last model response that is an answer. Text a model writes beside
    tool calls is a preamble to them, not an answer: a run that ends on a tool call (a
    hand-off, a final action) has none of its own unless an earlier response answered. A
    response that calls an answer tool (``run_calls``) answers with that call."""
    by_response = {c.llm_span_id: c for c in answers if c.llm_span_id is not None}
    for s in reversed(steps):
        if not isinstance(s, LLMCall):
            continue
        answer = by_response.get(s.span_id) if s.span_id is not None else None
        if answer is not None and (text := _answer_text(answer)):
            return text
        if s.output_text and not any(m.tool_calls for m in s.output_messages):
            return s.output_text
    return None


def _answer_text(call: ToolCall) -> str | None:
    """The answer an answer-tool call gives: its one argument (smolagents ``answer``), else all of
    them (a structured output)."""
    args = call.arguments
    if isinstance(args, dict) and args:
        return as_text(next(iter(args.values()))) if len(args) == 1 else as_text(args)
    return call.arguments_raw
