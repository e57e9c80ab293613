"""What every reader of attribute texts shares: JSON text to a value, text UTF-8 cannot carry,
and the values left unread while a span is read (named in its problems)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any

#: JSON whitespace (Python's str.strip() removes more, which JSON does not allow between tokens)
JSON_WS = " \t\n\r"

# ``json.loads`` of a text without surrounding whitespace is its decoder's C scanner from 0 to
# the end; asked directly, it skips two regex matches and three Python calls per text.
_SCAN_JSON: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def json_value(text: str) -> Any:
    """``json.loads(text)`` for a text that ``str.strip()`` leaves as it is (every reader's)."""
    try:
        value, end = _SCAN_JSON(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if end != len(text):  # (what follows, ending in a non-space, is never only spaces)
        raise ValueError("not one JSON value")
    return value


# --- text UTF-8 cannot carry ------------------------------------------------------------------

#: a JSON escape of a lone surrogate half (JavaScript truncating a string inside an emoji); a
#: high half followed by a low one is a valid pair (json.dumps writes every emoji that way), unless
#: a backslash comes right before the high half's: ``\\ud83d`` may be an escaped backslash and the
#: text ``ud83d``, and the low half after it then lone (taken as lone when it is not, a pair has
#: the span's strings cleaned, where there is nothing to clean).
_SURROGATE_ESCAPE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    r"|(?<![^\\]\\u[dD][89abAB][0-9a-fA-F]{2})(?<!^\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def valid_text(value: str) -> str:
    """The text with every lone surrogate replaced by U+FFFD: UTF-8 cannot encode one, so it
    would break whatever writes the text out (OTLP exporters, the CLI's output, JSON dumps)."""
    if value.isascii():  # O(1) in CPython
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def may_hold_surrogates(value: str) -> bool:
    """Could reading this text give lone surrogates (raw, or as JSON escapes)?"""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
    return may_escape_half(value) and _SURROGATE_ESCAPE.search(value) is not None


#: what every JSON escape of a surrogate half starts with
_HALF_ESCAPE = re.compile(r"\\u[dD]")


def may_escape_half(text: str, start: int = 0) -> bool:
    """Does ``text`` hold ``\\ud`` or ``\\uD`` from ``start`` on (every escape of a surrogate
    half begins so)? Most texts hold no backslash at all, which one ``memchr`` tells; the
    others are searched once (two substring searches cost about three times the one match)."""
    return "\\" in text and _HALF_ESCAPE.search(text, start) is not None


def lone_surrogate_escape(text: str, start: int = 0) -> bool:
    """A JSON escape of a lone surrogate half in ``text`` from ``start`` on (what comes before
    ``start`` still tells whether a half there is paired)."""
    return _SURROGATE_ESCAPE.search(text, start) is not None


# --- what could not be read ---------------------------------------------------------------------

#: (value, why) of values left unread for their size or depth, while a span is read
_unread: ContextVar[list[tuple[Any, str]] | None] = ContextVar("otel_toolscore_unread", default=None)


def collect_unread(found: list[tuple[Any, str]]) -> Token[list[tuple[Any, str]] | None]:
    """From now on, values left unread (too large, too deep) are listed in ``found``, for the
    span's problems, until ``stop_collecting`` with the token returned. (Not a context manager:
    this runs for every span read, and a generator-based one costs more than the rest.)"""
    return _unread.set(found)


def stop_collecting(token: Token[list[tuple[Any, str]] | None]) -> None:
    _unread.reset(token)


def unread_so_far() -> list[tuple[Any, str]] | None:
    """The list values left unread go to now (``collect_unread``), if any."""
    return _unread.get()


def note_unread(value: Any, why: str) -> None:
    found = _unread.get()
    if found is not None and not any(v is value and w == why for v, w in found):
        found.append((value, why))
