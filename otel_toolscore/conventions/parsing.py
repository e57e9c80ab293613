"""Lenient readers for the value shapes real instrumentation writes into attributes.

Values that should be objects arrive as JSON strings, Python reprs (``str(dict)`` or
``ResponseFunctionToolCall(...)``), bare strings, or already-decoded sequences. Every function
here takes anything and returns ``None`` (or an empty list) rather than raising: a bad value is a
recorded problem for the caller, never an exception.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from otel_toolscore.trajectory import Message, ToolCallRequest, ToolDefinition, ToolResultPart

#: cap on what we try to parse: a 10 MB attribute is kept raw, not parsed
MAX_PARSE_CHARS = 2_000_000
_NOT_PARSED = object()


def as_text(value: Any) -> str | None:
    """Attribute value → text, keeping JSON for structured values."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    try:
        return json.dumps(list(value) if isinstance(value, tuple) else value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def loads(value: Any) -> Any:
    """Parse a JSON (or Python-repr) string; ``None`` when it cannot be parsed.

    Non-string values are returned as they are (already structured). Use ``try_loads`` when the
    caller must tell "parsed to null" from "could not parse".
    """
    ok, parsed = try_loads(value)
    return parsed if ok else None


def try_loads(value: Any) -> tuple[bool, Any]:
    if not isinstance(value, (str, bytes)):
        if isinstance(value, tuple):
            return True, list(value)
        return True, value
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    text = text.strip()
    if not text or len(text) > MAX_PARSE_CHARS:
        return False, None
    if text[0] in "{[\"" or text in ("null", "true", "false") or _looks_numeric(text):
        try:
            return True, json.loads(text)
        except (ValueError, RecursionError):
            pass
    if text[0] in "{[(" or text in ("None", "True", "False"):
        # Python reprs (str(dict), str(list)) from SDKs that stringify what they do not know.
        try:
            return True, ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return False, None
    return False, None


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def parse_json_list(value: Any) -> list[Any]:
    parsed = loads(value)
    if isinstance(parsed, list):
        # Some emitters (Vercel ai.prompt.tools) send arrays of JSON strings.
        return [loads(v) if isinstance(v, str) and v[:1] in "{[" else v for v in parsed]
    return []


def parse_repr_call(text: str) -> tuple[str, dict[str, Any]] | None:
    """``ResponseFunctionToolCall(arguments='…', call_id='…', name='…')`` → (class name, kwargs).

    Only literal keyword values are kept; anything else in the repr is ignored.
    """
    if not isinstance(text, str) or "(" not in text or len(text) > MAX_PARSE_CHARS:
        return None
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return None
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            continue
        try:
            kwargs[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError, RecursionError):
            continue
    return node.func.id, kwargs


# --- tool arguments and results ---------------------------------------------------------------

_LANGCHAIN_TOOL_INPUT_KEYS = frozenset({"input_str", "tags", "metadata", "inputs", "run_id"})


def parse_arguments(value: Any) -> tuple[Any, str | None, str | None]:
    """Tool-call arguments in any shape → (parsed object or None, raw text, problem or None)."""
    if value is None:
        return None, None, None
    raw = as_text(value)
    if isinstance(value, Mapping):
        parsed: Any = dict(value)
    else:
        ok, parsed = try_loads(value)
        if not ok:
            return None, raw, "arguments are not JSON"
    parsed = unwrap_arguments(parsed)
    if not isinstance(parsed, dict):
        return None, raw, f"arguments are a JSON {type(parsed).__name__}, not an object"
    return parsed, raw, None


def unwrap_arguments(parsed: Any) -> Any:
    """Undo framework wrappers around the real arguments.

    OpenLLMetry's LangChain instrumentation records ``{"input_str": "{'location': …}", "tags":
    …, "metadata": …}``; its generic task wrapper records ``{"args": [...], "kwargs": {...}}``.
    """
    if isinstance(parsed, dict):
        if "input_str" in parsed and set(parsed) <= _LANGCHAIN_TOOL_INPUT_KEYS:
            inner = loads(parsed["input_str"])
            return inner if inner is not None else parsed["input_str"]
        if set(parsed) == {"args", "kwargs"} and isinstance(parsed.get("kwargs"), dict):
            if not parsed.get("args"):
                return parsed["kwargs"]
    return parsed


def parse_result(value: Any) -> tuple[Any, str | None]:
    """Tool result → (parsed value, raw text). Unparseable text stays a string result."""
    if value is None:
        return None, None
    raw = as_text(value)
    ok, parsed = try_loads(value)
    if not ok:
        return (value if isinstance(value, str) else raw), raw
    return unwrap_result(parsed), raw


def unwrap_result(parsed: Any) -> Any:
    """Undo LangChain ToolMessage serialisations to reach what the tool returned."""
    content: Any = _NOT_PARSED
    if isinstance(parsed, dict):
        if set(parsed) == {"output"} or (
            "output" in parsed and isinstance(parsed["output"], dict) and "lc" in parsed["output"]
        ):
            return unwrap_result(parsed["output"])
        if parsed.get("lc") == 1 and isinstance(parsed.get("kwargs"), dict):
            content = parsed["kwargs"].get("content", _NOT_PARSED)
        elif parsed.get("type") == "tool" and isinstance(parsed.get("data"), dict):
            content = parsed["data"].get("content", _NOT_PARSED)
    if content is _NOT_PARSED:
        return parsed
    if isinstance(content, str):
        inner = loads(content)
        return inner if isinstance(inner, (dict, list)) else content
    return content


_ERROR_TEXT_RE = re.compile(r"^\s*[A-Z][A-Za-z0-9_.]*(Error|Exception)\b\s*:")


def result_error(parsed: Any) -> str | None:
    """The error text when a tool result is an error payload, else None.

    A string counts only when it starts like a raised exception (``TypeError: …``,
    ``AI_InvalidToolInputError: …``): frameworks send rejected calls back to the model that way.
    """
    if isinstance(parsed, str):
        return parsed if _ERROR_TEXT_RE.match(parsed) else None
    if isinstance(parsed, dict):
        err = parsed.get("error")
        if err not in (None, False, "", 0):
            if err is True:
                msg = parsed.get("message")
                return str(msg) if msg else "error"
            return err if isinstance(err, str) else json.dumps(err, default=str)
        status = parsed.get("status")
        if isinstance(status, str) and status.lower() in ("error", "failed", "failure"):
            return str(parsed.get("message") or parsed.get("detail") or status)
    return None


# --- messages in the shapes seen in the wild --------------------------------------------------

_ROLE_ALIASES = {"human": "user", "ai": "assistant", "model": "assistant", "function": "tool"}


def norm_role(role: Any) -> str:
    r = str(role or "").strip().lower()
    return _ROLE_ALIASES.get(r, r or "unknown")


def text_of(content: Any) -> str | None:
    """Message content (string, list of parts, dict) → plain text, or None."""
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        for key in ("content", "text"):
            if isinstance(content.get(key), str):
                return content[key]
        return None
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type") in (None, "text", "input_text", "output_text"):
                t = part.get("text", part.get("content"))
                if isinstance(t, str):
                    texts.append(t)
        return "\n".join(texts) if texts else None
    return None


def tool_call_from(obj: Mapping[str, Any]) -> ToolCallRequest | None:
    """A tool call dict in OpenAI, GenAI-part, Vercel or LangChain shape → ToolCallRequest."""
    fn = obj.get("function") if isinstance(obj.get("function"), Mapping) else None
    name = obj.get("name") or obj.get("toolName") or (fn or {}).get("name")
    if "arguments" in obj:
        args_value = obj["arguments"]
    elif fn is not None and "arguments" in fn:
        args_value = fn["arguments"]
    elif "input" in obj:
        args_value = obj["input"]
    elif "args" in obj:
        args_value = obj["args"]
    else:
        args_value = None
    call_id = obj.get("id") or obj.get("toolCallId") or obj.get("call_id") or obj.get("tool_call_id")
    if name is None and call_id is None:
        return None
    parsed, raw, _problem = parse_arguments(args_value)
    return ToolCallRequest(
        id=str(call_id) if call_id is not None else None,
        name=str(name) if name is not None else None,
        arguments=parsed,
        arguments_raw=raw,
    )


def messages_from_list(items: Any) -> list[Message]:
    """Chat history in OpenAI, GenAI parts, Vercel AI SDK or LangChain form → Messages."""
    if not isinstance(items, list):
        return []
    out: list[Message] = []
    for item in items:
        msg = message_from(item)
        if msg is not None:
            out.append(msg)
    return out


def message_from(item: Any) -> Message | None:
    if isinstance(item, str):
        return Message(role="user", content=item)
    if not isinstance(item, Mapping):
        return None
    if item.get("lc") == 1 and isinstance(item.get("kwargs"), Mapping):
        return _langchain_message(item)
    if "data" in item and "type" in item and isinstance(item.get("data"), Mapping):
        # LangChain messages_to_dict form: {"type": "human", "data": {...}}
        data = dict(item["data"])
        data.setdefault("type", item["type"])
        return _langchain_message({"kwargs": data, "id": [item["type"]]})
    role = norm_role(item.get("role") or item.get("type"))
    msg = Message(role=role, finish_reason=opt_str(item.get("finish_reason")))
    if isinstance(item.get("parts"), list):
        _apply_parts(msg, item["parts"])
        return msg
    content = item.get("content")
    if isinstance(content, list):
        _apply_parts(msg, content)
    else:
        msg.content = text_of(content)
    for tc in item.get("tool_calls") or []:
        if isinstance(tc, Mapping):
            req = tool_call_from(tc)
            if req is not None:
                msg.tool_calls.append(req)
    if role == "tool" and not msg.tool_results:
        parsed, raw = parse_result(content)
        msg.tool_results.append(
            ToolResultPart(
                tool_call_id=opt_str(item.get("tool_call_id") or item.get("toolCallId")),
                name=opt_str(item.get("name")),
                content=parsed,
                content_raw=raw,
            )
        )
        msg.content = None
    return msg


def _apply_parts(msg: Message, parts: list[Any]) -> None:
    texts: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, Mapping):
            continue
        ptype = str(part.get("type") or "")
        if ptype in ("text", "input_text", "output_text", ""):
            t = part.get("content", part.get("text"))
            if isinstance(t, str):
                texts.append(t)
        elif ptype in ("tool_call", "tool-call", "function_call", "tool_use"):
            req = tool_call_from(part)
            if req is not None:
                msg.tool_calls.append(req)
        elif ptype in ("tool_call_response", "tool-result", "function_call_output", "tool_result"):
            msg.tool_results.append(_tool_result_part(part))
    msg.content = "\n".join(t for t in texts) if texts else None


