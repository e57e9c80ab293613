"""One response written as its streamed chunks: the partial assistant messages merged into one.

Some emitters record a streamed response chunk by chunk in its output messages. Google ADK in
SSE mode writes one assistant message per chunk (``finish_reason: ""``, the calls known so far,
``arguments: null`` until the call is whole), then the whole response; others write each
chunk's text delta only, or the text so far. Read as they are, every chunk's call would be a
call of its own beside the whole one, and the answer would be the chunks and the whole text
joined. The rule (docs/conventions.md, "Streamed responses") is the same for every convention:

* a *partial* message is an assistant message whose ``finish_reason`` is stated and empty (the
  stream had not finished), or one that states none and holds a call whose id a later
  assistant message of the response holds again (a chunk of a call still being written);
* partial messages and the assistant message that completes them (the first after them that is
  not partial, when there is one) are one message;
* its calls: one per id, in the order ids first appear; a later message's call with that id
  supersedes an earlier one (a chunk's call is what was known then), except that a call whose
  arguments are null never supersedes one that has them; when no chunk holds the whole
  arguments but their texts joined make a JSON object (argument deltas), that object;
  calls without an id are kept as written;
* its text: each chunk's text either repeats all the text so far (the whole text, or the text so
  far) and replaces it, or is a delta that is appended.

Several assistant messages that are all finished (``n`` choices, or an emitter that lists every
step) are not partial and stay apart, and so do two calls of one finished message that share an
id (a model that reused an id: ``assemble`` pairs them by position).
"""

from __future__ import annotations

from otel_toolscore.conventions import parsing as p
from otel_toolscore.trajectory import Message, ToolCallRequest

_ASSISTANT = "assistant"


def merged_chunks(messages: list[Message]) -> list[Message]:
    """``messages`` with every streamed response's partial messages merged (the same list when
    there are none: most outputs hold one message)."""
    if len(messages) < 2:
        return messages
    partial = _partial_flags(messages)
    if not any(partial):
        return messages
    out: list[Message] = []
    pending: list[Message] = []
    for msg, is_partial in zip(messages, partial):
        if msg.role != _ASSISTANT:
            if pending:
                out.append(_merge(pending, complete=False))
                pending = []
            out.append(msg)
        elif is_partial:
            pending.append(msg)
        elif pending:
            pending.append(msg)
            out.append(_merge(pending, complete=True))
            pending = []
        else:
            out.append(msg)
    if pending:
        out.append(_merge(pending, complete=False))
    return out


def _partial_flags(messages: list[Message]) -> list[bool]:
    """Which messages are partial, in one pass from the end (linear in the calls, however many
    messages an output holds)."""
    flags = [False] * len(messages)
    later: set[str] = set()  # call ids of the later assistant messages of the same response
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if msg.role != _ASSISTANT:
            later = set()
            continue
        ids = [c.id for c in msg.tool_calls if c.id]
        if msg.finish_reason is not None:
            flags[i] = msg.finish_reason == ""  # a message that states why it finished is whole
        else:
            flags[i] = any(call_id in later for call_id in ids)
        later.update(ids)
    return flags


def _merge(group: list[Message], complete: bool) -> Message:
    last = group[-1]
    finish = last.finish_reason if complete else next(
        (m.finish_reason for m in reversed(group) if m.finish_reason), None)
    return Message(role=_ASSISTANT, content=_text(group), tool_calls=_calls(group),
                   tool_results=[r for m in group for r in m.tool_results], finish_reason=finish)


def _text(group: list[Message]) -> str | None:
    text: str | None = None
    for msg in group:
        chunk = msg.content
        if not chunk:
            continue
        # the whole text or the text so far repeats what came before; a delta does not
        text = chunk if text is None or chunk.startswith(text) else text + chunk
    return text


def _calls(group: list[Message]) -> list[ToolCallRequest]:
    order: list[str | ToolCallRequest] = []  # an id, or a call without one, in first-seen order
    seen: dict[str, list[ToolCallRequest]] = {}
    for msg in group:
        for call in msg.tool_calls:
            if not call.id:
                order.append(call)
                continue
            versions = seen.get(call.id)
            if versions is None:
                versions = seen[call.id] = []
                order.append(call.id)
            versions.append(call)
    out: list[ToolCallRequest] = []
    for key in order:
        out.append(key if isinstance(key, ToolCallRequest) else _one_call(seen[key]))
    return out


def _has_arguments(call: ToolCallRequest) -> bool:
    return call.arguments is not None or call.arguments_raw is not None


def _one_call(versions: list[ToolCallRequest]) -> ToolCallRequest:
    if len(versions) == 1:
        return versions[0]
    whole = [c for c in versions if c.arguments is not None]
    name = next((c.name for c in reversed(versions) if c.name), None)
    if whole:
        chosen = whole[-1]
    else:
        pieces = [c.arguments_raw for c in versions if c.arguments_raw is not None]
        if len(pieces) > 1:
            joined = "".join(pieces)
            parsed, raw, problem = p.parse_arguments(joined)
            if problem is None:
                return ToolCallRequest(id=versions[0].id, name=name, arguments=parsed, arguments_raw=raw)
        with_any = [c for c in versions if _has_arguments(c)]
        chosen = with_any[-1] if with_any else versions[-1]
    if chosen.name == name:
        return chosen
    return ToolCallRequest(id=chosen.id, name=name, arguments=chosen.arguments, arguments_raw=chosen.arguments_raw)
