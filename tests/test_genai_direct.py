"""The direct path for the usual GenAI trace (``otel_toolscore.assemble._direct``) gives exactly the
trajectories the general way gives (``read_trace`` → ``SpanFacts`` → ``_CallBuilder``).

Checked on every recorded trace (fixtures and conformance captures), the shared real
conversations (in order: a turn's trace extends the history of the turn before), synthetic runs,
and random chat histories that grow, repeat, shrink, fork and restart, with tool results,
reused and missing call ids and tool spans in between, all of it also inside an app's own spans
(whole, or the run alone as the span processor hands it over): the trajectories' JSON, each trace read
both ways, equal; and the direct path taken where it should be.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

from benchmarks.throughput import synthetic
from benchmarks.workload import SpanSpec, fixture_runs, genai_run, readable_run, specs_from_spans
from otel_toolscore.assemble import _direct as _genai_direct
from otel_toolscore.assemble import assemble_trace
from otel_toolscore.conventions.parsing import forget_earlier_traces
from tests.realworld import corpus


@contextmanager
def _direct(enabled: bool, taken: list[int] | None = None) -> Iterator[None]:
    """The direct path on (counting into ``taken`` the traces it read) or off."""
    real = _genai_direct.trajectories

    def counted(trace_id: str, spans: Sequence[ReadableSpan]) -> Any:
        out = real(trace_id, spans)
        if taken is not None and out is not None:
            taken.append(1)
        return out

    _genai_direct.trajectories = counted if enabled else (lambda trace_id, spans: None)  # type: ignore[assignment]
    try:
        yield
    finally:
        _genai_direct.trajectories = real  # type: ignore[assignment]


def _dumps(traces: Sequence[Sequence[ReadableSpan]], direct: bool, taken: list[int] | None = None) -> list[list[str]]:
    """Each trace's trajectories as JSON, read in order (what earlier traces read is forgotten first)."""
    forget_earlier_traces()
    with _direct(direct, taken):
        return [[t.model_dump_json() for t in assemble_trace(f"{i:032x}", spans)] for i, spans in enumerate(traces)]


def _both_ways(traces: Sequence[Sequence[ReadableSpan]]) -> int:
    """Asserts both ways read every trace alike; the number of traces the direct path read."""
    taken: list[int] = []
    general = _dumps(traces, direct=False)
    direct = _dumps(traces, direct=True, taken=taken)
    different = [i for i, (a, b) in enumerate(zip(general, direct)) if a != b]
    assert not different, f"traces read differently: {different[:10]}"
    return len(taken)


def test_recorded_traces_read_alike_both_ways() -> None:
    traces = [spans for _, spans in fixture_runs()]
    assert len(traces) > 100
    # the direct path reads some of them (plain GenAI runs), the general way the rest
    assert 0 < _both_ways(traces) < len(traces)


def test_real_conversations_read_alike_both_ways() -> None:
    traces = corpus.span_traces()
    assert len(traces) == 592
    assert _both_ways(traces) >= 550  # (a few reuse a call id, or echo a call no output made)


def test_synthetic_runs_read_alike_both_ways_all_directly() -> None:
    traces = synthetic(10, 600, seed0=4242) + synthetic(3, 20, seed0=7) + synthetic(60, 10, seed0=77)
    assert _both_ways(traces) == len(traces)


# --- runs inside an app's own spans -------------------------------------------------------------

_SERVER = ("POST /chat", SpanKind.SERVER, {"http.request.method": "POST", "http.route": "/chat",
                                           "url.path": "/chat", "http.response.status_code": 200})
_CLIENT = ("GET", SpanKind.CLIENT, {"http.request.method": "GET", "url.full": "https://api.example.com/v1/weather",
                                    "server.address": "api.example.com", "http.response.status_code": 200})
_DB = ("SELECT cities", SpanKind.CLIENT, {"db.system.name": "postgresql", "db.operation.name": "SELECT",
                                          "db.query.text": "SELECT * FROM cities WHERE name = $1"})


