"""OpenLLMetry (Traceloop): ``traceloop.*`` entity spans and the legacy flattened prompt format.

Releases ≥ 0.55 write the OTel GenAI attributes (read by ``genai``); this reader adds the span
kinds, the entity input/output of workflows, tasks and tools, and ≤ 0.54's
``gen_ai.prompt.{i}.*`` / ``gen_ai.completion.{i}.*`` / ``llm.request.functions.{i}.*``.
litellm's OTel callback writes the same flattened form.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions.base import Attributes, Convention, SpanFacts, Stated, ToolExecution
from otel_toolscore.conventions.genai import documents_from, last_assistant_text, last_user_text
from otel_toolscore.trajectory import Message, ToolCallRequest, ToolResultPart

NAME = "openllmetry"
_LLM_REQUEST_TYPES = frozenset({"chat", "completion"})
_KIND_ROLES: dict[str, Stated] = {"workflow": "agent", "agent": "agent", "tool": "tool"}
_REQUEST_ROLES: dict[str, Stated] = dict.fromkeys(_LLM_REQUEST_TYPES, "llm")
# The flattened form always starts at index 0, and every message has a role (or content): these
# few keys tell it with one set operation instead of a prefix scan of every attribute.
_FLATTENED = frozenset(
    f"{prefix}0.{field}" for prefix in (sc.TL_PROMPT_PREFIX, sc.TL_COMPLETION_PREFIX) for field in ("role", "content")
)


def _is_llm(attrs: Attributes) -> bool:
    return attrs.get(sc.LLM_REQUEST_TYPE) in _REQUEST_ROLES or not _FLATTENED.isdisjoint(attrs)


def detect(span: ReadableSpan, attrs: Attributes) -> Stated | None:
    kind = attrs.get(sc.TL_SPAN_KIND)
    llm = _is_llm(attrs)
    if kind is None and not llm and sc.LLM_REQUEST_TYPE not in attrs:
        return None
    role = _KIND_ROLES.get(kind) if kind is not None else None
    if role:
        return role
    if llm:
        return "llm"
    return "retrieval" if kind == "task" and _documents(attrs) is not None else ""


def read(span: ReadableSpan, attrs: Attributes, facts: SpanFacts, stated: Stated) -> None:
    facts.note(NAME)
    if stated == "agent":
        if facts.agent_name is None:
            name = attrs.get(sc.GEN_AI_AGENT_NAME) or attrs.get(sc.TL_ENTITY_NAME) or attrs.get(sc.TL_WORKFLOW_NAME)
            facts.agent_name = p.opt_str(name)
        if facts.run_input is None and sc.TL_ENTITY_INPUT in attrs:
            facts.run_input = _entity_text(attrs[sc.TL_ENTITY_INPUT], want="user")
        if facts.run_output is None and sc.TL_ENTITY_OUTPUT in attrs:
            facts.run_output = _entity_text(attrs[sc.TL_ENTITY_OUTPUT], want="assistant")
    elif stated == "tool":
        _read_tool(span, attrs, facts)
    elif stated == "retrieval":
        facts.documents = facts.documents if facts.documents is not None else _documents(attrs)
        if facts.retrieval_query is None and sc.TL_ENTITY_INPUT in attrs:
            facts.retrieval_query = _entity_text(attrs[sc.TL_ENTITY_INPUT], want="user")
    if _is_llm(attrs):
        _read_flattened(attrs, facts)


def _entity_text(value: Any, want: str) -> str | None:
    ok, parsed = p.try_loads(value)
    if not ok:
        return p.as_text(value)
    if isinstance(parsed, dict):
        for key in ("inputs", "outputs", "input", "output"):
            if key in parsed and len(parsed) <= 3:
                parsed = parsed[key]
                break
    if isinstance(parsed, str):
        return parsed
    if isinstance(parsed, dict):
        for key in ("query", "question", "input", "text", "content"):
            if isinstance(parsed.get(key), str):
                return parsed[key]
        msgs = parsed.get("messages")
        if isinstance(msgs, list):
            parsed_msgs = p.messages_from_list(msgs)
            return last_user_text(parsed_msgs) if want == "user" else last_assistant_text(parsed_msgs)
    return None


def _documents(attrs: Attributes) -> list[Any] | None:
    for key in (sc.TL_ENTITY_OUTPUT, sc.GEN_AI_TASK_OUTPUT):
        out = p.loads(attrs.get(key)) if key in attrs else None
        if isinstance(out, dict) and isinstance(out.get("documents"), list):
            return documents_from(out["documents"])
    return None


def _read_tool(span: ReadableSpan, attrs: Attributes, facts: SpanFacts) -> None:
    if facts.tool is not None:
        return
    tool = ToolExecution()
    name = attrs.get(sc.GEN_AI_TOOL_NAME) or attrs.get(sc.TL_ENTITY_NAME)
    if not name:
        name = span.name.removesuffix(sc.TL_TOOL_SPAN_SUFFIX)
    tool.name = str(name)
    tool.call_id = p.opt_str(attrs.get(sc.GEN_AI_TOOL_CALL_ID))
    args = attrs.get(sc.GEN_AI_TOOL_CALL_ARGUMENTS, attrs.get(sc.TL_ENTITY_INPUT))
    if args is not None:
        tool.arguments, tool.arguments_raw, tool.arguments_error = p.parse_arguments(args)
    result_key = sc.GEN_AI_TOOL_CALL_RESULT if sc.GEN_AI_TOOL_CALL_RESULT in attrs else sc.TL_ENTITY_OUTPUT
    if result_key in attrs:
        tool.result, tool.result_raw, tool.error = p.read_result(attrs[result_key])
        tool.has_result = True
    facts.tool = tool


def _read_flattened(attrs: Attributes, facts: SpanFacts) -> None:
    prompts: dict[int, dict[str, Any]] = {}
    completions: dict[int, dict[str, Any]] = {}
    functions: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if key.startswith(sc.TL_PROMPT_PREFIX):
            m = sc.TL_PROMPT_RE.match(key)
            if m:
                prompts.setdefault(int(m.group(1)), {})[m.group(2)] = value
        elif key.startswith(sc.TL_COMPLETION_PREFIX):
            m = sc.TL_COMPLETION_RE.match(key)
            if m:
                completions.setdefault(int(m.group(1)), {})[m.group(2)] = value
        elif key.startswith(sc.TL_FUNCTIONS_PREFIX):
            m = sc.TL_FUNCTIONS_RE.match(key)
            if m:
                functions.setdefault(int(m.group(1)), {})[m.group(2)] = value
    if facts.input_messages is None and prompts:
        facts.input_messages = [_message(prompts[i]) for i in sorted(prompts)]
        if facts.system_instructions is None:
            facts.system_instructions = p.system_from_messages(facts.input_messages)
    if facts.output_messages is None and completions:
        facts.output_messages = _completions(completions)
    if facts.tool_definitions is None and functions:
        defs = [p.tool_definition_from(functions[i]) for i in sorted(functions)]
        facts.tool_definitions = [d for d in defs if d is not None]


def _message(fields: dict[str, Any]) -> Message:
    role = p.norm_role(fields.get("role"))
    msg = Message(role=role, finish_reason=p.opt_str(fields.get("finish_reason")))
    for call in _calls(fields):
        msg.tool_calls.append(call)
    content = fields.get("content")
    if role == "tool":
        read = p.read_result(content)
        msg.tool_results.append(
            ToolResultPart(tool_call_id=p.opt_str(fields.get("tool_call_id")), name=p.opt_str(fields.get("name")),
                           content=read.value, content_raw=read.raw, is_error=read.error is not None)
        )
    else:
        text = content
        parsed = p.loads(content) if isinstance(content, str) and content[:1] == "[" else None
        if isinstance(parsed, list):
            text = p.text_of(parsed)
        msg.content = p.as_text(text)
    return msg


def _calls(fields: dict[str, Any]) -> list[ToolCallRequest]:
    calls: dict[int, dict[str, Any]] = {}
    for k, v in fields.items():
        m = sc.TL_TOOL_CALLS_RE.match(k)
        if m:
            calls.setdefault(int(m.group(1)), {})[m.group(2)] = v
    out = []
    for j in sorted(calls):
        c = calls[j]
        args, raw, _ = p.parse_arguments(c.get("arguments"))
        out.append(ToolCallRequest(id=p.opt_str(c.get("id")), name=p.opt_str(c.get("name")), arguments=args,
                                   arguments_raw=raw))
    if "function_call.name" in fields:
        args, raw, _ = p.parse_arguments(fields.get("function_call.arguments"))
        out.append(ToolCallRequest(name=p.opt_str(fields["function_call.name"]), arguments=args, arguments_raw=raw))
    return out


def _completions(completions: dict[int, dict[str, Any]]) -> list[Message]:
    """One assistant message; litellm spreads parallel calls over completion.0 and completion.1."""
    msgs = [_message({**completions[i], "role": completions[i].get("role", "assistant")}) for i in sorted(completions)]
    if len(msgs) > 1 and all(m.role == "assistant" for m in msgs):
        merged = Message(role="assistant", finish_reason=msgs[0].finish_reason)
        texts = [m.content for m in msgs if m.content]
        merged.content = "\n".join(texts) if texts else None
        for m in msgs:
            merged.tool_calls.extend(m.tool_calls)
        return [merged]
    return msgs


CONVENTION = Convention(
    NAME, frozenset({sc.TL_SPAN_KIND, sc.LLM_REQUEST_TYPE}) | _FLATTENED, detect, read,
    stated=((sc.TL_SPAN_KIND, _KIND_ROLES, None), (sc.LLM_REQUEST_TYPE, _REQUEST_ROLES, None)),
)
