"""The performance shortcuts give exactly what the plain paths give.

* ``ReadMemo`` / ``read_trace``: a chat history that extends an earlier one is parsed only in its
  new part; the facts must equal ``read_span`` on each span alone.
* ``classify`` / ``read_span`` read the SDK's attribute dict directly; the answers must equal
  those for the same attributes in a plain mapping.
* ``extract_facts`` skips patterns whose required characters or guards (runs every match holds)
  are missing; the facts must equal those of running every pattern.
* tool_results' claim patterns (asked only whether a text matches) are written for a fast scan;
  they must match exactly the texts their plain forms (``tests/support/claims_oracle``) match,
  and a response's claims (the success pattern behind a word pre-check) with them.
* the fact patterns that begin with a character class, and the units grouped by first letter,
  must match what their plain forms (``tests/support/facts_oracle``) match, group for group.
* a result's leaves are walked once for the sources and the salient values: the lazy walk of
  the salient values must give the leaves of ``_grounding.walk``.
* ``Engine.score`` skips reading traces that no scorer samples.
* the processor's hold deadlines (a queue in hold order, released early by at most a small
  slack, never late) still release a held span whose scoring hangs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags

from otel_toolscore import read_otlp_json
from otel_toolscore.conventions import _memo as memo
from otel_toolscore.conventions import classify, read_span, read_trace
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions.genai import _convert_messages, _without_finish_reason
from otel_toolscore.scorers import _facts, _grounding
from otel_toolscore.scorers import tool_results as tr
from otel_toolscore.scorers.base import Score, Scorer
from tests.support import claims_oracle, facts_oracle, paths

FIXTURES = paths.traces(paths.FIXTURES) + paths.traces(paths.CAPTURES)
TRACE_FILES = [f for f in FIXTURES if f.name not in ("labels.json", "stacks.json")]


def _facts_of(facts: list[Any]) -> list[dict[str, Any]]:
    return [dataclasses.asdict(f) for f in facts]


# --- ReadMemo and read_trace -----------------------------------------------------------------


@pytest.mark.parametrize("path", TRACE_FILES, ids=paths.trace_id)
def test_read_trace_equals_reading_each_span_alone(path: Path) -> None:
    spans = read_otlp_json(path)
    assert _facts_of(read_trace(spans)) == _facts_of([read_span(s, i) for i, s in enumerate(spans)])
    # in any order (OTLP files need not list spans in the order they ended)
    rev = list(reversed(spans))
    assert _facts_of(read_trace(rev)) == _facts_of([read_span(s, i) for i, s in enumerate(rev)])


_part = st.fixed_dictionaries({"type": st.just("text"), "content": st.text(max_size=20)})
_call = st.fixed_dictionaries({
    "type": st.just("tool_call"), "id": st.text("abc123", min_size=1, max_size=6),
    "name": st.sampled_from(["get_weather", "send_email"]),
    "arguments": st.dictionaries(st.text("xyz", max_size=3), st.integers() | st.text(max_size=5), max_size=2),
})
_message = st.fixed_dictionaries({
    "role": st.sampled_from(["system", "user", "assistant", "tool"]),
    "parts": st.lists(_part | _call, max_size=3),
}) | st.text(max_size=10) | st.integers() | st.none()
_separators = st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")])


def _plain(text: str) -> list[Any] | None:
    ok, parsed = p.try_loads(text)
    return _convert_messages(parsed) if ok and isinstance(parsed, list) else None


@settings(max_examples=300, deadline=None)
@given(history=st.lists(_message, max_size=8), cuts=st.lists(st.integers(0, 8), max_size=4),
       separators=_separators, indent=st.sampled_from([None, 1]))
def test_growing_histories_parse_as_a_full_parse_does(history: list[Any], cuts: list[int],
                                                       separators: tuple[str, str], indent: int | None) -> None:
    texts = [json.dumps(history[:c], separators=separators, indent=indent) for c in sorted(cuts)]
    texts.append(json.dumps(history, separators=separators, indent=indent))
    memo = p.ReadMemo()
    for text in texts:
        got = memo.json_list("k", text.strip(), _convert_messages)
        assert got == _plain(text)


@settings(max_examples=300, deadline=None)
@given(history=st.lists(_message, min_size=1, max_size=8), cuts=st.lists(st.integers(1, 8), min_size=1, max_size=4),
       more=st.lists(_message, max_size=2), separators=_separators, indent=st.sampled_from([None, 1]),
       echoed=st.booleans())
def test_inputs_that_start_their_new_part_with_an_earlier_output_parse_as_a_full_parse_does(
    history: list[Any], cuts: list[int], more: list[Any], separators: tuple[str, str], indent: int | None,
    echoed: bool,
) -> None:
    # each model call's output, then the next call's input: the history so far, that output
    # (echoed as it was written, or not) and maybe more turns
    memo = p.ReadMemo()
    done = 0
    for cut in sorted(set(cuts)):
        if cut >= len(history):
            break
        output = history[done:cut] if done else history[:cut]
        out_text = json.dumps(output, separators=separators, indent=indent)
        assert memo.json_list("out", out_text.strip(), _convert_messages) == _plain(out_text)
        rest = json.dumps(output if echoed else [*output, *more], separators=separators, indent=indent)
        in_text = json.dumps(history[:done] if done else [], separators=separators, indent=indent)
        joined = rest if not done else in_text[:-1].rstrip() + "," + rest.strip()[1:]
        assert memo.json_list("in", joined.strip(), _convert_messages, continues="out") == _plain(joined)
        done = cut


_GENAI_CONTINUES = p.Continues("out", "finish_reason", _without_finish_reason)
_finish = st.sampled_from(["stop", "tool_calls", "finish_reason", 'a"}', "\u00e9\ud83d\ude00", None])
_text = st.text(max_size=12) | st.sampled_from(['"finish_reason": "stop"}', ',"finish_reason":"x"}', "\u2028"])


def _dumps(value: Any, separators: tuple[str, str], indent: int | None, ascii_only: bool) -> str:
    return json.dumps(value, separators=separators, indent=indent, ensure_ascii=ascii_only)


@settings(max_examples=400, deadline=None)
@given(
    calls=st.lists(st.tuples(st.lists(_message, min_size=1, max_size=2), _finish, st.lists(_message, max_size=2),
                             st.booleans(), st.booleans(), _text),
                   min_size=1, max_size=4),
    first=st.lists(_message, max_size=3), separators=_separators, indent=st.sampled_from([None, 1]),
    ascii_only=st.booleans(),
)
def test_histories_that_repeat_outputs_without_their_finish_reason_parse_as_a_full_parse_does(
    calls: list[tuple[list[Any], str | None, list[Any], bool, bool, str]], first: list[Any],
    separators: tuple[str, str], indent: int | None, ascii_only: bool,
) -> None:
    """Model call after model call (as the GenAI semconv writes them): the output messages with
    a ``finish_reason`` (maybe twice, maybe not last, maybe text that looks like one), then an
    input that repeats the history, that output without it (or as written) and maybe more; whitespace
    variants and escaped unicode. Every list read through the memo equals a full parse."""
    memo = p.ReadMemo()
    history: list[Any] = list(first)
    text = _dumps(history, separators, indent, ascii_only)
    assert memo.json_list("in", text.strip(), _convert_messages, _GENAI_CONTINUES) == _plain(text)
    for output, finish, more, dropped, twice, content in calls:
        output = [m if isinstance(m, dict) else {"role": "assistant", "content": m} for m in output]
        last = dict(output[-1])
        if twice:
            last = {"finish_reason": "other", **last, "content": content}
        last["finish_reason"] = finish
        written = [*output[:-1], last]
        out_text = _dumps(written, separators, indent, ascii_only)
        assert memo.json_list("out", out_text.strip(), _convert_messages) == _plain(out_text)
        echoed = output if dropped else written
        if twice and dropped:
            echoed = [*output[:-1], {k: v for k, v in last.items() if k != "finish_reason"}]
        history = [*history, *echoed, *more]
        text = _dumps(history, separators, indent, ascii_only)
        assert memo.json_list("in", text.strip(), _convert_messages, _GENAI_CONTINUES) == _plain(text)


@pytest.mark.parametrize("output, later", [
    # the output's message again without its finish_reason, then a tool result
    ('[{"role":"assistant","content":"x","finish_reason":"stop"}]',
     '[{"role":"user","content":"hi"},{"role":"assistant","content":"x"},{"role":"user","content":"y"}]'),
    # a prefix of the output's message that is not a message boundary
    ('[{"role":"assistant","content":"x","finish_reason":"stop"}]',
     '[{"role":"user","content":"hi"},{"role":"assistant","content":"x"'
     ',"extra":1}]'),
    ('[{"role":"assistant","content":"x","finish_reason":"stop"}]',
     '[{"role":"user","content":"hi"},{"role":"assistant","content":"xy"}]'),
    # finish_reason named twice: the object without the last keeps the first
    ('[{"role":"assistant","finish_reason":"a","content":"x","finish_reason":"stop"}]',
     '[{"role":"user","content":"hi"},{"role":"assistant","finish_reason":"a","content":"x"}]'),
    # the key inside a string, not a member
    ('[{"role":"assistant","content":"a, \\"finish_reason\\": \\"stop\\"}"}]',
     '[{"role":"user","content":"hi"},{"role":"assistant","content":"a}]'),
    # finish_reason inside a part, not the message's
    ('[{"role":"assistant","parts":[{"type":"text","content":"x","finish_reason":"stop"}]}]',
     '[{"role":"user","content":"hi"},{"role":"assistant","parts":[{"type":"text","content":"x"}]}]'),
    ('[{"role":"assistant","content":"x","finish_reason":"stop"}]',
     '[{"role":"user","content":"hi"} , { "role":"assistant","content":"x" } ]'),
])
def test_edge_cases_of_outputs_repeated_without_their_finish_reason(output: str, later: str) -> None:
    with p.shared_memo():
        p.json_list_of('[{"role":"user","content":"hi"}]', "in", _convert_messages, _GENAI_CONTINUES)
        assert p.json_list_of(output, "out", _convert_messages) == _plain(output)
        assert p.json_list_of(later, "in", _convert_messages, _GENAI_CONTINUES) == _plain(later)


def test_an_output_repeated_without_its_finish_reason_is_not_read_again() -> None:
    first = '[{"role":"user","content":"hi"}]'
    output = ('[{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"f","arguments":{"a":1}}],'
              '"finish_reason":"tool_calls"}]')
    later = (first[:-1] + ',{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"f","arguments":{"a":1}}]}'
             ',{"role":"tool","parts":[{"type":"tool_call_response","id":"c1"}]}]')
    with p.shared_memo():
        p.json_list_of(first, "in", _convert_messages, _GENAI_CONTINUES)
        out = p.json_list_of(output, "out", _convert_messages)
        got = p.json_list_of(later, "in", _convert_messages, _GENAI_CONTINUES)
    assert got == _plain(later)
    assert out is not None and got is not None and got[1] is not out[0] and got[1].finish_reason is None
    assert got[1].tool_calls[0] is out[0].tool_calls[0]  # read once, with the output


def test_an_input_that_starts_its_new_part_with_the_earlier_output_shares_its_messages() -> None:
    first = '[{"role":"user","content":"hi"}]'
    output = '[{"role":"assistant","parts":[{"type":"tool_call","id":"c1","name":"f","arguments":{"a":1}}]}]'
    later = first[:-1] + "," + output[1:-1] + ',{"role":"tool","parts":[{"type":"tool_call_response","id":"c1"}]}]'
    with p.shared_memo():
        p.json_list_of(first, "in", _convert_messages, "out")
        out = p.json_list_of(output, "out", _convert_messages)
        got = p.json_list_of(later, "in", _convert_messages, "out")
    assert got == _plain(later)
    assert out is not None and got is not None and got[1] is out[0]  # read once, with the output


@pytest.mark.parametrize("earlier, later", [
    ('[{"role":"user","content":"a"}]', '[{"role":"user","content":"a"},]'),  # trailing comma: not JSON
    ('[{"role":"user","content":"a"}]', '[{"role":"user","content":"a"}, ]'),
    ('[{"role":"user","content":"a"}]', '[{"role":"user","content":"a"}]x'),
    ('[{"role":"user","content":"a"}]', '[{"role":"user","content":"a"},\x0c{"role":"user"}]'),  # not JSON space
    ("[1]", "[12]"),
    ("[1]", "[1.5]"),
    ("[]", '[,{"role":"user"}]'),
    ('["a"]', '["a","b"]'),
    ('["a"]', '["a"\n,\n"b"]'),
    ("[{'role': 'user'}]", "[{'role': 'user'}, {'role': 'assistant'}]"),  # Python reprs: not JSON
])
def test_edge_cases_of_extension(earlier: str, later: str) -> None:
    with p.shared_memo():
        got = [p.json_list_of(t, "k", _convert_messages) for t in (earlier, later)]
    assert got == [_plain(earlier), _plain(later)]


@settings(max_examples=200, deadline=None)
@given(turns=st.lists(st.sampled_from(["a" * 700, "b\ud83d", "\udc00c", "\ud83d\ude00", "d\u00e9", "x"]),
                      min_size=1, max_size=8),
       ascii_only=st.booleans())
def test_a_growing_history_is_searched_for_surrogates_as_a_whole_text_is(turns: list[str], ascii_only: bool) -> None:
    # each text extends the one before (searched only in what it adds, once it is long); a turn
    # may add a lone surrogate
    turns = ["a" * 700, "a" * 700, *turns]
    with p.shared_memo():
        for n in range(1, len(turns) + 1):
            text = json.dumps([{"role": "user", "content": t} for t in turns[:n]], ensure_ascii=ascii_only)
            p.json_list_of(text, "in", _convert_messages)
            assert p.text_may_hold_surrogates(text) == p.may_hold_surrogates(text)


@settings(max_examples=100, deadline=None)
@given(roles=st.lists(st.sampled_from(["system", "developer", "user", "assistant", "tool"]), min_size=1, max_size=60),
       step=st.integers(min_value=1, max_value=9), change_copy=st.booleans())
def test_a_growing_historys_system_prompt_is_the_one_the_whole_history_gives(
        roles: list[str], step: int, change_copy: bool) -> None:
    # each text extends the one before; the system prompt of a long one is worked out from what
    # the list it extends gave and what it adds (ReadMemo.derived), or whole when a reader
    # changed the list it was given
    # (a short list is searched at once: the first 17 messages make every list a long one)
    history = [{"role": role, "content": f"{role} {i}"} for i, role in enumerate(["system", *["user"] * 16, *roles])]
    with p.shared_memo():
        for n in range(17, len(history) + step, step):
            messages = p.json_list_of(json.dumps(history[:n]), "in", _convert_messages)
            assert messages is not None
            if change_copy:
                messages.append(p.message_from({"role": "system", "content": "added"}))
            texts = [m.content for m in messages if m.role in ("system", "developer") and m.content]
            assert p.system_from_messages(messages) == ("\n".join(texts) if texts else None)


def _chat_span(trace_id: int, span_id: int, history: str, output: str = "[]") -> ReadableSpan:
    return ReadableSpan(name="chat m", context=SpanContext(trace_id, span_id, False, TraceFlags(1)),
                        attributes={"gen_ai.operation.name": "chat", "gen_ai.input.messages": history,
                                    "gen_ai.output.messages": output})


def test_a_turn_that_repeats_the_history_an_earlier_trace_read_reads_as_each_span_alone() -> None:
    # a conversation, a trace per turn: each turn's history repeats every turn before
    p.forget_earlier_traces()
    history: list[Any] = [{"role": "system", "content": "policy " * 700}]
    read: list[list[Any]] = []
    for turn in range(4):
        history.append({"role": "user", "content": f"question {turn} \u00e9"})
        output = [{"role": "assistant", "parts": [{"type": "text", "content": f"answer {turn}"}],
                   "finish_reason": "stop"}]
        spans = [_chat_span(turn + 1, 2, json.dumps(history), json.dumps(output))]
        history.append({"role": "assistant", "parts": output[0]["parts"]})
        spans.append(_chat_span(turn + 1, 3, json.dumps(history)))
        facts = read_trace(spans)
        assert _facts_of(facts) == _facts_of([read_span(s, i) for i, s in enumerate(spans)])
        read.append(facts[0].input_messages or [])
    # the later turns took the earlier turns' messages as read
    assert read[3][0] is read[0][0] and read[3][2] is read[1][2]


def test_what_earlier_traces_read_is_kept_within_bounds() -> None:
    p.forget_earlier_traces()
    for i in range(memo._EARLIER_HEADS + 50):
        text = json.dumps([{"role": "user", "content": f"{i} " + "x" * memo._EARLIER_MIN_CHARS}])
        read_trace([_chat_span(i + 1, 2, text)])
    earlier = memo._EARLIER
    assert len(earlier._heads) == memo._EARLIER_HEADS
    assert earlier._chars == sum(len(e.text) for kept in earlier._heads.values() for e in kept)
    assert earlier._chars <= memo._EARLIER_CHARS
    p.forget_earlier_traces()


def _defs_span(trace_id: int, definitions: str) -> ReadableSpan:
    return ReadableSpan(name="chat m", context=SpanContext(trace_id, 2, False, TraceFlags(1)),
                        attributes={"gen_ai.operation.name": "chat", "gen_ai.tool.definitions": definitions})


def test_tool_definitions_an_earlier_trace_read_are_not_read_again() -> None:
    p.forget_earlier_traces()
    text = json.dumps([{"type": "function", "name": "f", "parameters": {"type": "object"}}])
    first, second = (read_trace([_defs_span(t, text)])[0] for t in (1, 2))
    assert _facts_of([second]) == _facts_of([read_span(_defs_span(2, text))])
    assert first.tool_definitions and second.tool_definitions
    assert second.tool_definitions[0] is first.tool_definitions[0]
    # a text that may hold a lone surrogate is read again: what it gives is cleaned in place
    odd = json.dumps([{"type": "function", "name": "g", "description": "\ud800"}])
    first, second = (read_trace([_defs_span(t, odd)])[0] for t in (3, 4))
    assert first.tool_definitions and second.tool_definitions
    assert second.tool_definitions[0] is not first.tool_definitions[0]
    assert second.tool_definitions[0].description == "\ufffd"


class _Untouchable(dict):  # type: ignore[type-arg]
    def clear(self) -> None:
        raise AssertionError("a value that holds no lone surrogate was changed")


class _UntouchableList(list):  # type: ignore[type-arg]
    def __setitem__(self, index: Any, value: Any) -> None:
        raise AssertionError("a value that holds no lone surrogate was changed")


def test_cleaning_leaves_what_holds_no_lone_surrogate_untouched() -> None:
    # (what the readers share between spans and traces may be read in another thread meanwhile)
    shared = _Untouchable({"a": _UntouchableList(["b", _Untouchable({"c": "d"})])})
    value = {"shared": shared, "odd": ["x\ud800"]}
    assert p.clean_strings(value) == {"shared": {"a": ["b", {"c": "d"}]}, "odd": ["x\ufffd"]}
    assert value["shared"] is shared


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_starts_with_nothing_kept_and_free_locks() -> None:
    p.forget_earlier_traces()
    text = json.dumps([{"type": "function", "name": "f"}])
    read_trace([_defs_span(1, text)])
    with memo._EARLIER._lock, memo._EARLIER_VALUES._lock:  # as if another thread were reading
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            fresh = not memo._EARLIER._lock.locked() and not memo._EARLIER_VALUES._lock.locked() \
                and not memo._EARLIER_VALUES._values
            os._exit(0 if fresh else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def test_a_history_that_left_a_value_unread_is_noted_for_each_span_that_holds_it() -> None:
    deep: Any = 1
    for _ in range(p.MAX_DEPTH + 5):
        deep = [deep]
    call = {"type": "tool_call", "id": "c1", "name": "f", "arguments": {"a": deep}}
    history: list[Any] = [{"role": "user", "content": "hi"}, {"role": "assistant", "parts": [call]}]
    first = json.dumps(history)
    later = json.dumps([*history, {"role": "user", "content": "again"}])
    spans = [_chat_span(1, 2, first), _chat_span(1, 3, later)]
    facts = read_trace(spans)
    assert _facts_of(facts) == _facts_of([read_span(s, i) for i, s in enumerate(spans)])
    assert all(any("was not read" in problem for problem in f.problems) for f in facts)


def _tool_span(span_id: int, result: str) -> ReadableSpan:
    return ReadableSpan(name="execute_tool f", context=SpanContext(1, span_id, False, TraceFlags(1)),
                        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f",
                                    "gen_ai.tool.call.result": result})


def test_a_result_text_met_again_in_a_trace_is_read_once() -> None:
    text = '{"temperature": 21, "rows": [1, 2]}'
    first, second = read_trace([_tool_span(2, text), _tool_span(3, text)])
    assert first.tool is not None and second.tool is not None
    assert second.tool.result is first.tool.result == {"temperature": 21, "rows": [1, 2]}


def test_a_result_text_left_unread_is_named_on_every_span_that_holds_it() -> None:
    deep = "[" * (p.MAX_DEPTH + 5) + "]" * (p.MAX_DEPTH + 5)
    facts = read_trace([_tool_span(2, deep), _tool_span(3, deep)])
    alone = [read_span(_tool_span(2, deep)), read_span(_tool_span(3, deep), 1)]
    assert _facts_of(facts) == _facts_of(alone)
    for f in facts:
        assert any("gen_ai.tool.call.result was not read" in problem for problem in f.problems)


# --- attributes read from the SDK's dict ----------------------------------------------------------

ATTRIBUTE_SETS: list[dict[str, Any]] = [
    {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a", "toolscore.expected_tool": "x"},
    {"gen_ai.operation.name": "chat", "gen_ai.input.messages": '[{"role":"user","content":"hi"}]'},
    {"openinference.span.kind": "AGENT"},
    {"openinference.span.kind": "CHAIN"},
    {"traceloop.span.kind": "workflow"},
    {"ai.operationId": "ai.generateText"},
    {"mastra.span.type": "agent_run"},
    {"gen_ai.system": "openai"},
    {"http.request.method": "GET", "url.full": "http://x"},
    {},
]


@pytest.mark.parametrize("attrs", ATTRIBUTE_SETS)
@pytest.mark.parametrize("root", [True, False])
def test_sdk_spans_read_as_plain_spans(attrs: dict[str, Any], root: bool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    if root:
        tracer.start_span("s", attributes=attrs).end()
    else:
        with tracer.start_as_current_span("parent"):
            tracer.start_span("s", attributes=attrs).end()
    sdk_span = next(s for s in exporter.get_finished_spans() if s.name == "s")
    assert isinstance(sdk_span._attributes, BoundedAttributes)  # the shortcut is taken
    plain = ReadableSpan(name="s", context=sdk_span.context, parent=sdk_span.parent, attributes=dict(attrs),
                         start_time=sdk_span.start_time, end_time=sdk_span.end_time)
    assert classify(sdk_span) == classify(plain)
    assert dataclasses.asdict(read_span(sdk_span)) == dataclasses.asdict(read_span(plain))


def test_spans_without_sdk_internals_use_the_public_attributes() -> None:
    class Foreign(ReadableSpan):
        @property
        def attributes(self) -> Any:  # what a non-SDK span type might expose
            return {"gen_ai.operation.name": "invoke_agent"}

    span = Foreign(name="x", context=SpanContext(1, 2, False, TraceFlags(1)))
    span._attributes = None  # type: ignore[assignment]
    assert classify(span) == "agent"


# --- extract_facts guards ----------------------------------------------------------------------


_PIECES = list("0123456789 ,.:;/-_#@$€£¥₹%'’\"()[]{}abcdefjmnprstuyACDEFJMPSUW°º\u017f\u212a\u0130\u0131ß\n٣") + [
    "Jan", "sept", "USD", "inr", "İNR", "per cent", "pct", "http://", "www.", "am", "p.m.", "dollars", "bucks",
    "ſep", "ſek", "2025-06-14", "12:30", "03/04/2025", "1,234.5", "°F", "km/h", "#1234", "AB1234", "deadbeef7",
    # the guards' runs, whole and cut: hex, capitals before digits, clock and date separators
    "WWW.", "HTTPS://", "M", "PM", "a.m", "ABCDEF", "0f", "a1b2c3d", "ZZ", "123", "9:", ":05", "-0", "/1",
    "12345678-", "1a2b-", "#", "AbCdEf0",
]


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join))
def test_extract_facts_skips_only_patterns_that_cannot_match(text: str) -> None:
    assert _facts.extract_facts.__wrapped__(text) == facts_oracle.every_pattern(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=30).map("".join), st.sampled_from([" ", "x", "4", "a-", ":"]))
def test_long_texts_are_checked_pattern_by_pattern_alike(text: str, filler: str) -> None:
    long = text + filler * (_facts._TRIGGER_TEXT + 1 - len(text)) + text  # past the trigger-set path
    assert _facts.extract_facts.__wrapped__(long) == facts_oracle.every_pattern(long)


_FAST_FORMS = [
    (_facts._NUMBER_RE, facts_oracle.NUMBER_RE),
    (_facts._PERCENT_RE, facts_oracle.PERCENT_RE),
    (_facts._MONEY_SUFFIX_RE, facts_oracle.MONEY_SUFFIX_RE),
    (_facts._MONEY_PREFIX_RE, facts_oracle.MONEY_PREFIX_RE),
    (_facts._CLOCK_RE, facts_oracle.CLOCK_RE),
    (_facts._IDENT_CODE_RE, facts_oracle.IDENT_CODE_RE),
    (tr._SEPARATORS, facts_oracle.SEPARATORS),
]
_UNIT_PIECES = [*_facts._UNITS, "C$", "A$", "c$", "a$", "US$", "uS$", "U", "S", "Kelvin", " mph", " kg", "5 ", "-", "−",
                "+", "1,2", "3,456", ".5", "x.", ". ", ".\n", "a.", "\u00a0", "“", "—", " million", "bn"]


def _matches(pattern: Any, text: str) -> list[Any]:
    return [(m.span(), m.groupdict()) for m in pattern.finditer(text)]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.sampled_from(_UNIT_PIECES), max_size=20).map("".join))
def test_fast_fact_patterns_match_what_their_plain_forms_match(text: str) -> None:
    for fast, plain in _FAST_FORMS:
        assert _matches(fast, text) == _matches(plain, text), plain.pattern


_AMPM_PIECES = ["a", "A", "p", "P", "m", "M", ".", " ", "\n", "5", "٣", "x", "am", "p.m", "5 p. m"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_AMPM_PIECES) | st.sampled_from(_PIECES), max_size=20).map("".join))
def test_the_am_pm_guard_finds_what_its_plain_form_finds(text: str) -> None:
    assert (_facts._AMPM_GUARD.search(text) is None) == (facts_oracle.AMPM_GUARD.search(text) is None)


@pytest.mark.parametrize("path", TRACE_FILES[::3], ids=paths.trace_id)
def test_extract_facts_on_fixture_texts(path: Path) -> None:
    for span in read_otlp_json(path):
        for value in (span.attributes or {}).values():
            if isinstance(value, str):
                for text in (value, *value.split('"')):
                    assert _facts.extract_facts.__wrapped__(text) == facts_oracle.every_pattern(text)
                    for fast, plain in _FAST_FORMS:
                        assert _matches(fast, text) == _matches(plain, text), plain.pattern


# --- response claims ---------------------------------------------------------------------------

_CLAIM_WORDS = [
    *tr._DONE.strip("(?:)").replace("cancell?ed", "cancelled|canceled").split("|"),
    "success", "successful", "successfully", "succeeded", "all set", "all", "set", "i", "I", "we", "We", "'ve",
    "have", "has", "had", "been", "be", "just", "now", "already", "was", "were", "is", "are", "not", "never",
    "n't", "don't", "doesn't", "didn't", "can", "could", "couldn't", "cannot", "can't", "unable", "able",
    "unsuccessful", "unsuccessfully", "fail", "fails", "failed", "failure", "unfortunately", "wasn't",
    "weren't", "an", "the", "error", "occurred", "no", "results", "result", "matches", "records", "record",
    "data", "information", "entries", "such", "does", "do", "did", "exist", "possible", "work", "found",
    "the order", "x", "12", "ſent", "ſucceſs", "faıled", "İs", "WAS", "Booked", "notfound", "boo\u212aed",
    "submİtted", "submıtted", "°",
]
_CLAIM_GLUE = [" ", "  ", "\n", "\t", "", ".", ",", "-", "'", "_", "!", " (", ")"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_CLAIM_WORDS) | st.sampled_from(_CLAIM_GLUE), max_size=14).map("".join))
def test_claim_patterns_match_what_their_plain_forms_match(text: str) -> None:
    assert bool(tr._SUCCESS_RE.search(text)) == bool(claims_oracle.SUCCESS_RE.search(text))
    assert bool(tr._FAILURE_RE.search(text)) == bool(claims_oracle.FAILURE_RE.search(text))
    response = tr.Response.of(text)
    assert response.claims_success == bool(claims_oracle.SUCCESS_RE.search(text))
    assert response.claims_failure == bool(claims_oracle.FAILURE_RE.search(text))


@pytest.mark.parametrize("path", TRACE_FILES, ids=paths.trace_id)
def test_claim_patterns_on_fixture_texts(path: Path) -> None:
    for span in read_otlp_json(path):
        for value in (span.attributes or {}).values():
            if isinstance(value, str):
                for text in (value, *value.split('"')):
                    assert bool(tr._SUCCESS_RE.search(text)) == bool(claims_oracle.SUCCESS_RE.search(text))
                    assert bool(tr._FAILURE_RE.search(text)) == bool(claims_oracle.FAILURE_RE.search(text))


# --- grounding: source facts indexed when first needed ------------------------------------------


class _EagerIndex(_facts.FactIndex):
    """The full index, every text's facts indexed when added: the oracle of the lazy one."""

    def add_text(self, text: str, *, lazily: bool = False, facts: tuple[_facts.Fact, ...] | None = None) -> None:
        super().add_text(text, facts=facts)