def _plain(spec: tuple[str, SpanKind, dict[str, Any]], parent: int | None) -> SpanSpec:
    name, kind, attrs = spec
    return SpanSpec(name, kind, dict(attrs), parent)


def _tie(specs: list[SpanSpec]) -> list[SpanSpec]:
    for s in specs:
        s.children = []
    for i, s in enumerate(specs):
        if s.parent is not None:
            specs[s.parent].children.append(i)
    return specs


def _in_app(specs: Sequence[SpanSpec]) -> list[SpanSpec]:
    """The run as an app using the span processor holds it: under an HTTP server span, a database
    span beside it, an HTTP client and a database span under each tool span."""
    out = [_plain(_SERVER, None), _plain(_DB, 0)]
    at = len(out)
    out.extend(SpanSpec(s.name, s.kind, s.attributes, 0 if s.parent is None else s.parent + at) for s in specs)
    for i, s in enumerate(specs):
        if s.attributes.get("gen_ai.operation.name") == "execute_tool":
            out += [_plain(_CLIENT, i + at), _plain(_DB, i + at)]
    return _tie(out)


def _subtree(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    """The spans the span processor hands for scoring when the run completes before the app's span
    around it: the agent span (named ``name``) and the spans below it; its parent is elsewhere."""
    top = next(s for s in spans if s.name == name)
    parents = {s.context.span_id: s.parent.span_id if s.parent else None for s in spans}  # type: ignore[union-attr]

    def under(span_id: int | None) -> bool:
        while span_id is not None:
            if span_id == top.context.span_id:  # type: ignore[union-attr]
                return True
            span_id = parents.get(span_id)
        return False

    return [s for s in spans if under(s.context.span_id)]  # type: ignore[union-attr]


def test_synthetic_runs_inside_an_app_read_alike_both_ways_all_directly() -> None:
    specs = [genai_run(10, seed=4242 + i) for i in range(200)] + [genai_run(60, seed=77 + i) for i in range(5)]
    whole = [readable_run(_in_app(s), trace_id=i + 1) for i, s in enumerate(specs)]
    # (as the span processor completes them: the run alone, the app's span still open)
    runs = [_subtree(spans, s[0].name) for spans, s in zip(whole, specs)]
    assert all(len(run) < len(spans) and run[-1].name == s[0].name and run[-1].parent is not None
               for run, spans, s in zip(runs, whole, specs))  # (ended children first: the agent span last)
    assert _both_ways(whole) == len(whole)
    assert _both_ways(runs) == len(runs)
    # the agent span's parent, not in the run, is the one problem both ways report
    assert all(len(t.problems) == 1 and "not in the trace" in t.problems[0]
               for spans in runs[:5] for t in assemble_trace("0" * 32, spans))


def test_recorded_traces_inside_an_app_read_alike_both_ways() -> None:
    traces = [readable_run(_in_app(specs_from_spans(spans)), trace_id=i + 1)
              for i, (_, spans) in enumerate(fixture_runs())]
    plain = [readable_run(specs_from_spans(spans), trace_id=i + 1) for i, (_, spans) in enumerate(fixture_runs())]
    # wrapped, the direct path reads as many as it reads of the same traces alone
    assert 0 < _both_ways(traces) == _both_ways(plain) < len(traces)


# --- random histories ---------------------------------------------------------------------------

_TOOLS = ("get_weather", "get_flights")
_DEFINITIONS = json.dumps([{"type": "function", "name": n, "parameters": {"type": "object"}} for n in _TOOLS])


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


@st.composite
def _runs(draw: Any) -> list[SpanSpec]:
    """An agent span over chat spans (and tool spans) whose input histories change from one to the
    next the ways real apps change them: grown by the model's output and the tools' results,
    repeated, cut back, forked from an earlier point, started again; call ids fresh, reused or
    missing; results paired with their calls, with unknown ids, or without ids."""
    agent_attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent"}
    if draw(st.booleans()):
        agent_attrs["gen_ai.agent.name"] = "helper"
    if draw(st.booleans()):
        agent_attrs["toolscore.expected_tool"] = "get_weather"
    specs = [SpanSpec("invoke_agent helper", SpanKind.INTERNAL, agent_attrs, None)]
    history: list[dict[str, Any]] = [_text("system", "Be brief."), _text("user", "Weather in Oslo?")]
    ids: list[str] = []
    fresh = 0
    for step in range(draw(st.integers(1, 6))):
        calls = []
        for _ in range(draw(st.integers(0, 2))):
            how = draw(st.sampled_from(["fresh"] * 6 + ["reuse", "none"]))
            if how == "reuse" and ids:
                call_id: str | None = draw(st.sampled_from(ids))
            elif how == "none":
                call_id = None
            else:
                fresh += 1
                call_id = f"call_{fresh}"
                ids.append(call_id)
            args = {"location": draw(st.sampled_from(["Oslo", "Rome"]))}
            part = {"type": "tool_call", "name": draw(st.sampled_from(_TOOLS)), "arguments": args}
            if call_id is not None:
                part["id"] = call_id
            calls.append(part)
        parts = calls or [{"type": "text", "content": draw(st.sampled_from(["Done.", "It is sunny."]))}]
        output = {"role": "assistant", "parts": parts}
        if draw(st.booleans()):
            output["finish_reason"] = "tool_calls" if calls else "stop"
        chat: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                "gen_ai.input.messages": json.dumps(history, separators=(",", ":")),
                                "gen_ai.output.messages": json.dumps([output], separators=(",", ":"))}
        if draw(st.booleans()):
            chat["gen_ai.tool.definitions"] = _DEFINITIONS
        # (now and then: no input or output attribute, an empty list, instructions apart)
        odd = draw(st.sampled_from([None] * 12 + ["no input", "no output", "empty input", "empty output", "empty",
                                                   "instructions", "empty instructions"]))
        if odd == "no input":
            del chat["gen_ai.input.messages"]
        elif odd == "no output":
            del chat["gen_ai.output.messages"]
        elif odd in ("empty input", "empty output", "empty"):
            for key in ("gen_ai.input.messages", "gen_ai.output.messages"):
                if odd == "empty" or odd.endswith(key.split(".")[1]):
                    chat[key] = "[]"
        elif odd is not None:
            chat["gen_ai.system_instructions"] = "" if odd == "empty instructions" else json.dumps(
                [{"type": "text", "content": "Answer in French."}])
        specs.append(SpanSpec("chat m", SpanKind.CLIENT, chat, 0))
        results = []
        for part in calls:
            result = draw(st.sampled_from(['{"temperature": 20}', "Error: no such city", "sunny"]))
            # (mostly the call's own id; else an unknown one, none, or an earlier call's)
            target = part.get("id") if draw(st.integers(0, 7)) else draw(st.sampled_from(["call_x", None, *ids]))
            if draw(st.booleans()):  # the tool's own span
                tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": part["name"],
                        "gen_ai.tool.call.arguments": json.dumps(part["arguments"]), "gen_ai.tool.call.result": result}
                if target is not None:
                    tool["gen_ai.tool.call.id"] = target
                specs.append(SpanSpec(f"execute_tool {part['name']}", SpanKind.INTERNAL, tool, 0))
            response: dict[str, Any] = {"type": "tool_call_response", "response": result}
            if target is not None:
                response["id"] = target
            results.append(response)
        change = draw(st.sampled_from(["grow", "grow", "grow", "echo", "repeat", "shrink", "shrink", "fork", "restart", "user"]))
        if change in ("grow", "echo"):
            if change == "echo" and calls:  # an app that echoes a call otherwise than it was made
                i = draw(st.integers(0, len(calls) - 1))
                altered = {**calls[i], **({"arguments": {"location": "Lima"}} if draw(st.booleans())
                                          else {"name": "get_time"})}
                parts = [*calls[:i], altered, *calls[i + 1:]]
            history = [*history, {"role": "assistant", "parts": parts}]
            if results:
                history.append({"role": "tool", "parts": results})
        elif change == "shrink" and len(history) > 2:
            history = history[: draw(st.integers(2, len(history) - 1))]
        elif change == "fork":
            history = [*history[: draw(st.integers(1, len(history)))], _text("user", f"And step {step}?")]
        elif change == "restart":
            history = [_text("system", "Be brief."), _text("user", f"New question {step}")]
        elif change == "user":
            history = [*history, {"role": "assistant", "parts": parts}, _text("user", "Thanks, and Rome?")]
    for i, s in enumerate(specs):
        if s.parent is not None:
            specs[s.parent].children.append(i)
    return specs