def _tool_result_part(part: Mapping[str, Any]) -> ToolResultPart:
    is_error = False
    if "response" in part:
        value = part["response"]
    elif "result" in part:
        value = part["result"]
    elif "output" in part:
        value = part["output"]
        # Vercel AI SDK: {"type": "json"|"text"|"error-text"|"error-json", "value": …}
        if isinstance(value, Mapping) and "type" in value and "value" in value:
            is_error = str(value["type"]).startswith("error")
            value = value["value"]
    else:
        value = part.get("content")
    parsed, raw = parse_result(value)
    return ToolResultPart(
        tool_call_id=opt_str(part.get("id") or part.get("toolCallId") or part.get("tool_call_id") or part.get("call_id")),
        name=opt_str(part.get("name") or part.get("toolName") or part.get("tool_name")),
        content=parsed,
        content_raw=raw,
        is_error=is_error,
    )


def _langchain_message(item: Mapping[str, Any]) -> Message:
    kw = item["kwargs"]
    lc_type = str(kw.get("type") or (item.get("id") or ["?"])[-1]).lower()
    role = {"systemmessage": "system", "humanmessage": "user", "aimessage": "assistant",
            "toolmessage": "tool"}.get(lc_type, norm_role(lc_type))
    msg = Message(role=role)
    if role == "tool":
        parsed, raw = parse_result(kw.get("content"))
        msg.tool_results.append(
            ToolResultPart(tool_call_id=opt_str(kw.get("tool_call_id")), name=opt_str(kw.get("name")),
                           content=parsed, content_raw=raw, is_error=kw.get("status") == "error")
        )
        return msg
    msg.content = text_of(kw.get("content"))
    for tc in kw.get("tool_calls") or []:
        if isinstance(tc, Mapping):
            req = tool_call_from(tc)
            if req is not None:
                msg.tool_calls.append(req)
    return msg


