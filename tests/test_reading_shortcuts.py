"""Reading's per-span and per-message shortcuts give exactly what the long ways give.

* ``message_from`` builds the GenAI semconv's message (only ``role``, ``parts``,
  ``finish_reason``) without asking for the other shapes: it must equal ``_any_message_from``,
  which asks for every shape, on any item with those keys.
* ``read_span`` asks only the ``_STATED`` entries whose key the span's key set holds: the role it
  states must be the one the whole table, asked in order, gives.
* The search for lone surrogates skips a text without a backslash, then one without ``\\u[dD]``:
  its verdict, per text and per span, must be the one the whole search gives.
* ``read_trace`` reads a chat history only in what it adds to one read before (``ReadMemo``):
  over histories that grow, repeat, shrink, fork or start again, in one trace and the next, the
  facts must be those each span read alone gives.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

import otel_toolscore.conventions as conventions
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions import read_span
from otel_toolscore.conventions._text import _SURROGATE_ESCAPE, may_escape_half

_scalar = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=8)
_role = st.sampled_from(["system", "user", "assistant", "tool", "human", "AI", "model", " Tool ", ""]) | _scalar
_arguments = st.dictionaries(st.text("xyz", max_size=3), _scalar, max_size=2) | st.text("{}:\"ab1", max_size=12)
_part = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_call", "tool_call_response", "input_text", "", "image", "tool-call"])},
    optional={
        "content": _scalar, "text": _scalar, "id": _scalar | st.text("abc123", min_size=1, max_size=4),
        "name": _scalar | st.sampled_from(["get_weather", "send_email"]), "arguments": _arguments,
        "response": _scalar | st.text("{}\":a1[]", max_size=12), "is_error": st.booleans(),
        "toolUse": st.fixed_dictionaries({"name": st.text(max_size=4), "input": _arguments}),
    },
)
_parts = st.lists(_part | st.text(max_size=6) | st.integers() | st.none(), max_size=4)
_semconv_message = st.fixed_dictionaries(
    {}, optional={"role": _role, "parts": _parts | _scalar, "finish_reason": _scalar})


def _outcome(build: Any, item: Any) -> Any:
    """What ``build(item)`` gives, or the type of what it raised (a reader's failure is recorded
    as a problem: the shortcut must fail where the long way fails)."""
    try:
        return build(item)
    except Exception as exc:  # noqa: BLE001 - compared, not hidden
        return type(exc)


@settings(max_examples=500, deadline=None)
@given(item=_semconv_message)
def test_a_semconv_message_is_built_as_the_long_way_builds_it(item: dict[str, Any]) -> None:
    assert _outcome(p.message_from, item) == _outcome(p._any_message_from, item)


@settings(max_examples=100, deadline=None)
@given(item=_semconv_message, other=st.sampled_from(["content", "type", "lc", "data", "tool_calls", "name"]),
       value=_scalar | st.just(1) | st.just({"role": "user"}) | st.just([{"type": "text", "text": "x"}]))
def test_a_message_with_another_key_takes_the_long_way(item: dict[str, Any], other: str, value: Any) -> None:
    item = {**item, other: value}
    assert _outcome(p.message_from, item) == _outcome(p._any_message_from, item)


def _stated_the_long_way(attrs: dict[str, Any]) -> Any:
    for key, answers, default in conventions._STATED:
        value = attrs.get(key)
        if value is not None:
            answer = answers.get(value, default)
            if answer:
                return answer
    return None


_STATED_KEYS = sorted({key for key, _, _ in conventions._STATED})
_STATED_VALUES = sorted({v for _, answers, _ in conventions._STATED for v in answers}) + ["other", "?"]


@settings(max_examples=300, deadline=None)
@given(attrs=st.dictionaries(st.sampled_from([*_STATED_KEYS, "x.other", "gen_ai.request.model"]),
                             st.sampled_from(_STATED_VALUES) | st.integers(0, 2), max_size=4))
def test_a_span_states_the_role_the_whole_table_gives(attrs: dict[str, Any]) -> None:
    span = ReadableSpan(name="span", context=SpanContext(1, 2, False, TraceFlags(1)), attributes=attrs)
    expected = _stated_the_long_way(attrs)
    facts = read_span(span)
    if expected is not None:
        assert facts.role == expected
    # the hot path's classify says the same of it
    kind = conventions._stated_kind(attrs)
    assert kind == (None if expected is None else "agent" if expected == "agent" else "genai")


_json_value = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text("abxy", max_size=3), inner, max_size=3), max_leaves=12)
_plain_call = st.fixed_dictionaries(
    {"type": st.just("tool_call")},
    optional={
        "id": _scalar | st.text("abc123", min_size=1, max_size=4),
        "name": _scalar | st.sampled_from(["get_weather", "send_email"]),
        "arguments": _json_value | st.dictionaries(
            st.sampled_from(["input_str", "args", "kwargs", "tags", "location", "x" * 190]), _json_value, max_size=3),
    },
)


@settings(max_examples=500, deadline=None)
@given(part=_plain_call)
def test_a_plain_tool_call_part_is_read_as_the_long_way_reads_it(part: dict[str, Any]) -> None:
    assert _outcome(p._plain_call, part) == _outcome(p.tool_call_from, part)


def test_deep_arguments_in_a_plain_call_are_left_unread_as_the_long_way_leaves_them() -> None:
    deep: Any = "leaf"
    for _ in range(p.MAX_DEPTH + 2):
        deep = {"a": deep}
    part = {"type": "tool_call", "id": "c1", "name": "f", "arguments": deep}
    call = p._plain_call(part)
    assert call is not None and call.arguments is None
    assert _outcome(p._plain_call, part) == _outcome(p.tool_call_from, part)


# --- the search for escapes of lone surrogates ---------------------------------------------------

_escape_piece = st.sampled_from(["\\ud83d", "\\ude00", "\\uDBFF", "\\\\", "ud83d", "a", "\\u00e9"])


@settings(max_examples=1000, deadline=None)
@given(pieces=st.lists(_escape_piece, min_size=1, max_size=8))
def test_a_json_text_that_decodes_to_a_lone_surrogate_is_found(pieces: list[str]) -> None:
    text = "".join(pieces)
    decoded = json.loads(f'"{text}"')
    # (json decodes an escaped pair to one character: a surrogate left over is a lone one)
    if any(0xD800 <= ord(c) <= 0xDFFF for c in decoded):
        assert p.may_hold_surrogates(text)
        assert p.may_hold_surrogates(f'["{text}"]')


def test_a_low_half_after_an_escaped_backslash_and_text_like_a_high_half_is_lone() -> None:
    text = '"\\\\ud83d\\ude00"'  # an escaped backslash, the text "ud83d", a lone low half
    assert "\udc00" <= json.loads(text)[-1] <= "\udfff"
    assert p.may_hold_surrogates(text)
    assert not p.may_hold_surrogates('"\\ud83d\\ude00"')  # a pair


# --- a tool span's arguments and result written as a short JSON object ----------------------------

_object_key = st.sampled_from(["location", "input_str", "args", "kwargs", "type", "content", "toolResult", "response",
                               "name", "isError", "raw_output", "tool_name", "error", "status", "lc", "output", "x"])
_object = st.dictionaries(_object_key, _json_value, max_size=4)
_object_text = st.one_of(
    _object.map(json.dumps),
    _object.map(lambda o: json.dumps(o, separators=(",", ":"))),
    _object.map(repr),  # a Python repr: not JSON, read by ast
    st.text("{}\"a:1,[] ", max_size=12).map(lambda t: "{" + t + "}"),
    st.just("{" + '"a":' * 60 + "1" + "}" * 60),
)


@settings(max_examples=500, deadline=None)
@given(text=_object_text)
def test_short_object_arguments_are_read_as_the_long_way_reads_them(text: str) -> None:
    assert _outcome(p.parse_arguments, text) == _outcome(p._parse_arguments, text)


@settings(max_examples=500, deadline=None)
@given(text=_object_text)
def test_a_short_object_result_is_read_as_the_long_way_reads_it(text: str) -> None:
    assert _outcome(p._read_result, text) == _outcome(p._any_result, text)


# --- the per-span check for surrogates: prefilters against the whole search --------------------

_text_piece = st.sampled_from(["\\ud83d", "\\ude00", "\\uDBFF", "\\uD83D", "\\\\", "\\u00b0", "\\", "u", "d",
                               "D", "a", "é", "\ud83d", "\udc00", "😀", "\\n"])


def _whole_search(text: str) -> bool:
    """``may_hold_surrogates`` without a prefilter: a raw surrogate, or an escape of a lone half
    found by the one regex that decides it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return _SURROGATE_ESCAPE.search(text) is not None