@settings(max_examples=500, deadline=None)
@given(_runs(), st.booleans())
def test_random_histories_read_alike_both_ways(specs: list[SpanSpec], sdk_attributes: bool) -> None:
    _both_ways([readable_run(specs, trace_id=1, sdk_attributes=sdk_attributes)])


@settings(max_examples=200, deadline=None)
@given(_runs(), _runs())
def test_random_histories_read_alike_both_ways_after_another_trace(first: list[SpanSpec], then: list[SpanSpec]) -> None:
    # a later trace may extend what an earlier one read (kept between traces)
    _both_ways([readable_run(first, trace_id=1), readable_run(then, trace_id=2)])


@st.composite
def _runs_in_app(draw: Any) -> tuple[list[SpanSpec], bool]:
    """``_runs`` among an app's own spans: maybe under an HTTP server span, plain spans below any
    span or now and then between a span and its parent; and whether the run is handed over
    alone (``_subtree``), as the span processor does when the app's span is still open."""
    specs = [SpanSpec(s.name, s.kind, s.attributes, s.parent) for s in draw(_runs())]
    wrapped = draw(st.booleans())
    if wrapped:
        specs = [_plain(_SERVER, None),
                 *(SpanSpec(s.name, s.kind, s.attributes, 0 if s.parent is None else s.parent + 1) for s in specs)]
    handle = ("handle_request", SpanKind.INTERNAL, {"app.user.id": "u1", "code.function.name": "handle"})
    for _ in range(draw(st.integers(0, 4))):
        plain = draw(st.sampled_from([_CLIENT, _DB, handle]))
        target = draw(st.integers(0, len(specs) - 1))
        if draw(st.integers(0, 5)) or specs[target].parent is None:
            specs.append(_plain(plain, target))
        else:  # between the span and its parent
            specs.append(_plain(plain, specs[target].parent))
            specs[target].parent = len(specs) - 1
    return _tie(specs), wrapped and draw(st.booleans())


