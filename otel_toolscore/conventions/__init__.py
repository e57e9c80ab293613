"""Per-span convention readers: one ReadableSpan → SpanFacts.

The convention is detected per span, never per trace: real traces mix them (an OpenInference
agent around OpenLLMetry LLM spans, a GenAI root over Vercel ``ai.*`` children). Every reader
that recognises a span adds what it knows; the most specific readers run first so that their
decisions (a role, a final answer) are not overridden by generic ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from types import MappingProxyType
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import frameworks, genai, openinference, openllmetry, vercel_ai
from otel_toolscore.conventions.base import Attributes, SpanFacts, ToolExecution
from otel_toolscore.conventions.parsing import (
    as_text,
    clean_strings,
    collect_unread,
    may_hold_surrogates,
    result_error,
    shared_memo,
    stop_collecting,
)

Reader = Callable[[ReadableSpan, Attributes, SpanFacts], None]

READERS: tuple[Reader, ...] = (
    frameworks.read_mastra,
    frameworks.read_pydantic_ai,
    frameworks.read_litellm,
    vercel_ai.read,
    openinference.read,
    openllmetry.read,
    genai.read,
)

__all__ = ["READERS", "SpanFacts", "ToolExecution", "classify", "read_span", "read_trace"]


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def read_trace(spans: Sequence[ReadableSpan]) -> list[SpanFacts]:
    """``read_span`` for each span of one trace, in order. The readers share what repeats from
    span to span (chat histories, tool definitions: ``parsing.ReadMemo``), so reading a run is
    linear in its size; the facts are the ones ``read_span`` gives for each span alone."""
    with shared_memo():
        return [read_span(s, i) for i, s in enumerate(spans)]


def _service_name(span: ReadableSpan) -> str | None:
    resource = getattr(span, "resource", None)
    value = resource.attributes.get("service.name") if resource is not None else None
    # the SDK's default for an app that never named itself says nothing about which app it was
    return str(value) if value and not str(value).startswith("unknown_service") else None


def read_span(span: ReadableSpan, order: int = 0) -> SpanFacts:
    """Read one span with every convention. Never raises: a reader failure is a recorded problem."""
    ctx = span.context
    parent = span.parent
    facts = SpanFacts(
        span_id=_hex(ctx.span_id, 16) if ctx is not None else f"#{order}",
        parent_id=_hex(parent.span_id, 16) if parent is not None else None,
        name=span.name or "",
        start=span.start_time or 0,
        end=span.end_time or span.start_time or 0,
        order=order,
    )
    raw = _lookup_attributes(span)
    # Read-only for the readers; a proxy of a plain dict answers get/in in C.
    attrs: Attributes = MappingProxyType(raw) if type(raw) is dict else (raw or {})
    unread: list[tuple[Any, str]] = []
    token = collect_unread(unread)
    try:
        for reader in READERS:
            try:
                reader(span, attrs, facts)
            except Exception as exc:  # noqa: BLE001 - one bad attribute must not lose the trace
                facts.problem(f"{reader.__module__.rsplit('.', 1)[-1]} reader failed: {type(exc).__name__}: {exc}")
    finally:
        stop_collecting(token)
    for value, why in unread:
        # Values left unread for their size or depth: named by attribute when they are one.
        key = next((k for k, v in attrs.items() if v is value), None)
        facts.problem(f"{key or 'a value inside an attribute'} was not read: {why}")
    if facts.role is None:
        facts.role = "other"
    if facts.role == "agent":  # only run spans need it (reports show which app a run came from)
        facts.service_name = _service_name(span)
    _read_failure(span, facts)
    if any(map(str.startswith, attrs, repeat(sc.TOOLSCORE_PREFIX))):
        for key, value in attrs.items():
            if key.startswith(sc.TOOLSCORE_PREFIX):
                facts.expectations[key] = value
    # A span no reader recognised gives the run only its name (in problems): look at that alone.
    if _may_hold_surrogates(span, attrs) if facts.conventions else may_hold_surrogates(facts.name):
        clean_strings(facts)
    return facts


def _may_hold_surrogates(span: ReadableSpan, attrs: Attributes) -> bool:
    """Lone surrogates (raw, or JSON-escaped in text the readers parse) anywhere in the span?
    Rare; when so, what was read is cleaned rather than every reader guarding its output.
    Most texts are ASCII without a ``\\u`` escape, which two C-level checks tell."""
    if _texts_may_hold_surrogates(attrs.values()) or not all(map(str.isascii, attrs)) and any(
        map(may_hold_surrogates, attrs)
    ):
        return True
    name = span.name or ""
    if not name.isascii() and may_hold_surrogates(name):
        return True
    status = span.status
    if status is not None and status.description and may_hold_surrogates(status.description):
        return True
    for event in span.events:
        ev = event.attributes or {}
        if may_hold_surrogates(event.name) or _texts_may_hold_surrogates(ev.values()) or any(
            map(may_hold_surrogates, ev)
        ):
            return True
    return False


def _texts_may_hold_surrogates(values: Iterable[Any]) -> bool:
    for value in values:
        if type(value) is str:
            if (not value.isascii() or "\\u" in value) and may_hold_surrogates(value):
                return True
        elif type(value) is tuple and any(type(v) is str and may_hold_surrogates(v) for v in value):
            return True
    return False


def _read_failure(span: ReadableSpan, facts: SpanFacts) -> None:
    """A failed span: status ERROR, an ``exception`` event, or (tools) an error payload."""
    error = None
    for event in span.events:
        if event.name == sc.EXCEPTION_EVENT:
            ev = event.attributes or {}
            etype, emsg = ev.get(sc.EXCEPTION_TYPE), ev.get(sc.EXCEPTION_MESSAGE)
            error = ": ".join(str(x) for x in (etype, emsg) if x) or "exception"
            break
    status = span.status
    if error is None and status is not None and status.status_code == StatusCode.ERROR:
        error = status.description or (span.attributes or {}).get(sc.ERROR_TYPE) or "error"
    if error is None and facts.tool is not None and facts.tool.has_result:
        error = result_error(facts.tool.result)
    if error is not None:
        facts.error = as_text(error)
        if facts.tool is not None and facts.tool.error is None:
            facts.tool.error = facts.error


_AGENT_TL_KINDS = frozenset({"agent", "workflow"})


def _lookup_attributes(span: ReadableSpan) -> Attributes | None:
    """The span's attributes as a mapping that is cheap to query, for a read-only look.

    ``ReadableSpan.attributes`` wraps the SDK's ``BoundedAttributes`` in a new MappingProxyType
    on every access, and ``BoundedAttributes`` answers ``get`` and ``in`` in Python, through a
    KeyError for every missing key: about 4 µs to learn that an HTTP span is not GenAI. The
    SDK keeps a plain dict inside; it is read directly when it is there (ended spans' attributes
    no longer change), else the public property is.
    """
    attrs = getattr(span, "_attributes", None)
    if type(attrs) is dict:
        return attrs
    inner = getattr(attrs, "_dict", None)
    if type(inner) is dict:
        return inner
    return span.attributes


def classify(span: ReadableSpan) -> str | None:
    """Cheap look at one ending span: "agent" (may be a run: hold it), "genai" (other GenAI
    activity), or None. A handful of dict lookups: this runs on the app's hot path."""
    attrs = _lookup_attributes(span)
    if not attrs:
        return None
    op = attrs.get(sc.GEN_AI_OPERATION_NAME)
    if op is not None:
        return "agent" if op in sc.AGENT_OPERATIONS else "genai"
    kind = attrs.get(sc.OI_SPAN_KIND)
    if kind is not None:
        if kind == sc.OI_KIND_AGENT or (kind == sc.OI_KIND_CHAIN and span.parent is None):
            return "agent"
        return "genai"
    tl = attrs.get(sc.TL_SPAN_KIND)
    if tl is not None:
        return "agent" if tl in _AGENT_TL_KINDS else "genai"
    ai_op = attrs.get(sc.AI_OPERATION_ID)
    if ai_op is not None:
        return "agent" if ai_op in sc.AI_RUN_SPANS else "genai"
    mastra = attrs.get(sc.MASTRA_SPAN_TYPE)
    if mastra is not None:
        return "agent" if mastra == "agent_run" else "genai"
    if sc.GEN_AI_SYSTEM in attrs or sc.LLM_REQUEST_TYPE in attrs or sc.GEN_AI_REQUEST_MODEL in attrs:
        return "genai"
    return None