@settings(max_examples=1000, deadline=None)
@given(pieces=st.lists(_text_piece, max_size=10), start=st.integers(0, 12))
def test_the_backslash_and_half_escape_prefilter_rules_out_only_texts_the_whole_search_clears(
        pieces: list[str], start: int) -> None:
    text = "".join(pieces)
    assert p.may_hold_surrogates(text) == _whole_search(text)
    assert may_escape_half(text, start) == (re.search(r"\\u[dD]", text[start:]) is not None)


_attr_value = (st.lists(_text_piece, max_size=6).map("".join) | st.integers() | st.booleans()
               | st.tuples(st.lists(_text_piece, max_size=4).map("".join), st.integers())
               | st.lists(_text_piece, max_size=6).map(lambda ps: "x" * 1030 + "".join(ps)))


@settings(max_examples=500, deadline=None)
@given(values=st.lists(_attr_value, max_size=6))
def test_a_spans_values_may_hold_surrogates_exactly_when_one_of_its_texts_does(values: list[Any]) -> None:
    texts = [t for v in values for t in (v if isinstance(v, tuple) else (v,)) if isinstance(t, str)]
    with p.shared_memo():
        assert conventions._texts_may_hold_surrogates(values) == any(map(_whole_search, texts))
    assert conventions._texts_may_hold_surrogates(values) == any(map(_whole_search, texts))


