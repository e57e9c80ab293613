"""The conventions, one module each, and reading one span with all of them: ReadableSpan → SpanFacts.

The convention is detected per span, never per trace: real traces mix them (an OpenInference
agent around OpenLLMetry LLM spans, a GenAI root over Vercel ``ai.*`` children). Every
convention whose ``detect`` recognises a span reads what it knows; the most specific run first,
so that their decisions (a role, a final answer) are not overridden by generic ones. The
processor's hot-path ``classify`` asks the same ``detect``s in the same order.

Adding a convention: a module with ``CONVENTION = Convention(name, keys, detect, read)`` and one
line in ``CONVENTIONS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import (
    _memo,
    crewai,
    gcp_vertex_agent,
    genai,
    litellm,
    mastra,
    openinference,
    openllmetry,
    pydantic_ai,
    vercel_ai,
)
from otel_toolscore.conventions._chunks import merged_chunks
from otel_toolscore.conventions._unread import note_unused_content
from otel_toolscore.conventions.base import Attributes, Convention, SpanFacts, Stated, ToolExecution
from otel_toolscore.conventions.parsing import (
    LONG_TEXT as _LONG_TEXT,
)
from otel_toolscore.conventions.parsing import (
    as_text,
    clean_strings,
    collect_unread,
    may_escape_half,
    may_hold_surrogates,
    result_error,
    stop_collecting,
    text_may_hold_surrogates,
)

#: most specific first: the first convention that states a role decides it
CONVENTIONS: tuple[Convention, ...] = (
    mastra.CONVENTION,
    pydantic_ai.CONVENTION,
    crewai.CONVENTION,
    litellm.CONVENTION,
    vercel_ai.CONVENTION,
    openinference.CONVENTION,
    openllmetry.CONVENTION,
    genai.CONVENTION,
    # ADK's own attributes complete the GenAI ones written on the same spans
    gcp_vertex_agent.CONVENTION,
)

# The roles conventions state outright, asked before any detect: a framework's own span type
# (Mastra's marks the model_inference duplicate of a model_step, which also says "chat"; ADK's
# marks the merged-responses span it adds after parallel calls, which also says "execute_tool"),
# then the standard's GenAI operation, then the other conventions in ``CONVENTIONS`` order.
_STATED_ORDER = (mastra.CONVENTION, gcp_vertex_agent.CONVENTION, genai.CONVENTION, vercel_ai.CONVENTION,
                 openinference.CONVENTION, openllmetry.CONVENTION)
_STATED: tuple[tuple[str, Mapping[str, Stated], Stated | None], ...] = tuple(
    entry for c in _STATED_ORDER for entry in c.stated
)

__all__ = ["CONVENTIONS", "Convention", "SpanFacts", "ToolExecution", "classify", "read_span", "read_trace"]

_GATE_KEYS = frozenset().union(*(c.keys for c in CONVENTIONS))
_GATE_NAMES = tuple(n for c in CONVENTIONS for n in c.span_names)
_GATED: dict[frozenset[str], tuple[Convention, ...]] = {}
# a span with none of the gate keys can still be a convention's by its name alone (Vercel, litellm);
# detect tells which
_NAMED_ONLY = tuple(c for c in CONVENTIONS if c.span_names)


def _gated(name: str, attrs: Attributes | None) -> tuple[Convention, ...]:
    """The conventions whose gate the span passes, in ``CONVENTIONS`` order.

    Most spans an app ends are not GenAI: one C-level pass over their keys says so. For the rest,
    the answer for their set of gate keys is looked up (``_gated_by_keys``); a name that starts
    like a convention's span names adds the conventions that know it.
    """
    if not name.startswith(_GATE_NAMES):
        return (_gated_by_keys(attrs) if attrs else None) or ()
    if not attrs or _GATE_KEYS.isdisjoint(attrs):
        return _NAMED_ONLY
    present = _GATE_KEYS.intersection(attrs)
    return tuple(c for c in CONVENTIONS if not c.keys.isdisjoint(present) or name.startswith(c.span_names))


def _compile_stated(
    table: Sequence[tuple[str, Mapping[str, str], str | None]],
) -> Callable[[Attributes], Any]:
    """A table of stated roles as one function of straight-line look-ups (the way
    ``dataclasses`` writes an ``__init__``): every span the app ends with a GenAI key asks it,
    and a loop over the table's tuples cost about as much again as the look-ups themselves.
    The first key present whose value the table maps (or that has a default) answers."""
    names: dict[str, Any] = {}
    lines = ["def _stated(attrs):", "    get = attrs.get"]
    for i, (key, answers, default) in enumerate(table):
        names[f"K{i}"], names[f"R{i}"], names[f"D{i}"] = key, answers, default
        lines += [
            f"    value = get(K{i})",
            "    if value is not None:",
            f"        answer = R{i}.get(value, D{i})",
            "        if answer:",
            "            return answer",  # (never "": a table states a role or nothing)
        ]
    lines.append("    return None")
    exec("\n".join(lines), names)  # our own table's constants, never input
    function: Callable[[Attributes], Any] = names["_stated"]
    return function


def _kind(role: Stated | None) -> str | None:
    """What ``classify`` says of a span with this role."""
    return None if not role else "agent" if role == "agent" else "genai"


#: the role a span states outright (``_STATED``, in order), in ``classify``'s words ("agent",
#: "genai"), for the hot path (``_read`` asks ``_Keys.stated``: the entries whose key a set holds)
_stated_kind: Callable[[Attributes], str | None] = _compile_stated(
    [(key, {value: "agent" if role == "agent" else "genai" for value, role in roles.items() if role}, _kind(default))
     for key, roles, default in _STATED]
)


class _Keys:
    """What a span's set of attribute keys alone tells ``read_span``, worked out once per set:
    an emitter writes the same few key sets on span after span."""

    __slots__ = ("direct_others", "direct_roles", "expectations", "gated", "may_hold_surrogates", "stated")

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.gated = _gated_by_keys(keys)
        #: the ``toolscore.*`` keys, in the span's order
        self.expectations = tuple(k for k in keys if k.startswith(sc.TOOLSCORE_PREFIX))
        self.may_hold_surrogates = not all(map(str.isascii, keys)) and any(map(may_hold_surrogates, keys))
        #: the entries of ``_STATED`` whose key the set holds, in order: the role a span states
        #: outright is asked of these alone
        present = frozenset(keys)
        self.stated = tuple(entry for entry in _STATED if entry[0] in present)
        #: the roles in which a span of this key set may be read straight into a trajectory
        #: (``assemble._direct``), when the GenAI convention reads it alone: when the other
        #: conventions whose gate it passes (``direct_others``) do not recognise it
        gated = self.gated or ()
        self.direct_roles: frozenset[str] = frozenset(
            role for role, refused in genai.DIRECT_REFUSES.items() if refused.isdisjoint(present)
        ) if genai.CONVENTION in gated and not self.may_hold_surrogates else frozenset()
        self.direct_others = tuple(c for c in gated if c is not genai.CONVENTION)


def stated_role(stated: tuple[tuple[str, Mapping[str, Stated], Stated | None], ...], attrs: Attributes) -> Any:
    """The role the first entry of ``stated`` (``_Keys.stated``) that answers one gives, or None."""
    for key, answers, default in stated:
        value = attrs[key]
        if value is not None:
            answer = answers.get(value, default)
            if answer:
                return answer
    return None


_KEY_SETS: dict[tuple[str, ...], _Keys] = {}


def _keys_of(attrs: Attributes) -> _Keys:
    keys = tuple(attrs)
    known = _KEY_SETS.get(keys)
    if known is None:
        known = _Keys(keys)
        if len(_KEY_SETS) < 4096:  # the key sets real emitters produce are few; a hostile stream's are not
            _KEY_SETS[keys] = known
    return known


def _gated_by_keys(keys: Iterable[str]) -> tuple[Convention, ...] | None:
    """The conventions whose keys the span carries, or None when it carries none of them (then
    only a name can make it a convention's). One intersection with every convention's keys and
    a look-up of the answer for that set: the gates are not tested one by one on the hot path."""
    if _GATE_KEYS.isdisjoint(keys):
        return None
    present = _GATE_KEYS.intersection(keys)
    gated = _GATED.get(present)
    if gated is None:
        gated = tuple(c for c in CONVENTIONS if not c.keys.isdisjoint(present))
        if len(_GATED) < 4096:  # the key sets real emitters produce are few; a hostile stream's are not
            _GATED[present] = gated
    return gated


def read_trace(spans: Sequence[ReadableSpan]) -> list[SpanFacts]:
    """``read_span`` for each span of one trace, in order. The readers share what repeats from
    span to span (chat histories, tool definitions: ``parsing.ReadMemo``), so reading a run is
    linear in its size; the facts are the ones ``read_span`` gives for each span alone."""
    unread: list[tuple[Any, str]] = []
    token = collect_unread(unread)  # once for the trace: each span takes what it left unread
    ids: dict[int, str] = {}  # each id formatted once: a parent's is every child's parent_id
    memo, memo_token = _memo.begin()
    try:
        facts = [_read(s, i, ids, unread) for i, s in enumerate(spans)]
    finally:
        _memo.reset(memo_token)
        stop_collecting(token)
    memo.keep_for_later_traces()
    return facts


def _service_name(span: ReadableSpan) -> str | None:
    resource = getattr(span, "resource", None)
    value = resource.attributes.get("service.name") if resource is not None else None
    # the SDK's default for an app that never named itself says nothing about which app it was
    return str(value) if value and not str(value).startswith("unknown_service") else None


def read_span(span: ReadableSpan, order: int = 0) -> SpanFacts:
    """Read one span with every convention. Never raises: a reader failure is a recorded problem."""
    unread: list[tuple[Any, str]] = []
    token = collect_unread(unread)
    try:
        return _read(span, order, {}, unread)
    finally:
        stop_collecting(token)


def _hex_id(span_id: int, ids: dict[int, str]) -> str:
    text = ids.get(span_id)
    if text is None:
        text = ids[span_id] = f"{span_id:016x}"
    return text


def _read(span: ReadableSpan, order: int, ids: dict[int, str], unread: list[tuple[Any, str]]) -> SpanFacts:
    """``read_span``, with the ids formatted so far in the span's trace; values left unread for
    their size or depth are listed in ``unread`` (``collect_unread``) while the span is read."""
    ctx = span.context
    parent = span.parent
    name = span.name or ""
    start = span.start_time or 0
    facts = SpanFacts(
        span_id=_hex_id(ctx.span_id, ids) if ctx is not None else f"#{order}",
        parent_id=_hex_id(parent.span_id, ids) if parent is not None else None,
        name=name,
        start=start,
        end=span.end_time or start,
        order=order,
    )
    raw = _lookup_attributes(span)
    # Read-only for the readers; a proxy of a plain dict answers get/in in C.
    attrs: Attributes = MappingProxyType(raw) if type(raw) is dict else (raw or {})
    keys = _keys_of(attrs)
    # what the span states outright decides its role; else the first convention that states one
    facts.role = stated_role(keys.stated, attrs)
    # (the key set's answer, known already, unless the name adds conventions of its own)
    gated = (keys.gated or ()) if not name.startswith(_GATE_NAMES) else _gated(name, raw)
    first = len(unread)
    for convention in gated:
        try:
            stated = convention.detect(span, attrs)
            if stated is None:
                continue
            if stated:
                facts.set_role(stated)
            convention.read(span, attrs, facts, stated)
        except Exception as exc:  # noqa: BLE001 - one bad attribute must not lose the trace
            facts.problem(f"{convention.name} reader failed: {type(exc).__name__}: {exc}")
    if len(unread) > first:
        for value, why in unread[first:]:
            # Values left unread for their size or depth: named by attribute when they are one.
            key = next((k for k, v in attrs.items() if v is value), None)
            facts.problem(f"{key or 'a value inside an attribute'} was not read: {why}")
        del unread[first:]
    role = facts.role
    if role is None:
        role = facts.role = "other"
    output = facts.output_messages
    if output is not None and len(output) > 1:
        # whichever convention read them (docs/conventions.md, "Streamed responses")
        facts.output_messages = merged_chunks(output)
    events = span.events
    if role != "agent" and role != "tool" and not (facts.input_messages or facts.output_messages):
        note_unused_content(span, attrs, facts)
    if role == "agent":  # only run spans need it (reports show which app a run came from)
        facts.service_name = _service_name(span)
    # (most spans: no event, no tool, no ERROR status: no failure to look for)
    status = span.status
    if events or facts.tool is not None or (status is not None and status.status_code is _ERROR):
        _read_failure(span, events, status, facts)
    for key in keys.expectations:
        facts.expectations[key] = attrs[key]
    # Lone surrogates (raw, or JSON-escaped in text the readers parse) anywhere in the span?
    # Rare; when so, what was read is cleaned rather than every reader guarding its output. (A
    # span no reader recognised gives the run only its name, in problems: that alone is looked at.)
    # (most spans: an ASCII name, no event, no status description: nothing else to look at)
    if (keys.may_hold_surrogates or _texts_may_hold_surrogates(attrs.values())
            or (events or not name.isascii() or (status is not None and status.description))
            and _others_may_hold_surrogates(name, events, status)) if facts.conventions \
            else may_hold_surrogates(name):
        clean_strings(facts)
    return facts


_ERROR = StatusCode.ERROR  # (an enum member looked up on its class costs a call)


def _others_may_hold_surrogates(name: str, events: Sequence[Any], status: Any) -> bool:
    """Lone surrogates in the span's name, status or events (its attributes are looked at first)?"""
    if not name.isascii() and may_hold_surrogates(name):
        return True
    if status is not None and status.description and may_hold_surrogates(status.description):
        return True
    for event in events:
        ev = event.attributes or {}
        if may_hold_surrogates(event.name) or _texts_may_hold_surrogates(ev.values()) or any(
            map(may_hold_surrogates, ev)
        ):
            return True
    return False


def _texts_may_hold_surrogates(values: Iterable[Any]) -> bool:
    for value in values:
        if type(value) is str:
            # (most texts: ASCII, told in O(1), without a backslash, told by one ``memchr``, both
            # without a call; a long one, a history that extends one read before, is searched
            # only in what it adds)
            if len(value) >= _LONG_TEXT:
                if text_may_hold_surrogates(value):
                    return True
            elif (not value.isascii() or "\\" in value and may_escape_half(value)) and may_hold_surrogates(value):
                return True
        elif type(value) is tuple:  # (a loop here: a generator per tuple costs more than the checks)
            for v in value:
                if type(v) is str and (not v.isascii() or "\\" in v) and may_hold_surrogates(v):
                    return True
    return False


def _read_failure(span: ReadableSpan, events: Sequence[Any], status: Any, facts: SpanFacts) -> None:
    """A failed span: status ERROR, an ``exception`` event, or (tools) a result whose envelope
    flags an error (``read_result``) or an error payload. The span's own failure says most."""
    error: Any = None
    for event in events:
        if event.name == sc.EXCEPTION_EVENT:
            ev = event.attributes or {}
            etype, emsg = ev.get(sc.EXCEPTION_TYPE), ev.get(sc.EXCEPTION_MESSAGE)
            error = ": ".join(str(x) for x in (etype, emsg) if x) or "exception"
            break
    if error is None and status is not None and status.status_code is _ERROR:
        error = status.description or (span.attributes or {}).get(sc.ERROR_TYPE) or "error"
    if error is not None:
        facts.error = as_text(error)
        if facts.tool is not None:
            facts.tool.error = facts.error
        return
    if facts.tool is not None and settle_tool_error(facts.tool):
        facts.error = facts.tool.error


def settle_tool_error(tool: ToolExecution) -> bool:
    """A tool span that did not fail itself: its error is the one its reader found, else what its
    result says (an error payload), as text in ``tool.error``. True when it has one."""
    error = tool.error or (result_error(tool.result) if tool.has_result else None)
    if error is None:
        return False
    tool.error = as_text(error)
    return True


def _lookup_attributes(span: ReadableSpan) -> Attributes | None:
    """The span's attributes as a mapping that is cheap to query, for a read-only look.

    ``ReadableSpan.attributes`` wraps the SDK's ``BoundedAttributes`` in a new MappingProxyType
    on every access, and ``BoundedAttributes`` answers ``get`` and ``in`` in Python, through a
    KeyError for every missing key: about 4 µs to learn that an HTTP span is not GenAI. The
    SDK keeps a plain dict inside; it is read directly when it is there (ended spans' attributes
    no longer change), else the public property is.
    """
    try:
        attrs = span._attributes  # type: ignore[attr-defined]
        inner = attrs if type(attrs) is dict else attrs._dict  # type: ignore[union-attr]
        if type(inner) is dict:
            return inner
    except AttributeError:
        pass
    return span.attributes


def classify(span: ReadableSpan) -> str | None:
    """Cheap look at one ending span: "agent" (may be a run: hold it), "genai" (other GenAI
    activity), or None. ``read_span``'s decision, made the same way: what the span states
    outright, else the conventions whose gate it passes, each asked by its ``detect`` in order.
    A span is an agent here exactly when ``read_span`` gives it the role "agent"
    (``tests/test_detection.py``)."""
    try:  # (inlined _lookup_attributes: this runs for every span the app ends)
        raw = span._attributes  # type: ignore[attr-defined]
        attrs = raw if type(raw) is dict else raw._dict  # type: ignore[union-attr]
        if type(attrs) is not dict:
            attrs = span.attributes
    except AttributeError:
        attrs = span.attributes
    if not attrs or _GATE_KEYS.isdisjoint(attrs):
        # most spans an app ends: no convention's keys; only a name can still make it one's
        name = span.name or ""
        if not name.startswith(_GATE_NAMES):
            return None
        gated, attrs = _NAMED_ONLY, attrs or _EMPTY
    else:
        kind = _stated_kind(attrs)
        if kind is not None:
            return kind
        gated = _gated(span.name or "", attrs)
    recognised = False
    for convention in gated:
        try:
            detected = convention.detect(span, attrs)
        except Exception:  # noqa: BLE001 - read_span records it; the hot path must not raise
            continue
        if detected:
            return "agent" if detected == "agent" else "genai"
        recognised = recognised or detected is not None
    return "genai" if recognised else None


_EMPTY: Attributes = MappingProxyType({})
