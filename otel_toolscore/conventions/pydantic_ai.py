"""Pydantic AI: the run span's ``pydantic_ai.all_messages`` and ``final_result``, and the output
tools a chat span's ``model_request_parameters`` names (the rest is GenAI)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions.base import Attributes, Convention, SpanFacts, Stated

NAME = "pydantic_ai"
_KEYS = frozenset({sc.PYDANTIC_AI_ALL_MESSAGES, sc.PYDANTIC_AI_FINAL_RESULT, sc.PYDANTIC_AI_MODEL_REQUEST_PARAMETERS})


def detect(span: ReadableSpan, attrs: Attributes) -> Stated | None:
    # the role is GenAI's (invoke_agent); these attributes only add the final answer
    return "" if not _KEYS.isdisjoint(attrs) else None


def read(span: ReadableSpan, attrs: Attributes, facts: SpanFacts, stated: Stated) -> None:
    facts.note(NAME)
    if facts.run_output is None and sc.PYDANTIC_AI_FINAL_RESULT in attrs:
        facts.run_output = p.as_text(attrs[sc.PYDANTIC_AI_FINAL_RESULT])
    if facts.answer_tools is None and sc.PYDANTIC_AI_MODEL_REQUEST_PARAMETERS in attrs:
        names = p.memoized("pydantic_ai_output_tools", attrs[sc.PYDANTIC_AI_MODEL_REQUEST_PARAMETERS], _output_tools)
        facts.answer_tools = list(names) if names else None


def _output_tools(value: Any) -> tuple[str, ...]:
    """The names of the request's output tools: the tools through which the model gives the run's
    structured answer (``ToolOutput``, named ``final_result`` unless the app names them)."""
    params = p.loads(value)
    tools = params.get(sc.PYDANTIC_AI_OUTPUT_TOOLS) if isinstance(params, dict) else None
    if not isinstance(tools, list):
        return ()
    return tuple(str(t["name"]) for t in tools if isinstance(t, dict) and t.get("name"))


CONVENTION = Convention(NAME, _KEYS, detect, read)
