"""Google ADK's own attributes, ``gcp.vertex.agent.*`` (ADK's legacy telemetry schema).

ADK 1.x, and 2.x with ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``, keep a model call's content on
its ``call_llm`` span as ``gcp.vertex.agent.llm_request`` (the Gemini request as JSON:
``{model, config: {system_instruction, tools: [{function_declarations}]}, contents: [{role,
parts}]}``) and ``gcp.vertex.agent.llm_response`` (``{content: {role, parts}, finish_reason}``,
or the raw ``{candidates: [{content}]}``), and a tool call's on its ``execute_tool`` span as
``gcp.vertex.agent.tool_call_args`` / ``tool_response``, beside the OTel GenAI attributes that
name the tool and its call id. Spans without content carry ``"{}"``.

Runs after the OTel GenAI reader: these attributes fill what the GenAI ones on the same spans
leave out. What ADK states outright, asked before the GenAI operation: the span it adds after a
turn's parallel calls (``gen_ai.tool.name = "(merged tools)"``, its response event's id as the
call id) is the merged response event for ADK's dev UI, not a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions.base import Attributes, Convention, SpanFacts, Stated, ToolExecution
from otel_toolscore.trajectory import Message

NAME = "gcp_vertex_agent"
_CONTENT_KEYS = frozenset({sc.ADK_LLM_REQUEST, sc.ADK_LLM_RESPONSE, sc.ADK_TOOL_CALL_ARGS, sc.ADK_TOOL_RESPONSE})
_KEYS = _CONTENT_KEYS | {sc.GEN_AI_TOOL_NAME}
_MERGED: dict[str, Stated] = {sc.ADK_MERGED_TOOLS: "other"}
#: what ADK writes in place of content it does not capture (and on the merged span's arguments)
_NO_CONTENT = frozenset({"", "{}", "N/A"})

# fields of the Gemini request and response (the SDK's snake_case and the REST camelCase)
_CONTENTS = "contents"
_CONFIG = "config"
_SYSTEM_INSTRUCTION = ("system_instruction", "systemInstruction")
_TOOLS = "tools"
_MODEL = "model"
_CONTENT = "content"
_CANDIDATES = "candidates"
_FINISH_REASON = ("finish_reason", "finishReason")


def _has_content(value: Any) -> bool:
    return value is not None and (not isinstance(value, str) or value.strip() not in _NO_CONTENT)


def detect(span: ReadableSpan, attrs: Attributes) -> Stated | None:
    if attrs.get(sc.GEN_AI_TOOL_NAME) == sc.ADK_MERGED_TOOLS:
        return "other"
    if _CONTENT_KEYS.isdisjoint(attrs):
        return None
    if sc.ADK_TOOL_CALL_ARGS in attrs or sc.ADK_TOOL_RESPONSE in attrs:
        return "tool"
    if _has_content(attrs.get(sc.ADK_LLM_REQUEST)) or _has_content(attrs.get(sc.ADK_LLM_RESPONSE)):
        return "llm"
    return ""


def read(span: ReadableSpan, attrs: Attributes, facts: SpanFacts, stated: Stated) -> None:
    facts.note(NAME)
    if facts.role == "tool":
        _read_tool(span, attrs, facts)
    elif facts.role == "llm":
        _read_model_call(attrs, facts)


def _read_tool(span: ReadableSpan, attrs: Attributes, facts: SpanFacts) -> None:
    tool = facts.tool
    if tool is None:
        name = attrs.get(sc.GEN_AI_TOOL_NAME)
        if not name and span.name.startswith(sc.OP_EXECUTE_TOOL + " "):
            name = span.name[len(sc.OP_EXECUTE_TOOL) + 1 :]
        tool = facts.tool = ToolExecution(name=p.opt_str(name or None), call_id=p.opt_str(attrs.get(sc.GEN_AI_TOOL_CALL_ID)))
    args = attrs.get(sc.ADK_TOOL_CALL_ARGS)
    if tool.arguments_raw is None and _has_content(args):
        tool.arguments, tool.arguments_raw, tool.arguments_error = p.parse_arguments(args)
    response = attrs.get(sc.ADK_TOOL_RESPONSE)
    if not tool.has_result and _has_content(response):
        tool.result, tool.result_raw = p.parse_result(response)
        tool.has_result = True


def _read_model_call(attrs: Attributes, facts: SpanFacts) -> None:
    request = _object(attrs.get(sc.ADK_LLM_REQUEST))
    response = _object(attrs.get(sc.ADK_LLM_RESPONSE))
    config = request.get(_CONFIG)
    if not isinstance(config, Mapping):
        config = {}
    if facts.input_messages is None and isinstance(request.get(_CONTENTS), list):
        facts.input_messages = p.messages_from_list(request[_CONTENTS])
    if facts.output_messages is None and response:
        facts.output_messages = _response_messages(response)
    if facts.system_instructions is None:
        instruction = _first_of(config, _SYSTEM_INSTRUCTION)
        if instruction is not None:
            facts.system_instructions = _instruction_text(instruction)
    if facts.tool_definitions is None and isinstance(config.get(_TOOLS), list):
        facts.tool_definitions = p.tool_definitions_from(config[_TOOLS])
    if facts.model is None:
        model = attrs.get(sc.GEN_AI_RESPONSE_MODEL) or attrs.get(sc.GEN_AI_REQUEST_MODEL) or request.get(_MODEL)
        facts.model = p.opt_str(model or None)


def _object(value: Any) -> Mapping[str, Any]:
    parsed = p.loads(value) if isinstance(value, str) else value
    return parsed if isinstance(parsed, Mapping) else {}


def _first_of(obj: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    return next((obj[k] for k in keys if obj.get(k) is not None), None)


def _response_messages(response: Mapping[str, Any]) -> list[Message]:
    """ADK's ``LlmResponse`` (``content`` and ``finish_reason``), or a raw Gemini response
    (``candidates[i].content``), as output messages."""
    found: Any = [response] if isinstance(response.get(_CONTENT), Mapping) else response.get(_CANDIDATES)
    out = []
    for candidate in found if isinstance(found, list) else ():
        content = candidate.get(_CONTENT) if isinstance(candidate, Mapping) else None
        if not isinstance(content, Mapping):
            continue
        msg = p.message_from({"role": "model", **content})
        if msg is not None:
            msg.finish_reason = p.opt_str(_first_of(candidate, _FINISH_REASON))
            out.append(msg)
    return out


def _instruction_text(value: Any) -> str | None:
    """``system_instruction``: a string, a Gemini content (``{parts: [{text}]}``) or a list of parts."""
    if isinstance(value, Mapping) and isinstance(value.get("parts"), list):
        value = value["parts"]
    return p.text_of(value)


CONVENTION = Convention(NAME, _KEYS, detect, read, stated=((sc.GEN_AI_TOOL_NAME, _MERGED, None),))