_FACT_TEXT = st.lists(st.sampled_from(_PIECES), max_size=12).map("".join)
# facts to look up: what texts state, and numbers near what they state (roundings, signs, units)
_QUERIES = st.lists(st.one_of(
    _FACT_TEXT.map(lambda t: _facts.extract_facts.__wrapped__(t)),
    st.floats(-3000, 3000, allow_nan=False).map(lambda v: (_facts.number_fact(round(v, 1)),)),
), max_size=6).map(lambda groups: [f for group in groups for f in group])


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.tuples(_FACT_TEXT, st.booleans(), st.booleans()), max_size=8), _QUERIES, _QUERIES)
def test_a_lazy_fact_index_answers_as_the_full_index(texts: list[tuple[str, bool, bool]], first: list[Any],
                                                     then: list[Any]) -> None:
    lazy, full = _facts.FactIndex(), _EagerIndex()
    for text, lazily, known in texts:
        facts = _facts.facts_of(text) if known else None
        lazy.add_text(text, lazily=lazily, facts=facts)
        full.add_text(text, facts=facts)
    # asked in turns, as the scorer asks: what a look-up indexed stays indexed for the next
    for queries in (first, then):
        for fact in queries:
            assert lazy.contains(fact) == full.contains(fact), fact
            assert lazy.contains(fact, rounded_here=True) == full.contains(fact, rounded_here=True), fact
    assert lazy.kinds == full.kinds


