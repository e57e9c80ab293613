"""One detection per convention: ``read_span`` and the hot-path ``classify`` decide from the same
``Convention.detect``, so the processor, ``serve`` and ``score`` agree on which spans are runs.

* on every span of the shared fixtures, the conformance captures and the real conversations,
  and on generated mixes of every convention's attributes, ``classify`` says "agent" exactly
  when ``read_span`` gives the role "agent", and None exactly when no convention read the span;
* each convention's gate (``keys``, ``span_names``) holds: ``detect`` says None to a span that
  passes none of it, so ``classify`` may skip the conventions a span cannot belong to;
* the spans the old hand-written ``classify`` misjudged.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from otel_toolscore import read_otlp_json
from otel_toolscore import semconv as sc
from otel_toolscore.conventions import CONVENTIONS, classify, read_span
from tests.support import paths

FILES = (
    paths.traces(paths.FIXTURES) + paths.traces(paths.CAPTURES) + paths.traces(paths.REALWORLD, "tau_airline/*.json")
)
TRACE_FILES = [f for f in FILES if f.name not in ("labels.json", "stacks.json")]


def _expected(span: ReadableSpan) -> str | None:
    facts = read_span(span)
    if facts.role == "agent":
        return "agent"
    return "genai" if facts.conventions else None


def _gate_passed(convention: Any, span: ReadableSpan) -> bool:
    attrs = span.attributes or {}
    return not convention.keys.isdisjoint(attrs) or span.name.startswith(convention.span_names)


def test_classify_agrees_with_the_readers_on_every_recorded_span() -> None:
    seen = 0
    for path in TRACE_FILES:
        for span in read_otlp_json(path):
            assert classify(span) == _expected(span), f"{path.parent.name}/{path.name}: {span.name}"
            for convention in CONVENTIONS:
                if not _gate_passed(convention, span):
                    assert convention.detect(span, span.attributes or {}) is None, (convention.name, span.name)
            seen += 1
    assert seen > 2000  # the corpora were read, not skipped


# --- generated mixes ----------------------------------------------------------------------------

_VALUES: dict[str, list[Any]] = {
    sc.GEN_AI_OPERATION_NAME: ["chat", "invoke_agent", "create_agent", "execute_tool", "retrieval", "embeddings",
                               "text_completion", "generate_content", "other"],
    sc.GEN_AI_INPUT_MESSAGES: ['[{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]'],
    sc.GEN_AI_OUTPUT_MESSAGES: ['[{"role": "assistant", "parts": [{"type": "text", "content": "yo"}]}]'],
    sc.GEN_AI_TOOL_NAME: ["get_weather"],
    sc.GEN_AI_SYSTEM: ["openai"],
    sc.GEN_AI_REQUEST_MODEL: ["gpt-4o"],
    sc.GEN_AI_AGENT_NAME: ["assistant"],
    sc.OI_SPAN_KIND: ["AGENT", "CHAIN", "LLM", "TOOL", "RETRIEVER", "EMBEDDING", "agent", "llm"],
    sc.OI_METADATA: ['{"langgraph_node": "agent"}', '{"langgraph_node": "tools"}', "{}"],
    sc.TL_SPAN_KIND: ["workflow", "agent", "task", "tool", "unknown"],
    sc.LLM_REQUEST_TYPE: ["chat", "completion", "embedding"],
    "gen_ai.prompt.0.role": ["user"],
    "gen_ai.prompt.0.content": ["hi"],
    "gen_ai.completion.0.content": ["yo"],
    sc.TL_ENTITY_OUTPUT: ['{"documents": [{"page_content": "a doc"}]}', '"text"'],
    sc.AI_OPERATION_ID: ["ai.generateText", "ai.generateText.doGenerate", "ai.toolCall", "ai.embed", "other"],
    sc.MASTRA_SPAN_TYPE: ["agent_run", "model_step", "tool_call", "model_inference", "model_chunk"],
    sc.PYDANTIC_AI_FINAL_RESULT: ["done"],
    "http.method": ["GET"],
}
_NAMES = ["agent", "tools", "chat gpt-4o", "ai.generateText", "ai.toolCall", "ai.streamText.doStream",
          sc.LITELLM_REQUEST_SPAN, sc.LITELLM_RAW_REQUEST_SPAN, "GET /", "invoke_agent x"]


@st.composite
def _spans(draw: st.DrawFn) -> ReadableSpan:
    keys = draw(st.lists(st.sampled_from(sorted(_VALUES)), max_size=5, unique=True))
    attrs = {k: draw(st.sampled_from(_VALUES[k])) for k in keys}
    parent = None if draw(st.booleans()) else SpanContext(1, 2, False, TraceFlags(1))
    return ReadableSpan(
        name=draw(st.sampled_from(_NAMES)),
        context=SpanContext(1, 3, False, TraceFlags(1)),
        parent=parent,
        attributes=attrs,
    )


@settings(max_examples=400, deadline=None)
@given(span=_spans())
def test_classify_agrees_with_the_readers_on_generated_mixes(span: ReadableSpan) -> None:
    assert classify(span) == _expected(span)
    for convention in CONVENTIONS:
        if not _gate_passed(convention, span):
            assert convention.detect(span, span.attributes or {}) is None, convention.name


# --- what the hand-written classify misjudged ----------------------------------------------------


def _span(name: str, attrs: dict[str, Any], root: bool = False) -> ReadableSpan:
    parent = None if root else SpanContext(1, 2, False, TraceFlags(1))
    return ReadableSpan(name=name, context=SpanContext(1, 3, False, TraceFlags(1)), parent=parent, attributes=attrs)


def test_a_langgraph_node_tagged_agent_is_a_step_not_a_run() -> None:
    node = _span("agent", {sc.OI_SPAN_KIND: "AGENT", sc.OI_METADATA: '{"langgraph_node": "agent"}'})
    assert read_span(node).role == "other"
    assert classify(node) == "genai"


def test_a_chat_span_known_only_by_its_messages_is_genai() -> None:
    chat = _span("chat", {sc.GEN_AI_INPUT_MESSAGES: _VALUES[sc.GEN_AI_INPUT_MESSAGES][0]})
    assert read_span(chat).role == "llm"
    assert classify(chat) == "genai"


def test_a_vercel_run_known_only_by_its_name_is_an_agent() -> None:
    run = _span("ai.generateText", {"ai.model.id": "gpt-4o"}, root=True)
    assert read_span(run).role == "agent"
    assert classify(run) == "agent"


def test_a_span_of_no_convention_is_neither() -> None:
    http = _span("GET /", {"http.method": "GET", "http.route": "/"})
    assert classify(http) is None
    assert read_span(http).conventions == []


@pytest.mark.parametrize("convention", CONVENTIONS, ids=lambda c: c.name)
def test_what_a_convention_states_outright_its_detect_answers_the_same(convention: Any) -> None:
    for key, roles, default in convention.stated:
        assert key in convention.keys
        for value, role in roles.items():
            assert convention.detect(_span("x", {key: value}), {key: value}) == role, (key, value)
        if default is not None:
            odd = {key: "a value no table lists"}
            assert convention.detect(_span("x", odd), odd) == default
