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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from typing import Any, NamedTuple, TypeGuard, TypeVar

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import _memo
from otel_toolscore.conventions._memo import Continues as Continues
from otel_toolscore.conventions._memo import ReadMemo as ReadMemo
from otel_toolscore.conventions._memo import forget_earlier_traces as forget_earlier_traces
from otel_toolscore.conventions._memo import shared_memo as shared_memo
from otel_toolscore.conventions._text import collect_unread as collect_unread
from otel_toolscore.conventions._text import json_value, note_unread
from otel_toolscore.conventions._text import may_escape_half as may_escape_half
from otel_toolscore.conventions._text import may_hold_surrogates as may_hold_surrogates
from otel_toolscore.conventions._text import stop_collecting as stop_collecting
from otel_toolscore.conventions._text import unread_so_far as unread_so_far
from otel_toolscore.conventions._text import valid_text as valid_text
from otel_toolscore.trajectory import Message, ToolCallRequest, ToolDefinition, ToolResultPart

#: cap on what we try to parse: a 10 MB attribute is kept raw, not parsed
MAX_PARSE_CHARS = 2_000_000
#: deeper values are not read: they would break what handles them later (JSON encoding,
#: pydantic serialisation, schema validation all recurse), and no real payload nests this deep
MAX_DEPTH = 100
# json.dumps with any non-default option builds a new encoder per call; these are those calls'
# encoders, built once (encode() keeps no state between calls, so sharing them is safe).
_TEXT_ENCODER = json.JSONEncoder(ensure_ascii=False)
# Without the circular-reference bookkeeping: parsed JSON holds no cycle, and any value this
# cannot encode (a cycle, a non-JSON type, too deep) is encoded again by ``_TEXT_ENCODER``, which
# says why.
_QUICK_TEXT_ENCODER = json.JSONEncoder(ensure_ascii=False, check_circular=False)


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
        return _QUICK_TEXT_ENCODER.encode(value)  # (a tuple is written as a list)
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return _TEXT_ENCODER.encode(list(value) if isinstance(value, tuple) else value)
    except (TypeError, ValueError):
        pass
    except RecursionError:
        return _TOO_DEEP_TEXT
    try:
        return str(value)
    except RecursionError:
        return _TOO_DEEP_TEXT


_TOO_DEEP_TEXT = f"<a value nested deeper than {MAX_DEPTH} levels>"


_CONTAINERS = frozenset({list, dict, tuple, set, frozenset})
#: types that are never a Mapping: asked first, they spare ``isinstance(x, Mapping)`` its ABC
#: check (a Python-level ``__instancecheck__``), which the readers would make for nearly every value
_NOT_MAPPINGS = frozenset({str, list, tuple, int, float, bool, bytes, type(None)})


def _is_mapping(value: Any) -> TypeGuard[Mapping[Any, Any]]:
    """``isinstance(value, Mapping)``, without the ABC check for the types JSON gives."""
    kind = type(value)
    return kind is dict or (kind not in _NOT_MAPPINGS and isinstance(value, Mapping))