def system_from_messages(messages: list[Message]) -> str | None:
    """System prompt carried as ``system``/``developer`` messages."""
    texts = [m.content for m in messages if m.role in ("system", "developer") and m.content]
    return "\n".join(texts) if texts else None


def opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


# --- tool definitions -------------------------------------------------------------------------


def tool_definition_from(obj: Any) -> ToolDefinition | None:
    """OpenAI ``{"type":"function","function":{…}}``, flat GenAI, Vercel ``inputSchema`` or a bare name."""
    obj = loads(obj) if isinstance(obj, str) and obj[:1] in "{[" else obj
    if isinstance(obj, str):
        return ToolDefinition(name=obj) if obj else None
    if not isinstance(obj, Mapping):
        return None
    if isinstance(obj.get("function"), Mapping):
        obj = obj["function"]
    name = obj.get("name")
    if not name:
        return None
    params = obj.get("parameters", obj.get("inputSchema", obj.get("input_schema", obj.get("json_schema"))))
    params = loads(params) if isinstance(params, str) else params
    # Vercel wraps schemas as {"jsonSchema": {...}} in some versions.
    if isinstance(params, Mapping) and "jsonSchema" in params and len(params) <= 2:
        params = params["jsonSchema"]
    return ToolDefinition(
        name=str(name),
        description=opt_str(obj.get("description")),
        parameters=dict(params) if isinstance(params, Mapping) else None,
        deprecated=bool(obj.get("deprecated", False)),
        replaced_by=opt_str(obj.get("replaced_by")),
    )


def tool_definitions_from(value: Any) -> list[ToolDefinition]:
    out = []
    for item in parse_json_list(value):
        d = tool_definition_from(item)
        if d is not None:
            out.append(d)
    return out
