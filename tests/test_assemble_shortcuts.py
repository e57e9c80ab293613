"""Assembly's shortcuts give what the long way gives.

Finding runs jumps from agent span to agent span instead of walking every span; a model input
that continues the previous one keeps its boundary without scanning it again; an echoed call
whose arguments are plainly equal to its request's takes the request's key without encoding;
an echo of the one call of its id, with that call's very arguments, is counted by key only when
a count by key is read. Each is checked here against the long way (the reference kept in this file), on random input.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_toolscore.assemble import _build_tree, _CallBuilder, _canon, _Echoes, _find_runs, _plainly_equal, _Scope
from otel_toolscore.conventions import SpanFacts
from otel_toolscore.trajectory import Message, ToolCallRequest, ToolResultPart

# --- runs: the reference walks every span -------------------------------------------------------


def _reference_runs(tree: Any) -> list[tuple[str, tuple[str, ...], str | None, str | None]]:
    """Runs as ``_find_runs`` found them before it jumped between agent spans (every span
    walked, what each passes down carried to its children): (span, wrappers, name, parent)."""
    activity: dict[str, int] = {}
    nearest: dict[str, list[SpanFacts]] = defaultdict(list)
    for root in tree.roots:
        for f in reversed(tree.walk(root)):
            n = 1 if f.role in ("llm", "tool", "retrieval") else 0
            for c in tree.children.get(f.span_id, []):
                n += activity[c.span_id]
                if c.role == "agent":
                    nearest[f.span_id].append(c)
                else:
                    nearest[f.span_id].extend(nearest.get(c.span_id, []))
            activity[f.span_id] = n

    def wrapped(a: SpanFacts) -> bool:
        inner = [b for b in nearest.get(a.span_id, []) if activity[b.span_id] > 0]
        return len(inner) == 1 and activity[inner[0].span_id] == activity[a.span_id]

    runs: list[tuple[SpanFacts, list[SpanFacts], str | None, Any]] = []
    for root in tree.roots:
        stack: list[tuple[SpanFacts, Any, list[SpanFacts]]] = [(root, None, [])]
        while stack:
            f, enclosing, wrappers = stack.pop()
            current, passed = enclosing, []
            if f.role == "agent" and activity[f.span_id] > 0:
                if wrapped(f):
                    passed = [f, *wrappers]
                else:
                    chain = [f, *wrappers]
                    name = next((x.agent_name for x in chain if x.agent_name), None) or next(
                        (x.agent_name_fallback for x in chain if x.agent_name_fallback), None)
                    if not (enclosing is not None and name is not None and name == enclosing[2]):
                        current = (f, list(wrappers), name, enclosing)
                        runs.append(current)
            for c in reversed(tree.children.get(f.span_id, [])):
                stack.append((c, current, passed))
    if not runs:
        runs = [(r, [], r.agent_name, None) for r in tree.roots if activity[r.span_id] > 0]
    return [(s.span_id, tuple(w.span_id for w in ws), name, parent[0].span_id if parent else None)
            for s, ws, name, parent in runs]


_span = st.tuples(
    st.sampled_from(["agent", "agent", "llm", "tool", "retrieval", None, None]),
    st.sampled_from([None, "a", "b"]),  # agent name
    st.sampled_from([None, "fallback"]),
    st.integers(0, 3),  # start
)


@st.composite
def _traces(draw: Any) -> list[SpanFacts]:
    specs = draw(st.lists(_span, min_size=1, max_size=14))
    out = []
    for i, (role, name, fallback, start) in enumerate(specs):
        # a parent among the spans just before it (a tree, deep rather than wide), now and then
        # none (another root)
        parent = draw(st.sampled_from([None, i - 1, i - 1, i - 1, max(0, i - 2), max(0, i - 3)])) if i else None
        out.append(SpanFacts(span_id=f"s{i}", parent_id=f"s{parent}" if parent is not None else None, name="x",
                             start=start, end=start + 1, order=i, role=role, agent_name=name,
                             agent_name_fallback=fallback))
    return out


@settings(max_examples=400, deadline=None)
@given(_traces())
def test_runs_found_by_jumping_between_agent_spans_are_the_runs_every_span_walked_finds(facts: list[SpanFacts]) -> None:
    tree = _build_tree(facts)
    found = [(r.span.span_id, tuple(w.span_id for w in r.wrappers), r.name,
              r.parent.span.span_id if r.parent else None) for r in _find_runs(tree)]
    assert found == _reference_runs(tree)


def test_a_wrapper_passes_itself_only_to_an_agent_span_directly_below_it() -> None:
    # wrapper agent → plain span → agent → model call: the plain span between starts the
    # wrappers over, so the inner run is the agent span alone (its name is its own)
    facts = [SpanFacts(span_id="w", parent_id=None, name="x", start=0, end=9, order=0, role="agent", agent_name="outer"),
             SpanFacts(span_id="p", parent_id="w", name="x", start=1, end=8, order=1),
             SpanFacts(span_id="a", parent_id="p", name="x", start=2, end=7, order=2, role="agent"),
             SpanFacts(span_id="m", parent_id="a", name="x", start=3, end=4, order=3, role="llm")]
    tree = _build_tree(facts)
    assert [(r.span.span_id, r.wrappers, r.name) for r in _find_runs(tree)] == [("a", [], None)]
    assert _reference_runs(tree) == [("a", (), None, None)]


# --- a model input's own part: the reference scans every input ---------------------------------


class _ReferenceScope:
    """``_Scope`` as it was: every input scanned for its last user message."""

    def __init__(self) -> None:
        self.anchor: str | None = None
        self.anchored = False

    def own_history(self, inputs: list[Message]) -> list[Message]:
        last = next((i for i in range(len(inputs) - 1, -1, -1) if inputs[i].role == "user" and inputs[i].content), -1)
        if last < 0:
            return inputs
        if not self.anchored:
            self.anchored, self.anchor = True, inputs[last].content
            return inputs[last + 1 :]
        for i in range(last, -1, -1):
            if inputs[i].role == "user" and inputs[i].content == self.anchor:
                return inputs[i + 1 :]
        return inputs[last + 1 :]


_message = st.builds(Message, role=st.sampled_from(["user", "assistant", "tool", "system"]),
                     content=st.sampled_from([None, "", "q", "q2", "ok"]))
# each step: messages added to the last input (the same objects, as readers share them), or a
# new input: a copy of the last one cut somewhere, with messages of its own added
_step = st.tuples(st.booleans(), st.integers(0, 6), st.lists(_message, max_size=4))


@settings(max_examples=400, deadline=None)
@given(st.lists(_step, min_size=1, max_size=8))
def test_an_input_that_continues_the_last_keeps_the_boundary_the_long_way_finds(steps: list[Any]) -> None:
    scope, reference = _Scope(), _ReferenceScope()
    inputs: list[Message] = []
    for extend, cut, added in steps:
        inputs = [*inputs, *added] if extend else [*(Message(m.role, m.content) for m in inputs[:cut]), *added]
        own, _ = scope.own_history(list(inputs))
        assert [(m.role, m.content) for m in own] == [(m.role, m.content) for m in reference.own_history(inputs)]
        assert len(own) == len(reference.own_history(inputs))


# --- an echo's key: plainly equal arguments have one canonical text ------------------------------

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from([0.0, -0.0, 1.0, float("nan")]),
                    st.sampled_from(["", "1", "a", "true", "null"]))
_value = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                      st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2)),
                      max_leaves=4)
_keys = st.sampled_from(["a", "b", "c", 1, True])


@settings(max_examples=600, deadline=None)
@given(st.dictionaries(_keys, _value, max_size=3), st.dictionaries(_keys, _value, max_size=3), st.booleans())
def test_arguments_plainly_equal_have_one_canonical_text(a: dict[Any, Any], b: dict[Any, Any], copy: bool) -> None:
    if copy:
        b = dict(a)  # equal, another object: the usual echo
    if _plainly_equal(a, b):
        assert _canon(a) == _canon(b)


def test_an_echo_of_plain_arguments_is_plainly_equal_and_a_lookalike_is_not() -> None:
    assert _plainly_equal({"city": "Oslo", "days": 3, "metric": True}, {"days": 3, "metric": True, "city": "Oslo"})
    assert not _plainly_equal({"days": 1}, {"days": True})  # equal in Python, not in JSON
    assert not _plainly_equal({"days": 1}, {"days": 1.0})
    assert not _plainly_equal({"nested": {"a": 1}}, {"nested": {"a": 1}})  # not sure: encoded instead


# --- an echo of the one call of its id, with its very arguments: counted by key only when read ---

_ids = st.sampled_from([None, "c1", "c2", "c3"])
_args = st.sampled_from([{"x": 1}, {"x": 2}, {"x": True}, {"x": 1.0}, None])


@st.composite
def _chat_spans(draw: Any) -> list[SpanFacts]:
    """LLM spans of one run: each input the last one (the same message objects) with the last
    output echoed (that very message, or a copy whose requests carry equal or the same
    arguments) and results, or cut somewhere; ids and (name, arguments) repeat."""
    spans: list[SpanFacts] = []
    inputs: list[Message] = [Message("user", "q")]
    for i in range(draw(st.integers(1, 5))):
        requests = []
        for _ in range(draw(st.integers(0, 3))):
            args = draw(_args)
            requests.append(ToolCallRequest(id=draw(_ids), name=draw(st.sampled_from(["a", "b"])),
                                            arguments=dict(args) if args is not None else None))
        output = Message("assistant", tool_calls=requests)
        spans.append(SpanFacts(span_id=f"s{i}", parent_id=None, name="chat", start=10 * i, end=10 * i + 5, order=i,
                               role="llm", input_messages=list(inputs), output_messages=[output]))
        echo = output if draw(st.booleans()) else Message("assistant", tool_calls=[
            ToolCallRequest(r.id, r.name, dict(r.arguments) if draw(st.booleans()) and r.arguments else r.arguments)
            for r in requests])
        answered = Message("tool", tool_results=[ToolResultPart(tool_call_id=draw(st.one_of(st.just(r.id), _ids)),
                                                                content="ok") for r in requests])
        if draw(st.booleans()):
            inputs = [*inputs, echo, answered]
        else:
            inputs = [*inputs[: draw(st.integers(0, len(inputs)))], echo, answered]
    return spans


def _assembled(spans: list[SpanFacts]) -> Any:
    builder = _CallBuilder()
    requested = [builder.add_llm(f).tool_call_ids for f in spans]
    calls = builder.finish()
    return ([(c.id, c.name, c.arguments, c.sources, c.result, c.has_result, c.error, builder.sort_key(c)) for c in calls],
            requested, builder.problems)


@settings(max_examples=500, deadline=None)
@given(_chat_spans())
def test_echoes_counted_by_key_when_read_resolve_as_counted_at_once(spans: list[SpanFacts]) -> None:
    shortcut = _assembled(spans)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_Echoes, "__contains__", lambda self, key: True)  # (no id ever unseen: the long way)
        assert _assembled(spans) == shortcut


def test_an_echo_of_its_calls_very_arguments_is_not_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    request = ToolCallRequest(id="c1", name="a", arguments={"x": 1})
    output = Message("assistant", tool_calls=[request])
    first = SpanFacts(span_id="s0", parent_id=None, name="chat", start=0, end=5, order=0, role="llm",
                      input_messages=[Message("user", "q")], output_messages=[output])
    second = SpanFacts(span_id="s1", parent_id=None, name="chat", start=10, end=15, order=1, role="llm",
                       input_messages=[Message("user", "q"), output, Message("tool", tool_results=[
                           ToolResultPart(tool_call_id="c1", content="ok")])], output_messages=[])
    encoded: list[Any] = []
    monkeypatch.setattr("otel_toolscore.assemble._calls._canon", lambda args: encoded.append(args) or "")
    builder = _CallBuilder()
    builder.add_llm(first)
    builder.add_llm(second)
    (call,) = builder.finish()
    assert call.sources == ["llm_output", "history", "result_message"] and call.result == "ok"
    assert encoded == []
