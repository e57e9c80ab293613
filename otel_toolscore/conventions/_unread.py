"""A span that clearly carries conversation content the readers did not use.

A model span whose messages no reader understood would otherwise read as a run with nothing in
it (``problems: []``): say so instead, naming where the content sits, so that a silent miss
(a new framework, a new content setting) becomes a visible one.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions.base import Attributes, SpanFacts

# a key segment that names conversation content (not its size, ids or model)
_CONTENT_SEGMENTS = frozenset({
    "messages", "message", "prompt", "prompts", "completion", "completions", "content", "contents",
    "input_messages", "output_messages", "system_instructions", "llm_request", "llm_response", "parts",
})
# keys that say a span is a model call even when no reader gave it the role "llm"
_MODEL_KEYS = (sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL, sc.OI_LLM_MODEL_NAME, sc.AI_MODEL_ID)


def _content_keys(keys: object) -> list[str]:
    out = []
    for key in keys:  # type: ignore[attr-defined]
        if isinstance(key, str) and not _CONTENT_SEGMENTS.isdisjoint(key.replace("/", ".").split(".")):
            out.append(key)
    return out


def note_unused_content(span: ReadableSpan, attrs: Attributes, facts: SpanFacts) -> None:
    """Record a problem when a model span holds content-like attributes or events but no reader
    produced a message from it."""
    if facts.input_messages or facts.output_messages:
        return
    if facts.role != "llm" and not (facts.role == "other" and any(k in attrs for k in _MODEL_KEYS)):
        return
    where = _content_keys(attrs)
    for event in span.events:
        if event.name == sc.EXCEPTION_EVENT:
            continue
        where.extend(f"event {event.name}: {key}" for key in _content_keys(event.attributes or {}))
    if where:
        shown = ", ".join(sorted(set(where))[:6])
        facts.problem(f"carries content that no reader turned into messages ({shown}); the run may be incomplete")