@pytest.mark.parametrize("path", TRACE_FILES, ids=paths.trace_id)
@pytest.mark.parametrize("cross_turn", [False, True])
def test_lazy_sources_give_the_full_index_verdicts(path: Path, cross_turn: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_toolscore import build_trajectories
    from otel_toolscore.scorers import _grounding

    scorer = tr.ToolResultVerification(cross_turn=cross_turn)
    for trajectory in build_trajectories(read_otlp_json(path)):
        lazy = _verdicts(trajectory, scorer)
        monkeypatch.setattr(_grounding, "FactIndex", _EagerIndex)
        assert lazy == _verdicts(trajectory, scorer)
        monkeypatch.undo()


def _verdicts(trajectory: Any, scorer: tr.ToolResultVerification) -> Any:
    """Every fact of the run's texts, as the run's sources judge it, and the whole score."""
    from otel_toolscore.scorers import _grounding

    calls = trajectory.tool_calls
    results = [tr.structured_result(call) for call in calls]
    sources = _grounding.Sources.of(trajectory, calls, [value for value, _ in results], [True] * len(calls))
    texts = [trajectory.output or "", trajectory.input or "", *(c.result_raw or "" for c in calls)]
    facts = [fact for text in texts for fact in _facts.facts_of(text)]
    score = scorer.score(trajectory)
    return ([(fact, sources.verdict(fact), sources.supports(fact)) for fact in facts], sources.complete,
            sources.amounts_cut, score.value, score.label, score.explanation, json.dumps(score.details, default=repr))


class _EverySource(_grounding.Sources):
    """Sources that add every result leaf by leaf, as often as it is given: the oracle of
    adding a result seen before by its effects."""

    def add_result(self, value: Any, *, own: bool) -> None:
        self._add_leaves(value, own)


_LEAF = st.one_of(st.sampled_from([0, 1, 1.0, True, False, None, 12, 12.0, 120, 120.5, -7, 2025, 10**400]),
                  st.floats(allow_nan=True), _FACT_TEXT)
_KEYS = st.sampled_from(["price", "total", "id", "seats", "a", "b", "1", "date"])
_VALUE = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                      | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=12)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_VALUE, min_size=1, max_size=4),
       st.lists(st.tuples(st.integers(0, 7), st.booleans(), st.booleans()), max_size=10),
       st.integers(0, 40), st.integers(1, 8), _QUERIES)