def _spans_in_app(run: tuple[list[SpanSpec], bool], trace_id: int, sdk_attributes: bool = True) -> list[ReadableSpan]:
    specs, alone = run
    spans = readable_run(specs, trace_id=trace_id, sdk_attributes=sdk_attributes)
    return _subtree(spans, "invoke_agent helper") if alone else spans


@settings(max_examples=400, deadline=None)
@given(_runs_in_app(), st.booleans())
def test_random_histories_inside_an_app_read_alike_both_ways(run: tuple[list[SpanSpec], bool],
                                                             sdk_attributes: bool) -> None:
    _both_ways([_spans_in_app(run, trace_id=1, sdk_attributes=sdk_attributes)])


def test_random_histories_inside_an_app_take_the_direct_path_often() -> None:
    examples: list[tuple[list[SpanSpec], bool]] = []

    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(_runs_in_app())
    def collect(run: tuple[list[SpanSpec], bool]) -> None:
        examples.append(run)

    collect()
    traces = [_spans_in_app(run, trace_id=i + 1) for i, run in enumerate(examples)]
    taken: list[int] = []
    _dumps(traces, direct=True, taken=taken)
    assert len(taken) > len(examples) // 5
    # ... among them runs under the app's span, with plain spans, handed over alone
    inside = [t for t, (specs, _) in zip(traces, examples) if len(t) > sum(1 for s in specs
                                                                         if s.kind is not SpanKind.SERVER
                                                                         and s.name not in ("GET", "SELECT cities",
                                                                                            "handle_request"))]
    assert len(inside) > len(examples) // 4
    taken.clear()
    _dumps(inside, direct=True, taken=taken)
    assert len(taken) > len(inside) // 5


