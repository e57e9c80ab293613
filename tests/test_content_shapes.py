"""Content the readers find in more places and shapes than span attributes of the GenAI JSON schema
(issue 15): GenAI content carried in span events, content blocks keyed by their kind (Bedrock
Converse, Gemini), the tool-schema shapes of several providers, Google ADK's own attributes and
its merged-responses span, and an LLM span that stands for several model calls.

Each shape on small synthetic spans, with its error flag where the shape has one.
"""

from __future__ import annotations

import json
from itertools import count
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from otel_toolscore import semconv as sc
from otel_toolscore.assemble import assemble_trace
from otel_toolscore.conventions import classify, read_span
from otel_toolscore.conventions import parsing as p
from otel_toolscore.trajectory import Trajectory

TRACE = 0x5EED
_ids = count(100)


def _span(name: str, attrs: dict[str, Any], events: tuple[Event, ...] = (), *, parent: ReadableSpan | None = None,
          start: int = 0, end: int = 0) -> ReadableSpan:
    return ReadableSpan(
        name=name,
        context=SpanContext(TRACE, next(_ids), False, TraceFlags(1)),
        parent=parent.context if parent is not None else None,
        attributes=attrs,
        events=events,
        start_time=start,
        end_time=end or start + 1,
    )


def _run(spans: list[ReadableSpan]) -> Trajectory:
    (top,) = [t for t in assemble_trace(format(TRACE, "032x"), spans) if not t.nested]
    return top


def _parts(role: str, *parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"role": role, "parts": list(parts), **extra}


def _text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


# --- GenAI content in span events ------------------------------------------------------------------


def _details(**attrs: Any) -> Event:
    return Event(sc.EVENT_INFERENCE_DETAILS, {k.replace("__", "."): v for k, v in attrs.items()})


def test_the_inference_details_event_holds_the_spans_own_content() -> None:
    span = _span("chat", {sc.GEN_AI_OPERATION_NAME: "chat"}, (
        Event(sc.EVENT_INFERENCE_DETAILS, {sc.GEN_AI_SYSTEM_INSTRUCTIONS: json.dumps([_text("Be brief.")])}),
        Event(sc.EVENT_INFERENCE_DETAILS, {sc.GEN_AI_INPUT_MESSAGES: json.dumps([_parts("user", _text("hi"))])}),
        Event(sc.EVENT_INFERENCE_DETAILS, {sc.GEN_AI_OUTPUT_MESSAGES: json.dumps([_parts(
            "assistant", {"type": "tool_call", "id": "c1", "name": "f", "arguments": {"x": 1}}, finish_reason="tool_use")])}),
    ))
    facts = read_span(span)
    assert facts.role == "llm"
    assert facts.system_instructions == "Be brief."
    assert [(m.role, m.content) for m in facts.input_messages or []] == [("user", "hi")]
    (out,) = facts.output_messages or []
    assert [(c.id, c.name, c.arguments) for c in out.tool_calls] == [("c1", "f", {"x": 1})]
    assert not facts.problems


def test_a_model_span_known_only_by_its_content_events_is_a_model_call() -> None:
    span = _span("chat", {sc.GEN_AI_PROVIDER_NAME: "p"}, (
        Event(sc.EVENT_INFERENCE_DETAILS, {sc.GEN_AI_INPUT_MESSAGES: json.dumps([_parts("user", _text("hi"))])}),))
    assert read_span(span).role == "llm"
    assert classify(span) == "genai"


