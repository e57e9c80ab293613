"""OTel GenAI semantic conventions: current attributes and the deprecated per-message events."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions._chunks import merged_chunks
from otel_toolscore.conventions.base import Attributes, Convention, SpanFacts, Stated, ToolExecution
from otel_toolscore.trajectory import Document, Message, ToolCallRequest

NAME = "otel_genai"
_DEPRECATED_EVENTS = frozenset(
    {sc.EVENT_SYSTEM_MESSAGE, sc.EVENT_USER_MESSAGE, sc.EVENT_ASSISTANT_MESSAGE, sc.EVENT_TOOL_MESSAGE,
     sc.EVENT_CHOICE}
)
# Events that hold a span's content as event attributes, and for each event attribute the span
# attribute it stands for (``gen_ai.client.inference.operation.details`` carries the inference
# span's own attributes; emitters add one such event per attribute, or one for all).
_CONTENT_EVENTS: dict[str, dict[str, str]] = {
    sc.EVENT_INFERENCE_DETAILS: {
        k: k for k in (sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES, sc.GEN_AI_SYSTEM_INSTRUCTIONS,
                       sc.GEN_AI_TOOL_DEFINITIONS)
    },
    sc.EVENT_CONTENT_PROMPT: {sc.GEN_AI_PROMPT: sc.GEN_AI_INPUT_MESSAGES},
    sc.EVENT_CONTENT_COMPLETION: {sc.GEN_AI_COMPLETION: sc.GEN_AI_OUTPUT_MESSAGES},
}
_MESSAGE_EVENTS = _DEPRECATED_EVENTS | frozenset(_CONTENT_EVENTS)
# a span that reports its content in events names its system or model too
_EVENT_CARRIERS = frozenset({sc.GEN_AI_SYSTEM, sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_REQUEST_MODEL})
_OP_ROLES: dict[str, Stated] = {
    **dict.fromkeys(sc.AGENT_OPERATIONS, "agent"),
    **dict.fromkeys(sc.LLM_OPERATIONS, "llm"),
    sc.OP_EXECUTE_TOOL: "tool",
    sc.OP_RETRIEVAL: "retrieval",
}
#: the keys that keep a span of each role off the direct path (``assemble._direct``): what ``read``
#: takes from them (content kept elsewhere, a Strands status, an agent span's or a tool span's
#: own messages, instructions or definitions, a second result key) that path does not take
DIRECT_REFUSES: dict[Stated, frozenset[str]] = {
    "agent": frozenset({sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES, sc.GEN_AI_SYSTEM_INSTRUCTIONS,
                        sc.GEN_AI_TOOL_DEFINITIONS}),
    "llm": frozenset(),
    "tool": frozenset({sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES, sc.GEN_AI_SYSTEM_INSTRUCTIONS,
                       sc.GEN_AI_TOOL_DEFINITIONS, sc.STRANDS_TOOL_STATUS, *sc.TOOL_RESULT_KEYS[1:]}),
}
_DIRECT_NEVER = frozenset({sc.GEN_AI_INPUT_MESSAGES_REF, sc.GEN_AI_OUTPUT_MESSAGES_REF, sc.GEN_AI_RETRIEVAL_QUERY_TEXT,
                           sc.GEN_AI_RETRIEVAL_DOCUMENTS})
DIRECT_REFUSES = {role: keys | _DIRECT_NEVER for role, keys in DIRECT_REFUSES.items()}

_KEYS = frozenset(
    {sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES, sc.GEN_AI_TOOL_NAME}
) | _EVENT_CARRIERS


def _deprecated_events(span: ReadableSpan) -> list[Any]:
    return [e for e in span.events if e.name in _DEPRECATED_EVENTS]


def _has_message_events(span: ReadableSpan) -> bool:
    return any(e.name in _MESSAGE_EVENTS for e in span.events)


def event_content(span: ReadableSpan) -> dict[str, list[Any]]:
    """The content the span carries in events (``_CONTENT_EVENTS``), by the span attribute each
    value stands for, in event order: ``{"gen_ai.input.messages": [value, …], …}``."""
    out: dict[str, list[Any]] = {}
    for event in span.events:
        names = _CONTENT_EVENTS.get(event.name)
        if names is None:
            continue
        ev = event.attributes or {}
        for key, attr in names.items():
            if key in ev:
                out.setdefault(attr, []).append(ev[key])
    return out


def detect(span: ReadableSpan, attrs: Attributes) -> Stated | None:
    op = attrs.get(sc.GEN_AI_OPERATION_NAME)
    if op is not None:
        return _OP_ROLES.get(op, "other")
    # no operation name: a chat span known by its messages (older emitters, custom code)
    if sc.GEN_AI_INPUT_MESSAGES in attrs or sc.GEN_AI_OUTPUT_MESSAGES in attrs:
        return "llm"
    if not _EVENT_CARRIERS.isdisjoint(attrs) and _has_message_events(span):
        return "llm"
    return "tool" if sc.GEN_AI_TOOL_NAME in attrs else None


def read(span: ReadableSpan, attrs: Attributes, facts: SpanFacts, stated: Stated) -> None:
    span_events = span.events
    if span_events:
        events = _deprecated_events(span)
        content = event_content(span)
        if content:
            # what the span's attributes hold wins over the same attribute in an event
            for key in attrs:
                content.pop(key, None)
    else:
        events, content = _NO_EVENTS, _NO_CONTENT
    has_messages = (sc.GEN_AI_INPUT_MESSAGES in attrs or sc.GEN_AI_OUTPUT_MESSAGES in attrs
                    or (bool(content) and (sc.GEN_AI_INPUT_MESSAGES in content or sc.GEN_AI_OUTPUT_MESSAGES in content)))
    facts.note(NAME if not events else NAME + "_events")
    if stated == "agent":
        if facts.agent_name is None and attrs.get(sc.GEN_AI_AGENT_NAME):
            facts.agent_name = str(attrs[sc.GEN_AI_AGENT_NAME])
        elif span.name:
            facts.agent_name_fallback = agent_name_fallback(span.name)
    elif stated == "tool":
        if facts.tool is None:
            facts.tool = tool_execution(span.name, attrs)
        if facts.tool is not None and span_events:
            _tool_io_from_events(span, facts.tool)
    elif stated == "retrieval":
        _read_retrieval(attrs, facts)

    if facts.model is None:
        facts.model = model_of(attrs)

    if has_messages:
        if facts.input_messages is None:
            facts.input_messages = _messages_in(attrs, content, sc.GEN_AI_INPUT_MESSAGES, facts)
        if facts.output_messages is None:
            facts.output_messages = _messages_in(attrs, content, sc.GEN_AI_OUTPUT_MESSAGES, facts)
    elif events:
        _read_events(events, facts)

    for ref in (sc.GEN_AI_INPUT_MESSAGES_REF, sc.GEN_AI_OUTPUT_MESSAGES_REF):
        if ref in attrs:
            facts.external_content.append(f"{ref}={attrs[ref]}")

    # (most spans carry no content in events: then a value is the attribute's)
    if facts.system_instructions is None:
        value = _first_value(attrs, content, sc.GEN_AI_SYSTEM_INSTRUCTIONS) if content \
            else attrs.get(sc.GEN_AI_SYSTEM_INSTRUCTIONS)
        if value is not None:
            facts.system_instructions = system_text(value)
    if facts.system_instructions is None and facts.input_messages:
        facts.system_instructions = p.system_from_messages(facts.input_messages)
    if facts.tool_definitions is None:
        value = _first_value(attrs, content, sc.GEN_AI_TOOL_DEFINITIONS) if content \
            else attrs.get(sc.GEN_AI_TOOL_DEFINITIONS)
        if value is not None:
            facts.tool_definitions = p.tool_definitions_from(value)

    if facts.role == "agent":
        if facts.run_input is None and facts.input_messages:
            facts.run_input = last_user_text(facts.input_messages)
        if facts.run_output is None and facts.output_messages:
            # Some emitters merge every step into one output message (text, then all tool calls,
            # then all results): the text parts alone are the final answer.
            facts.run_output = last_assistant_text(facts.output_messages)


def agent_name_fallback(span_name: str) -> str | None:
    """An agent span that names no agent in its attributes (the Anthropic SDK's tool runner,
    ``anthropic.messages.tool_runner``): the name the span itself carries."""
    op, _, rest = span_name.partition(" ")
    return (rest.strip() or None) if op in sc.AGENT_OPERATIONS else span_name


def model_of(attrs: Attributes) -> str | None:
    model = attrs.get(sc.GEN_AI_RESPONSE_MODEL) or attrs.get(sc.GEN_AI_REQUEST_MODEL)
    return str(model) if model else None


def system_text(value: Any) -> str | None:
    parsed = p.loads(value) if isinstance(value, str) and value[:1] in "[{" else value
    if isinstance(parsed, list):
        return p.text_of(parsed)
    if isinstance(parsed, dict):
        return p.text_of(parsed)
    return p.as_text(value)


def last_user_text(messages: list[Message]) -> str | None:
    """The run's input: its last user message (a chat app sends earlier turns before it)."""
    for m in reversed(messages):
        if m.role == "user" and m.content:
            return m.content
    return None