def test_read_trace_leaves_no_memo_behind_even_when_a_span_cannot_be_read() -> None:
    from otel_toolscore.conventions import _memo

    class _Broken:
        @property
        def context(self) -> Any:
            raise RuntimeError("no context")

    assert _memo.current() is None
    try:
        conventions.read_trace([_Broken()])  # type: ignore[list-item]
    except RuntimeError:
        pass
    else:
        raise AssertionError("a span without a context must fail the trace's read here")
    assert _memo.current() is None


@settings(max_examples=200, deadline=None)
@given(where=st.sampled_from(["status", "event", "name", "none"]),
       text=st.sampled_from(["bad \ud800 text", "bad \\ud800 text", "fine \\u00b0 text", "plain"]))
def test_a_surrogate_in_a_spans_name_status_or_events_has_what_was_read_cleaned(where: str, text: str) -> None:
    # the attributes hold none: what the span's name, status or exception event say is read
    # into its facts (its name, its error), and must be cleaned there
    from opentelemetry.sdk.trace import Event
    from opentelemetry.trace import Status, StatusCode

    from otel_toolscore.conventions._text import valid_text

    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f", "gen_ai.tool.call.result": "{}"}
    events = [Event("exception", {"exception.type": "E", "exception.message": text})] if where == "event" else []
    span = ReadableSpan(
        name=f"execute_tool {text}" if where == "name" else "execute_tool f",
        context=SpanContext(1, 2, False, TraceFlags(1)), attributes=attrs, events=events,
        status=Status(StatusCode.ERROR, text if where == "status" else None))
    facts = read_span(span)
    expected = valid_text(text) if where in ("status", "event") else "error"
    assert facts.error is not None and facts.error.endswith(expected)
    assert facts.name == valid_text(facts.name)


# --- a trace's chat histories, read through the memo, against each span read alone ----------------

_piece = st.sampled_from(["a", "London", " ", "\u00e9", "\ud83d", "\ude00", "\ud83d\ude00", "\\ud83d", "\\", '"',
                          "finish_reason", '","finish_reason":"stop"}', "]", "x" * 40])
