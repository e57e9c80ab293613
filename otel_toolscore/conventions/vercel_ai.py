"""Vercel AI SDK built-in telemetry (``ai.*`` spans). AI SDK 7's ``@ai-sdk/otel`` is GenAI."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions.base import Attributes, Convention, SpanFacts, Stated, ToolExecution
from otel_toolscore.conventions.genai import last_user_text
from otel_toolscore.trajectory import Message

NAME = "vercel_ai"
_PREFIX = "ai."  # its span names and operation ids
_OP_ROLES: dict[str, Stated] = {
    **dict.fromkeys(sc.AI_RUN_SPANS, "agent"),
    **dict.fromkeys(sc.AI_LLM_SPANS, "llm"),
    sc.AI_TOOL_SPAN: "tool",
}


def _operation(span: ReadableSpan, attrs: Attributes) -> str | None:
    op = attrs.get(sc.AI_OPERATION_ID) or (span.name if span.name.startswith(_PREFIX) else None)
    return op if isinstance(op, str) and op.startswith(_PREFIX) else None


def detect(span: ReadableSpan, attrs: Attributes) -> Stated | None:
    op = _operation(span, attrs)
    return None if op is None else _OP_ROLES.get(op, "other")


def read(span: ReadableSpan, attrs: Attributes, facts: SpanFacts, stated: Stated) -> None:
    facts.note(NAME)
    if stated == "agent":
        if facts.agent_name is None:
            facts.agent_name = p.opt_str(attrs.get(sc.AI_FUNCTION_ID) or attrs.get(sc.AI_RESOURCE_NAME))
        _read_prompt(attrs, facts)
        if facts.run_output is None and sc.AI_RESPONSE_TEXT in attrs:
            facts.run_output = p.as_text(attrs[sc.AI_RESPONSE_TEXT])
    elif stated == "llm":
        if facts.model is None and attrs.get(sc.AI_MODEL_ID):
            facts.model = str(attrs[sc.AI_MODEL_ID])
        if facts.input_messages is None and sc.AI_PROMPT_MESSAGES in attrs:
            facts.input_messages = p.messages_from_list(p.loads(attrs[sc.AI_PROMPT_MESSAGES]))
            if facts.system_instructions is None:
                facts.system_instructions = p.system_from_messages(facts.input_messages)
        if facts.output_messages is None:
            facts.output_messages = [_output(attrs)]
        if facts.tool_definitions is None and sc.AI_PROMPT_TOOLS in attrs:
            facts.tool_definitions = p.tool_definitions_from(attrs[sc.AI_PROMPT_TOOLS])
    elif stated == "tool":
        tool = ToolExecution(name=p.opt_str(attrs.get(sc.AI_TOOL_CALL_NAME)),
                             call_id=p.opt_str(attrs.get(sc.AI_TOOL_CALL_ID)))
        if sc.AI_TOOL_CALL_ARGS in attrs:
            tool.arguments, tool.arguments_raw, tool.arguments_error = p.parse_arguments(attrs[sc.AI_TOOL_CALL_ARGS])
        if sc.AI_TOOL_CALL_RESULT in attrs:
            tool.result, tool.result_raw, tool.error = p.read_result(attrs[sc.AI_TOOL_CALL_RESULT])
            tool.has_result = True
        if facts.tool is None:
            facts.tool = tool


def _read_prompt(attrs: Attributes, facts: SpanFacts) -> None:
    prompt = p.loads(attrs.get(sc.AI_PROMPT)) if sc.AI_PROMPT in attrs else None
    if not isinstance(prompt, dict):
        if facts.run_input is None and isinstance(attrs.get(sc.AI_PROMPT), str):
            facts.run_input = attrs[sc.AI_PROMPT]
        return
    if facts.system_instructions is None and isinstance(prompt.get("system"), str):
        facts.system_instructions = prompt["system"]
    if facts.run_input is None:
        if isinstance(prompt.get("prompt"), str):
            facts.run_input = prompt["prompt"]
        elif isinstance(prompt.get("prompt"), list) or isinstance(prompt.get("messages"), list):
            msgs = p.messages_from_list(prompt.get("messages") or prompt.get("prompt"))
            facts.run_input = last_user_text(msgs)


def _output(attrs: Attributes) -> Message:
    msg = Message(role="assistant", finish_reason=p.opt_str(attrs.get(sc.AI_RESPONSE_FINISH_REASON)))
    text = attrs.get(sc.AI_RESPONSE_TEXT)
    msg.content = p.as_text(text) if text else None
    for item in p.parse_json_list(attrs.get(sc.AI_RESPONSE_TOOL_CALLS)):
        if isinstance(item, dict):
            req = p.tool_call_from(item)
            if req is not None:
                msg.tool_calls.append(req)
    return msg


CONVENTION = Convention(
    NAME, frozenset({sc.AI_OPERATION_ID}), detect, read, span_names=(_PREFIX,),
    stated=((sc.AI_OPERATION_ID, _OP_ROLES, None),),
)