def last_assistant_text(messages: list[Message]) -> str | None:
    for m in reversed(messages):
        if m.role in ("assistant", "unknown") and m.content:
            return m.content
    return None


def _first_value(attrs: Attributes, content: dict[str, list[Any]], key: str) -> Any:
    if key in attrs:
        return attrs[key]
    values = content.get(key) if content else None
    return values[0] if values else None


#: a span without events carries no content in them (never changed: ``content`` is only
#: changed when it holds something), nor deprecated message events (never changed either)
_NO_CONTENT: dict[str, list[Any]] = {}
_NO_EVENTS: list[Any] = []


def _messages_in(attrs: Attributes, content: dict[str, list[Any]], key: str, facts: SpanFacts) -> list[Message] | None:
    """The messages of ``key``: the span attribute, else every event value of it in order (an
    emitter that adds the new turns of a step in a later event of the same name)."""
    if key in attrs:
        return _messages(attrs[key], facts, key)
    values = content.get(key)
    if not values:
        return None
    if len(values) == 1:
        return _messages(values[0], facts, key)
    return [m for value in values for m in _messages(value, facts, key)]


def _without_finish_reason(msg: Message) -> Message:
    if msg.finish_reason is None:
        return msg
    return Message(role=msg.role, content=msg.content, tool_calls=list(msg.tool_calls),
                   tool_results=list(msg.tool_results))


