"""The usual GenAI trace read straight into its Trajectory: ``assemble_trace``'s direct path.

Most traces an instrumented app sends are one agent span (``invoke_agent``) with the model calls
(``chat``) and tool runs (``execute_tool``) it made just below it, all of the OTel GenAI
convention alone, each tool call under an id of its own; in an app, inside the app's own spans
(an HTTP server span above it, HTTP client and database spans below its tools), which no
convention reads and the general way gives no part in the run. The general way reads every span with
every convention into ``SpanFacts``, then matches the places a call is seen in
(``_calls._CallBuilder``): for such a trace most of that answers questions the trace never
asks. Here the same readers (``conventions.genai``, the trace's ``ReadMemo``) read each span
once, straight into the run's LLM calls and tool calls.

What is read here is what the general way reads, by the same functions; the matching is the
general way's for calls that each have their own id, by its pieces (``_calls``), and what belongs
to the run is decided by the one set of rules both ways follow (``_rules``). Whatever this path does not cover -- a span
of another convention or of another role, events, an error status, a call without an id or
with one seen twice, an echo or result the general way would match otherwise, a problem to
report, a value left unread, text that may hold a lone surrogate -- gives ``None``, and the
trace is read the general way (``tests/test_genai_direct.py`` holds the two to one result).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from otel_toolscore import semconv as sc
from otel_toolscore.assemble._calls import _add_source, _args_error, _canon, _take_tool_run
from otel_toolscore.assemble._rules import (
    _Scope,
    add_definitions,
    give_result,
    in_call_order,
    last_output,
    last_user_text,
    run_calls,
    settle_errors,
)
from otel_toolscore.assemble._tree import _parent_missing
from otel_toolscore.conventions import (
    _GATE_NAMES,
    _keys_of,
    _lookup_attributes,
    _memo,
    _service_name,
    _texts_may_hold_surrogates,
    genai,
    settle_tool_error,
    stated_role,
)
from otel_toolscore.conventions._unread import _MODEL_KEYS
from otel_toolscore.conventions.parsing import (
    collect_unread,
    stop_collecting,
    system_from_messages,
    tool_definitions_from,
)
from otel_toolscore.trajectory import LLMCall, Message, ToolCall, ToolResultPart, Trajectory

_ERROR = StatusCode.ERROR


class _Span:
    """A span the direct path covers: what ``_plan`` found out about it."""

    __slots__ = ("attrs", "expectations", "order", "role", "span", "start")

    def __init__(self, span: ReadableSpan, attrs: dict[str, Any], role: str, expectations: tuple[str, ...],
                 order: int) -> None:
        self.span, self.attrs, self.role, self.expectations, self.order = span, attrs, role, expectations, order
        self.start: int = span.start_time or 0


def trajectories(trace_id: str, spans: Sequence[ReadableSpan]) -> list[Trajectory] | None:
    """The trace's one trajectory, as ``assemble_trace`` builds it; None when this path does
    not cover the trace (then nothing it read is kept)."""
    unread: list[tuple[Any, str]] = []
    token = collect_unread(unread)
    memo, memo_token = _memo.begin()
    try:
        plan = _plan(spans)
        out = _build(trace_id, *plan) if plan is not None else None
    except Exception:  # noqa: BLE001 - _NotCovered, or a failure the general way records as a problem
        out = None
    finally:
        _memo.reset(memo_token)
        stop_collecting(token)
    if out is None or unread:
        return None
    memo.keep_for_later_traces()
    return [out]


def _plan(spans: Sequence[ReadableSpan]) -> tuple[_Span, list[_Span], list[str]] | None:
    """The agent span, the spans below it in walk order and the trace's problems (parents not in
    the trace), when every span is one this path reads: looked at before anything is read.

    Spans no convention reads (an app's HTTP, job or database spans) may sit anywhere but
    between the agent span and its model and tool spans: above the agent span, beside it, below
    the others. The general way gives them no part in the run (``_plain``)."""
    agent: _Span | None = None
    below: list[_Span] = []
    others: list[ReadableSpan] = []  # the agent span and the plain spans, in input order
    for order, span in enumerate(spans):
        ctx = span.context
        name = span.name
        if ctx is None or not name.isascii():
            return None
        attrs = _lookup_attributes(span)
        if type(attrs) is not dict:
            return None
        keys = _keys_of(attrs)
        if keys.gated is None and not keys.stated and not name.startswith(_GATE_NAMES):
            if not _plain(attrs):
                return None
            others.append(span)
            continue
        status = span.status
        if span.events or not name or name.startswith(_GATE_NAMES) \
                or status is not None and (status.status_code is _ERROR or status.description):
            return None
        role = stated_role(keys.stated, attrs) if keys.direct_roles else None
        if role is None or role not in keys.direct_roles \
                or keys.direct_others and any(c.detect(span, attrs) is not None for c in keys.direct_others):
            return None
        one = _Span(span, attrs, role, keys.expectations, order)
        if role == "agent":
            if agent is not None:
                return None
            agent = one
            others.append(span)
        else:
            below.append(one)
    if agent is None or not below:
        return None
    own = agent.span.context.span_id  # type: ignore[union-attr]  # (checked above)
    ids = {own}
    for one in below:
        parent = one.span.parent
        span_id = one.span.context.span_id  # type: ignore[union-attr]
        if parent is None or parent.span_id != own or span_id in ids:
            return None
        ids.add(span_id)
    problems: list[str] = []
    if len(others) > 1 or agent.span.parent is not None:
        for span in others:
            span_id = span.context.span_id  # type: ignore[union-attr]
            if span_id in ids and span is not agent.span:
                return None  # (a span id seen twice: a problem the general way reports)
            ids.add(span_id)
        if not _tree(own, below, others, ids, problems):
            return None
    below.sort(key=_START_ORDER)  # the tree walk's order
    return agent, below, problems


def _plain(attrs: dict[str, Any]) -> bool:
    """True when a span no convention reads is nothing to the general way but a node of the tree
    (role "other", no problem): it would note content on it only with a model's key."""
    return not any(key in attrs for key in _MODEL_KEYS)


def _tree(own: int, below: list[_Span], others: list[ReadableSpan], ids: set[int], problems: list[str]) -> bool:
    """The trace's problems of parents not in it (``_tree._build_tree``: each such span a root),
    in ``problems``; False when a span is on a parent cycle (another problem) or a plain span
    sits between the agent span and a span of its run (checked by the caller: their parent is
    the agent span)."""
    children: dict[int, list[int]] = {own: [one.span.context.span_id for one in below]}  # type: ignore[union-attr]
    roots: list[int] = []
    for span in others:
        span_id = span.context.span_id  # type: ignore[union-attr]
        parent = span.parent
        if parent is None:
            roots.append(span_id)
        elif parent.span_id == span_id or parent.span_id not in ids:
            roots.append(span_id)
            problems.append(_parent_missing(f"{span_id:016x}", span.name, f"{parent.span_id:016x}"))
        else:
            children.setdefault(parent.span_id, []).append(span_id)
    reached = 0
    stack = roots
    while stack:
        reached += 1
        stack.extend(children.get(stack.pop(), ()))
    return reached == len(ids)


_START_ORDER = operator.attrgetter("start", "order")


def _build(trace_id: str, agent: _Span, below: list[_Span], problems: list[str]) -> Trajectory | None:
    own_id = f"{agent.span.context.span_id:016x}"  # type: ignore[union-attr]
    calls: dict[str, ToolCall] = {}
    keys: dict[int, tuple[int, int]] = {}  # id(call) -> (anchor, creation order), as the general way sorts
    results: list[tuple[ToolResultPart, ToolCall]] = []
    steps: list[Any] = []
    definitions: dict[str, Any] = {}
    system: str | None = None
    first_inputs: list[Message] | None = None
    scope = _Scope()
    last: list[Message] | None = None  # the last model call's own history ...
    echoed: dict[str, bool] = {}  # ... and the calls it echoed: id -> answered there
    for one in below:
        span, attrs = one.span, one.attrs
        if one.role == "tool":
            continue
        span_id = f"{span.context.span_id:016x}"  # type: ignore[union-attr]
        start = one.start
        given_in = _messages(attrs, sc.GEN_AI_INPUT_MESSAGES)
        given_out = _messages(attrs, sc.GEN_AI_OUTPUT_MESSAGES)
        if not (given_in or given_out):
            return None  # (no message: the general way looks for content it did not read)
        instructions = attrs.get(sc.GEN_AI_SYSTEM_INSTRUCTIONS)
        if system is None or not system:
            system = genai.system_text(instructions) if instructions is not None else None
            if system is None and given_in:
                system = system_from_messages(given_in)
        value = attrs.get(sc.GEN_AI_TOOL_DEFINITIONS)
        offered_defs = tool_definitions_from(value) if value is not None else None
        if not _clean(attrs):
            return None
        inputs = list(given_in) if given_in else []
        outputs = list(given_out) if given_out else []
        if first_inputs is None and inputs:
            first_inputs = inputs
        history, continued = scope.own_history(inputs)
        if last is not None and (continued or (len(last) <= len(history) and all(map(operator.is_, last, history)))):
            new = history[len(last):]
        else:
            new, echoed = history, {}
        for m in new:
            for req in m.tool_calls:
                call = calls.get(req.id) if req.id else None
                if call is None or req.id in echoed or call.name != req.name or (
                        call.arguments is not req.arguments
                        and _canon(call.arguments) != _canon(req.arguments)):
                    return None  # a call the general way would make of an echo, or match otherwise
                echoed[req.id] = False  # type: ignore[index]
                _add_source(call, "history")
            for part in m.tool_results:
                call = calls.get(part.tool_call_id) if part.tool_call_id else None
                if call is None or echoed.get(part.tool_call_id) is not False:  # type: ignore[arg-type]
                    return None  # a result not paired with an echo before it in this input
                echoed[part.tool_call_id] = True  # type: ignore[index]
                results.append((part, call))
        last = history
        offered: list[str] | None = None
        requested: list[str] = []
        for m in outputs:
            for req in m.tool_calls:
                if not req.id or req.id in calls:
                    return None
                if offered is None and offered_defs:
                    offered = [d.name for d in offered_defs]
                call = calls[req.id] = ToolCall(
                    id=req.id, name=req.name, arguments=req.arguments, arguments_raw=req.arguments_raw,
                    arguments_error=_args_error(req), llm_span_id=span_id, offered_tools=offered,
                    sources=["llm_output"], start_time=start,
                )
                keys[id(call)] = (start, len(keys) + 1)
                requested.append(req.id)
        if offered_defs:
            add_definitions(definitions, offered_defs)
        steps.append(LLMCall(
            span_id=span_id, model=genai.model_of(attrs), input_messages=inputs, output_messages=outputs,
            tool_definitions=list(offered_defs) if offered_defs else [], tool_call_ids=requested,
            start_time=start, end_time=span.end_time or start,
        ))
    for one in below:
        if one.role == "tool" and not _tool_span(one, calls):
            return None
    for part, call in results:  # (as ``_CallBuilder.finish`` gives them)
        give_result(call, part)
    made, answers = run_calls(sorted(calls.values(), key=lambda c: keys[id(c)]), set())
    if answers:
        return None  # a framework's answer tool: the general way takes it apart
    settle_errors(made)
    steps = in_call_order(steps, made, lambda c: keys[id(c)])

    span, attrs = agent.span, agent.attrs
    name = attrs.get(sc.GEN_AI_AGENT_NAME)
    start = span.start_time or 0
    if not _clean(attrs):
        return None
    return Trajectory(
        trace_id=trace_id,
        span_id=own_id,
        agent_name=str(name) if name else genai.agent_name_fallback(span.name),
        service_name=_service_name(span),
        input=last_user_text(first_inputs),
        output=last_output(steps),
        system_instructions=system or None,
        steps=steps,
        tool_definitions=list(definitions.values()),
        conventions=[genai.NAME],
        expectations={key: attrs[key] for key in agent.expectations},
        problems=problems,
        start_time=start,
        end_time=span.end_time or start,
    )


class _NotCovered(Exception):
    """The trace is one the general way reads: raised where returning would take more lines."""


def _messages(attrs: dict[str, Any], key: str) -> list[Message] | None:
    """The messages of ``key``, None when the span has none."""
    if key not in attrs:
        return None
    messages = genai.messages_of(attrs[key], key)
    if messages is None:
        raise _NotCovered(f"{key} is not a JSON list of messages")  # a problem the general way reports
    return messages


def _clean(attrs: dict[str, Any]) -> bool:
    """True when no text of the span may hold a lone surrogate (asked after its texts were read:
    the memo then knows a history's earlier part to be clean)."""
    return not _texts_may_hold_surrogates(attrs.values())


def _tool_span(one: _Span, calls: dict[str, ToolCall]) -> bool:
    """The tool span's run added to the call of its id (``_CallBuilder.add_tool_span``); False
    when the general way would match it otherwise."""
    span, attrs = one.span, one.attrs
    tool = genai.tool_execution(span.name, attrs)
    if not _clean(attrs):
        return False
    call = calls.get(tool.call_id) if tool.call_id else None
    if call is None or call.span_id is not None:
        return False
    settle_tool_error(tool)
    call.span_id = f"{span.context.span_id:016x}"  # type: ignore[union-attr]
    _add_source(call, "tool_span")
    _take_tool_run(call, tool)
    return True
