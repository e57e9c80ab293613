"""A model span whose content no reader used says so in the run's problems (issue 15, item 3):
a silent miss (a new framework, a new content setting) becomes a visible one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from otel_toolscore import read_otlp_json
from otel_toolscore import semconv as sc
from otel_toolscore.conventions import read_span
from tests.support import paths

MARK = "no reader turned into messages"


def _span(attrs: dict[str, Any], events: tuple[Event, ...] = (), name: str = "chat") -> ReadableSpan:
    return ReadableSpan(name=name, context=SpanContext(1, 3, False, TraceFlags(1)),
                        parent=SpanContext(1, 2, False, TraceFlags(1)), attributes=attrs, events=events)


def _flagged(span: ReadableSpan) -> list[str]:
    return [p for p in read_span(span).problems if MARK in p]


def test_a_chat_span_with_content_in_an_unknown_attribute_is_flagged() -> None:
    span = _span({sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_REQUEST_MODEL: "m",
                  "vendor.agent.llm_request": json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})})
    (problem,) = _flagged(span)
    assert "vendor.agent.llm_request" in problem


def test_content_in_events_nobody_reads_is_flagged_with_the_event_name() -> None:
    event = Event("vendor.inference.details", {"gen_ai.input.messages": "[]", "gen_ai.output.messages": "[]"})
    (problem,) = _flagged(_span({sc.GEN_AI_OPERATION_NAME: "chat"}, (event,)))
    assert "event vendor.inference.details: gen_ai.input.messages" in problem


def test_a_model_span_no_convention_gives_a_role_is_flagged_too() -> None:
    span = _span({sc.GEN_AI_REQUEST_MODEL: "m", "vendor.prompt": "hi"}, name="call_llm")
    assert read_span(span).role == "other"
    assert _flagged(span)


def test_content_that_was_read_and_spans_without_content_are_not_flagged() -> None:
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}])
    assert not _flagged(_span({sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_INPUT_MESSAGES: messages}))
    assert not _flagged(_span({sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_REQUEST_MODEL: "m",
                               "gen_ai.usage.input_tokens": 3}))
    crash = Event(sc.EXCEPTION_EVENT, {sc.EXCEPTION_TYPE: "E", sc.EXCEPTION_MESSAGE: "message content"})
    assert not _flagged(_span({sc.GEN_AI_OPERATION_NAME: "chat"}, (crash,)))
    assert not _flagged(_span({"http.request.method": "GET", "message": "x"}, name="GET /"))


def _read_exactly() -> list[Path]:
    files = paths.traces(paths.FIXTURES) + paths.traces(paths.REALWORLD, "tau_airline/*.json")
    for path in paths.traces(paths.CAPTURES):
        pending = path.parent / "pending.json"
        reasons = json.loads(pending.read_text()) if pending.is_file() else {}
        if path.stem not in reasons and "*" not in reasons:
            files.append(path)
    return [f for f in files if f.name not in ("labels.json", "stacks.json")]


def test_no_span_of_a_trace_read_exactly_is_flagged() -> None:
    flagged = [(p.parent.name, p.name, s.name) for p in _read_exactly() for s in read_otlp_json(p) if _flagged(s)]
    assert flagged == []
