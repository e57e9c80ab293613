"""tool_result_verification says its details are JSON by construction (``_details_are_json``) and
builds its Score without validation (``Score.of_code``). Checked against the long way: on random
runs whose ids, names, results, errors and answers are of odd types (NaN in a result, sets, bytes,
text subclasses), the score with the shortcut is the score without it (an error score where the
encode fails), and the shortcut is taken only for details that encode."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_toolscore.scorers.tool_results import ToolResultVerification
from otel_toolscore.trajectory import LLMCall, Message, ToolCall, Trajectory
from tests.support.score_shortcuts import assert_scores_as_the_long_way


class _Text(str):
    pass


_scalar = st.one_of(
    st.none(), st.text(max_size=6), st.sampled_from(["a", "ok", "\ud800", "Paris", "42", "$19.99", "2024-05-01"]),
    st.builds(_Text, st.sampled_from(["a", "Paris", "42"])), st.integers(-2, 50), st.floats(allow_nan=True),
    st.just({1}), st.just(b"a"), st.just(("a",)), st.booleans(),
)
_value = st.one_of(
    _scalar,
    st.dictionaries(st.sampled_from(["status", "error", "city", "price", "isError", "found", "message"]), _scalar,
                    max_size=3),
    st.lists(_scalar, max_size=3),
    st.sampled_from(['{"price": NaN}', '{"a": 1', "Error: not found", "[1, 2", "{'x': {1}}", "", "{}"]),
)
_id = st.one_of(st.none(), st.sampled_from(["c1", "c2"]), st.builds(_Text, st.just("c1")), st.integers(0, 2),
                st.just({1}))
_call = st.builds(ToolCall, id=_id, name=st.one_of(_id, st.sampled_from(["search", "book"])), span_id=_id,
                  result=_value, result_raw=st.one_of(st.none(), st.sampled_from(['{"a": 1', "raw"])),
                  has_result=st.booleans(),
                  error=st.one_of(st.none(), st.sampled_from(["", "timeout"]), st.builds(_Text, st.just("boom"))))
_answer = st.one_of(
    st.none(),
    st.sampled_from([
        "The booking succeeded: Paris on 2024-05-01 for $19.99.", "It failed, sorry.", "Found 42 results at a@b.co.",
        "Your order 7781 costs $12.00 and ships to Lyon.", "",
    ]),
    st.builds(_Text, st.just("Done: Paris, 42.")),
)


@st.composite
def _trajectories(draw: Any) -> Trajectory:
    steps: list[Any] = draw(st.lists(_call, max_size=4))
    answer = draw(_answer)
    if answer is not None:
        steps.append(LLMCall(output_messages=[Message(role="assistant", content=answer)]))
    return Trajectory(trace_id="t", steps=steps, input=draw(st.one_of(st.none(), st.just("Book Paris for 42"))))


_SCORERS = [ToolResultVerification(), ToolResultVerification(cross_turn=True, no_output_tools=["book"])]


@settings(max_examples=400, deadline=None)
@given(trajectory=_trajectories())
def test_the_shortcut_scores_as_the_long_way(trajectory: Trajectory) -> None:
    assert_scores_as_the_long_way(_SCORERS, trajectory)


def test_the_shortcut_is_taken_for_plain_runs() -> None:
    """Not a test that cannot fail: without the shortcut taken there is nothing saved."""
    trajectory = Trajectory(trace_id="t", steps=[
        ToolCall(id="c1", name="search", span_id="s1", result={"city": "Paris", "price": 19.99}, has_result=True),
        ToolCall(id="c2", name="book", span_id="s2", error="timeout"),
        LLMCall(output_messages=[Message(role="assistant", content="Booked Paris for $25.00; it worked.")]),
    ])
    scorer = ToolResultVerification()
    result = scorer._score(trajectory)
    assert result.call_results and any(r.issues for r in result.call_results)
    assert scorer._details_are_json(result)


def test_an_odd_issue_value_is_not_trusted() -> None:
    """An issue value copied from a result is looked at, not trusted: a NaN or a set there sends
    the details to the encode."""
    scorer = ToolResultVerification()
    trajectory = Trajectory(trace_id="t", steps=[ToolCall(id="c1", name="a", error="boom")])
    for odd in (float("nan"), {1}, ["a", 1.5]):
        result = scorer._score(trajectory)
        assert result.call_results and scorer._details_are_json(result)
        result.call_results[0].issues[0].actual = odd
        assert not scorer._details_are_json(result)
