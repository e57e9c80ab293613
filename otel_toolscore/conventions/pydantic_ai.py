"""Pydantic AI: the run span's ``pydantic_ai.all_messages`` and ``final_result`` (the rest is GenAI)."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions.base import Attributes, Convention, SpanFacts, Stated

NAME = "pydantic_ai"
_KEYS = frozenset({sc.PYDANTIC_AI_ALL_MESSAGES, sc.PYDANTIC_AI_FINAL_RESULT})


def detect(span: ReadableSpan, attrs: Attributes) -> Stated | None:
    # the role is GenAI's (invoke_agent); these attributes only add the final answer
    return "" if not _KEYS.isdisjoint(attrs) else None


def read(span: ReadableSpan, attrs: Attributes, facts: SpanFacts, stated: Stated) -> None:
    facts.note(NAME)
    if facts.run_output is None and sc.PYDANTIC_AI_FINAL_RESULT in attrs:
        facts.run_output = p.as_text(attrs[sc.PYDANTIC_AI_FINAL_RESULT])


CONVENTION = Convention(NAME, _KEYS, detect, read)