def test_several_events_of_one_attribute_add_up_in_order_and_the_span_attribute_wins() -> None:
    first = json.dumps([_parts("user", _text("q"))])
    later = json.dumps([_parts("user", {"type": "tool_call_response", "id": "c1", "response": "42"})])
    span = _span("step", {sc.GEN_AI_OPERATION_NAME: "chat"}, (
        Event(sc.EVENT_INFERENCE_DETAILS, {sc.GEN_AI_INPUT_MESSAGES: first}),
        Event(sc.EVENT_INFERENCE_DETAILS, {sc.GEN_AI_INPUT_MESSAGES: later}),
    ))
    messages = read_span(span).input_messages or []
    assert [m.content for m in messages] == ["q", None]
    assert messages[1].tool_results[0].content == 42

    attr = json.dumps([_parts("user", _text("from the attribute"))])
    both = _span("chat", {sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_INPUT_MESSAGES: attr},
                 (Event(sc.EVENT_INFERENCE_DETAILS, {sc.GEN_AI_INPUT_MESSAGES: first}),))
    assert [m.content for m in read_span(both).input_messages or []] == ["from the attribute"]


def test_the_early_content_events_hold_the_prompt_and_the_completion() -> None:
    span = _span("chat", {sc.GEN_AI_SYSTEM: "openai"}, (
        Event(sc.EVENT_CONTENT_PROMPT, {sc.GEN_AI_PROMPT: json.dumps([{"role": "user", "content": "hi"}])}),
        Event(sc.EVENT_CONTENT_COMPLETION, {sc.GEN_AI_COMPLETION: json.dumps([{"role": "assistant", "content": "yo"}])}),
    ))
    facts = read_span(span)
    assert facts.role == "llm"
    assert [m.content for m in facts.input_messages or []] == ["hi"]
    assert [m.content for m in facts.output_messages or []] == ["yo"]


def test_an_agent_span_with_content_events_gives_the_runs_input_and_answer() -> None:
    agent = _span("invoke_agent a", {sc.GEN_AI_OPERATION_NAME: "invoke_agent", sc.GEN_AI_AGENT_NAME: "a"}, (
        _details(gen_ai__input__messages=json.dumps([_parts("user", _text("What is 2+2?"))])),
        _details(gen_ai__output__messages=json.dumps([_parts("assistant", _text("4\n"), finish_reason="end_turn")])),
    ), start=0, end=10)
    chat = _span("chat", {sc.GEN_AI_OPERATION_NAME: "chat"}, (
        _details(gen_ai__output__messages=json.dumps([_parts("assistant", _text("4"))])),), parent=agent, start=1)
    run = _run([agent, chat])
    assert run.input == "What is 2+2?"
    assert run.output == "4\n"


# --- the deprecated per-message events with content-block lists --------------------------------


def _blocks(*blocks: dict[str, Any]) -> str:
    return json.dumps(list(blocks))


