"""Tool results out of their envelopes, with the envelopes' error flags; run input/output that
is a Python object repr; agent spans that name no agent.

``parsing.read_result`` is the one way a tool result is read: on tool spans of every convention
and in tool-result message parts. Each envelope kind below is a real framework's shape; each
has its error flag, and a tool's own dict that merely shares a key is never taken for one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, Status, StatusCode

from otel_toolscore import build_trajectories
from otel_toolscore import semconv as sc
from otel_toolscore.conventions import read_span
from otel_toolscore.conventions.parsing import is_object_repr, message_from, read_result, result_error

TRACE = 0xE5


def _span(sid: int, name: str, attrs: dict[str, Any], parent: int | None = None, start: int = 0,
          status: Status | None = None, events: list[Event] | None = None) -> ReadableSpan:
    return ReadableSpan(
        name=name,
        context=SpanContext(TRACE, sid, False),
        parent=SpanContext(TRACE, parent, False) if parent is not None else None,
        attributes=attrs,
        events=events or [],
        status=status or Status(StatusCode.UNSET),
        start_time=start,
        end_time=start + 1,
    )


WEATHER = {"temperature": "61°F", "condition": "light rain"}
WEATHER_JSON = json.dumps(WEATHER)  # ASCII-escaped, as json.dumps writes it by default


# --- the envelopes, one by one -------------------------------------------------------------------

ENVELOPES: list[tuple[str, Any, Any, bool]] = [
    # (what, value as recorded, what the tool returned, flagged as an error)
    ("Anthropic / MCP text blocks", [{"type": "text", "text": WEATHER_JSON}], WEATHER, False),
    ("Bedrock / Strands text block", [{"text": WEATHER_JSON}], WEATHER, False),
    ("Bedrock JSON block", [{"json": WEATHER}], WEATHER, False),
    ("LlamaIndex text block", [{"block_type": "text", "text": WEATHER_JSON}], WEATHER, False),
    ("text block, not JSON", [{"type": "text", "text": "It rains."}], "It rains.", False),
    ("several text blocks", [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "a\nb", False),
    ("Anthropic tool_result", {"type": "tool_result", "tool_use_id": "toolu_1", "content": WEATHER_JSON}, WEATHER,
     False),
    ("Anthropic tool_result, is_error", {"type": "tool_result", "tool_use_id": "toolu_1",
                                         "content": [{"type": "text", "text": "ValueError: no city"}],
                                         "is_error": True}, "ValueError: no city", True),
    ("Bedrock toolResult", {"toolResult": {"toolUseId": "t1", "status": "success",
                                           "content": [{"text": WEATHER_JSON}]}}, WEATHER, False),
    ("Bedrock toolResult, status error", {"toolResult": {"toolUseId": "t1", "status": "error",
                                                         "content": [{"text": "Error: boom"}]}}, "Error: boom", True),
    ("Strands ToolResult", {"toolUseId": "t1", "status": "error", "content": [{"text": "boom"}]}, "boom", True),
    ("a message's one toolResult block", [{"toolResult": {"toolUseId": "t1", "status": "success",
                                                          "content": [{"json": WEATHER}]}}], WEATHER, False),
    ("MCP CallToolResult", {"content": [{"type": "text", "text": WEATHER_JSON}], "isError": False}, WEATHER, False),
    ("MCP CallToolResult, structuredContent", {"content": [{"type": "text", "text": "61°F, light rain"}],
                                               "structuredContent": WEATHER}, WEATHER, False),
    ("MCP CallToolResult, isError", {"content": [{"type": "text", "text": "Unknown city"}], "isError": True},
     "Unknown city", True),
    ("LlamaIndex ToolOutput", {"blocks": [{"text": str(WEATHER)}], "tool_name": "get_weather",
                               "raw_input": {"args": [], "kwargs": {"location": "Paris"}}, "raw_output": WEATHER,
                               "is_error": False}, WEATHER, False),
    ("LlamaIndex ToolOutput, JSON text returned", {"blocks": [{"text": WEATHER_JSON}], "tool_name": "get_weather",
                                                   "raw_input": {}, "raw_output": WEATHER_JSON, "is_error": False},
     WEATHER, False),
    ("LlamaIndex ToolOutput, is_error", {"blocks": [{"text": "Encountered error: no city"}], "tool_name": "get_weather",
                                         "raw_input": {}, "raw_output": "no city", "is_error": True}, "no city", True),
    ("LlamaIndex ToolOutput, older content field", {"content": "sunny", "tool_name": "get_weather", "raw_input": {},
                                                    "raw_output": None, "is_error": False}, "sunny", False),
    ("ADK FunctionResponse", {"id": "call_1", "name": "get_weather", "response": WEATHER}, WEATHER, False),
    ("Gemini function_response part", {"function_response": {"name": "get_weather", "response": WEATHER}}, WEATHER,
     False),
    ("LangChain ToolMessage, status error", {"lc": 1, "type": "constructor", "id": ["ToolMessage"],
                                             "kwargs": {"content": "KeyError: 'city'", "tool_call_id": "c1",
                                                        "status": "error"}}, "KeyError: 'city'", True),
    ("LangChain ToolMessage", {"lc": 1, "kwargs": {"content": WEATHER_JSON, "tool_call_id": "c1"}}, WEATHER, False),
]


@pytest.mark.parametrize(("what", "recorded", "returned", "flagged"), ENVELOPES, ids=[e[0] for e in ENVELOPES])
@pytest.mark.parametrize("as_json", [True, False], ids=["json-text", "decoded"])
def test_an_envelope_gives_what_the_tool_returned_and_keeps_its_error_flag(
    what: str, recorded: Any, returned: Any, flagged: bool, as_json: bool
) -> None:
    value = json.dumps(recorded) if as_json else recorded
    read = read_result(value)
    assert read.value == returned
    assert (read.error is not None) is flagged
    if flagged:
        assert read.error == (returned if isinstance(returned, str) else json.dumps(returned, ensure_ascii=False))
    if as_json:
        assert read.raw == value  # the text as recorded is kept


def test_an_error_payload_inside_an_envelope_is_a_payload_not_a_flag() -> None:
    read = read_result(json.dumps([{"type": "text", "text": json.dumps({"error": "503 Service Unavailable"})}]))
    assert read.value == {"error": "503 Service Unavailable"}
    assert read.error is None  # no envelope flagged it; the payload itself says so:
    assert result_error(read.value) == "503 Service Unavailable"


def test_a_flagged_envelope_with_nothing_in_it_still_fails() -> None:
    assert read_result({"content": [], "isError": True}).error == "error"
    assert read_result({"toolUseId": "t", "status": "error", "content": []}).error == "error"


NOT_ENVELOPES: list[tuple[str, Any]] = [
    ("a tool's dict with content and name", {"content": "the article", "name": "Bob"}),
    ("a response that is not an object", {"name": "Bob", "response": "ok"}),
    ("name and response beside other keys", {"name": "x", "response": {"a": 1}, "score": 3}),
    ("a content list of non-MCP blocks", {"content": [{"type": "paragraph", "text": "x"}]}),
    ("a list of records with a text key among others", [{"text": "a", "score": 1}, {"text": "b", "score": 2}]),
    ("an image block beside a text block", [{"type": "text", "text": "see"}, {"type": "image", "source": {}}]),
    ("a list of strings", ["a", "b"]),
    ("tool_name without raw_output", {"tool_name": "x", "blocks": []}),
    ("raw_output beside a foreign key", {"tool_name": "x", "raw_output": 1, "blocks": [], "extra": True}),
    ("an error payload", {"error": "boom"}),
]


@pytest.mark.parametrize(("what", "value"), NOT_ENVELOPES, ids=[n[0] for n in NOT_ENVELOPES])
def test_a_tools_own_value_is_not_taken_for_an_envelope(what: str, value: Any) -> None:
    read = read_result(json.dumps(value))
    assert read.value == value
    assert read.error is None


def test_plain_values_read_as_before() -> None:
    assert read_result(None) == (None, None, None)
    assert read_result("not json").value == "not json"
    assert read_result("42").value == 42
    assert read_result("{'a': 1}").value == {"a": 1}  # a Python repr
    # a JSON string holding JSON stays that string at the top level (it is what was recorded) ...
    assert read_result(json.dumps(WEATHER_JSON)).value == WEATHER_JSON
    # ... while a text block's text is read as the value it carries
    assert read_result([{"type": "text", "text": WEATHER_JSON}]).value == WEATHER


# --- where results are read: tool spans of every convention, tool-result parts -------------------

def _tool_facts(attrs: dict[str, Any], name: str = "tool", status: Status | None = None) -> Any:
    facts = read_span(_span(1, name, attrs, status=status))
    assert facts.tool is not None
    return facts


def test_the_anthropic_sdk_tool_span_result_is_its_tool_result_content() -> None:
    blocks = json.dumps([{"type": "text", "text": WEATHER_JSON}])
    facts = _tool_facts({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                         "gen_ai.tool.call.id": "toolu_1", sc.ANTHROPIC_TOOL_RESULT_CONTENT: blocks},
                        name="anthropic.custom_tool_use get_weather")
    assert facts.tool.has_result and facts.tool.result == WEATHER and facts.tool.result_raw == blocks
    assert facts.tool.error is None and facts.error is None


def test_gen_ai_tool_call_result_wins_over_the_anthropic_attribute() -> None:
    facts = _tool_facts({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
                         sc.GEN_AI_TOOL_CALL_RESULT: '{"a": 1}', sc.ANTHROPIC_TOOL_RESULT_CONTENT: '{"a": 2}'})
    assert facts.tool.result == {"a": 1}


def test_a_strands_tool_span_with_status_error_failed() -> None:
    facts = _tool_facts({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch",
                         sc.GEN_AI_TOOL_CALL_RESULT: json.dumps([{"text": "Error: timeout"}]),
                         sc.STRANDS_TOOL_STATUS: "error"})
    assert facts.tool.result == "Error: timeout"
    assert facts.tool.error == "Error: timeout" and facts.error == "Error: timeout"
    ok = _tool_facts({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch",
                      sc.GEN_AI_TOOL_CALL_RESULT: json.dumps([{"text": "fine"}]), sc.STRANDS_TOOL_STATUS: "success"})
    assert ok.tool.error is None


def test_an_openinference_tool_output_flagged_is_error_failed() -> None:
    output = {"blocks": [{"text": "Encountered error: no city"}], "tool_name": "get_weather",
              "raw_input": {"args": [], "kwargs": {}}, "raw_output": "no city", "is_error": True}
    facts = _tool_facts({"openinference.span.kind": "TOOL", "tool.name": "get_weather",
                         "input.value": json.dumps({"kwargs": {}}), "output.value": json.dumps(output)},
                        name="FunctionTool.acall")
    assert facts.tool.result == "no city" and facts.tool.error == "no city"


def test_an_openllmetry_and_a_vercel_tool_span_unwrap_too() -> None:
    mcp = json.dumps({"content": [{"type": "text", "text": "Unknown city"}], "isError": True})
    tl = _tool_facts({"traceloop.span.kind": "tool", "traceloop.entity.name": "get_weather",
                      "traceloop.entity.output": mcp}, name="get_weather.tool")
    assert tl.tool.result == "Unknown city" and tl.tool.error == "Unknown city"
    ai = _tool_facts({"ai.operationId": "ai.toolCall", "ai.toolCall.name": "get_weather", "ai.toolCall.id": "c1",
                      "ai.toolCall.result": json.dumps([{"type": "text", "text": WEATHER_JSON}])}, name="ai.toolCall")
    assert ai.tool.result == WEATHER and ai.tool.error is None


def test_the_spans_own_failure_says_more_than_the_envelope_flag() -> None:
    facts = _tool_facts({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
                         sc.ANTHROPIC_TOOL_RESULT_CONTENT: json.dumps({"type": "tool_result", "content": "boom",
                                                                      "is_error": True})},
                        status=Status(StatusCode.ERROR, "ValueError: boom in t"))
    assert facts.tool.error == "ValueError: boom in t" == facts.error


@pytest.mark.parametrize(("part", "returned", "flagged"), [
    ({"type": "tool_call_response", "id": "c1", "response": [{"type": "text", "text": WEATHER_JSON}]}, WEATHER, False),
    ({"type": "tool_call_response", "id": "c1", "response": [{"text": "Error: boom"}], "status": "error"},
     "Error: boom", True),
    ({"type": "tool_call_response", "id": "c1", "response": "boom", "is_error": True}, "boom", True),
    ({"type": "tool_call_response", "id": "c1",
      "response": {"content": [{"type": "text", "text": "nope"}], "isError": True}}, "nope", True),
    ({"type": "tool_call_response", "id": "c1", "response": {"id": "c1", "name": "t", "response": WEATHER}}, WEATHER,
     False),
], ids=["text-blocks", "part-status-error", "part-is_error", "mcp-isError", "function-response"])
def test_a_tool_result_part_reads_its_value_and_flag_the_same_way(part: dict[str, Any], returned: Any,
                                                                  flagged: bool) -> None:
    msg = message_from({"role": "user", "parts": [part]})
    assert msg is not None and len(msg.tool_results) == 1
    assert msg.tool_results[0].content == returned
    assert msg.tool_results[0].is_error is flagged


def test_a_role_tool_message_reads_its_content_the_same_way() -> None:
    msg = message_from({"role": "tool", "tool_call_id": "c1",
                        "content": json.dumps({"toolUseId": "c1", "status": "error", "content": [{"text": "boom"}]})})
    assert msg is not None and msg.tool_results[0].content == "boom" and msg.tool_results[0].is_error


def test_a_result_seen_only_in_history_fails_the_call_when_flagged() -> None:
    spans = [
        _span(1, "invoke_agent a", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}),
        _span(2, "chat", {"gen_ai.operation.name": "chat",
                          "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text",
                                                                                           "content": "q"}]}]),
                          "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                              {"type": "tool_call", "id": "c1", "name": "t", "arguments": {}}]}])}, 1, 1),
        _span(3, "chat", {"gen_ai.operation.name": "chat",
                          "gen_ai.input.messages": json.dumps([
                              {"role": "user", "parts": [{"type": "text", "content": "q"}]},
                              {"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "t",
                                                               "arguments": {}}]},
                              {"role": "user", "parts": [{"type": "tool_call_response", "id": "c1",
                                                          "response": [{"type": "text", "text": "nope"}],
                                                          "is_error": True}]}]),
                          "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                              {"type": "text", "content": "It failed."}]}])}, 1, 2),
    ]
    (run,) = build_trajectories(spans)
    (call,) = run.tool_calls
    assert call.result == "nope" and call.error == "nope"


# --- run input and output that are no one's words --------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("StopEvent(result=AgentOutput(response=ChatMessage(role=<MessageRole.ASSISTANT: 'assistant'>...", True),
    ("AgentInput()", True),
    ("<workflows.context.context.Context object at 0x7f6069f29c50>", True),
    ("  ToolCall(tool_name='x')", True),
    ("Paris (France) is the capital.", False),
    ("Paris(France) is the capital.", False),
    ("f(x) = 2x", False),
    ("The answer is 42.", False),
])
def test_is_object_repr(text: str, expected: bool) -> None:
    assert is_object_repr(text) is expected


def _oi_llm(sid: int, parent: int, start: int, user: str | None, answer: str | None) -> ReadableSpan:
    attrs: dict[str, Any] = {"openinference.span.kind": "LLM", "llm.model_name": "m"}
    if user is not None:
        attrs |= {"llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": user}
    if answer is not None:
        attrs |= {"llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": answer}
    return _span(sid, "OpenAI.chat", attrs, parent, start)


def test_a_run_whose_input_and_output_are_object_reprs_takes_them_from_its_llm_calls() -> None:
    spans = [
        _span(1, "FunctionAgent.run", {"openinference.span.kind": "CHAIN",
                                       "input.value": json.dumps({"start_event": "AgentWorkflowStartEvent()"}),
                                       "output.value": "StopEvent(result=AgentOutput(response=ChatMessage(...",
                                       "output.mime_type": "text/plain"}),
        # an LLM-kind helper span without messages (a framework preparing the request) comes first
        _span(2, "OpenAI._prepare_chat_with_tools", {"openinference.span.kind": "LLM", "llm.model_name": "m"}, 1, 1),
        _oi_llm(3, 1, 2, "What is the capital of France?", "Paris."),
    ]
    (run,) = build_trajectories(spans)
    assert run.input == "What is the capital of France?"
    assert run.output == "Paris."


def test_a_run_whose_input_and_output_are_words_keeps_them() -> None:
    spans = [
        _span(1, "agent", {"openinference.span.kind": "AGENT", "agent.name": "a", "input.value": "Hi there",
                           "output.value": "Hello!"}),
        _oi_llm(2, 1, 1, "Hi there (from the app)", "Hello (model)!"),
    ]
    (run,) = build_trajectories(spans)
    assert (run.input, run.output) == ("Hi there", "Hello!")


# --- agent spans that name no agent -----------------------------------------------------------------

@pytest.mark.parametrize(("span_name", "expected"), [
    ("anthropic.messages.tool_runner", "anthropic.messages.tool_runner"),
    ("invoke_agent", None),
    ("invoke_agent helper", "helper"),
])
def test_a_genai_agent_span_without_an_agent_name_is_named_by_its_span(span_name: str, expected: str | None) -> None:
    spans = [
        _span(1, span_name, {"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": "anthropic"}),
        _span(2, "chat", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "q"}]}])}, 1, 1),
    ]
    (run,) = build_trajectories(spans)
    assert run.agent_name == expected


def test_a_named_agent_span_keeps_its_name() -> None:
    spans = [
        _span(1, "anthropic.messages.tool_runner", {"gen_ai.operation.name": "invoke_agent",
                                                    "gen_ai.agent.name": "planner"}),
        _span(2, "chat", {"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "q"}]}])}, 1, 1),
    ]
    (run,) = build_trajectories(spans)
    assert run.agent_name == "planner"