def nested_deeper_than(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Do lists/dicts nest more than ``limit`` levels? Level by level, containers only.

    Checked where a parsed value is kept as it is (arguments, results, schemas, metadata: the
    ``Any`` fields of a trajectory), not on every parse: whole chat histories are read only for
    their texts, and walking them would cost more than reading them."""
    level = [value] if type(value) in _CONTAINERS else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [child for item in level for child in (item.values() if type(item) is dict else item)
                 if type(child) in _CONTAINERS]
    return False


#: JSON or a repr writes at least two characters (an opening and a closing bracket) per level
#: of nesting, so a text shorter than this cannot hold a value nested deeper than ``MAX_DEPTH``
_SHALLOW_TEXT = 2 * (MAX_DEPTH + 1)


def _deeper_than_max(parsed: Any, raw: str | None) -> bool:
    """``nested_deeper_than(parsed)`` for a value read from (or encoded as) ``raw``: the walk
    is skipped when the text is too short to nest that deep (nearly every argument and result)."""
    if raw is not None and len(raw) < _SHALLOW_TEXT and raw is not _TOO_DEEP_TEXT:
        return False
    return nested_deeper_than(parsed)


# --- text UTF-8 cannot carry (see _text) -------------------------------------------------------


def clean_strings(obj: Any) -> Any:
    """``valid_text`` on every string inside a value (lists, dicts and dataclasses in place).
    Values read from attributes nest at most ``MAX_DEPTH`` levels, so recursion is bounded.

    Only what holds such a string is changed: the readers share what they read between spans
    and traces (``ReadMemo``), and a value that holds none is left untouched for the others."""
    if isinstance(obj, str):
        return valid_text(obj)
    if isinstance(obj, list):
        items = [clean_strings(x) for x in obj]
        if any(new is not old for new, old in zip(items, obj)):
            obj[:] = items
    elif isinstance(obj, tuple):
        items = [clean_strings(x) for x in obj]
        return tuple(items) if any(new is not old for new, old in zip(items, obj)) else obj
    elif isinstance(obj, dict):
        pairs = [(clean_strings(k), clean_strings(v)) for k, v in obj.items()]
        if any(k is not old_k or v is not old_v for (k, v), (old_k, old_v) in zip(pairs, obj.items())):
            obj.clear()
            obj.update(pairs)
    elif is_dataclass(obj) and not isinstance(obj, type):
        for f in fields(obj):
            value = getattr(obj, f.name)
            cleaned = clean_strings(value)
            if cleaned is not value:
                setattr(obj, f.name, cleaned)
    return obj


# --- JSON and Python-repr texts (values left unread: _text) -------------------------------------

_TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"


def loads(value: Any) -> Any:
    """Parse a JSON (or Python-repr) string; ``None`` when it cannot be parsed.

    Non-string values are returned as they are (already structured). Use ``try_loads`` when the
    caller must tell "parsed to null" from "could not parse".
    """
    ok, parsed = try_loads(value)
    return parsed if ok else None


def try_loads(value: Any) -> tuple[bool, Any]:
    ok, parsed, _ = _try_loads(value)
    return ok, parsed


def _try_loads(value: Any) -> tuple[bool, Any, str | None]:
    """``try_loads``, with why a text was left unread for its size or depth (also noted for
    the span's problems, see ``collect_unread``)."""
    if not isinstance(value, (str, bytes)):
        if isinstance(value, tuple):
            return True, list(value), None
        return True, value, None
    if len(value) > MAX_PARSE_CHARS:
        return _unread_because(value, f"{len(value):,} characters, over the {MAX_PARSE_CHARS:,}-character read limit")
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    text = text.strip()
    if not text:
        return False, None, None
    if text[0] in "{[\"" or text in ("null", "true", "false") or _looks_numeric(text):
        try:
            return True, json_value(text), None
        except RecursionError:
            return _unread_because(value, _TOO_DEEP)
        except ValueError:
            pass
    if text[0] in "{[(" or text in ("None", "True", "False"):
        # Python reprs (str(dict), str(list)) from SDKs that stringify what they do not know.
        try:
            return True, ast.literal_eval(text), None
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return False, None, None
    return False, None, None


def _unread_because(value: Any, why: str) -> tuple[bool, None, str]:
    note_unread(value, why)
    return False, None, why


def _looks_numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# --- reading through the trace's shared memory (_memo) ------------------------------------------

_T = TypeVar("_T")


def json_list_of(value: Any, key: str, convert: Callable[[list[Any]], list[Any]],
                 continues: str | Continues | None = None) -> list[Any] | None:
    """``convert(parsed)`` when the value reads (``try_loads``) as a list, else None.

    Inside ``shared_memo`` a JSON text that extends an earlier one of the same ``key`` is
    parsed and converted only in its new part, and a list of key ``continues`` that the new
    part starts with is not converted again (``ReadMemo.json_list``).
    """
    memo = _memo.current()
    if memo is not None and isinstance(value, str):
        text = value.strip()
        if text[:1] == "[" and len(text) <= MAX_PARSE_CHARS:
            items = memo.json_list(key, text, convert, continues)
            if items is not None:
                return items
            # not JSON: try_loads may still read it as a Python repr
    ok, parsed = try_loads(value)
    if not ok or not isinstance(parsed, list):
        return None
    return convert(parsed)


#: texts shorter than this are searched whole: asking the memo would cost more
LONG_TEXT = 1024


def text_may_hold_surrogates(text: str) -> bool:
    """``may_hold_surrogates``; inside ``shared_memo``, a long text that extends an earlier one
    found clean (a growing chat history) is searched only in what it adds."""
    if len(text) < LONG_TEXT:
        # most texts are ASCII and an ASCII text can only hold escapes of surrogates, which all
        # begin so: C-level checks rule nearly all of them out without a call
        return (not text.isascii() or may_escape_half(text)) and may_hold_surrogates(text)
    memo = _memo.current()
    return memo.may_hold_surrogates(text) if memo is not None else may_hold_surrogates(text)


def memoized(key: str, value: Any, convert: Callable[[Any], _T]) -> _T:
    """``convert(value)``; inside ``shared_memo``, once per distinct string value."""
    memo = _memo.current()
    if memo is None or not isinstance(value, str):
        return convert(value)
    return memo.value(key, value, convert)


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
#: a ``f(*args, <the wrapper's own keyword parameters>, **kwargs)`` call recorded by its bound
#: signature: ``args`` and ``kwargs``, plus the parameters of the wrappers known to be recorded so
_CALL_WRAPPER_KEYS = frozenset({"args", "kwargs"}) | sc.SMOLAGENTS_TOOL_CALL_PARAMETERS


def parse_arguments(value: Any) -> tuple[Any, str | None, str | None]:
    """Tool-call arguments in any shape → (parsed object or None, raw text, problem or None)."""
    if value is None:
        return None, None, None
    if type(value) is str and len(value) < _SHALLOW_TEXT and value[:1] == "{" and value[-1:] == "}":
        # JSON object text, too short to nest deeper than ``MAX_DEPTH``: a tool span's arguments
        parsed = _json_object(value)
        if parsed is not None and _WRAPPER_MARKS.isdisjoint(parsed):
            return parsed, value, None
    return _parse_arguments(value)


def _json_object(text: str) -> dict[str, Any] | None:
    """``json_value(text)`` when it is an object, else None (the caller reads the text the long way)."""
    try:
        parsed = json_value(text)
    except (ValueError, RecursionError):
        return None
    return parsed if type(parsed) is dict else None


def _parse_arguments(value: Any) -> tuple[Any, str | None, str | None]:
    """``parse_arguments`` of any value."""
    raw = as_text(value)
    if type(value) is not str and _is_mapping(value):
        parsed: Any = dict(value)
    else:
        ok, parsed, unread = _try_loads(value)
        if not ok:
            return None, raw, f"arguments were not read: {unread}" if unread else "arguments are not JSON"
    if _deeper_than_max(parsed, raw):
        note_unread(value, _TOO_DEEP)
        return None, raw, f"arguments were not read: {_TOO_DEEP}"
    parsed = unwrap_arguments(parsed)
    if not isinstance(parsed, dict):
        return None, raw, f"arguments are a JSON {type(parsed).__name__}, not an object"
    return parsed, raw, None


def unwrap_arguments(parsed: Any) -> Any:
    """Undo framework wrappers around the real arguments.

    OpenLLMetry's LangChain instrumentation records ``{"input_str": "{'location': …}", "tags":
    …, "metadata": …}``; its generic task wrapper records ``{"args": [...], "kwargs": {...}}``;
    OpenInference's smolagents TOOL spans record ``Tool.__call__``'s bound signature,
    ``{"args": [], "sanitize_inputs_outputs": true, "kwargs": {...}}``. A call made with keyword
    arguments only (``args`` empty) was given ``kwargs``.
    """
    if isinstance(parsed, dict):
        if "input_str" in parsed and set(parsed) <= _LANGCHAIN_TOOL_INPUT_KEYS:
            inner = loads(parsed["input_str"])
            return inner if inner is not None else parsed["input_str"]
        if "args" in parsed and isinstance(parsed.get("kwargs"), dict) and parsed.keys() <= _CALL_WRAPPER_KEYS:
            if not parsed.get("args"):
                return parsed["kwargs"]
    return parsed


class ResultRead(NamedTuple):
    """A tool result as read: what the tool returned, the text recorded, and the failure its
    envelope states (``is_error``, ``isError``, ``status: "error"``), if it states one."""

    value: Any
    raw: str | None
    #: the failure text when an envelope flags the result as an error, else None (an
    #: ``{"error": …}`` payload is not a flag: ``result_error`` tells that one)
    error: str | None


def read_result(value: Any) -> ResultRead:
    """A tool result in any shape → ``ResultRead``: the one way results are read, on tool spans
    of every convention and in tool-result message parts.

    The value is parsed (JSON or a Python repr; unparseable text stays a string result), then
    taken out of the envelopes frameworks put around it (``unwrap_result``), keeping their
    error flags. Inside ``shared_memo`` a text is read once: a result's text is on its tool span
    and again in every later model input.
    """
    if type(value) is str:
        memo = _memo.current()
        if memo is not None:
            return memo.read_once("result", value, _read_result)
    return _read_result(value)


def _read_result(value: Any) -> ResultRead:
    if type(value) is str and len(value) < _SHALLOW_TEXT and value[:1] == "{" and value[-1:] == "}":
        # JSON object text, too short to nest deeper than ``MAX_DEPTH``, of no envelope's keys
        # (``_envelope``): what most tools return
        parsed = _json_object(value)
        if parsed is not None and _ENVELOPE_KEYS.isdisjoint(parsed):
            return ResultRead(parsed, value, None)
    return _any_result(value)


def _any_result(value: Any) -> ResultRead:
    """``_read_result`` of any value."""
    if value is None:
        return ResultRead(None, None, None)
    raw = as_text(value)
    ok, parsed = try_loads(value)
    if ok and _deeper_than_max(parsed, raw):
        note_unread(value, _TOO_DEEP)
        ok = False
    if not ok:
        return ResultRead(value if isinstance(value, str) else raw, raw, None)
    inner, failed = _unwrap(parsed)
    error = None
    if failed:
        error = result_error(inner) or (as_text(inner) if inner not in (None, "", [], {}) else None) or "error"
    return ResultRead(inner, raw, error)


def parse_result(value: Any) -> tuple[Any, str | None]:
    """Tool result → (value, raw text): ``read_result`` without the envelope's error flag."""
    read = read_result(value)
    return read.value, read.raw


def unwrap_result(parsed: Any) -> Any:
    """What the tool returned, out of the envelopes around it (see ``_envelope``)."""
    return _unwrap(parsed)[0]


#: envelopes inside envelopes (a Bedrock toolResult around content blocks around JSON text)
_MAX_ENVELOPES = 8


def _unwrap(parsed: Any) -> tuple[Any, bool]:
    """(the value inside every envelope, whether one of them flags an error)."""
    failed = False
    for _ in range(_MAX_ENVELOPES):
        step = _envelope(parsed)
        if step is None:
            break
        inner, flagged, is_text = step
        failed = failed or flagged
        if is_text and isinstance(inner, str):
            # text that carries the value: read as the attribute itself would be ("{…}" → dict)
            ok, decoded = try_loads(inner)
            inner = decoded if ok and not _deeper_than_max(decoded, inner) else inner
        parsed = inner
    return parsed, failed


_Envelope = tuple[Any, bool, bool]  # (inner value, error flag, inner is text to read)


def _envelope(parsed: Any) -> _Envelope | None:
    """One envelope around a tool result, or None when the value is what the tool returned.

    Each shape is recognised by its keys as the framework writes them, never by a single
    common key, so a tool's own dict is not taken for an envelope:

    * content-block lists: ``[{"type": "text", "text": …}]`` (Anthropic, MCP),
      ``[{"text": …}]`` / ``[{"json": …}]`` (Bedrock Converse, Strands), LlamaIndex
      ``{"block_type": "text", "text": …}``; a text block's text is read as the value;
    * Anthropic ``tool_result`` blocks (``content``, ``is_error``);
    * Bedrock / Strands ``toolResult`` (``toolUseId``, ``content``, ``status: "error"``);
    * MCP ``CallToolResult`` (``content``, ``isError``, ``structuredContent``, which wins);
    * LlamaIndex ``ToolOutput`` (``raw_output``, ``is_error``, ``blocks``/``content``,
      ``tool_name``, ``raw_input``): ``raw_output`` is what the function returned;
    * Google ADK / Gemini ``function_response`` (``{"id", "name", "response": {…}}``);
    * LangChain ``ToolMessage`` serialisations (``lc`` kwargs, ``{"type": "tool", "data"}``,
      ``{"output": …}``), ``status: "error"`` being their flag.
    """
    if isinstance(parsed, list):
        return _content_blocks(parsed)
    if not isinstance(parsed, dict) or not parsed or _ENVELOPE_KEYS.isdisjoint(parsed):
        return None
    keys = parsed.keys()
    if len(parsed) == 1:
        key = next(iter(keys))
        if key in _ENVELOPE_WRAPPER_KEYS and isinstance(parsed[key], dict):
            return parsed[key], False, False
    if parsed.get("type") == "tool_result" and "content" in parsed:
        return parsed["content"], parsed.get("is_error") is True, True
    if "toolUseId" in parsed and isinstance(parsed.get("content"), list) and keys <= _ENVELOPE_TOOL_RESULT_FIELDS:
        return parsed["content"], str(parsed.get("status")).lower() == "error", False
    if isinstance(parsed.get("content"), list) and keys <= _ENVELOPE_MCP_FIELDS and _mcp_blocks(parsed["content"]):
        structured = parsed.get("structuredContent")
        return (structured if structured is not None else parsed["content"]), parsed.get("isError") is True, False
    if "raw_output" in parsed and "tool_name" in parsed and keys <= _ENVELOPE_TOOL_OUTPUT_FIELDS:
        flagged = parsed.get("is_error") is True
        if parsed["raw_output"] is not None:
            return parsed["raw_output"], flagged, True
        return parsed.get("blocks", parsed.get("content")), flagged, True
    if "response" in parsed and "name" in parsed and isinstance(parsed["response"], dict) \
            and keys <= _ENVELOPE_FUNCTION_RESPONSE_FIELDS:
        return parsed["response"], False, False
    return _langchain_envelope(parsed)


#: single-key wrappers around one envelope: Bedrock content blocks, Gemini parts
_ENVELOPE_WRAPPER_KEYS = frozenset({"toolResult", "function_response", "functionResponse"})
#: every envelope object below has one of these keys (a tool's own dict usually has none)
_ENVELOPE_KEYS = _ENVELOPE_WRAPPER_KEYS | {"type", "toolUseId", "content", "raw_output", "response", "output", "lc"}
_ENVELOPE_TOOL_RESULT_FIELDS = frozenset({"toolUseId", "content", "status"})
_ENVELOPE_MCP_FIELDS = frozenset({"content", "isError", "structuredContent", "_meta", "meta"})
#: llama_index.core.tools.ToolOutput's fields (``content`` in releases before ``blocks``)
_ENVELOPE_TOOL_OUTPUT_FIELDS = frozenset({"blocks", "content", "tool_name", "raw_input", "raw_output", "is_error"})
#: google.genai FunctionResponse's fields as ADK and the Gemini API write them
_ENVELOPE_FUNCTION_RESPONSE_FIELDS = frozenset({"id", "name", "response", "will_continue", "willContinue", "scheduling",
                                     "parts"})
_ENVELOPE_TEXT_BLOCK_FIELDS = frozenset({"type", "block_type", "text", "annotations", "citations", "cache_control",
                              "_meta", "meta"})


def _content_blocks(blocks: list[Any]) -> _Envelope | None:
    """A list of text blocks → their text (to read as the value); one JSON block → its value;
    one ``toolResult`` / ``function_response`` block → that envelope. Any other list, or a list
    with any other kind of block (an image), is the value itself."""
    if not blocks:
        return None
    if len(blocks) == 1 and isinstance(blocks[0], dict) and len(blocks[0]) == 1:
        key, value = next(iter(blocks[0].items()))
        if key == "json":
            return value, False, False
        if key in _ENVELOPE_WRAPPER_KEYS and isinstance(value, dict):
            # a message's content of one block, the result: [{"toolResult": {…}}]
            return value, False, False
    texts = []
    for block in blocks:
        if not isinstance(block, dict) or not isinstance(block.get("text"), str) or not block.keys() <= _ENVELOPE_TEXT_BLOCK_FIELDS:
            return None
        kind = block.get("type", block.get("block_type", "text"))
        if kind != "text" or ("type" in block and "block_type" in block):
            return None
        texts.append(block["text"])
    return "\n".join(texts), False, True


#: the content block types of the MCP specification
_ENVELOPE_MCP_BLOCK_TYPES = frozenset({"text", "image", "audio", "resource", "resource_link"})


def _mcp_blocks(blocks: list[Any]) -> bool:
    """MCP content: every item a block of one of the specification's types."""
    return all(isinstance(b, dict) and b.get("type") in _ENVELOPE_MCP_BLOCK_TYPES for b in blocks)


def _langchain_envelope(parsed: dict[str, Any]) -> _Envelope | None:
    """LangChain ToolMessage serialisations (the readers' first envelope kind)."""
    if set(parsed) == {"output"} or (
        "output" in parsed and isinstance(parsed["output"], dict) and "lc" in parsed["output"]
    ):
        return parsed["output"], False, False
    message: Any = None
    if parsed.get("lc") == 1 and isinstance(parsed.get("kwargs"), dict):
        message = parsed["kwargs"]
    elif parsed.get("type") == "tool" and isinstance(parsed.get("data"), dict):
        message = parsed["data"]
    if message is None or "content" not in message:
        return None
    content = message["content"]
    if isinstance(content, str):
        inner = loads(content)
        content = inner if isinstance(inner, (dict, list)) else content
    return content, message.get("status") == "error", False


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


# --- texts that are no one's words ------------------------------------------------------------

#: ``StopEvent(result=AgentOutput(...``, ``AgentInput()``: a Python object's repr (constructor
#: form: a class name, then ``(`` and a keyword argument or ``)``), cut or not; and the default
#: ``<module.Class object at 0x…>``
_OBJECT_REPR_RE = re.compile(r"\A\s*(?:[A-Za-z_][\w.]*\((?:\)|[A-Za-z_]\w*=)|<[\w.]+ object at 0x[0-9a-fA-F]+>)")


def is_object_repr(text: str) -> bool:
    """Is the text a Python object's repr rather than words (a framework stringifying its
    event objects into ``input.value`` / ``output.value``)?"""
    return _OBJECT_REPR_RE.match(text) is not None


# --- messages in the shapes seen in the wild --------------------------------------------------

_ROLE_ALIASES = {"human": "user", "ai": "assistant", "model": "assistant", "function": "tool"}


def norm_role(role: Any) -> str:
    if type(role) is str:
        # every message names one of a few roles: each spelling is normalised once
        known = _NORMED_ROLES.get(role)
        if known is not None:
            return known
    r = str(role or "").strip().lower()
    normed = _ROLE_ALIASES.get(r, r or "unknown")
    if type(role) is str and len(_NORMED_ROLES) < 256:  # bounded: a hostile stream's roles are many
        _NORMED_ROLES[role] = normed
    return normed


_NORMED_ROLES: dict[str, str] = {}


def text_of(content: Any) -> str | None:
    """Message content (string, list of parts, dict) → plain text, or None."""
    if content is None:
        return None
    if isinstance(content, str):
        return content
    if _is_mapping(content):
        for key in ("content", "text"):
            if isinstance(content.get(key), str):
                return content[key]
        return None
    if type(content) is list or isinstance(content, Sequence):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif _is_mapping(part) and part.get("type") in (None, "text", "input_text", "output_text"):
                t = part.get("text", part.get("content"))
                if isinstance(t, str):
                    texts.append(t)
        return "\n".join(texts) if texts else None
    return None


def tool_call_from(obj: Mapping[str, Any]) -> ToolCallRequest | None:
    """A tool call dict in OpenAI, GenAI-part, Vercel or LangChain shape → ToolCallRequest."""
    fn = obj.get("function")
    if fn is not None and not _is_mapping(fn):
        fn = None
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
    if type(item) is dict and item.keys() <= _PARTS_MESSAGE_KEYS:
        parts = item.get("parts")
        if type(parts) is list:
            # The GenAI semconv's message, which every history repeats: with only these keys,
            # none of the other shapes below can be there (``_any_message_from`` is the long way).
            msg = Message(role=norm_role(item.get("role")), finish_reason=opt_str(item.get("finish_reason")))
            _apply_parts(msg, parts)
            return msg
    return _any_message_from(item)


#: the keys of the GenAI semconv's message (``message_from``'s first shape)
_PARTS_MESSAGE_KEYS = frozenset({"role", "parts", "finish_reason"})


def _any_message_from(item: Any) -> Message | None:
    """``message_from`` for an item of any shape."""
    if type(item) is not dict:
        if isinstance(item, str):
            return Message(role="user", content=item)
        if not _is_mapping(item):
            return None
    if item.get("lc") == 1 and _is_mapping(item.get("kwargs")):
        return _langchain_message(item)
    if "data" in item and "type" in item and _is_mapping(item.get("data")):
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
        if _is_mapping(tc):
            req = tool_call_from(tc)
            if req is not None:
                msg.tool_calls.append(req)
    if role == "tool" and not msg.tool_results:
        read = read_result(content)
        msg.tool_results.append(
            ToolResultPart(
                tool_call_id=opt_str(item.get("tool_call_id") or item.get("toolCallId")),
                name=opt_str(item.get("name")),
                content=read.value,
                content_raw=read.raw,
                is_error=read.error is not None,
            )
        )
        msg.content = None
    return msg


_TEXT_PART, _CALL_PART, _RESULT_PART = 1, 2, 3
#: what a part's ``type`` makes it; a type not here is a part the trajectory does not keep
_PART_KINDS: dict[str, int] = {
    **dict.fromkeys(("text", "input_text", "output_text", ""), _TEXT_PART),
    **dict.fromkeys(("tool_call", "tool-call", "function_call", "tool_use"), _CALL_PART),
    **dict.fromkeys(("tool_call_response", "tool-result", "function_call_output", "tool_result"), _RESULT_PART),
}


def _apply_parts(msg: Message, parts: list[Any]) -> None:
    texts: list[str] = []
    for part in parts:
        if type(part) is not dict:
            if isinstance(part, str):
                texts.append(part)
                continue
            if not _is_mapping(part):
                continue
        ptype = part.get("type") or ""
        if type(ptype) is not str:
            ptype = str(ptype)
        if not ptype and _apply_keyed_block(msg, part):
            continue
        kind = _PART_KINDS.get(ptype)
        if kind == _TEXT_PART:
            t = part["content"] if "content" in part else part.get("text")
            if isinstance(t, str):
                texts.append(t)
        elif kind == _CALL_PART:
            req = _plain_call(part) if part.keys() <= _PLAIN_CALL_KEYS else tool_call_from(part)
            if req is not None:
                msg.tool_calls.append(req)
        elif kind == _RESULT_PART:
            msg.tool_results.append(
                _plain_result(part) if part.keys() <= _PLAIN_RESULT_KEYS else _tool_result_part(part))
    msg.content = "\n".join(texts) if texts else None


# The GenAI semconv's parts, which every history repeats: with only these keys, none of the
# other spellings ``tool_call_from`` and ``_tool_result_part`` look for can be there.
_PLAIN_CALL_KEYS = frozenset({"type", "id", "name", "arguments"})
_PLAIN_RESULT_KEYS = frozenset({"type", "id", "response"})


def _plain_call(part: Mapping[str, Any]) -> ToolCallRequest | None:
    """``tool_call_from(part)`` for a part with only ``_PLAIN_CALL_KEYS``."""
    name, call_id = part.get("name"), part.get("id")
    if not name or not call_id:
        return tool_call_from(part)
    arguments = part.get("arguments")
    if type(arguments) is dict and _WRAPPER_MARKS.isdisjoint(arguments):
        # ``parse_arguments`` of an object that no wrapper's keys mark (``unwrap_arguments``),
        # written too short to nest deeper than ``MAX_DEPTH``: every model's call in a history
        raw = as_text(arguments)
        if raw is not None and len(raw) < _SHALLOW_TEXT and raw is not _TOO_DEEP_TEXT:
            return ToolCallRequest(id=str(call_id), name=str(name), arguments=dict(arguments), arguments_raw=raw)
    parsed, raw, _problem = parse_arguments(arguments)
    return ToolCallRequest(id=str(call_id), name=str(name), arguments=parsed, arguments_raw=raw)


#: the keys ``unwrap_arguments`` looks for first: arguments without them are their own
_WRAPPER_MARKS = frozenset({"input_str", "args"})


def _plain_result(part: Mapping[str, Any]) -> ToolResultPart:
    """``_tool_result_part(part)`` for a part with only ``_PLAIN_RESULT_KEYS`` (no flag of its own)."""
    read = read_result(part.get("response"))
    call_id = part.get("id")
    return ToolResultPart(tool_call_id=str(call_id) if call_id else None, name=None, content=read.value,
                          content_raw=read.raw, is_error=read.error is not None)


# --- content blocks keyed by their kind (Bedrock Converse, Gemini) ------------------------------

#: Bedrock Converse blocks are ``{<kind>: {...}}``; Gemini parts ``{<kind>: {...}}`` in snake_case
#: (the Python SDK's ``model_dump``) or camelCase (the REST JSON); text is ``{"text": ...}`` in both
_TOOL_USE_KEYS = ("toolUse",)
_TOOL_RESULT_KEYS = ("toolResult",)
_FUNCTION_CALL_KEYS = ("function_call", "functionCall")
_FUNCTION_RESPONSE_KEYS = ("function_response", "functionResponse")
#: blocks that carry no text, call or result a trajectory keeps (reasoning, media, code, cache marks)
_OTHER_BLOCK_KEYS = frozenset({
    "reasoningContent", "image", "document", "video", "cachePoint", "guardContent", "citationsContent",
    "inline_data", "inlineData", "file_data", "fileData", "executable_code", "executableCode",
    "code_execution_result", "codeExecutionResult", "video_metadata", "videoMetadata",
})
_BLOCK_KEYS = frozenset({"text", *_TOOL_USE_KEYS, *_TOOL_RESULT_KEYS, *_FUNCTION_CALL_KEYS,
                         *_FUNCTION_RESPONSE_KEYS}) | _OTHER_BLOCK_KEYS
#: ``type`` values of the typed part shapes (OTel GenAI, OpenAI, Anthropic, Vercel)
_PART_TYPES = frozenset({
    "text", "input_text", "output_text", "tool_call", "tool-call", "tool_call_response", "tool-result",
    "function_call", "function_call_output", "tool_use", "tool_result", "reasoning", "thinking",
    "image", "image_url", "input_image", "blob", "file", "uri", "server_tool_call", "server_tool_call_response",
})


def _keyed(part: Mapping[str, Any], keys: tuple[str, ...]) -> Mapping[str, Any] | None:
    for key in keys:
        value = part.get(key)
        if _is_mapping(value):
            return value
    return None


def _apply_keyed_block(msg: Message, part: Mapping[str, Any]) -> bool:
    """A part without ``type`` that names its kind by its key: Bedrock ``toolUse`` / ``toolResult``,
    Gemini ``function_call`` / ``function_response`` (either spelling), Gemini thought text and
    blocks without text. Added to ``msg``; False when the part is none of these (plain text)."""
    if (block := _keyed(part, _TOOL_USE_KEYS)) is not None:
        args, raw, _ = parse_arguments(block.get("input"))
        msg.tool_calls.append(ToolCallRequest(id=opt_str(block.get("toolUseId")), name=opt_str(block.get("name")),
                                              arguments=args, arguments_raw=raw))
        return True
    if (block := _keyed(part, _FUNCTION_CALL_KEYS)) is not None:
        args, raw, _ = parse_arguments(block.get("args"))
        msg.tool_calls.append(ToolCallRequest(id=opt_str(block.get("id")), name=opt_str(block.get("name")),
                                              arguments=args, arguments_raw=raw))
        return True
    if (block := _keyed(part, _TOOL_RESULT_KEYS)) is not None:
        parsed, raw = parse_result(block.get("content"))
        status = block.get("status")
        msg.tool_results.append(ToolResultPart(
            tool_call_id=opt_str(block.get("toolUseId")), content=parsed, content_raw=raw,
            is_error=isinstance(status, str) and status.lower() == "error",
        ))
        return True
    if (block := _keyed(part, _FUNCTION_RESPONSE_KEYS)) is not None:
        parsed, raw = parse_result(block.get("response"))
        msg.tool_results.append(ToolResultPart(tool_call_id=opt_str(block.get("id")), name=opt_str(block.get("name")),
                                               content=parsed, content_raw=raw))
        return True
    if part.get("thought") is True:
        return True  # Gemini's thought summary: reasoning, not what the model said
    return "text" not in part and "content" not in part and not _OTHER_BLOCK_KEYS.isdisjoint(part)


def is_content_block(item: Any) -> bool:
    """A message part in any shape the readers take apart: typed (``{"type": "text", …}``) or
    keyed by its kind (``{"text": …}``, ``{"toolUse": {…}}``, ``{"function_call": {…}}``)."""
    if not _is_mapping(item) or not item:
        return False
    ptype = item.get("type")
    if ptype is not None:
        return ptype in _PART_TYPES
    return not _BLOCK_KEYS.isdisjoint(item)


def content_blocks(value: Any) -> list[Any] | None:
    """The value as a list of content blocks when it is one (or a JSON text of one), else None.

    Emitters that cannot put structures into event attributes send a message's content as the
    JSON text of its block list (Strands: ``'[{"text": "…"}, {"toolUse": {…}}]'``)."""
    if isinstance(value, str):
        text = value.lstrip()
        if text[:1] != "[":
            return None
        value = loads(text)
    if isinstance(value, (list, tuple)) and value and all(is_content_block(v) for v in value):
        return list(value)
    return None


def _tool_result_part(part: Mapping[str, Any]) -> ToolResultPart:
    is_error = False
    if "response" in part:
        value = part["response"]
    elif "result" in part:
        value = part["result"]
    elif "output" in part:
        value = part["output"]
        # Vercel AI SDK: {"type": "json"|"text"|"error-text"|"error-json", "value": …}
        if _is_mapping(value) and "type" in value and "value" in value:
            is_error = str(value["type"]).startswith("error")
            value = value["value"]
    else:
        value = part.get("content")
    read = read_result(value)
    return ToolResultPart(
        tool_call_id=opt_str(part.get("id") or part.get("toolCallId") or part.get("tool_call_id") or part.get("call_id")),
        name=opt_str(part.get("name") or part.get("toolName") or part.get("tool_name")),
        content=read.value,
        content_raw=read.raw,
        is_error=is_error or read.error is not None or _part_flags_error(part),
    )


def _part_flags_error(part: Mapping[str, Any]) -> bool:
    """The error flag a tool-result part carries itself: Anthropic ``is_error``, MCP
    ``isError``, Bedrock / LangChain ``status: "error"``."""
    return part.get("is_error") is True or part.get("isError") is True or str(part.get("status")).lower() == "error"


def _langchain_message(item: Mapping[str, Any]) -> Message:
    kw = item["kwargs"]
    lc_type = str(kw.get("type") or (item.get("id") or ["?"])[-1]).lower()
    role = {"systemmessage": "system", "humanmessage": "user", "aimessage": "assistant",
            "toolmessage": "tool"}.get(lc_type, norm_role(lc_type))
    msg = Message(role=role)
    if role == "tool":
        read = read_result(kw.get("content"))
        msg.tool_results.append(
            ToolResultPart(tool_call_id=opt_str(kw.get("tool_call_id")), name=opt_str(kw.get("name")),
                           content=read.value, content_raw=read.raw,
                           is_error=kw.get("status") == "error" or read.error is not None)
        )
        return msg
    msg.content = text_of(kw.get("content"))
    for tc in kw.get("tool_calls") or []:
        if _is_mapping(tc):
            req = tool_call_from(tc)
            if req is not None:
                msg.tool_calls.append(req)
    return msg


def read_text_tool_messages(messages: list[Message]) -> list[Message]:
    """Tool calls and results a framework wrote into the chat history as text, read (in place).

    smolagents (``semconv.SMOLAGENTS_ROLE_*``) echoes a step's calls as a ``tool-call`` message
    ``Calling tools:\\n[<repr of the calls>]`` and its results as a ``tool-response`` message
    ``Observation:\\n<results>``; a failed step adds a ``tool-response`` ``[Call id: <id>\\n]Error:\\n…``.
    The first becomes an assistant message with its calls, the others tool messages. What can be
    tied to one call becomes that call's result: an observation that follows an echo of exactly
    one call. Several calls' results are joined by newlines, which a result can contain too, so
    they stay the tool message's text; so does a step's error: smolagents reports it without a
    call id when a call failed, and with the step's first call id when the step failed after its
    calls had run (an answer given beside other calls), so it is not that call's failure.

    Only calls with object arguments are read as calls: a ``CodeAgent`` step echoes its code as a
    ``python_interpreter`` call with text arguments, which no model requested as a tool call (the
    tools the code called have tool spans of their own).
    """
    echoed: list[ToolCallRequest] | None = None  # the calls of the last echo not yet answered
    for msg in messages:
        if msg.role == sc.SMOLAGENTS_ROLE_TOOL_CALL:
            msg.role = "assistant"
            echoed = None
            text = msg.content or ""
            if not text.startswith(sc.SMOLAGENTS_CALLING_TOOLS):
                continue
            items = loads(text[len(sc.SMOLAGENTS_CALLING_TOOLS):])
            if not isinstance(items, list):
                continue
            calls = [c for c in map(_echoed_call, items) if c is not None]
            msg.tool_calls.extend(calls)
            if len(calls) == len(items):
                msg.content = None
                echoed = calls
        elif msg.role == sc.SMOLAGENTS_ROLE_TOOL_RESPONSE:
            msg.role = "tool"
            text = msg.content or ""
            if echoed is not None and len(echoed) == 1 and text.startswith(sc.SMOLAGENTS_OBSERVATION):
                call = echoed[0]
                content, raw = parse_result(text[len(sc.SMOLAGENTS_OBSERVATION):])
                msg.tool_results.append(
                    ToolResultPart(tool_call_id=call.id, name=call.name, content=content, content_raw=raw)
                )
                msg.content = None
            echoed = None
    return messages


def _echoed_call(item: Any) -> ToolCallRequest | None:
    """One ``{"id", "type", "function": {"name", "arguments"}}`` of a smolagents echo, when it is
    a function call with object arguments."""
    if not _is_mapping(item) or not _is_mapping(item.get("function")):
        return None
    fn = item["function"]
    if not _is_mapping(fn.get("arguments")) or not fn.get("name"):
        return None
    return tool_call_from(item)


def system_from_messages(messages: list[Message]) -> str | None:
    """System prompt carried as ``system``/``developer`` messages."""
    # (a short list is searched at once: asking the memo would cost more)
    memo = _memo.current() if len(messages) > _FEW_MESSAGES else None
    texts = memo.derived(messages, _system_texts) if memo is not None else None
    if texts is None:
        texts = _system_texts(messages)
    return "\n".join(texts) if texts else None


_FEW_MESSAGES = 16


def _system_texts(messages: list[Message]) -> tuple[str, ...]:
    # (a message's role and content, once read, are changed only for tool calls and results:
    # ``read_text_tool_messages``, ``_repr_tool_calls``; see ``ReadMemo.derived``)
    # (a list comprehension: a generator's frame per call costs more than the few messages)
    return tuple([m.content for m in messages if (m.role == "system" or m.role == "developer") and m.content])


def opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


# --- tool definitions -------------------------------------------------------------------------


#: where a tool definition keeps its parameters' schema: OTel GenAI / OpenAI ``parameters``, Gemini
#: ``parameters_json_schema`` (either spelling), Vercel and Bedrock ``inputSchema``, Anthropic
#: ``input_schema``, OpenInference ``json_schema``; the first one that is not null counts
_SCHEMA_KEYS = ("parameters", "parameters_json_schema", "parametersJsonSchema", "inputSchema", "input_schema",
                "json_schema")
#: wrappers around a definition: OpenAI ``{"type": "function", "function": {…}}``, Bedrock ``{"toolSpec": {…}}``
_DEFINITION_WRAPPERS = ("function", "toolSpec")
#: wrappers around a schema: Vercel ``{"jsonSchema": {…}}``, Bedrock ``{"json": {…}}``
_SCHEMA_WRAPPERS = ("jsonSchema", "json")


def tool_definition_from(obj: Any) -> ToolDefinition | None:
    """A tool definition in any of the shapes above (``_SCHEMA_KEYS``, ``_DEFINITION_WRAPPERS``) or a bare name."""
    obj = loads(obj) if isinstance(obj, str) and obj[:1] in "{[" else obj
    if isinstance(obj, str):
        return ToolDefinition(name=obj) if obj else None
    if not _is_mapping(obj):
        return None
    for wrapper in _DEFINITION_WRAPPERS:
        if _is_mapping(obj.get(wrapper)):
            obj = obj[wrapper]
            break
    name = obj.get("name")
    if not name:
        return None
    params = next((obj[k] for k in _SCHEMA_KEYS if obj.get(k) is not None), None)
    params = loads(params) if isinstance(params, str) else params
    if nested_deeper_than(params):
        note_unread(params, _TOO_DEEP)
        params = None
    if _is_mapping(params):
        for wrapper in _SCHEMA_WRAPPERS:
            if wrapper in params and len(params) <= (2 if wrapper == "jsonSchema" else 1):
                inner = params[wrapper]
                params = loads(inner) if isinstance(inner, str) else inner
                break
    return ToolDefinition(
        name=str(name),
        description=opt_str(obj.get("description")),
        parameters=dict(params) if _is_mapping(params) else None,
        deprecated=bool(obj.get("deprecated", False)),
        replaced_by=opt_str(obj.get("replaced_by")),
    )


def tool_schema_from(value: Any) -> dict[str, Any] | None:
    """The JSON Schema a framework records on a tool's own span (JSON text or a mapping, maybe
    in a Bedrock ``{"json": {…}}`` wrapper, as older Strands wrote it); None when the value is
    no schema (the call's arguments, say). Inside ``shared_memo`` a text repeated on every call
    of the tool is read once, into one dict (the validator cache then knows it by the object)."""
    return memoized("tool_schema", value, _tool_schema_from)


def _tool_schema_from(value: Any) -> dict[str, Any] | None:
    parsed = loads(value) if isinstance(value, str) else value
    if _is_mapping(parsed) and len(parsed) == 1 and "json" in parsed:
        inner = parsed["json"]
        parsed = loads(inner) if isinstance(inner, str) else inner
    if not is_json_schema(parsed) or nested_deeper_than(parsed):
        return None
    return dict(parsed)


def tool_definitions_from(value: Any) -> list[ToolDefinition]:
    """Tool definitions from an attribute value; inside ``shared_memo`` a value repeated on
    several spans (every request sends the same tools) is read once."""
    return list(memoized("tool_definitions", value, _tool_definitions_from))


def _tool_definitions_from(value: Any) -> list[ToolDefinition]:
    out = []
    for item in parse_json_list(value):
        # Gemini groups its declarations: [{"function_declarations": [...]}, {"google_search": {}}]
        group = _keyed_list(item, _DECLARATION_GROUPS) if _is_mapping(item) else None
        for one in group if group is not None else (item,):
            d = tool_definition_from(one)
            if d is not None:
                out.append(d)
    return out


_DECLARATION_GROUPS = ("function_declarations", "functionDeclarations")


def _keyed_list(obj: Mapping[str, Any], keys: tuple[str, ...]) -> list[Any] | None:
    for key in keys:
        if isinstance(obj.get(key), list):
            return obj[key]
    return None


_JSON_TYPES = frozenset({"object", "string", "number", "integer", "boolean", "array", "null"})
_SCHEMA_ONLY_KEYWORDS = ("$schema", "$ref", "$defs", "anyOf", "oneOf", "allOf")


def is_json_schema(value: Any) -> bool:
    """Could the value be a JSON Schema (rather than, say, the arguments of one call)? An empty
    object, or one whose ``type`` is a JSON type (Gemini writes them upper-case) or list of
    them, whose ``properties`` is an object, or that uses a keyword only schemas use."""
    if not _is_mapping(value):
        return False
    if not value:
        return True
    t = value.get("type")
    if isinstance(t, str) and t.lower() in _JSON_TYPES:
        return True
    if isinstance(t, list) and t and all(isinstance(x, str) and x.lower() in _JSON_TYPES for x in t):
        return True
    if _is_mapping(value.get("properties")):
        return True
    return any(k in value for k in _SCHEMA_ONLY_KEYWORDS)