# Each LLM span's input history extends the previous span's, with that span's output first: as
# it was written, or (the semconv's input messages have no finish_reason) without its
# finish_reason.
_CONTINUES = p.Continues(sc.GEN_AI_OUTPUT_MESSAGES, "finish_reason", _without_finish_reason)


def _messages(value: Any, facts: SpanFacts, attr: str) -> list[Message]:
    messages = messages_of(value, attr)
    if messages is None:
        facts.problem(f"{attr} is not a JSON list of messages")
        return []
    return messages


def messages_of(value: Any, attr: str) -> list[Message] | None:
    """The messages of attribute ``attr`` (input or output messages), None when the value is no
    JSON list; read through the trace's memo, keyed by attribute."""
    if attr == sc.GEN_AI_INPUT_MESSAGES:
        return p.json_list_of(value, attr, _convert_messages, _CONTINUES)
    messages = p.json_list_of(value, attr, _convert_messages)
    # a streamed response written chunk by chunk is one message (docs/conventions.md, "Streamed responses")
    return merged_chunks(messages) if messages is not None else None


def _convert_messages(items: list[Any]) -> list[Message]:
    # (``messages_from_list`` and ``_repr_tool_calls`` in one pass: a history's new items are few,
    # and the calls around them cost as much as their conversion)
    message_from = p.message_from
    out = []
    for item in items:
        msg = message_from(item)
        if msg is not None:
            out.append(msg if msg.role != "assistant" or not msg.content or "ToolCall(" not in msg.content
                       else _repr_tool_calls(msg))
    return out


