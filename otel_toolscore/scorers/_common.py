"""Pieces shared by the per-call scorers: value shortening, JSON text and trajectory look-ups."""

from __future__ import annotations

import json
from typing import Any

from otel_toolscore.scorers.results import Issue
from otel_toolscore.trajectory import LLMCall, ToolCall, Trajectory

_MAX_ACTUAL_CHARS = 200
# json.dumps with non-default options builds a new encoder on every call; these are built once
# (encode() keeps no state between calls, so sharing them is safe).
_SMALL_ENCODER = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=str)
_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
# Without circular-reference markers (parsed JSON holds no cycle): what it cannot encode, a cycle
# included, goes through ``_CANONICAL_ENCODER``, which says what it is.
_QUICK_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                            default=str, check_circular=False)


def suggestions_of(issues: list[Issue]) -> list[str]:
    """One suggestion per issue, in issue order, duplicates dropped."""
    seen: dict[str, None] = {}
    for issue in issues:
        if issue.suggestion:
            seen.setdefault(issue.suggestion, None)
    return list(seen)


def small_json(value: Any) -> Any:
    """A value safe and short enough to sit in details: scalars as they are, small lists of
    scalars as lists, anything else as truncated JSON text."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, (list, tuple)) and len(value) <= 20:
        if all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
            return [clip(v) if isinstance(v, str) else v for v in value]
    return clip(_encode(_SMALL_ENCODER, value))


def clip(text: str, limit: int = _MAX_ACTUAL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def canonical_json(value: Any) -> str:
    """Order-insensitive text of a JSON-like value, for equality of arguments and results."""
    try:
        return _QUICK_CANONICAL_ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):
        return _encode(_CANONICAL_ENCODER, value)


def _encode(encoder: json.JSONEncoder, value: Any) -> str:
    """JSON text of a value; its repr when it is not JSON; a marker when it nests too deep for
    either (the readers do not let such values through; this is the last guard)."""
    try:
        return encoder.encode(value)
    except (TypeError, ValueError):
        pass
    except RecursionError:
        return "<nested too deeply to show>"
    try:
        return repr(value)
    except RecursionError:
        return "<nested too deeply to show>"


def is_text_or_none(value: Any) -> bool:
    """A value that is JSON as it is: a ``str`` (not a subclass: its methods could be anything)
    or None. For scorers that copy a call's id or name into their details."""
    return value is None or type(value) is str


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def step_positions(
    trajectory: Trajectory,
) -> tuple[list[ToolCall], list[int], list[LLMCall], list[int]]:
    """Tool calls and LLM calls with their positions in ``trajectory.steps``."""
    calls: list[ToolCall] = []
    call_positions: list[int] = []
    llms: list[LLMCall] = []
    llm_positions: list[int] = []
    for position, step in enumerate(trajectory.steps):
        if isinstance(step, ToolCall):
            calls.append(step)
            call_positions.append(position)
        elif isinstance(step, LLMCall):
            llms.append(step)
            llm_positions.append(position)
    return calls, call_positions, llms, llm_positions
