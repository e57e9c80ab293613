"""What the readers share while they read one trace's spans (``ReadMemo``), and what they keep
from earlier traces for later ones: chat histories (a conversation's next turn repeats them)
and values every request repeats (tool definitions). Whatever is shared is never mutated."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any, NamedTuple, TypeVar

from otel_toolscore import _fork
from otel_toolscore.conventions._text import (
    JSON_WS,
    json_value,
    lone_surrogate_escape,
    may_escape_half,
    unread_so_far,
)

_T = TypeVar("_T")
#: earlier lists remembered per attribute: parallel sub-agents interleave a few histories
_MEMO_LISTS = 8


class ReadMemo:
    """What the readers of one trace's spans share (see ``conventions.read_trace``).

    Chat histories grow by appending: each LLM span's input repeats the previous span's input
    and adds the new turns. Reading a run span by span would parse and convert that history
    again for every LLM call (quadratic in the run's length); with the memo only the new tail
    is parsed and converted. The new turns usually begin with the previous model call's output,
    read from that span already: an input may name the key of those outputs (``continues``), and
    an output list found at the head of its new part is taken as read, as written or without
    its ``finish_reason`` (``Continues``). Values repeated verbatim (the tool definitions sent
    with every request) are converted once. The converted items are shared between spans, never
    mutated; what a trace read last is kept for the traces after it (``_Earlier``,
    ``_EarlierValues``), unless its text may hold a lone surrogate (``clean_strings`` changes
    what such a text gives in place) or reading it left a value unread (noted per span).
    """

    __slots__ = ("_clean", "_extends", "_given", "_last", "_lists", "_values")

    def __init__(self) -> None:
        self._lists: dict[str, list[_Listed]] = {}
        #: the list read last for each key, and its ``convert``
        self._last: dict[str, tuple[Callable[..., Any], _Listed]] = {}
        self._values: dict[tuple[str, str], Any] = {}
        # Both by id, not by text (hashing a long text costs more than searching it); each
        # holds its texts, so that an id stays theirs while the memo lives.
        #: id(text) → (text, an earlier text it extends: it starts with all of that one but its last character)
        self._extends: dict[int, tuple[str, str]] = {}
        #: id(text) → a long text found to hold no surrogate, raw or escaped
        self._clean: dict[int, str] = {}
        #: the list read last for each key, whose copy ``json_list`` gave last (for ``derived``)
        self._given: dict[str, _Listed] = {}

    def may_hold_surrogates(self, text: str) -> bool:
        """``may_hold_surrogates(text)``; a text that extends one found clean is searched only
        where it differs: each LLM span's history repeats the one before it."""
        if self._clean.get(id(text)) is text:
            return False
        start = 0
        extends = self._extends.get(id(text))
        if extends is not None and extends[0] is text and self._clean.get(id(extends[1])) is extends[1]:
            # The text shares all but the clean one's last character with it. An escape of a
            # lone half (six characters, and the four after a high half that would pair it, or
            # the six before a low one) that begins more than ten before the shared part's end
            # is all in that part, with what tells whether it is paired: the clean text would
            # hold it too. One that begins later is searched for from there on.
            start = max(len(extends[1]) - 1 - 10, 0)
        if not text.isascii():  # (O(1): an ASCII text holds no raw surrogate)
            # a raw surrogate is one character: in the shared part, the clean text would hold it
            try:
                text[start:].encode("utf-8")
            except UnicodeEncodeError:
                return True
        if may_escape_half(text, start) and lone_surrogate_escape(text, start):
            return True
        self._clean[id(text)] = text
        return False

    def value(self, key: str, text: str, convert: Callable[[str], _T]) -> _T:
        """``convert(text)``, once per distinct text: ``read_once``, and kept for later traces
        too (an app sends the same tool definitions with every request of every run)."""
        k = (key, text)
        if k in self._values:
            return self._values[k]  # type: ignore[no-any-return]
        earlier = (key, convert, text)
        found, value = _EARLIER_VALUES.get(earlier)
        if found:
            self._values[k] = value
            return value  # type: ignore[no-any-return]
        unread = unread_so_far()
        before = len(unread) if unread is not None else -1
        value = convert(text)
        if unread is None or len(unread) == before:
            self._values[k] = value
            # (what a text with lone surrogates read is cleaned in place: kept to this trace)
            if not self.may_hold_surrogates(text):
                _EARLIER_VALUES.add(earlier, len(text), value)
        return value

    def read_once(self, key: str, text: str, read: Callable[[str], _T]) -> _T:
        """``read(text)``, once per distinct text unless reading it left a value unread (that
        is noted for each span that holds it: ``collect_unread``)."""
        k = (key, text)
        if k in self._values:
            return self._values[k]  # type: ignore[no-any-return]
        found = unread_so_far()
        before = len(found) if found is not None else -1
        value = read(text)
        if found is not None and len(found) == before:
            self._values[k] = value
        return value

    def json_list(self, key: str, text: str, convert: Callable[[list[Any]], list[Any]],
                  continues: str | Continues | None = None) -> list[Any] | None:
        """``convert(json.loads(text))`` for stripped text that starts with ``[`` and parses to a
        JSON list, else None; an earlier list of the same key that this one extends is reused,
        and in what it adds, a list of key ``continues`` (converted by the same ``convert``).

        ``convert`` must map items one by one, so that ``convert(a + b) == convert(a) +
        convert(b)``. ``text = earlier[:-1] + "," + more`` parses to ``earlier``'s items followed
        by those of ``"[" + more`` whenever that parses to a non-empty list (the JSON grammar
        ends every value before the comma), so the result is the one a full parse gives; so
        does ``"[" + other[1:-1] + "," + more``, or ``"[" + other[1:-1] + "]"``, to ``other``'s
        items followed by those of ``"[" + more``.
        """
        seen = self._lists.setdefault(key, [])
        best: _Listed | None = None
        # latest first: the list a text extends is nearly always the one read last, and the
        # shorter ones before it are then not compared (a comparison costs their length)
        for prev in reversed(seen):
            if prev.text == text:
                return self._give(key, prev)
            if len(prev.text) < len(text) and (best is None or len(prev.text) > len(best.text)) \
                    and text.startswith(prev.open):
                best = prev
        if best is None and len(text) >= _EARLIER_MIN_CHARS:
            # the first list of this trace: a conversation's next turn (a new trace) repeats
            # the history an earlier trace read
            best = _EARLIER.extended(key, convert, text)
            if best is not None:
                self._clean[id(best.text)] = best.text  # (only texts without surrogates are kept)
                if best.text == text:
                    seen.append(best)
                    return self._give(key, best)
        found = unread_so_far()
        noted = len(found) if found is not None else 0
        items: list[Any] | None = None
        base: _Listed | None = None  # the list read earlier whose items ``items`` begins with
        if best is not None:
            self._extends[id(text)] = (text, best.text)
            rest = text[len(best.open) :].lstrip(JSON_WS)
            if rest[:1] == ",":
                added = None
                if continues:
                    added = self._continued(Continues(continues) if isinstance(continues, str) else continues,
                                            rest[1:].lstrip(JSON_WS), convert)
                if added is None:
                    added = _converted_list("[" + rest[1:], convert)
                if added is not None:
                    items, base = best.items + added, best
        if items is None:
            try:
                parsed = json_value(text)
            except (ValueError, RecursionError):
                return None
            if not isinstance(parsed, list):
                return None
            items = convert(parsed)
            if not parsed:
                # "[]" + "," + more is no JSON: only a non-empty list can be extended.
                return list(items)
        if found is not None and len(found) > noted:
            # a value left unread is noted for each span that holds it (as read_once does)
            return items
        listed = _Listed(text, items, base)
        seen.append(listed)
        if len(seen) > _MEMO_LISTS:
            del seen[0]
        self._last[key] = (convert, listed)
        return self._give(key, listed)

    def _give(self, key: str, listed: _Listed) -> list[Any]:
        """A copy of the list's items for a reader (who may change the copy, not the items)."""
        out = listed.given = list(listed.items)
        self._given[key] = listed
        return out

    def derived(self, items: list[Any], derive: Callable[[list[Any]], tuple[Any, ...]]) -> tuple[Any, ...] | None:
        """``derive(items)`` for a list ``json_list`` gave (else None, for the caller to work out
        itself), from what was derived of the list it extends and of what it adds: a history's
        system prompt would otherwise be searched for in the whole history by every LLM span.
        ``derive`` must map items one by one (``derive(a + b) == derive(a) + derive(b)``) and
        look only at what the readers never change in a converted item."""
        for listed in self._given.values():
            if listed.given is items:
                # (a reader may have changed its copy: then it is not the list read)
                if len(items) != len(listed.items) or (items and items[-1] is not listed.items[-1]):
                    return None
                return listed.derived(derive)
        return None

    def keep_for_later_traces(self) -> None:
        """Each key's last list (a history: its longest), for the traces after this one."""
        for key, (convert, listed) in self._last.items():
            # (what a text with lone surrogates read is cleaned in place: kept to this trace)
            if len(listed.text) >= _EARLIER_MIN_CHARS and not self.may_hold_surrogates(listed.text):
                _EARLIER.add(key, convert, listed)

    def _continued(self, continues: Continues, rest: str,
                   convert: Callable[[list[Any]], list[Any]]) -> list[Any] | None:
        """The items of ``"[" + rest`` when ``rest`` starts with the items of a list of
        ``continues.key`` (latest first), whole or with the last one's ``continues.member``
        dropped, else None."""
        for prev in reversed(self._lists.get(continues.key, ())):
            inner = prev.inner
            if not prev.items or not inner:
                continue
            items = prev.items
            if not rest.startswith(inner):
                head = prev.without(continues.member) if continues.member else None
                if head is None or not rest.startswith(head):
                    continue
                inner = head
                items = [*items[:-1], continues.without(items[-1])]
            after = rest[len(inner) :].lstrip(JSON_WS)
            if after == "]":
                return list(items)
            if after[:1] == ",":
                more = _converted_list("[" + after[1:], convert)
                if more is not None:
                    return items + more
        return None


class _Listed:
    """A list text the memo has read (stripped, ``[`` … ``]``), its converted items, and the
    texts later lists are compared with, each cut once."""

    __slots__ = ("_base", "_derived", "_inner", "_tail", "_without", "given", "items", "open", "text")

    def __init__(self, text: str, items: list[Any], base: _Listed | None = None) -> None:
        self.text = text
        self.items = items
        # An earlier list whose items these begin with, while what ``derived`` gave for it is
        # known (the readers ask for each list before the next is read): never a chain of them,
        # which would keep every list of a long run.
        self._base = base if base is not None and base._derived is not None else None
        self._derived: tuple[Callable[..., Any], tuple[Any, ...]] | None = None
        #: the copy of ``items`` a reader was given last (``ReadMemo.derived`` knows it by that)
        self.given: list[Any] | None = None
        #: all but the closing ``]``: what a text that adds items starts with
        self.open = text[:-1]
        self._tail = self.open[-32:]
        self._inner: str | None = None
        self._without: tuple[str, str | None] | None = None

    def opens(self, text: str) -> bool:
        """Does ``text`` start with ``open``? Histories of one app's conversations share a
        long head (the system prompt): their ends are compared first."""
        return text.endswith(self._tail, 0, len(self.open)) and text.startswith(self.open)

    @property
    def inner(self) -> str:
        """The items' text, without brackets or the spaces inside them."""
        if self._inner is None:
            self._inner = self.text[1:-1].strip(JSON_WS)
        return self._inner

    def derived(self, derive: Callable[[list[Any]], tuple[Any, ...]]) -> tuple[Any, ...]:
        """``derive(self.items)``, from the base's in what these items add (``ReadMemo.derived``)."""
        known = self._derived
        if known is None or known[0] is not derive:
            base = self._base
            known_base = base._derived if base is not None else None
            if base is not None and known_base is not None and known_base[0] is derive:
                value = known_base[1] + derive(self.items[len(base.items):])
            else:
                value = derive(self.items)
            known = self._derived = (derive, value)
            self._base = None  # (not needed again)
        return known[1]

    def without(self, member: str) -> str | None:
        """``_without_last_member(self.inner, member)``, worked out once."""
        if self._without is None or self._without[0] != member:
            self._without = (member, _without_last_member(self.inner, member))
        return self._without[1]


class Continues(NamedTuple):
    """What the new part of a list may start with (``ReadMemo.json_list``): the items of a list
    of ``key`` read earlier, as they were written, or with the last one's last ``member``
    dropped (a chat history repeats a model call's output messages without their
    ``finish_reason``). ``convert`` must turn an object item into exactly one item, and
    ``without`` turn that into what the object without ``member`` converts to."""

    key: str
    member: str | None = None
    without: Callable[[Any], Any] = lambda item: item


_MEMBER_TAILS: dict[str, re.Pattern[str]] = {}


def _without_last_member(items: str, member: str) -> str | None:
    """The JSON text of items whose last is an object ending with ``member`` (a string or
    null), with that member dropped, when ``member`` is nowhere else in that text: an object
    that named it twice would keep the other. Else None.

    The ``,`` before the member's key is outside any string (a string cannot hold an unescaped
    ``"``), so the key is a member of the object the final ``}`` closes: the last item's."""
    key = f'"{member}"'
    at = items.rfind(key)
    if at < 0:
        return None
    tail = _MEMBER_TAILS.get(member)
    if tail is None:
        tail = _MEMBER_TAILS[member] = re.compile(
            re.escape(key) + r'[ \t\n\r]*:[ \t\n\r]*(?:"(?:[^"\\]|\\.)*"|null)[ \t\n\r]*\}', re.S)
    if tail.fullmatch(items, at) is None:
        return None
    head = items[:at].rstrip(JSON_WS)
    if head[-1:] != "," or key in head:
        return None
    return head[:-1].rstrip(JSON_WS) + "}"


def _converted_list(text: str, convert: Callable[[list[Any]], list[Any]]) -> list[Any] | None:
    """``convert`` of the text's JSON list when it parses to a non-empty one, else None (an
    empty one cannot follow a comma)."""
    try:
        parsed = json_value(text)
    except (ValueError, RecursionError):
        return None
    return convert(parsed) if isinstance(parsed, list) and parsed else None


#: a list text's first characters, by which lists read by earlier traces are found
_HEAD = 512
#: lists kept for later traces: the shortest (a shorter one costs less to parse again than to
#: keep: its objects, cold by then, are freed when it is dropped), how many heads, how many
#: lists per head, how many characters
_EARLIER_MIN_CHARS = 4096
_EARLIER_HEADS = 128
_EARLIER_PER_HEAD = 32
_EARLIER_CHARS = 2_000_000


class _Earlier:
    """Lists read by earlier traces, for the first list of a later trace that extends one.

    A chat app's conversation is a trace per turn, and each turn's model calls repeat the
    history of all the turns before: read trace by trace, that history would be parsed whole
    once per turn (quadratic in the conversation's length). Kept by (key, ``convert``, first
    characters), most recently used first, within bounds of count and characters; the items
    are shared, never mutated (as between the spans of one trace). Read and written under a
    lock: traces may be read in several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heads: OrderedDict[tuple[str, Callable[..., Any], str], list[_Listed]] = OrderedDict()
        self._chars = 0

    def extended(self, key: str, convert: Callable[..., Any], text: str) -> _Listed | None:
        """The longest list kept that ``text`` equals or extends (whose text it starts with,
        but for the closing ``]``), or None."""
        head = (key, convert, text[:_HEAD])
        with self._lock:
            kept = self._heads.get(head)
            if not kept:
                return None
            self._heads.move_to_end(head)
            kept = list(kept)
        best: _Listed | None = None
        for prev in kept:
            if len(prev.text) <= len(text) and (best is None or len(prev.text) > len(best.text)) \
                    and (prev.text == text or prev.opens(text)):
                best = prev
        return best

    def add(self, key: str, convert: Callable[..., Any], listed: _Listed) -> None:
        head = (key, convert, listed.text[:_HEAD])
        size = len(listed.text)
        with self._lock:
            kept = self._heads.get(head)
            if kept is None:
                kept = self._heads[head] = []
            else:
                self._heads.move_to_end(head)
                # a list this one extends is no longer needed: the next turn extends this one
                for prev in [e for e in kept if e.opens(listed.text)]:
                    kept.remove(prev)
                    self._chars -= len(prev.text)
            kept.append(listed)
            self._chars += size
            if len(kept) > _EARLIER_PER_HEAD:
                self._chars -= len(kept.pop(0).text)
            while self._heads and (len(self._heads) > _EARLIER_HEADS or self._chars > _EARLIER_CHARS):
                _, dropped = self._heads.popitem(last=False)
                self._chars -= sum(len(p.text) for p in dropped)

    def clear(self) -> None:
        with self._lock:
            self._heads.clear()
            self._chars = 0


_EARLIER = _Earlier()


class _EarlierValues:
    """Values read by earlier traces (``ReadMemo.value``), by (key, ``convert``, text), most
    recently used first, within bounds of count and characters; under a lock."""

    def __init__(self, entries: int = 256, chars: int = 2_000_000) -> None:
        self._lock = threading.Lock()
        self._values: OrderedDict[tuple[str, Callable[..., Any], str], Any] = OrderedDict()
        self._entries, self._max_chars, self._chars = entries, chars, 0

    def get(self, k: tuple[str, Callable[..., Any], str]) -> tuple[bool, Any]:
        with self._lock:
            if k not in self._values:
                return False, None
            self._values.move_to_end(k)
            return True, self._values[k]

    def add(self, k: tuple[str, Callable[..., Any], str], size: int, value: Any) -> None:
        with self._lock:
            if k in self._values or size > self._max_chars // 8:
                return
            self._values[k] = value
            self._chars += size
            while len(self._values) > self._entries or self._chars > self._max_chars:
                (_, _, text), _ = self._values.popitem(last=False)
                self._chars -= len(text)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._chars = 0


_EARLIER_VALUES = _EarlierValues()


def _forget_in_child() -> None:
    # a fork copies the locks as they were: one held by another thread then stays held
    global _EARLIER, _EARLIER_VALUES
    _EARLIER, _EARLIER_VALUES = _Earlier(), _EarlierValues()


_fork.register(after_in_child=_forget_in_child)


def forget_earlier_traces() -> None:
    """Forget what earlier traces read (for benchmarks that read the same traces again)."""
    _EARLIER.clear()
    _EARLIER_VALUES.clear()


_memo: ContextVar[ReadMemo | None] = ContextVar("otel_toolscore_read_memo", default=None)


@contextmanager
def shared_memo() -> Iterator[ReadMemo]:
    """Readers called inside share one ``ReadMemo`` (one trace at a time)."""
    memo, token = begin()
    try:
        yield memo
    finally:
        _memo.reset(token)
    memo.keep_for_later_traces()


def begin() -> tuple[ReadMemo, Token[ReadMemo | None]]:
    """``shared_memo`` without a generator, for ``read_trace`` (once per trace: the generator's
    frames cost about as much as reading a span): ``reset(token)`` after, then, when the trace
    was read, ``keep_for_later_traces``."""
    memo = ReadMemo()
    return memo, _memo.set(memo)


reset: Callable[[Token[ReadMemo | None]], None] = _memo.reset


#: ``current()``: the ``ReadMemo`` of the trace being read (``shared_memo``), if any (the
#: context variable's own ``get``: the readers ask for it a few times per span)
current: Callable[[], ReadMemo | None] = _memo.get
