"""Runs in conversations, for every convention that carries chat history (docs/design.md, "Runs in
conversations"): a run's own calls are those after its last user message; earlier turns are
context, whichever LLM span of the run carries them.

Each real fixture run is replayed as the *second* turn of a conversation: every model input of
the run gets the first turn (the same question, the assistant's tool calls with the same ids and
arguments, their results) in front of its own messages, written in that span's own convention.
The first turn asked about other cities (every city in it is replaced), so its calls differ from
the run's own in their arguments; its tool-call ids are fresh (the usual case) or the run's own
ids again (models reuse ids across turns). Either way the run must read exactly its own
calls, results, input and answer, as it does alone. The real multi-turn corpus (``tests/realworld``) checks the same on
real GPT-4o conversations.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from otel_toolscore import build_trajectories, read_otlp_json
from otel_toolscore.assemble import assemble_trace
from otel_toolscore.trajectory import Trajectory
from tests.support import paths

FIXTURES = (paths.traces(paths.FIXTURES, "*/correct_single.json")
            + paths.traces(paths.FIXTURES, "*/parallel_tools.json"))

#: attributes holding a model input as one JSON list of messages
_JSON_INPUTS = ("gen_ai.input.messages", "ai.prompt.messages", "mastra.model_step.input")
#: attributes holding a model input flattened by message index: (prefix, what follows the index)
_FLAT_INPUT = re.compile(r"^(gen_ai\.prompt|llm\.input_messages)\.(\d+)\.(.*)$")


def _spans(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def _string(attr: dict[str, Any]) -> str | None:
    return attr["value"].get("stringValue")


def _is_system(role: Any) -> bool:
    return role in ("system", "developer")


def _json_history(span: dict[str, Any]) -> tuple[str, list[Any]] | None:
    for attr in span["attributes"]:
        if attr["key"] in _JSON_INPUTS and _string(attr):
            value = json.loads(_string(attr))
            if isinstance(value, list):
                return attr["key"], value
    return None


def _flat_history(span: dict[str, Any]) -> tuple[str, dict[int, list[tuple[str, Any]]]] | None:
    """prefix, and index → [(rest of the key, value)] of a flattened model input."""
    prefix = None
    messages: dict[int, list[tuple[str, Any]]] = {}
    for attr in span["attributes"]:
        m = _FLAT_INPUT.match(attr["key"])
        if m:
            prefix = m.group(1)
            messages.setdefault(int(m.group(2)), []).append((m.group(3), attr["value"]))
    return (prefix, messages) if prefix else None


def _flat_role(fields: list[tuple[str, Any]]) -> Any:
    for rest, value in fields:
        if rest in ("role", "message.role"):
            return value.get("stringValue")
    return None


def _history_length(span: dict[str, Any]) -> int:
    if (j := _json_history(span)) is not None:
        return len(j[1])
    if (f := _flat_history(span)) is not None:
        return len(f[1])
    return 0


_ID_KEYS = frozenset({"id", "tool_call_id", "toolCallId", "call_id"})


def _fresh_ids(value: Any) -> Any:
    """A first-turn message with its tool-call ids renamed (``call_1`` → ``call_1_t1``)."""
    if isinstance(value, dict):
        if "stringValue" in value and len(value) == 1:
            return value
        return {k: (v + "_t1" if k in _ID_KEYS and isinstance(v, str) else _fresh_ids(v)) for k, v in value.items()}
    if isinstance(value, list):
        if value and isinstance(value[0], tuple):  # flattened fields: (rest of the key, value)
            return [(k, {"stringValue": v["stringValue"] + "_t1"} if k.rsplit(".", 1)[-1] in _ID_KEYS
                     and "stringValue" in v else v) for k, v in value]
        return [_fresh_ids(v) for v in value]
    return value


_OTHER_CITIES = {"New York": "Boston", "London": "Madrid", "Berlin": "Rome", "Paris": "Vienna"}


def _other_cities(messages: Any) -> Any:
    text = json.dumps(messages)
    for city, other in _OTHER_CITIES.items():
        text = text.replace(city, other)
    return json.loads(text, object_pairs_hook=lambda pairs: dict(pairs)) if text else messages


def as_second_turn(doc: dict[str, Any], fresh_ids: bool = True) -> dict[str, Any]:
    """The trace again, as the second turn of a conversation whose first turn was this run."""
    doc = copy.deepcopy(doc)
    spans = _spans(doc)
    fullest = max(spans, key=_history_length)
    turn1_json = _json_history(fullest)
    turn1_flat = _flat_history(fullest)
    assert turn1_json or turn1_flat, "no model input with history in this trace"
    for span in spans:
        if (j := _json_history(span)) is not None and turn1_json is not None:
            key, own = j
            earlier = [m for m in turn1_json[1] if not (isinstance(m, dict) and _is_system(m.get("role")))]
            earlier = _other_cities(_fresh_ids(earlier) if fresh_ids else earlier)
            system = [m for m in own if isinstance(m, dict) and _is_system(m.get("role"))]
            rest = [m for m in own if not (isinstance(m, dict) and _is_system(m.get("role")))]
            for attr in span["attributes"]:
                if attr["key"] == key:
                    attr["value"] = {"stringValue": json.dumps(system + earlier + rest)}
        elif (f := _flat_history(span)) is not None and turn1_flat is not None:
            prefix, own_by_index = f
            earlier = [v for _, v in sorted(turn1_flat[1].items()) if not _is_system(_flat_role(v))]
            earlier = [_fresh_ids(v) for v in earlier] if fresh_ids else earlier
            earlier = [[(k, v) for k, v in _other_cities([list(f) for f in fields])] for fields in earlier]
            own = [v for _, v in sorted(own_by_index.items())]
            system = [v for v in own if _is_system(_flat_role(v))]
            rest = [v for v in own if not _is_system(_flat_role(v))]
            span["attributes"] = [a for a in span["attributes"] if not _FLAT_INPUT.match(a["key"])]
            for i, fields in enumerate(system + earlier + rest):
                for tail, value in fields:
                    span["attributes"].append({"key": f"{prefix}.{i}.{tail}", "value": value})
    return doc


def _top_run(spans: Any) -> Trajectory:
    runs = [t for t in build_trajectories(spans) if not t.nested]
    assert len(runs) == 1, [(t.agent_name, t.span_id) for t in runs]
    return runs[0]


def _calls(t: Trajectory) -> list[tuple[Any, ...]]:
    return [(c.name, json.dumps(c.arguments, sort_keys=True), json.dumps(c.result, sort_keys=True, default=str),
             c.error) for c in t.tool_calls]


@pytest.mark.parametrize("fresh_ids", [True, False], ids=["fresh_ids", "reused_ids"])
@pytest.mark.parametrize("path", FIXTURES, ids=paths.trace_id)
def test_a_second_turn_reads_only_its_own_calls(path: Path, fresh_ids: bool, tmp_path: Path) -> None:
    alone = _top_run(read_otlp_json(path))
    second = tmp_path / "second_turn.json"
    doc = as_second_turn(json.loads(path.read_text()), fresh_ids)
    second.write_text(json.dumps(doc))
    spans = read_otlp_json(second)
    # the transformation really put the first turn into the model inputs
    assert sum(_history_length(s) for s in _spans(doc)) > sum(
        _history_length(s) for s in _spans(json.loads(path.read_text())))
    in_turn = _top_run(spans)
    assert alone.tool_calls, "the fixture has calls"
    assert any(city in json.dumps(doc) for city in _OTHER_CITIES.values()), "the first turn differs from the run"
    assert _calls(in_turn) == _calls(alone)
    assert in_turn.input == alone.input
    assert in_turn.output == alone.output


# --- repeated tool-call ids, spelled out ---------------------------------------------------------


def _genai_span(span_id: int, start: int, inputs: list[Any], outputs: list[Any]) -> Any:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    ctx = SpanContext(0xABC, span_id, is_remote=False, trace_flags=TraceFlags(1))
    parent = SpanContext(0xABC, 1, is_remote=False)
    return ReadableSpan(
        name="chat gpt-4o", context=ctx, parent=parent, start_time=start, end_time=start + 10,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(inputs),
                    "gen_ai.output.messages": json.dumps(outputs)},
    )


def _agent_span() -> Any:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    ctx = SpanContext(0xABC, 1, is_remote=False, trace_flags=TraceFlags(1))
    return ReadableSpan(name="invoke_agent bot", context=ctx, parent=None, start_time=0, end_time=1000,
                        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bot"})


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def _asst_calls(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "tool_call", "id": i, "name": n, "arguments": a}
                                           for i, n, a in calls]}


def _results(*results: tuple[str, Any]) -> dict[str, Any]:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": i, "response": r} for i, r in results]}


def _answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "text", "content": text}], "finish_reason": "stop"}


def test_one_id_for_two_different_calls_in_one_response_pairs_results_by_position() -> None:
    """GPT-4o once sent two different calls with one id: two calls, each with its own result."""
    ask = _user("Weather in Oslo and Paris?")
    calls = _asst_calls(("call_X", "get_weather", {"city": "Oslo"}), ("call_X", "get_weather", {"city": "Paris"}))
    results = _results(("call_X", {"temp": "5°C"}), ("call_X", {"temp": "18°C"}))
    spans = [
        _agent_span(),
        _genai_span(2, 10, [ask], [calls]),
        _genai_span(3, 30, [ask, calls, results], [_answer("Oslo 5°C, Paris 18°C.")]),
    ]
    (run,) = assemble_trace("abc", spans)
    assert [(c.name, c.arguments, c.result) for c in run.tool_calls] == [
        ("get_weather", {"city": "Oslo"}, {"temp": "5°C"}),
        ("get_weather", {"city": "Paris"}, {"temp": "18°C"}),
    ]


def test_an_id_reused_in_a_later_response_is_another_call_with_its_own_result() -> None:
    ask = _user("Book it, then check the booking.")
    first = _asst_calls(("call_R", "book", {"flight": "HAT1"}))
    first_result = _results(("call_R", {"status": "booked", "id": "B1"}))
    second = _asst_calls(("call_R", "get_booking", {"id": "B1"}))
    second_result = _results(("call_R", {"id": "B1", "flight": "HAT1"}))
    spans = [
        _agent_span(),
        _genai_span(2, 10, [ask], [first]),
        _genai_span(3, 30, [ask, first, first_result], [second]),
        _genai_span(4, 50, [ask, first, first_result, second, second_result], [_answer("Booked B1 on HAT1.")]),
    ]
    (run,) = assemble_trace("abc", spans)
    assert [(c.name, c.result) for c in run.tool_calls] == [
        ("book", {"status": "booked", "id": "B1"}),
        ("get_booking", {"id": "B1", "flight": "HAT1"}),
    ]


def test_the_same_call_repeated_in_two_responses_is_two_calls() -> None:
    """A model that repeats a call word for word, id included (GPT-4o did, with `think`)."""
    ask = _user("Pay with the certificate.")
    think = _asst_calls(("call_T", "think", {"thought": "check totals"}))
    empty = _results(("call_T", ""))
    spans = [
        _agent_span(),
        _genai_span(2, 10, [ask], [think]),
        _genai_span(3, 30, [ask, think, empty], [think]),
        _genai_span(4, 50, [ask, think, empty, think, empty], [_answer("Done.")]),
    ]
    (run,) = assemble_trace("abc", spans)
    assert [c.name for c in run.tool_calls] == ["think", "think"]


def test_earlier_turns_calls_in_later_llm_spans_are_context() -> None:
    turn1 = [_user("Weather in Oslo?"), _asst_calls(("call_1", "get_weather", {"city": "Oslo"})),
             _results(("call_1", {"temp": "5°C"})), _answer("5°C in Oslo.")]
    ask = _user("And in Paris?")
    call = _asst_calls(("call_1", "get_weather", {"city": "Paris"}))  # the id reused across turns
    result = _results(("call_1", {"temp": "18°C"}))
    spans = [
        _agent_span(),
        _genai_span(2, 10, [*turn1, ask], [call]),
        _genai_span(3, 30, [*turn1, ask, call, result], [_answer("18°C in Paris.")]),
    ]
    (run,) = assemble_trace("abc", spans)
    assert [(c.arguments, c.result) for c in run.tool_calls] == [({"city": "Paris"}, {"temp": "18°C"})]
    assert run.input == "And in Paris?" and run.output == "18°C in Paris."