def _repr_tool_calls(msg: Message) -> Message:
    """Text parts holding ``ResponseFunctionToolCall(...)`` reprs are tool calls.

    The official OpenAI Agents instrumentation (0.1.x) stringifies Responses output items it
    does not know into text parts; without this, those runs would look tool-free.
    """
    if msg.role != "assistant" or not msg.content or "ToolCall(" not in msg.content:
        return msg
    rest: list[str] = []
    for line in _split_reprs(msg.content):
        parsed = p.parse_repr_call(line)
        if parsed and parsed[0].endswith("ToolCall") and "name" in parsed[1]:
            kw = parsed[1]
            args, raw, _ = p.parse_arguments(kw.get("arguments"))
            msg.tool_calls.append(
                ToolCallRequest(id=kw.get("call_id") or kw.get("id"), name=kw["name"], arguments=args,
                                arguments_raw=raw)
            )
        else:
            rest.append(line)
    msg.content = "\n".join(rest) if rest else None
    return msg


def _split_reprs(text: str) -> list[str]:
    # text parts were joined with newlines by the message reader; reprs contain no raw newlines
    return [t for t in text.split("\n") if t.strip()]


def tool_execution(span_name: str, attrs: Attributes) -> ToolExecution:
    """A tool span's call as executed, from its attributes (events aside: ``read``)."""
    tool = ToolExecution()
    name = attrs.get(sc.GEN_AI_TOOL_NAME)
    if not name and span_name.startswith(sc.OP_EXECUTE_TOOL + " "):
        name = span_name[len(sc.OP_EXECUTE_TOOL) + 1 :]
    tool.name = str(name) if name else None
    call_id = attrs.get(sc.GEN_AI_TOOL_CALL_ID)
    tool.call_id = str(call_id) if call_id else None
    if sc.GEN_AI_TOOL_CALL_ARGUMENTS in attrs:
        tool.arguments, tool.arguments_raw, tool.arguments_error = p.parse_arguments(
            attrs[sc.GEN_AI_TOOL_CALL_ARGUMENTS]
        )
    for key in sc.TOOL_RESULT_KEYS:
        if key in attrs:
            tool.result, tool.result_raw, tool.error = p.read_result(attrs[key])
            tool.has_result = True
            break
    status = attrs.get(sc.STRANDS_TOOL_STATUS)
    if tool.error is None and status is not None and str(status).lower() == "error":
        tool.error = p.result_error(tool.result) or (p.as_text(tool.result) if tool.has_result else None) or "error"
    schema = attrs.get(sc.STRANDS_TOOL_JSON_SCHEMA)
    if schema is not None:  # (Strands: the tool's own schema, checked against with schema_source "tool_span")
        tool.schema = p.tool_schema_from(schema)
    return tool


def _tool_io_from_events(span: ReadableSpan, tool: ToolExecution) -> None:
    """A tool span that reports its call as deprecated message events (Strands without the
    opt-in): a ``gen_ai.tool.message`` then a ``gen_ai.choice``, for the span's own call id
    when they name one, are what went into the tool (the arguments) and what came out (the
    result). Only the pair is read so: one message alone says nothing of its direction. What
    the span's attributes hold wins."""
    if tool.arguments_raw is not None and tool.has_result:
        return
    sent = chosen = None
    for event in span.events:
        if event.name != sc.EVENT_TOOL_MESSAGE and event.name != sc.EVENT_CHOICE:
            continue
        body = _event_body(event)
        call_id = body.get(sc.EVENT_FIELD_ID)
        if call_id is not None and tool.call_id is not None and str(call_id) != tool.call_id:
            continue
        if event.name == sc.EVENT_TOOL_MESSAGE and sent is None and chosen is None:
            sent = body
        elif event.name == sc.EVENT_CHOICE and sent is not None and chosen is None:
            chosen = body
    if sent is None or chosen is None:
        return
    if tool.arguments_raw is None and sc.EVENT_FIELD_CONTENT in sent:
        tool.arguments, tool.arguments_raw, tool.arguments_error = p.parse_arguments(sent[sc.EVENT_FIELD_CONTENT])
    if not tool.has_result and sc.EVENT_FIELD_MESSAGE in chosen:
        tool.result, tool.result_raw = p.parse_result(chosen[sc.EVENT_FIELD_MESSAGE])
        tool.has_result = True