def _use(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": call_id, "name": name, "input": args}}


def _result(call_id: str, value: Any, status: str = "success") -> dict[str, Any]:
    return {"toolResult": {"toolUseId": call_id, "status": status, "content": [{"json": value}]}}


def test_deprecated_events_with_block_lists_read_as_text_calls_and_results() -> None:
    span = _span("chat", {sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_SYSTEM: "s"}, (
        Event(sc.EVENT_SYSTEM_MESSAGE, {"content": _blocks({"text": "Be brief."})}),
        Event(sc.EVENT_USER_MESSAGE, {"content": _blocks({"text": "Weather in Oslo?"})}),
        Event(sc.EVENT_ASSISTANT_MESSAGE, {"content": _blocks({"text": "Checking."}, _use("t1", "weather", city="Oslo"))}),
        Event(sc.EVENT_TOOL_MESSAGE, {"content": _blocks(_result("t1", {"c": 3}), _result("t2", "down", "error"))}),
        Event(sc.EVENT_CHOICE, {"message": _blocks({"text": "3 degrees."}), "finish_reason": "end_turn"}),
    ))
    facts = read_span(span)
    assert facts.system_instructions == "Be brief."
    system, user, assistant, tool = facts.input_messages or []
    assert user.content == "Weather in Oslo?"
    assert assistant.content == "Checking."
    assert [(c.id, c.name, c.arguments) for c in assistant.tool_calls] == [("t1", "weather", {"city": "Oslo"})]
    assert [(r.tool_call_id, r.is_error) for r in tool.tool_results] == [("t1", False), ("t2", True)]
    (choice,) = facts.output_messages or []
    assert (choice.content, choice.finish_reason) == ("3 degrees.", "end_turn")


def test_a_choice_whose_message_is_plain_text_is_the_answer() -> None:
    agent = _span("invoke_agent a", {sc.GEN_AI_OPERATION_NAME: "invoke_agent", sc.GEN_AI_SYSTEM: "s"}, (
        Event(sc.EVENT_USER_MESSAGE, {"content": _blocks({"text": "Capital of France?"})}),
        Event(sc.EVENT_CHOICE, {"message": "Paris.\n", "finish_reason": "end_turn"}),
    ))
    facts = read_span(agent)
    assert (facts.run_input, facts.run_output) == ("Capital of France?", "Paris.\n")
    structured = _span("invoke_agent a", {sc.GEN_AI_OPERATION_NAME: "invoke_agent", sc.GEN_AI_SYSTEM: "s"}, (
        Event(sc.EVENT_CHOICE, {"message": '{"capital": "Paris"}'}),))
    assert read_span(structured).run_output == '{"capital": "Paris"}'
    as_json = _span("chat", {sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_SYSTEM: "s"}, (
        Event(sc.EVENT_CHOICE, {"message": '{"role": "assistant", "content": "Paris."}', "finish_reason": "stop"}),))
    assert [(m.content, m.finish_reason) for m in read_span(as_json).output_messages or []] == [("Paris.", "stop")]


def test_a_tool_message_whose_content_is_a_plain_list_stays_the_result() -> None:
    span = _span("chat", {sc.GEN_AI_OPERATION_NAME: "chat"}, (
        Event(sc.EVENT_TOOL_MESSAGE, {"content": json.dumps([{"title": "a"}, {"title": "b"}]), "id": "c1"}),))
    (tool,) = read_span(span).input_messages or []
    (part,) = tool.tool_results
    assert (part.tool_call_id, part.content) == ("c1", [{"title": "a"}, {"title": "b"}])


def _tool_span(events: tuple[Event, ...], **attrs: Any) -> ReadableSpan:
    return _span("execute_tool weather", {sc.GEN_AI_OPERATION_NAME: "execute_tool", sc.GEN_AI_TOOL_NAME: "weather",
                                          sc.GEN_AI_TOOL_CALL_ID: "t1", **attrs}, events)


def test_a_tool_spans_message_and_choice_events_are_its_arguments_and_result() -> None:
    tool = read_span(_tool_span((
        Event(sc.EVENT_TOOL_MESSAGE, {"role": "tool", "content": '{"city": "Oslo"}', "id": "t1"}),
        Event(sc.EVENT_CHOICE, {"message": '{"c": 3}', "id": "t1"}),
    ))).tool
    assert tool is not None
    assert (tool.arguments, tool.result, tool.has_result, tool.error) == ({"city": "Oslo"}, {"c": 3}, True, None)


def test_a_tool_spans_error_payload_in_its_choice_event_is_a_failure() -> None:
    facts = read_span(_tool_span((
        Event(sc.EVENT_TOOL_MESSAGE, {"content": '{"city": "Oslo"}', "id": "t1"}),
        Event(sc.EVENT_CHOICE, {"message": '{"error": "503 backend down"}', "id": "t1"}),
    )))
    assert facts.tool is not None and facts.tool.error == "503 backend down"


def test_a_tool_span_reads_no_direction_from_one_event_alone_or_another_calls_events() -> None:
    alone = read_span(_tool_span((Event(sc.EVENT_TOOL_MESSAGE, {"content": '{"city": "Oslo"}'}),))).tool
    assert alone is not None and (alone.arguments, alone.has_result) == (None, False)
    other = read_span(_tool_span((
        Event(sc.EVENT_TOOL_MESSAGE, {"content": '{"city": "Oslo"}', "id": "t9"}),
        Event(sc.EVENT_CHOICE, {"message": "3", "id": "t9"}),
    ))).tool
    assert other is not None and (other.arguments, other.has_result) == (None, False)
    # the span's own attributes win
    attrs = read_span(_tool_span((
        Event(sc.EVENT_TOOL_MESSAGE, {"content": '{"city": "Oslo"}'}), Event(sc.EVENT_CHOICE, {"message": "3"}),
    ), **{sc.GEN_AI_TOOL_CALL_ARGUMENTS: '{"city": "Rome"}', sc.GEN_AI_TOOL_CALL_RESULT: "9"})).tool
    assert attrs is not None and (attrs.arguments, attrs.result) == ({"city": "Rome"}, 9)


# --- content blocks keyed by their kind ------------------------------------------------------------


def test_gemini_parts_in_either_spelling() -> None:
    model, user = p.messages_from_list([
        {"role": "model", "parts": [
            {"text": "thinking it over", "thought": True},
            {"text": "Let me look."},
            {"function_call": {"id": "a", "name": "f", "args": {"x": 1}}},
            {"functionCall": {"name": "g", "args": {"y": 2}}},
        ]},
        {"role": "user", "parts": [
            {"function_response": {"id": "a", "name": "f", "response": {"ok": True}}},
            {"functionResponse": {"name": "g", "response": {"error": "boom"}}},
            {"inline_data": {"mime_type": "image/png", "data": "..."}},
        ]},
    ])
    assert (model.role, model.content) == ("assistant", "Let me look.")
    assert [(c.id, c.name, c.arguments) for c in model.tool_calls] == [("a", "f", {"x": 1}), (None, "g", {"y": 2})]
    assert user.content is None
    assert [(r.tool_call_id, r.name, r.content) for r in user.tool_results] == [
        ("a", "f", {"ok": True}), (None, "g", {"error": "boom"})]
    assert p.result_error(user.tool_results[1].content) == "boom"


def test_bedrock_blocks_and_the_error_status_of_a_tool_result() -> None:
    (msg,) = p.messages_from_list([{"role": "user", "content": [
        {"toolResult": {"toolUseId": "t1", "status": "error", "content": [{"text": "no such city"}]}},
        {"reasoningContent": {"reasoningText": {"text": "hmm"}}},
    ]}])
    (part,) = msg.tool_results
    assert (part.tool_call_id, part.is_error) == ("t1", True)
    assert msg.content is None


def test_content_blocks_are_told_from_plain_lists() -> None:
    assert p.content_blocks('[{"text": "a"}, {"toolUse": {"toolUseId": "t", "name": "f", "input": {}}}]')
    assert p.content_blocks([{"type": "text", "content": "a"}])
    assert p.content_blocks('[{"title": "a"}]') is None
    assert p.content_blocks('[{"type": "sedan"}]') is None
    assert p.content_blocks("[]") is None
    assert p.content_blocks("plain text") is None


# --- tool schema shapes ---------------------------------------------------------------------------

_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_every_schema_shape_gives_the_schema() -> None:
    shapes = [
        {"type": "function", "function": {"name": "w", "parameters": _SCHEMA}},
        {"name": "w", "parameters_json_schema": _SCHEMA},
        {"name": "w", "parametersJsonSchema": _SCHEMA},
        {"toolSpec": {"name": "w", "inputSchema": {"json": _SCHEMA}}},
        {"name": "w", "inputSchema": {"json": json.dumps(_SCHEMA)}},
        {"name": "w", "input_schema": _SCHEMA},
        {"name": "w", "parameters": None, "parameters_json_schema": _SCHEMA},
        {"name": "w", "inputSchema": {"jsonSchema": _SCHEMA}},
    ]
    for shape in shapes:
        d = p.tool_definition_from(shape)
        assert d is not None and (d.name, d.parameters) == ("w", _SCHEMA), shape
    bare = p.tool_definition_from({"name": "w", "description": "d", "parameters": None, "type": "function"})
    assert bare is not None and (bare.name, bare.description, bare.parameters) == ("w", "d", None)


def test_gemini_declaration_groups_are_one_definition_each() -> None:
    defs = p.tool_definitions_from(json.dumps([
        {"function_declarations": [{"name": "a", "parameters_json_schema": _SCHEMA}, {"name": "b"}]},
        {"google_search": {}},
        {"functionDeclarations": [{"name": "c"}]},
    ]))
    assert [(d.name, d.parameters) for d in defs] == [("a", _SCHEMA), ("b", None), ("c", None)]


def test_what_is_and_is_not_a_json_schema() -> None:
    for schema in ({}, _SCHEMA, {"type": "OBJECT"}, {"type": ["string", "null"]}, {"anyOf": []},
                   {"properties": {}}):
        assert p.is_json_schema(schema), schema
    for other in ({"city": "Oslo"}, {"type": "sedan"}, {"properties": "x"}, "object", None, [_SCHEMA]):
        assert not p.is_json_schema(other), other


def test_an_openinference_tool_parameters_holding_the_arguments_is_no_schema() -> None:
    args = '{"city": "Oslo"}'
    as_args = read_span(_span("execute_tool w", {sc.OI_SPAN_KIND: "TOOL", sc.OI_TOOL_NAME: "w",
                                                 sc.OI_TOOL_PARAMETERS: args, sc.OI_INPUT_VALUE: args}))
    assert as_args.tool is not None and as_args.tool.schema is None
    as_schema = read_span(_span("w", {sc.OI_SPAN_KIND: "TOOL", sc.OI_TOOL_NAME: "w",
                                      sc.OI_TOOL_PARAMETERS: json.dumps(_SCHEMA), sc.OI_INPUT_VALUE: args}))
    # the tool span's own schema (validation's schema_source "tool_span"), not an offered definition
    assert as_schema.tool is not None and as_schema.tool.schema == _SCHEMA
    assert as_schema.tool_definitions is None


# --- Google ADK's own attributes (legacy schema) --------------------------------------------------

_REQUEST = {
    "model": "gemini-x",
    "config": {"system_instruction": "Be brief.",
               "tools": [{"function_declarations": [{"name": "weather", "parameters_json_schema": _SCHEMA}]}]},
    "contents": [{"role": "user", "parts": [{"text": "Weather in Oslo?"}]}],
}


def _call_llm(request: dict[str, Any], response: dict[str, Any], **kw: Any) -> ReadableSpan:
    return _span("call_llm", {sc.GEN_AI_SYSTEM: "gcp.vertex.agent", sc.GEN_AI_REQUEST_MODEL: "gemini-x",
                              sc.ADK_LLM_REQUEST: json.dumps(request), sc.ADK_LLM_RESPONSE: json.dumps(response)}, **kw)


def _fc(call_id: str, **args: Any) -> dict[str, Any]:
    return {"function_call": {"id": call_id, "name": "weather", "args": args}}


def _fr(call_id: str, response: Any) -> dict[str, Any]:
    return {"function_response": {"id": call_id, "name": "weather", "response": response}}


def test_a_call_llm_span_reads_the_gemini_request_and_response() -> None:
    span = _call_llm(_REQUEST, {"content": {"role": "model", "parts": [_fc("c1", city="Oslo")]}, "finish_reason": "STOP"})
    facts = read_span(span)
    assert facts.role == "llm" and classify(span) == "genai"
    assert facts.system_instructions == "Be brief."
    assert [(d.name, d.parameters) for d in facts.tool_definitions or []] == [("weather", _SCHEMA)]
    assert [(m.role, m.content) for m in facts.input_messages or []] == [("user", "Weather in Oslo?")]
    (out,) = facts.output_messages or []
    assert (out.role, out.finish_reason, out.tool_calls[0].arguments) == ("assistant", "STOP", {"city": "Oslo"})
    assert facts.model == "gemini-x"
    raw = read_span(_call_llm(_REQUEST, {"candidates": [{"content": {"role": "model", "parts": [{"text": "3"}]},
                                                          "finishReason": "STOP"}]}))
    assert [(m.content, m.finish_reason) for m in raw.output_messages or []] == [("3", "STOP")]


def test_adk_spans_without_content_are_not_model_calls() -> None:
    span = _span("call_llm", {sc.GEN_AI_SYSTEM: "gcp.vertex.agent", sc.ADK_LLM_REQUEST: "{}", sc.ADK_LLM_RESPONSE: "{}"})
    facts = read_span(span)
    assert facts.role == "other" and facts.conventions == ["gcp_vertex_agent"]


def _legacy_tool(parent: ReadableSpan, call_id: str, args: str, response: str, start: int) -> ReadableSpan:
    return _span("execute_tool weather", {
        sc.GEN_AI_OPERATION_NAME: "execute_tool", sc.GEN_AI_TOOL_NAME: "weather", sc.GEN_AI_TOOL_CALL_ID: call_id,
        sc.ADK_TOOL_CALL_ARGS: args, sc.ADK_TOOL_RESPONSE: response, sc.ADK_LLM_REQUEST: "{}",
        sc.ADK_LLM_RESPONSE: "{}"}, parent=parent, start=start)


def _merged(parent: ReadableSpan, start: int) -> ReadableSpan:
    return _span("execute_tool (merged)", {
        sc.GEN_AI_OPERATION_NAME: "execute_tool", sc.GEN_AI_TOOL_NAME: sc.ADK_MERGED_TOOLS,
        sc.GEN_AI_TOOL_CALL_ID: "0b5e-event", sc.ADK_TOOL_CALL_ARGS: "N/A"}, parent=parent, start=start)


def test_an_adk_legacy_run_reads_exactly_and_its_merged_span_is_no_call() -> None:
    agent = _span("invoke_agent a", {sc.GEN_AI_OPERATION_NAME: "invoke_agent", sc.GEN_AI_AGENT_NAME: "a"}, end=100)
    turn1 = {"role": "model", "parts": [_fc("c1", city="Oslo"), _fc("c2", city="Rome")]}
    results = {"role": "user", "parts": [_fr("c1", {"c": 3}), _fr("c2", {"error": "no data"})]}
    spans = [
        agent,
        _call_llm(_REQUEST, {"content": turn1}, parent=agent, start=1),
        _legacy_tool(agent, "c1", '{"city": "Oslo"}', '{"c": 3}', 3),
        _legacy_tool(agent, "c2", '{"city": "Rome"}', '{"error": "no data"}', 4),
        _merged(agent, 5),
        _call_llm({**_REQUEST, "contents": [*_REQUEST["contents"], turn1, results]},
                  {"content": {"role": "model", "parts": [{"text": "Oslo is 3 degrees; Rome failed."}]}},
                  parent=agent, start=6),
    ]
    assert read_span(spans[4]).role == "other"
    assert classify(spans[4]) == "genai"
    run = _run(spans)
    assert run.input == "Weather in Oslo?"
    assert run.output == "Oslo is 3 degrees; Rome failed."
    assert run.system_instructions == "Be brief."
    assert [(c.id, c.name, c.arguments, c.result) for c in run.tool_calls] == [
        ("c1", "weather", {"city": "Oslo"}, {"c": 3}), ("c2", "weather", {"city": "Rome"}, {"error": "no data"})]
    assert [c.error for c in run.tool_calls] == [None, "no data"]
    assert not run.problems


# --- an LLM span that stands for several model calls ---------------------------------------------


def _oi_llm(inputs: list[tuple[str, str]], calls: list[tuple[int, str, str]], out_text: str | None,
            out_calls: list[tuple[str, str, str]], **kw: Any) -> ReadableSpan:
    attrs: dict[str, Any] = {sc.OI_SPAN_KIND: "LLM"}
    for i, (role, text) in enumerate(inputs):
        attrs[f"llm.input_messages.{i}.message.role"] = role
        attrs[f"llm.input_messages.{i}.message.content"] = text
    for i, call_id, args in calls:
        attrs[f"llm.input_messages.{i}.message.tool_calls.0.tool_call.id"] = call_id
        attrs[f"llm.input_messages.{i}.message.tool_calls.0.tool_call.function.name"] = "weather"
        attrs[f"llm.input_messages.{i}.message.tool_calls.0.tool_call.function.arguments"] = args
    attrs["llm.output_messages.0.message.role"] = "assistant"
    if out_text is not None:
        attrs["llm.output_messages.0.message.content"] = out_text
    for j, (call_id, name, args) in enumerate(out_calls):
        attrs[f"llm.output_messages.0.message.tool_calls.{j}.tool_call.id"] = call_id
        attrs[f"llm.output_messages.0.message.tool_calls.{j}.tool_call.function.name"] = name
        attrs[f"llm.output_messages.0.message.tool_calls.{j}.tool_call.function.arguments"] = args
    return _span("llm", attrs, **kw)


def _oi_tool(parent: ReadableSpan, call_id: str, args: str, result: str, start: int) -> ReadableSpan:
    return _span("weather", {sc.OI_SPAN_KIND: "TOOL", sc.OI_TOOL_NAME: "weather", sc.OI_TOOL_ID: call_id,
                             sc.OI_INPUT_VALUE: args, sc.OI_OUTPUT_VALUE: result}, parent=parent, start=start)


def test_an_llm_span_enclosing_the_tools_drops_the_stale_output_calls_its_input_holds() -> None:
    agent = _span("run", {sc.OI_SPAN_KIND: "AGENT", sc.OI_AGENT_NAME: "a"}, end=100)
    # the last call's input (question, call, result) and output (answer) beside the first
    # call's output keys that nothing overwrote
    llm = _oi_llm([("user", "Weather in Oslo?"), ("assistant", ""), ("tool", '{"c": 3}')], [(1, "c1", '{"city": "Oslo"}')],
                  "3 degrees.", [("c1", "weather", '{"city": "Oslo"}')], parent=agent, start=1, end=90)
    spans = [agent, llm, _oi_tool(llm, "c1", '{"city": "Oslo"}', '{"c": 3}', 5)]
    run = _run(spans)
    assert [(c.id, c.arguments, c.result) for c in run.tool_calls] == [("c1", {"city": "Oslo"}, {"c": 3})]
    assert run.output == "3 degrees."


def test_an_llm_span_without_tools_below_it_keeps_every_call_it_requests() -> None:
    agent = _span("run", {sc.OI_SPAN_KIND: "AGENT", sc.OI_AGENT_NAME: "a"}, end=100)
    # a model that asks again for a call with the same id and arguments (GPT-4o does): two calls
    first = _oi_llm([("user", "Weather in Oslo?")], [], None, [("c1", "weather", '{"city": "Oslo"}')],
                    parent=agent, start=1)
    again = _oi_llm([("user", "Weather in Oslo?"), ("assistant", ""), ("tool", '{"c": 3}')],
                    [(1, "c1", '{"city": "Oslo"}')], None, [("c1", "weather", '{"city": "Oslo"}')], parent=agent, start=5)
    run = _run([agent, first, _oi_tool(agent, "c1", '{"city": "Oslo"}', '{"c": 3}', 3), again])
    assert [c.id for c in run.tool_calls] == ["c1", "c1"]