def test_a_result_added_again_changes_what_adding_it_leaf_by_leaf_does(
        values: list[Any], adds: list[tuple[int, bool, bool]], budget: int, operands: int, queries: list[Any]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_grounding, "MAX_GROUNDING_VALUES", budget)
        patch.setattr(_grounding, "_MAX_OPERANDS", operands)
        fast, oracle = _grounding.Sources(), _EverySource()
        _add_results(fast, oracle, values, adds)
    fast._scan()
    oracle._scan()
    for name in ("complete", "amounts_cut", "result_kinds", "own_kinds", "_budget", "_own_amounts", "_amounts",
                 "_digit_runs", "_overnight", "_numbers"):
        assert getattr(fast, name) == getattr(oracle, name), name
    for fact in queries:
        assert fast.verdict(fact) == oracle.verdict(fact) and fast.supports(fact) == oracle.supports(fact), fact


@settings(max_examples=1500, deadline=None)
@given(_VALUE)
def test_the_salient_walk_gives_the_leaves_of_the_sources_walk(value: Any) -> None:
    leaves, _ = _grounding.walk(value, 10**9)
    assert list(tr._leaves(value)) == [leaf for _, leaf in leaves]


def _add_results(fast: _grounding.Sources, oracle: _grounding.Sources, values: list[Any],
                 adds: list[tuple[int, bool, bool]]) -> None:
    for i, own, copied in adds:
        value = values[i % len(values)]
        # an equal copy (as a history's result is to the call's), a twin equal in Python but not in
        # its leaves (True for 1, keys in another order), or the same object
        if copied:
            value = json.loads(json.dumps(value)) if _jsonable(value) else value
        elif i >= len(values):
            value = _twin(value)
        for sources in (fast, oracle):
            sources.add_result(value, own=own)


