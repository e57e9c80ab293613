"""OpenInference (Arize): span kinds and flattened ``llm.*_messages.{i}.message.*`` attributes."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions.base import Attributes, Convention, SpanFacts, Stated, ToolExecution
from otel_toolscore.conventions.genai import documents_from, last_assistant_text, last_user_text
from otel_toolscore.trajectory import Document, Message, ToolCallRequest, ToolResultPart

NAME = "openinference"
_ROLES: dict[str, Stated] = {sc.OI_KIND_LLM: "llm", sc.OI_KIND_TOOL: "tool", sc.OI_KIND_RETRIEVER: "retrieval"}


def detect(span: ReadableSpan, attrs: Attributes) -> Stated | None:
    kind = attrs.get(sc.OI_SPAN_KIND)
    if kind is None:
        return None
    kind = str(kind).upper()
    if kind == sc.OI_KIND_AGENT:
        return "other" if _is_graph_node(attrs, span.name) else "agent"
    if kind == sc.OI_KIND_CHAIN and span.parent is None:
        # LangGraph and LangChain runs are rooted at a CHAIN named after the graph.
        return "agent"
    return _ROLES.get(kind, "other")


def read(span: ReadableSpan, attrs: Attributes, facts: SpanFacts, stated: Stated) -> None:
    facts.note(NAME)
    if stated == "agent":
        if str(attrs[sc.OI_SPAN_KIND]).upper() == sc.OI_KIND_AGENT:
            if facts.agent_name is None and attrs.get(sc.OI_AGENT_NAME):
                facts.agent_name = str(attrs[sc.OI_AGENT_NAME])
            elif span.name:
                facts.agent_name_fallback = span.name
        elif facts.agent_name is None:
            facts.agent_name = str(attrs.get(sc.OI_AGENT_NAME) or span.name)
        _read_run_io(attrs, facts)
    elif stated == "tool":
        _read_tool(span, attrs, facts)
    elif stated == "retrieval":
        _read_retriever(attrs, facts)

    if facts.model is None and attrs.get(sc.OI_LLM_MODEL_NAME):
        facts.model = str(attrs[sc.OI_LLM_MODEL_NAME])
    if facts.role == "llm":
        inputs, outputs, tools = _flattened(attrs)
        if facts.input_messages is None and inputs:
            facts.input_messages = inputs
        if facts.output_messages is None and outputs:
            facts.output_messages = outputs
        if facts.tool_definitions is None and tools:
            facts.tool_definitions = tools
        if facts.system_instructions is None and inputs:
            facts.system_instructions = p.system_from_messages(inputs)


def _is_graph_node(attrs: Attributes, name: str) -> bool:
    """LangGraph node executions are tagged AGENT by some versions; they are steps, not agents."""
    meta = p.loads(attrs.get(sc.OI_METADATA)) if sc.OI_METADATA in attrs else None
    return isinstance(meta, dict) and meta.get(sc.LANGGRAPH_NODE) == name


def _flattened(attrs: Attributes) -> tuple[list[Message], list[Message], list[Any]]:
    """Rebuild messages and tool definitions from the flattened attribute keys."""
    raw: dict[str, dict[int, dict[str, Any]]] = {"input": {}, "output": {}}
    tools: dict[int, Any] = {}
    for key, value in attrs.items():
        if not key.startswith(sc.OI_LLM_PREFIX):
            continue
        m = sc.OI_MESSAGES_RE.match(key)
        if m:
            raw[m.group(1)].setdefault(int(m.group(2)), {})[m.group(3)] = value
            continue
        t = sc.OI_TOOLS_RE.match(key)
        if t:
            tools[int(t.group(1))] = value
    defs = []
    for i in sorted(tools):
        # every LLM span of a run repeats the same schemas: read each distinct one once
        d = p.memoized("oi_tool_definition", tools[i], p.tool_definition_from)
        if d is not None:
            defs.append(d)
    return _build(raw["input"]), _build(raw["output"]), defs


def _build(by_index: dict[int, dict[str, Any]]) -> list[Message]:
    out = []
    for i in sorted(by_index):
        fields = by_index[i]
        msg = Message(role=p.norm_role(fields.get("role")))
        content = fields.get("content")
        if content is None:
            parts = {}
            for k, v in fields.items():
                cm = sc.OI_CONTENTS_RE.match(k)
                if cm and cm.group(2) == "text":
                    parts[int(cm.group(1))] = str(v)
            content = "\n".join(parts[j] for j in sorted(parts)) if parts else None
        calls: dict[int, dict[str, Any]] = {}
        for k, v in fields.items():
            tm = sc.OI_TOOL_CALL_RE.match(k)
            if tm:
                calls.setdefault(int(tm.group(1)), {})[tm.group(2)] = v
        for j in sorted(calls):
            c = calls[j]
            args, raw, _ = p.parse_arguments(c.get(sc.OI_TOOL_CALL_FUNCTION_ARGUMENTS))
            msg.tool_calls.append(
                ToolCallRequest(
                    id=p.opt_str(c.get("id")),
                    name=p.opt_str(c.get(sc.OI_TOOL_CALL_FUNCTION_NAME)),
                    arguments=args,
                    arguments_raw=raw,
                )
            )
        if msg.role == "tool":
            read = p.read_result(content)
            msg.tool_results.append(
                ToolResultPart(
                    tool_call_id=p.opt_str(fields.get("tool_call_id")),
                    name=p.opt_str(fields.get("name")),
                    content=read.value,
                    content_raw=read.raw,
                    is_error=read.error is not None,
                )
            )
        else:
            msg.content = p.as_text(content)
        out.append(msg)
    if any(m.role in _TEXT_TOOL_ROLES for m in out):
        p.read_text_tool_messages(out)
    return out


# roles under which a framework writes tool calls and results into the history as text
_TEXT_TOOL_ROLES = frozenset({sc.SMOLAGENTS_ROLE_TOOL_CALL, sc.SMOLAGENTS_ROLE_TOOL_RESPONSE})


def _read_run_io(attrs: Attributes, facts: SpanFacts) -> None:
    if facts.run_input is None and sc.OI_INPUT_VALUE in attrs:
        facts.run_input = _io_text(attrs[sc.OI_INPUT_VALUE], want="user")
    if facts.run_output is None and sc.OI_OUTPUT_VALUE in attrs:
        facts.run_output = _io_text(attrs[sc.OI_OUTPUT_VALUE], want="assistant")


#: where ``input.value``/``output.value`` JSON holds the messages, the question or the answer
_IO_KEYS = ("messages", "input", "output", "final_output", "content", "text", "query", "question")
#: where a run's ``input.value`` (its run method's bound arguments) holds the question under the
#: name the framework gives it: smolagents ``MultiStepAgent.run(task, …)``
_QUESTION_KEYS = (*_IO_KEYS, "task")


def _io_text(value: Any, want: str) -> str | None:
    """``input.value``/``output.value``: plain text, or JSON holding messages or a final state."""
    ok, parsed = p.try_loads(value)
    if not ok:
        return p.as_text(value)
    if isinstance(parsed, str):
        return parsed
    messages: Any = None
    if isinstance(parsed, dict):
        for key in _QUESTION_KEYS if want == "user" else _IO_KEYS:
            if key in parsed:
                messages = parsed[key]
                break
    elif isinstance(parsed, list):
        messages = parsed
    if isinstance(messages, str):
        return messages
    msgs = p.messages_from_list(messages if isinstance(messages, list) else [])
    text = last_user_text(msgs) if want == "user" else last_assistant_text(msgs)
    return text


def _read_tool(span: ReadableSpan, attrs: Attributes, facts: SpanFacts) -> None:
    if facts.tool is not None:
        return
    tool = ToolExecution(name=p.opt_str(attrs.get(sc.OI_TOOL_NAME) or span.name))
    call_id = attrs.get(sc.OI_TOOL_ID) or attrs.get(sc.OI_TOOL_CALL_ID)
    tool.call_id = p.opt_str(call_id)
    if sc.OI_INPUT_VALUE in attrs:
        tool.arguments, tool.arguments_raw, tool.arguments_error = p.parse_arguments(attrs[sc.OI_INPUT_VALUE])
    if sc.OI_OUTPUT_VALUE in attrs:
        tool.result, tool.result_raw, tool.error = p.read_result(attrs[sc.OI_OUTPUT_VALUE])
        tool.has_result = True
    facts.tool = tool
    if attrs.get(sc.OI_TOOL_PARAMETERS):
        tool.schema = _schema_or_none(attrs[sc.OI_TOOL_PARAMETERS], tool)


def _schema_or_none(value: Any, tool: ToolExecution) -> dict[str, Any] | None:
    """``tool.parameters`` is the tool's schema, recorded on the tool's own span (not what the
    request offered: validation reads it with ``schema_source`` ``tool_span``), but some
    instrumentations (Google ADK's, Agno's) write the call's arguments there: a value equal to
    the arguments, or not shaped like a schema, is no schema."""
    schema = p.tool_schema_from(value)
    if schema is not None and tool.arguments is not None and schema == tool.arguments and schema:
        return None
    return schema


def _read_retriever(attrs: Attributes, facts: SpanFacts) -> None:
    if facts.retrieval_query is None and sc.OI_INPUT_VALUE in attrs:
        facts.retrieval_query = _io_text(attrs[sc.OI_INPUT_VALUE], want="user")
    by_index: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        m = sc.OI_DOCUMENTS_RE.match(key)
        if m:
            by_index.setdefault(int(m.group(1)), {})[m.group(2)] = value
    docs = []
    for i in sorted(by_index):
        f = by_index[i]
        meta = p.loads(f.get("metadata"))
        score = f.get("score")
        docs.append(
            Document(
                id=p.opt_str(f.get("id")),
                content=p.as_text(f.get("content")),
                score=float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
                metadata=meta if isinstance(meta, dict) and not p.nested_deeper_than(meta) else None,
            )
        )
    # Ids are often only in output.value (LangChain Documents); take them when it lines up.
    out = p.loads(attrs.get(sc.OI_OUTPUT_VALUE)) if sc.OI_OUTPUT_VALUE in attrs else None
    out_docs = documents_from(out.get("documents", [])) if isinstance(out, dict) else []
    if not docs:
        docs = out_docs
    elif len(out_docs) == len(docs):
        for d, o in zip(docs, out_docs):
            if d.id is None and o.content == d.content:
                d.id = o.id
    if facts.documents is None:
        facts.documents = docs


CONVENTION = Convention(NAME, frozenset({sc.OI_SPAN_KIND}), detect, read, stated=((sc.OI_SPAN_KIND, _ROLES, None),))
