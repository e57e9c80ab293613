"""A code scorer that says its details are JSON by construction (``Scorer._details_are_json``)
skips the encode ``Scorer.score`` checks them with. Checked here against the long way: on random
trajectories whose ids, names, arguments and expectations are of odd types, the score with the
shortcut is the score without it (an error score where the encode fails), and the shortcut is
taken only for details that encode."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_toolscore.scorers.base import Score
from otel_toolscore.scorers.tool_call_accuracy import ToolCallAccuracy
from otel_toolscore.scorers.tool_validation import ToolCallValidation
from otel_toolscore.trajectory import ToolCall, ToolDefinition, Trajectory
from tests.support.score_shortcuts import assert_scores_as_the_long_way


class _Text(str):
    pass


#: values a hand-built trajectory may hold where the readers put text
_odd = st.one_of(
    st.none(), st.text(max_size=4), st.sampled_from(["a", "b", "\ud800"]), st.builds(_Text, st.sampled_from(["a", "b"])),
    st.integers(-2, 2), st.floats(allow_nan=True), st.just({1}), st.just(b"a"), st.just(("a",)),
)
_arguments = st.one_of(st.none(), st.just("oops"), st.dictionaries(st.sampled_from(["x", "y"]), _odd, max_size=2))
_call = st.builds(ToolCall, id=_odd, name=st.one_of(_odd, st.sampled_from(["a", "b"])), span_id=_odd,
                  arguments=_arguments, has_result=st.booleans(), error=st.one_of(st.none(), st.just("e")))
_schema = st.sampled_from([
    None, {"type": "object"}, {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
    {"type": "object", "properties": {"x": {"minimum": 3}, "y": {"enum": ["a", 1]}}},
])
_expectations = st.fixed_dictionaries({}, optional={
    "toolscore.expected_tool": st.one_of(st.sampled_from(["a", "b"]), st.builds(_Text, st.just("a"))),
    "toolscore.expected_tool_order": st.one_of(st.just("a, b"), st.lists(st.sampled_from(["a", "b"]), max_size=3)),
    "toolscore.strict": st.sampled_from([True, "no"]),
})


@st.composite
def _trajectories(draw: Any) -> Trajectory:
    return Trajectory(
        trace_id="t",
        steps=draw(st.lists(_call, max_size=4)),
        tool_definitions=[ToolDefinition(name=n, parameters=draw(_schema)) for n in ("a", "b")],
        expectations=draw(_expectations),
    )


_SCORERS = [
    ToolCallValidation(),
    ToolCallValidation(strict=True),
    ToolCallAccuracy.from_trajectory_expectations(),
    ToolCallAccuracy(expected_tool_order=["a", "b"], strict=True),
    ToolCallAccuracy(expected_tool=_Text("a")),
]


@settings(max_examples=300, deadline=None)
@given(trajectory=_trajectories())
def test_the_shortcut_scores_as_the_long_way(trajectory: Trajectory) -> None:
    assert_scores_as_the_long_way(_SCORERS, trajectory)


def test_the_shortcut_is_taken_for_plain_runs() -> None:
    """Not a test that cannot fail: without the shortcut taken there is nothing saved."""
    trajectory = Trajectory(trace_id="t", expectations={"toolscore.expected_tool": "a"}, steps=[
        ToolCall(id="c1", name="a", span_id="s1", arguments={"x": "v"}, has_result=True)],
        tool_definitions=[ToolDefinition(name="a", parameters={"type": "object", "properties": {"x": {"type": "string"}}})])
    for scorer in (ToolCallValidation(), ToolCallAccuracy.from_trajectory_expectations()):
        assert scorer._details_are_json(scorer._score(trajectory))


def test_a_subclass_has_its_details_encoded() -> None:
    class Sets(ToolCallValidation):
        def _score(self, trajectory: Trajectory) -> Score:
            result = super()._score(trajectory)
            result.details["odd"] = {1}
            return result

    score = Sets().score(Trajectory(trace_id="t"))
    assert (score.label, score.error) == ("error", "TypeError")
