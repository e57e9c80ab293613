"""Assembly: runs, call de-duplication, result matching, and bad input recorded, never raised."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Status, StatusCode

from otel_toolscore import build_trajectories
from tests.support.spans import span


def agent(sid: int, name: str | None, parent: int | None = None, start: int = 0, **extra: Any) -> ReadableSpan:
    attrs = {"gen_ai.operation.name": "invoke_agent", **extra}
    if name:
        attrs["gen_ai.agent.name"] = name
    return span(sid, f"invoke_agent {name or ''}".strip(), parent, attrs, start)


def chat(sid: int, parent: int, start: int, inputs: list[Any], outputs: list[Any], **extra: Any) -> ReadableSpan:
    return span(sid, "chat m", parent, {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps(inputs),
        "gen_ai.output.messages": json.dumps(outputs),
        **extra,
    }, start)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def calls(*items: tuple[str | None, str, dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "parts": [
        {"type": "tool_call", "id": cid, "name": name, "arguments": args} for cid, name, args in items
    ]}


def results(*items: tuple[str | None, Any]) -> dict[str, Any]:
    return {"role": "tool", "parts": [
        {"type": "tool_call_response", "id": cid, "response": resp} for cid, resp in items
    ]}


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "text", "content": text}]}


def tool(sid: int, parent: int, start: int, name: str, args: Any, result: Any = None, call_id: str | None = None,
         status: Status | None = None, events: list[Event] | None = None) -> ReadableSpan:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                             "gen_ai.tool.call.arguments": json.dumps(args)}
    if result is not None:
        attrs["gen_ai.tool.call.result"] = json.dumps(result)
    if call_id:
        attrs["gen_ai.tool.call.id"] = call_id
    return span(sid, f"execute_tool {name}", parent, attrs, start, events=events, status=status)


def one(spans: list[ReadableSpan]):
    runs = build_trajectories(spans)
    assert len(runs) == 1, [(r.agent_name, r.nested) for r in runs]
    return runs[0]


def test_call_seen_in_output_history_and_tool_span_is_one_call() -> None:
    q = user("weather in Oslo?")
    t = one([
        agent(1, "a"),
        chat(2, 1, 10, [q], [calls(("c1", "get_weather", {"city": "Oslo"}))]),
        tool(3, 1, 20, "get_weather", {"city": "Oslo"}, {"t": 5}, call_id="c1"),
        chat(4, 1, 30, [q, calls(("c1", "get_weather", {"city": "Oslo"})), results(("c1", '{"t": 5}'))],
             [answer("5 degrees")]),
    ])
    assert len(t.tool_calls) == 1
    c = t.tool_calls[0]
    assert (c.id, c.name, c.arguments, c.result, c.span_id) == ("c1", "get_weather", {"city": "Oslo"}, {"t": 5},
                                                                "0000000000000003")
    assert set(c.sources) == {"llm_output", "history", "tool_span", "result_message"}
    assert t.output == "5 degrees" and t.input == "weather in Oslo?"
    assert [type(s).__name__ for s in t.steps] == ["LLMCall", "ToolCall", "LLMCall"]


def test_repeated_identical_calls_stay_separate() -> None:
    q = user("q")
    c = ("get_weather", {"city": "Oslo"})
    t = one([
        agent(1, "a"),
        chat(2, 1, 10, [q], [calls((None, *c))]),
        chat(3, 1, 20, [q, calls((None, *c)), results((None, "x"))], [calls((None, *c))]),
        chat(4, 1, 30, [q, calls((None, *c)), results((None, "x")), calls((None, *c)), results((None, "y"))],
             [answer("done")]),
    ])
    assert [x.name for x in t.tool_calls] == ["get_weather", "get_weather"]
    assert [x.result for x in t.tool_calls] == ["x", "y"]


def test_responses_bridge_ids_differ_between_history_and_results() -> None:
    q = user("q")
    t = one([
        agent(1, "a"),
        chat(2, 1, 10, [q], [calls(("call_1", "f", {"a": 1})), calls(("call_2", "f", {"a": 2}))]),
        chat(3, 1, 20, [q, calls(("fc_1", "f", {"a": 1}), ("fc_2", "f", {"a": 2})),
                        results(("call_1", "one"), ("call_2", "two"))], [answer("ok")]),
    ])
    assert [(c.id, c.result) for c in t.tool_calls] == [("call_1", "one"), ("call_2", "two")]


def test_results_without_ids_match_in_call_order() -> None:
    q = {"role": "user", "content": "q"}
    t = one([
        agent(1, "a"),
        span(2, "litellm_request", 1, {
            "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "q",
            "gen_ai.completion.0.function_call.name": "f", "gen_ai.completion.0.function_call.arguments": '{"x": 1}',
            "gen_ai.completion.1.function_call.name": "g", "gen_ai.completion.1.function_call.arguments": '{"y": 2}',
        }, 10),
        span(3, "litellm_request", 1, {
            "gen_ai.prompt.0.role": "user", "gen_ai.prompt.0.content": "q",
            "gen_ai.prompt.1.role": "assistant",
            "gen_ai.prompt.2.role": "tool", "gen_ai.prompt.2.content": '{"r": 1}',
            "gen_ai.prompt.3.role": "tool", "gen_ai.prompt.3.content": '{"r": 2}',
            "gen_ai.completion.0.content": "done",
        }, 20),
    ])
    del q
    assert [(c.name, c.arguments, c.result) for c in t.tool_calls] == [("f", {"x": 1}, {"r": 1}),
                                                                        ("g", {"y": 2}, {"r": 2})]
    assert t.output == "done"


def test_parallel_tool_spans_with_equal_start_keep_model_order() -> None:
    q = user("q")
    t = one([
        agent(1, "a"),
        chat(2, 1, 10, [q], [calls(("c1", "w", {"c": "London"}), ("c2", "w", {"c": "Berlin"}))]),
        tool(4, 1, 20, "w", {"c": "Berlin"}, "b", call_id="c2"),  # Berlin's span first in the file
        tool(3, 1, 20, "w", {"c": "London"}, "l", call_id="c1"),
        chat(5, 1, 30, [q], [answer("ok")]),
    ])
    assert [c.arguments["c"] for c in t.tool_calls] == ["London", "Berlin"]
    assert [c.result for c in t.tool_calls] == ["l", "b"]


def test_failed_tool_recorded_from_status_exception_and_payload() -> None:
    exc = Event("exception", {"exception.type": "ValueError", "exception.message": "bad city"}, 0)
    t = one([
        agent(1, "a"),
        tool(2, 1, 10, "a", {}, None, status=Status(StatusCode.ERROR, "boom")),
        tool(3, 1, 20, "b", {}, None, events=[exc]),
        tool(4, 1, 30, "c", {}, {"error": "quota exceeded"}),
        tool(5, 1, 40, "d", {}, {"status": "error", "message": "nope"}),
        tool(6, 1, 50, "e", {}, {"ok": True}),
    ])
    assert [c.error for c in t.tool_calls] == ["boom", "ValueError: bad city", "quota exceeded", "nope", None]


def test_rejected_call_without_tool_span_gets_error_from_next_input() -> None:
    q = user("q")
    t = one([
        agent(1, "a"),
        chat(2, 1, 10, [q], [calls(("c1", "send", {"to": "x"}))]),
        chat(3, 1, 20, [q, calls(("c1", "send", {"to": "x"})),
                        results(("c1", "AI_InvalidToolInputError: Invalid input for tool send"))],
             [answer("failed")]),
    ])
    assert t.tool_calls[0].error and t.tool_calls[0].error.startswith("AI_InvalidToolInputError")
    assert t.tool_calls[0].span_id is None


def test_earlier_conversation_turns_are_not_this_runs_calls() -> None:
    old = [user("first question"), calls(("old", "f", {})), results(("old", "r")), answer("first answer")]
    t = one([
        agent(1, "a"),
        chat(2, 1, 10, [*old, user("second question")], [answer("second answer")]),
    ])
    assert t.tool_calls == []
    assert t.input == "second question"


def test_wrappers_collapse_into_innermost_named_agent() -> None:
    t = one([
        agent(1, None, start=0),
        span(2, "unknown", 1, {"gen_ai.operation.name": "unknown"}, 1),
        agent(3, "inner", 2, start=2),
        chat(4, 3, 3, [user("q")], [answer("a")]),
    ])
    assert t.agent_name == "inner" and t.span_id == "0000000000000003" and not t.nested


def test_sub_agents_are_nested_runs_and_outer_sees_all_calls() -> None:
    runs = build_trajectories([
        agent(1, "orchestrator"),
        chat(2, 1, 1, [user("q")], [calls(("c1", "plan", {}))]),
        tool(3, 1, 2, "plan", {}, "p", call_id="c1"),
        agent(4, "researcher", 1, start=3),
        chat(5, 4, 4, [user("sub q")], [calls(("c2", "search", {"q": "x"}))]),
        tool(6, 4, 5, "search", {"q": "x"}, "found", call_id="c2"),
        agent(7, "writer", 1, start=6),
        chat(8, 7, 7, [user("write")], [answer("text")]),
        chat(9, 1, 8, [user("q")], [answer("final")]),
    ])
    assert [(r.agent_name, r.nested) for r in runs] == [("orchestrator", False), ("researcher", True),
                                                         ("writer", True)]
    assert [c.name for c in runs[0].tool_calls] == ["plan", "search"]
    assert [c.name for c in runs[1].tool_calls] == ["search"]
    assert runs[1].parent_run_span_id == runs[0].span_id
    assert runs[0].output == "final"


def test_trace_without_agent_span_is_one_run_at_its_root() -> None:
    t = one([
        span(1, "request", None, {}, 0),
        chat(2, 1, 1, [user("q")], [answer("a")]),
    ])
    assert t.span_id == "0000000000000001" and t.agent_name is None and t.output == "a"


def test_deprecated_genai_events_are_read() -> None:
    ev = [
        Event("gen_ai.system.message", {"body": json.dumps({"content": "be brief"})}, 1),
        Event("gen_ai.user.message", {"body": json.dumps({"content": "weather?"})}, 2),
        Event("gen_ai.choice", {"body": json.dumps({"index": 0, "finish_reason": "tool_calls", "message": {
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "w", "arguments": '{"city": "Oslo"}'}}]}})}, 3),
    ]
    ev2 = [
        Event("gen_ai.tool.message", {"body": json.dumps({"id": "c1", "content": '{"t": 3}'})}, 5),
        Event("gen_ai.choice", {"body": json.dumps({"message": {"content": "3 degrees"}})}, 6),
    ]
    t = one([
        agent(1, "a"),
        span(2, "chat m", 1, {"gen_ai.operation.name": "chat"}, 1, events=ev),
        span(3, "chat m", 1, {"gen_ai.operation.name": "chat"}, 4, events=ev2),
    ])
    assert t.system_instructions == "be brief" and t.input == "weather?"
    assert [(c.id, c.name, c.arguments, c.result) for c in t.tool_calls] == [("c1", "w", {"city": "Oslo"}, {"t": 3})]
    assert t.output == "3 degrees"
    assert "otel_genai_events" in t.conventions


def test_genai_retrieval_span() -> None:
    docs = [{"id": "d1", "content": "alpha", "score": 0.9}, {"id": "d2", "content": "beta", "score": 0.1}]
    t = one([
        agent(1, "a"),
        span(2, "retrieval kb", 1, {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "q",
                                    "gen_ai.retrieval.documents": json.dumps(docs)}, 1),
    ])
    (r,) = t.retrievals
    assert r.query == "q" and [(d.id, d.content, d.score) for d in r.documents] == [("d1", "alpha", 0.9),
                                                                                     ("d2", "beta", 0.1)]


def test_external_content_is_recorded_not_read_as_empty() -> None:
    t = one([agent(1, "a"), span(2, "chat m", 1, {"gen_ai.operation.name": "chat",
                                                 "gen_ai.input.messages_ref": "s3://bucket/x"}, 1)])
    assert any("outside the span" in p for p in t.problems)


def test_structural_faults_are_recorded() -> None:
    spans = [
        agent(1, "a"),
        chat(2, 1, 1, [user("q")], [answer("a")]),
        chat(2, 1, 2, [user("dup")], [answer("dup")]),  # duplicate span id
        chat(3, 99, 3, [user("orphan")], [answer("o")]),  # missing parent
        span(4, "x", 5, {}, 4),  # 4 and 5: a parent cycle
        span(5, "y", 4, {"gen_ai.operation.name": "chat"}, 5),
    ]
    runs = build_trajectories(spans)
    problems = [p for r in runs for p in r.problems]
    assert any("duplicate span id" in p for p in problems)
    assert any("not in the trace" in p for p in problems)
    assert any("parent cycle" in p for p in problems)
    assert runs[0].agent_name == "a" and runs[0].output == "a"


def test_malformed_message_json_and_odd_attribute_types() -> None:
    t = one([
        agent(1, "a"),
        span(2, "chat m", 1, {"gen_ai.operation.name": "chat", "gen_ai.input.messages": "[{not json",
                              "gen_ai.output.messages": 42, "gen_ai.tool.definitions": True}, 1),
        span(3, "execute_tool f", 1, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": ("f", "g"),
                                      "gen_ai.tool.call.arguments": "{'a': 1", "gen_ai.tool.call.result": b"\xff"}, 2),
    ])
    assert any("gen_ai.input.messages" in p for p in t.problems)
    (c,) = t.tool_calls
    assert c.arguments is None and c.arguments_error and c.arguments_raw == "{'a': 1"


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_keys = st.sampled_from([
    "gen_ai.operation.name", "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.name",
    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.tool.definitions", "openinference.span.kind",
    "llm.input_messages.0.message.role", "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
    "input.value", "output.value", "traceloop.span.kind", "gen_ai.prompt.0.role", "gen_ai.completion.0.content",
    "ai.operationId", "ai.prompt", "ai.response.toolCalls", "mastra.span.type", "retrieval.documents.0.document.content",
    "gen_ai.system_instructions", "toolscore.expected_tool",
])
_attr_value = st.one_of(
    st.sampled_from(["invoke_agent", "chat", "execute_tool", "AGENT", "LLM", "TOOL", "RETRIEVER", "CHAIN",
                     "agent", "tool", "ai.generateText", "ai.toolCall", "model_step", "agent_run"]),
    _values.map(json.dumps),
    st.text(max_size=40),
    st.integers(),
    st.booleans(),
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.tuples(st.integers(1, 12), st.integers(0, 12), st.dictionaries(_keys, _attr_value, max_size=6),
                          st.integers(0, 50)), max_size=15))
def test_random_spans_never_raise(items: list[tuple[int, int, dict[str, Any], int]]) -> None:
    spans = [span(sid, f"s{sid}", parent or None, attrs, start) for sid, parent, attrs, start in items]
    runs = build_trajectories(spans)
    for r in runs:
        r.model_dump_json()  # every trajectory is serialisable
        json.dumps(r.to_report(), default=str)


@pytest.mark.parametrize("depth", [5000])
def test_deep_trees_do_not_overflow(depth: int) -> None:
    spans = [agent(1, "a")] + [span(i, f"s{i}", i - 1, {}, i) for i in range(2, depth)]
    spans.append(chat(depth, depth - 1, depth, [user("q")], [answer("deep")]))
    assert one(spans).output == "deep"


def test_openinference_agent_without_agent_name_is_named_after_its_span_and_rules_match() -> None:
    from otel_toolscore.config import Rule

    oi_tool = {"openinference.span.kind": "TOOL", "tool.name": "get_weather", "input.value": '{"city": "Oslo"}'}
    unnamed = [span(1, "support-bot", attrs={"openinference.span.kind": "AGENT", "input.value": "weather?"}),
               span(2, "get_weather", 1, oi_tool, start=1)]
    run = one(unnamed)
    assert run.agent_name == "support-bot"
    assert Rule(agent="support-.*", expected_tool="get_weather").matches(run.agent_name, run.input)
    # a real agent.name anywhere in the run still wins over a span name
    named = [span(1, "Agent workflow", attrs={"openinference.span.kind": "AGENT", "agent.name": "planner"}),
             span(2, "AgentRunner", 1, {"openinference.span.kind": "AGENT"}, start=1),
             span(3, "get_weather", 2, oi_tool, start=2)]
    assert one(named).agent_name == "planner"


def test_the_run_carries_the_service_name_of_its_agent_span() -> None:
    from opentelemetry.sdk.resources import Resource

    spans = [agent(1, "weather"), tool(2, 1, 1, "get_weather", {"city": "Oslo"})]
    with_resource = [ReadableSpan(name=s.name, context=s.context, parent=s.parent, attributes=s.attributes,
                                  start_time=s.start_time, end_time=s.end_time,
                                  resource=Resource.create({"service.name": "checkout-api"})) for s in spans]
    assert one(with_resource).service_name == "checkout-api"
    assert one(spans).service_name is None  # the SDK's unknown_service default names no app


# A model call's history that repeats the one before it is walked only in what it adds
# (``_CallBuilder.add_llm``): what the repeated part leaves (unanswered calls, echo counts) holds.


def test_results_in_a_later_input_answer_the_calls_echoed_before_in_order() -> None:
    # two calls under one id (models reuse ids), answered only in the next model call's input
    asked = [user("q"), calls(("c1", "f", {"a": 1}), ("c1", "f", {"a": 2}))]
    run = one([
        agent(1, "a"),
        chat(2, 1, 10, asked, [answer("wait")]),
        chat(3, 1, 20, [*asked, results(("c1", "r1"), ("c1", "r2"))], [answer("done")]),
    ])
    assert [(c.arguments, c.result) for c in run.tool_calls] == [({"a": 1}, "r1"), ({"a": 2}, "r2")]


def test_a_call_echoed_again_after_the_repeated_history_is_a_second_call() -> None:
    first = [user("q"), calls(("x", "f", {"a": 1})), results(("x", "r1"))]
    run = one([
        agent(1, "a"),
        chat(2, 1, 10, first, [answer("again")]),
        chat(3, 1, 20, [*first, calls(("x", "f", {"a": 1})), results(("x", "r2"))], [answer("done")]),
    ])
    assert [c.result for c in run.tool_calls] == ["r1", "r2"]