def _twin(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _twin(value[key]) for key in reversed(value)}
    if isinstance(value, (list, tuple)):
        return type(value)(_twin(item) for item in value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return value


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.sampled_from(_CLAIM_WORDS), max_size=40).map("".join))
def test_salient_values_of_a_short_leaf_are_those_read_afresh(text: str) -> None:
    for _ in range(2):  # read, then from the cache
        assert tuple(tr._salient_of_leaf(text, [])) == tuple(tr._salient_of_value(text))


# --- engine: unsampled traces are not read ----------------------------------------------------------


def test_traces_no_scorer_samples_are_not_assembled(monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_toolscore.config import load_settings
    from otel_toolscore.outputs.otel import Emitter
    from otel_toolscore.runtime import engine as engine_module

    settings_ = load_settings(default_sample_rate=0.0, metrics=False, events=False)
    eng = engine_module.Engine(settings_, None, Emitter(settings_))
    seen: list[int] = []
    real = engine_module.build_trajectories
    monkeypatch.setattr(engine_module, "build_trajectories", lambda spans: seen.append(len(list(spans))) or real([]))
    spans = read_otlp_json(TRACE_FILES[0])
    assert eng.score(spans) == []
    assert seen == [0]


# --- processor: hold deadlines -------------------------------------------------------------------


class _Blocked(Scorer):
    """A scorer that does not return until the test lets it: the worker is busy all along."""

    name = "blocked"
    kind = "code"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()

    def _score(self, trajectory: Any) -> Score:
        self.started.set()
        self.release.wait(30)  # a guard against a hang, never reached when the test passes
        return Score(name=self.name, value=1.0)


def test_holds_are_released_by_their_deadline_while_the_scoring_worker_is_busy() -> None:
    from otel_toolscore.runtime.processor import ToolScoreSpanProcessor

    exporter = InMemorySpanExporter()
    blocked = _Blocked()
    processor = ToolScoreSpanProcessor(SimpleSpanProcessor(exporter), [blocked], hold_timeout=0.3,
                                       completion_grace=0.01, metrics=False, events=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    try:
        for i in range(3):
            with tracer.start_as_current_span(f"invoke_agent a{i}",
                                              attributes={"gen_ai.operation.name": "invoke_agent"}):
                with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
                    pass
        agents: list[ReadableSpan] = []
        deadline = time.monotonic() + 10  # a guard against a hang: the holds last 0.3 s
        while len(agents) < 3 and time.monotonic() < deadline:
            agents = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
            time.sleep(0.01)
        # every held agent span reached the exporter while the worker was still inside the first score
        assert blocked.started.is_set() and not blocked.release.is_set()
        assert sorted(s.name for s in agents) == ["invoke_agent a0", "invoke_agent a1", "invoke_agent a2"]
        assert all(dict(s.attributes or {}) == {"gen_ai.operation.name": "invoke_agent"} for s in agents)  # unscored
        assert processor.stats["holds_expired"] == 3
    finally:
        blocked.release.set()
        provider.shutdown()