_words = st.lists(_piece, max_size=4).map("".join)
_history_part = (
    st.fixed_dictionaries({"type": st.just("text"), "content": _words})
    | st.fixed_dictionaries({"type": st.just("tool_call"), "id": st.sampled_from(["c1", "c2"]),
                             "name": st.sampled_from(["get_weather", "f"]),
                             "arguments": st.dictionaries(st.sampled_from(["city", "n"]), _words | st.integers(0, 3),
                                                          max_size=2)})
    | st.fixed_dictionaries({"type": st.just("tool_call_response"), "id": st.sampled_from(["c1", "c2"]),
                             "response": _words | st.sampled_from(['{"t":"55\\u00b0F"}', '{"error":"x"}'])})
)
_history_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "parts": st.lists(_history_part, max_size=3)},
    optional={"finish_reason": st.sampled_from(["stop", "tool_calls", None])},
) | _words | st.integers(0, 2)
#: a model call's output as the semconv writes it: its finish_reason last
_output_message = st.fixed_dictionaries({
    "role": st.just("assistant"), "parts": st.lists(_history_part, max_size=2),
    "finish_reason": st.sampled_from(["stop", "tool_calls", None])})
#: how each model call's input follows the one before: the history grown by that call's output
#: (as written, without its finish_reason, or not repeated) and new turns, or the same history
#: again, a shorter one, a fork of it, or a new one
_step = st.tuples(st.sampled_from(["grow", "repeat", "shrink", "fork", "fresh"]),
                  st.sampled_from(["as written", "without finish_reason", "not repeated"]),
                  st.lists(_history_message, max_size=2), st.integers(0, 6),
                  st.tuples(st.lists(_history_message, max_size=1), _output_message).map(lambda t: [*t[0], t[1]]))


def _encoded(value: Any, how: tuple[tuple[str, str], bool]) -> str:
    separators, ascii_only = how
    return json.dumps(value, separators=separators, ensure_ascii=ascii_only)


@settings(max_examples=300, deadline=None)
@given(first=st.lists(_history_message, max_size=3), steps=st.lists(_step, min_size=1, max_size=5),
       how=st.tuples(st.sampled_from([(",", ":"), (", ", ": ")]), st.booleans()),
       long_head=st.booleans(), tool_spans=st.booleans())
def test_a_traces_chat_histories_read_as_each_span_alone_reads_them(
        first: list[Any], steps: list[Any], how: tuple[tuple[str, str], bool], long_head: bool,
        tool_spans: bool) -> None:
    """Histories that grow, repeat, shrink, fork or start again, each model call's output
    repeated in the next input as written, without its finish_reason or not at all, texts with
    raw and escaped surrogates (lone and paired), in two traces (the second turn of a
    conversation repeats the first's histories: a long head has the memo keep them)."""
    from otel_toolscore.conventions import _memo

    head = [{"role": "system", "parts": [{"type": "text", "content": "s" * 4200}]}] if long_head else []
    history = head + first
    spans: list[ReadableSpan] = []
    previous_output: list[Any] = []
    for step, (op, echo, more, cut, output) in enumerate(steps):
        if op == "grow":
            echoed = [] if echo == "not repeated" else [
                {k: v for k, v in m.items() if k != "finish_reason" or echo == "as written"}
                if isinstance(m, dict) else m for m in previous_output]
            history = history + echoed + more
        elif op == "shrink":
            history = history[:len(head) + cut]
        elif op == "fork":
            history = history[:len(head) + cut] + more
        elif op == "fresh":
            history = head + more
        previous_output = output
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": _encoded(history, how),
                 "gen_ai.output.messages": _encoded(output, how)}
        spans.append(ReadableSpan(name="chat m", context=SpanContext(1, 10 + step, False, TraceFlags(1)),
                                  attributes=attrs))
        if tool_spans:
            spans.append(ReadableSpan(
                name="execute_tool f", context=SpanContext(1, 100 + step, False, TraceFlags(1)),
                attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f",
                            "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.arguments": '{"city":"London"}',
                            "gen_ai.tool.call.result": '{"t":"55\\u00b0F"}'}))
    _memo.forget_earlier_traces()
    try:
        alone = [dataclasses.asdict(read_span(s, i)) for i, s in enumerate(spans)]
        for _turn in range(2):  # (the second time, what the first kept for later traces is reused)
            assert [dataclasses.asdict(f) for f in conventions.read_trace(spans)] == alone
    finally:
        _memo.forget_earlier_traces()