def test_random_histories_take_the_direct_path_often() -> None:
    """The random histories exercise the direct path, not only the general way."""
    taken: list[int] = []
    examples: list[list[SpanSpec]] = []

    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(_runs())
    def collect(specs: list[SpanSpec]) -> None:
        examples.append(specs)

    collect()
    _dumps([readable_run(s, trace_id=i + 1) for i, s in enumerate(examples)], direct=True, taken=taken)
    assert len(taken) > len(examples) // 4


# --- the cases the direct path must leave to the general way, each shown once -------------------


def _call(call_id: str, location: str = "Oslo") -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": "get_weather", "arguments": {"location": location}}


def _result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "response": '{"t": 20}'}]}


def _trace(*chats: tuple[list[dict[str, Any]], list[dict[str, Any]]], tools: Sequence[str] = ()) -> list[ReadableSpan]:
    """An agent span over chat spans of (input history, output parts), then a tool span per id."""
    specs = [SpanSpec("invoke_agent a", SpanKind.INTERNAL, {"gen_ai.operation.name": "invoke_agent",
                                                             "gen_ai.agent.name": "a"}, None)]
    for history, parts in chats:
        specs.append(SpanSpec("chat m", SpanKind.CLIENT, {
            "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(history),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}] if parts else [])}, 0))
    for call_id in tools:
        specs.append(SpanSpec("execute_tool get_weather", SpanKind.INTERNAL, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.call.result": '{"t": 21}'}, 0))
    specs[0].children = list(range(1, len(specs)))
    return readable_run(specs, trace_id=1)


_ASK = [_text("system", "s"), _text("user", "Weather?")]
_ASKED = [*_ASK, {"role": "assistant", "parts": [_call("c1")]}, _result("c1")]
_DONE = [{"type": "text", "content": "20 degrees."}]


@pytest.mark.parametrize(("spans", "direct"), [
    (_trace((_ASK, [_call("c1")]), (_ASKED, _DONE), tools=["c1"]), True),
    # a history cut back, still holding the result: read again, the result counted once
    (_trace((_ASK, [_call("c1")]), ([*_ASKED, _text("assistant", "Checking.")], _DONE), (_ASKED, _DONE)), True),
    # the call echoed with other arguments: another call for the general way
    (_trace((_ASK, [_call("c1")]), ([*_ASK, {"role": "assistant", "parts": [_call("c1", "Lima")]}, _result("c1")],
                                    _DONE)), False),
    # two tool spans for one call
    (_trace((_ASK, [_call("c1")]), (_ASKED, _DONE), tools=["c1", "c1"]), False),
    # a call id made twice
    (_trace((_ASK, [_call("c1")]), (_ASKED, [_call("c1")])), False),
    # a model call with empty lists of messages: a problem the general way reports
    (_trace(([], [])), False),
    # a result for a call its input does not echo
    (_trace((_ASK, [_call("c1")]), ([*_ASK, _result("c1")], _DONE)), False),
])
def test_the_general_way_reads_what_the_direct_path_leaves(spans: list[ReadableSpan], direct: bool) -> None:
    assert _both_ways([spans]) == (1 if direct else 0)


def _moved(spans: list[ReadableSpan], name: str, *, span_id: int | None = None, parent_of: str | None = None,
           parent_id: int | None = None) -> list[ReadableSpan]:
    """The trace with the span named ``name`` given another id, or the parent ``parent_of`` names
    (or ``parent_id``)."""
    by_name = {s.name: s for s in spans}
    out = []
    for s in spans:
        if s.name == name:
            ctx, parent = s.context, s.parent
            if span_id is not None:
                ctx = SpanContext(ctx.trace_id, span_id, False, ctx.trace_flags)  # type: ignore[union-attr]
            if parent_of is not None or parent_id is not None:
                pid = by_name[parent_of].context.span_id if parent_of else parent_id  # type: ignore[union-attr]
                parent = SpanContext(ctx.trace_id, pid, False, ctx.trace_flags)  # type: ignore[arg-type,union-attr]
            s = ReadableSpan(name=s.name, context=ctx, parent=parent, resource=s.resource, kind=s.kind,
                             attributes=dict(s.attributes or {}), start_time=s.start_time, end_time=s.end_time,
                             instrumentation_scope=s.instrumentation_scope)
        out.append(s)
    return out


def _failed(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    """The trace with the span named ``name`` failed: status ERROR, an exception event (naming a
    model's content key: the general way looks at events only on model spans)."""
    return [ReadableSpan(name=s.name, context=s.context, parent=s.parent, resource=s.resource, kind=s.kind,
                         attributes=dict(s.attributes or {}), start_time=s.start_time, end_time=s.end_time,
                         instrumentation_scope=s.instrumentation_scope, status=Status(StatusCode.ERROR, "503"),
                         events=[Event("exception", {"exception.type": "HTTPError", "exception.message": "503",
                                                     "gen_ai.prompt": "x"})])
            if s.name == name else s for s in spans]


def _in_app_trace(*between: str, model_key: bool = False) -> list[ReadableSpan]:
    """``_trace``'s usual run under an app's spans (``_in_app``), each span named in ``between``
    given a plain parent of its own; with ``model_key``, the tool's HTTP client span says a model."""
    specs = _in_app(specs_from_spans(_trace((_ASK, [_call("c1")]), (_ASKED, _DONE), tools=["c1"])))
    for name in between:
        i = next(i for i, s in enumerate(specs) if s.name == name)
        specs.append(SpanSpec(f"around {name}", SpanKind.INTERNAL, {"app.step": 1}, specs[i].parent))
        specs[i].parent = len(specs) - 1
    if model_key:
        specs[next(i for i, s in enumerate(specs) if s.name == "GET")].attributes.update(
            {"gen_ai.response.model": "m", "http.request.body.content": '{"messages": []}'})
    return readable_run(_tie(specs), trace_id=1)


_APP = _in_app_trace()
_AGENT_ID = next(s.context.span_id for s in _APP if s.name == "invoke_agent a")  # type: ignore[union-attr]


@pytest.mark.parametrize(("spans", "direct"), [
    (_APP, True),
    (_subtree(_APP, "invoke_agent a"), True),  # its parent elsewhere: the general way's problem
    (_in_app_trace("invoke_agent a"), True),  # two plain spans above it
    (_moved(_APP, "invoke_agent a", parent_id=_AGENT_ID), True),  # its own parent: another problem
    (_in_app_trace("SELECT cities"), True),
    (_failed(_APP, "GET"), True),  # a failed HTTP call under the tool span
    # a plain span between the agent span and its model or tool span
    (_in_app_trace("chat m"), False),
    (_in_app_trace("execute_tool get_weather"), False),
    # a plain span with a model's key beside content: a problem the general way reports
    (_in_app_trace(model_key=True), False),
    # span ids twice
    (_moved(_APP, "GET", span_id=_AGENT_ID), False),
    (_moved(_APP, "POST /chat", span_id=_AGENT_ID), False),
    (_moved(_APP, "GET", span_id=next(s.context.span_id for s in _APP if s.name == "POST /chat")), False),  # type: ignore[union-attr]
    # parent cycles: beside the run, and through the agent span
    (_moved(_moved(_APP, "POST /chat", parent_of="SELECT cities"), "SELECT cities", parent_of="POST /chat"), False),
    (_moved(_APP, "invoke_agent a", parent_of="GET"), False),
])
def test_the_general_way_reads_what_the_direct_path_leaves_in_an_app(spans: list[ReadableSpan], direct: bool) -> None:
    assert _both_ways([spans]) == (1 if direct else 0)