def _read_retrieval(attrs: Attributes, facts: SpanFacts) -> None:
    query = attrs.get(sc.GEN_AI_RETRIEVAL_QUERY_TEXT)
    if facts.retrieval_query is None and query is not None:
        facts.retrieval_query = str(query)
    if facts.documents is None and sc.GEN_AI_RETRIEVAL_DOCUMENTS in attrs:
        facts.documents = documents_from(p.parse_json_list(attrs[sc.GEN_AI_RETRIEVAL_DOCUMENTS]))


def documents_from(items: list[Any]) -> list[Document]:
    docs = []
    for item in items:
        if isinstance(item, str):
            docs.append(Document(content=item))
            continue
        if not isinstance(item, dict):
            continue
        meta = item.get("metadata") if isinstance(item.get("metadata"), dict) else None
        if meta is not None and p.nested_deeper_than(meta):
            meta = None
        doc_id = item.get("id") or (meta or {}).get("doc_id") or (meta or {}).get("id")
        content = item.get("content", item.get("page_content", item.get("text")))
        score = item.get("score")
        docs.append(
            Document(
                id=str(doc_id) if doc_id is not None else None,
                content=p.as_text(content),
                score=float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
                metadata=meta,
            )
        )
    return docs


def _event_body(event: Any) -> dict[str, Any]:
    """A deprecated event's body: the log record's body, else the event's attributes."""
    ev_attrs = dict(event.attributes or {})
    body = p.loads(ev_attrs.get(sc.EVENT_BODY)) if sc.EVENT_BODY in ev_attrs else None
    if body is None:
        body = {k: v for k, v in ev_attrs.items() if k != sc.EVENT_BODY}
    if not isinstance(body, dict):
        body = {sc.EVENT_FIELD_CONTENT: body}
    return body


def _with_blocks(body: dict[str, Any]) -> dict[str, Any]:
    """The body with a ``content`` that is the JSON text of a content-block list decoded, so
    its blocks (text, tool uses, tool results) are read as parts."""
    blocks = p.content_blocks(body.get(sc.EVENT_FIELD_CONTENT))
    if blocks is None:
        return body
    return {**body, sc.EVENT_FIELD_CONTENT: blocks}


_MESSAGE_FIELDS = frozenset({"role", "content", "tool_calls", "parts"})


def _choice_message(body: dict[str, Any]) -> dict[str, Any]:
    """A ``gen_ai.choice``'s message: an object (the semconv's ``{role, content, tool_calls}``,
    maybe as JSON), a content-block list (maybe as JSON), or the answer as plain text."""
    message = body.get(sc.EVENT_FIELD_MESSAGE)
    if isinstance(message, str) and message[:1] == "{":
        parsed = p.loads(message)
        # a message object as JSON, not an answer that is JSON text (structured output)
        if isinstance(parsed, dict) and not _MESSAGE_FIELDS.isdisjoint(parsed):
            message = parsed
    if isinstance(message, dict):
        return _with_blocks(message)
    if message is None:
        return body
    blocks = p.content_blocks(message)
    return {sc.EVENT_FIELD_CONTENT: blocks if blocks is not None else message}


def _read_events(events: list[Any], facts: SpanFacts) -> None:
    inputs: list[Message] = []
    outputs: list[Message] = []
    for event in events:
        body = _event_body(event)
        if event.name == sc.EVENT_CHOICE:
            msg = p.message_from({"role": "assistant", **_choice_message(body)})
            if msg is not None:
                msg.finish_reason = msg.finish_reason or p.opt_str(body.get("finish_reason"))
                outputs.append(_repr_tool_calls(msg))
            continue
        role = event.name.split(".")[1]  # gen_ai.<role>.message
        data = _with_blocks(body)
        data["role"] = role
        if role == "tool" and "id" in data and "tool_call_id" not in data:
            data["tool_call_id"] = data["id"]
        msg = p.message_from(data)
        if msg is None:
            continue
        if role == "system":
            if facts.system_instructions is None:
                facts.system_instructions = msg.content
        inputs.append(msg)
    if facts.input_messages is None:
        facts.input_messages = inputs
    if facts.output_messages is None:
        facts.output_messages = outputs


CONVENTION = Convention(NAME, _KEYS, detect, read, stated=((sc.GEN_AI_OPERATION_NAME, _OP_ROLES, None),))
