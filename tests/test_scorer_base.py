"""Score, the Scorer base (never raising), the registry and expectation resolution."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_toolscore import semconv
from otel_toolscore.scorers import (
    CODE_SCORERS,
    SCORERS,
    InvalidExpectationError,
    Score,
    Scorer,
    ScorerConfigError,
    ToolCallAccuracy,
    ToolCallValidation,
    ToolResultVerification,
    default_code_scorers,
    get_scorer,
    resolve_expectations,
    run_scorers,
)
from otel_toolscore.scorers.results import CallResult
from otel_toolscore.trajectory import Trajectory
from tests.support.trajectory_factory import make_trajectory


def test_to_dict_has_exactly_the_public_fields() -> None:
    score = Score(name="x", value=0.5, label="fail", explanation="e", details={"a": 1})
    assert score.to_dict() == {
        "name": "x",
        "value": 0.5,
        "label": "fail",
        "explanation": "e",
        "details": {"a": 1},
        "error": None,
    }
    assert score.outcome == "scored"


def test_skipped_score_has_no_value_and_no_error() -> None:
    score = Score.skipped("x", "no expectation")
    assert (score.value, score.label, score.error, score.explanation) == (
        None,
        "skipped",
        None,
        "no expectation",
    )
    assert score.outcome == "skipped"


class _Exploding(Scorer):
    name = "exploding"
    kind = "code"

    def _score(self, trajectory: Trajectory) -> Score:
        raise KeyError("boom")


class _BadDetails(Scorer):
    name = "bad_details"
    kind = "code"

    def _score(self, trajectory: Trajectory) -> Score:
        return Score(name=self.name, value=1.0, details={"s": {1, 2}})


def test_an_exception_inside_a_scorer_becomes_an_error_score() -> None:
    score = _Exploding().score(make_trajectory())
    assert score.value is None and score.label == "error" and score.error == "KeyError"
    assert "boom" in score.explanation
    assert score.outcome == "error"


def test_details_that_are_not_json_become_an_error_score() -> None:
    score = _BadDetails().score(make_trajectory())
    assert score.value is None and score.error == "TypeError"


def test_run_scorers_returns_one_score_per_scorer_even_for_foreign_callables() -> None:
    class Foreign:
        name = "foreign"

        def score(self, trajectory: Any) -> Any:
            return 42  # not a Score

    scores = run_scorers(make_trajectory(), [_Exploding(), Foreign(), _BadDetails()])
    assert [s.name for s in scores] == ["exploding", "foreign", "bad_details"]
    assert [s.error for s in scores] == ["KeyError", "TypeError", "TypeError"]


def test_registry_knows_the_code_scorers() -> None:
    assert set(CODE_SCORERS) <= set(SCORERS)
    assert SCORERS["tool_call_accuracy"] is ToolCallAccuracy
    assert SCORERS["tool_call_validation"] is ToolCallValidation
    assert SCORERS["tool_result_verification"] is ToolResultVerification
    for name in CODE_SCORERS:
        assert SCORERS[name].kind == "code"


def test_get_scorer_builds_with_options_and_rejects_unknown_names() -> None:
    scorer = get_scorer("tool_call_accuracy", expected_tool="a", strict=True)
    assert isinstance(scorer, ToolCallAccuracy) and scorer.strict is True
    with pytest.raises(ScorerConfigError):
        get_scorer("no_such_scorer")


def test_default_code_scorers_leaves_out_accuracy_without_expectation() -> None:
    assert [s.name for s in default_code_scorers()] == [
        "tool_call_validation",
        "tool_result_verification",
    ]
    with_expectation = default_code_scorers(expected_tool="get_weather")
    assert [s.name for s in with_expectation] == list(CODE_SCORERS)
    per_run = default_code_scorers(per_run_expectations=True)
    assert [s.name for s in per_run] == list(CODE_SCORERS)
    # a run without expectations is skipped by the per-run scorer, never scored 0
    scores = run_scorers(make_trajectory([("a", {}, {})]), per_run)
    assert scores[0].label == "skipped" and scores[0].value is None


def test_all_default_scores_serialise_as_json() -> None:
    trajectory = make_trajectory([("a", {"q": 1}, {"v": "x"})], output="x")
    for score in run_scorers(trajectory, default_code_scorers(expected_tool="a")):
        json.dumps(score.to_dict())


# --- expectations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attrs", "tool", "order", "strict"),
    [
        ({semconv.TOOLSCORE_EXPECTED_TOOL: "get_weather"}, "get_weather", None, False),
        ({semconv.TOOLSCORE_EXPECTED_TOOL_ORDER: ["a", "b"]}, None, ("a", "b"), False),
        ({semconv.TOOLSCORE_EXPECTED_TOOL_ORDER: ("a", "b")}, None, ("a", "b"), False),
        ({semconv.TOOLSCORE_EXPECTED_TOOL_ORDER: "a, b ,c"}, None, ("a", "b", "c"), False),
        ({semconv.TOOLSCORE_EXPECTED_TOOL_ORDER: '["a","b"]'}, None, ("a", "b"), False),
        ({semconv.TOOLSCORE_EXPECTED_TOOL: "x", semconv.TOOLSCORE_STRICT: "true"}, "x", None, True),
        (
            {semconv.TOOLSCORE_EXPECTED_TOOL: "x", semconv.TOOLSCORE_STRICT: "FALSE"},
            "x",
            None,
            False,
        ),
        ({semconv.TOOLSCORE_EXPECTED_TOOL: "x", semconv.TOOLSCORE_STRICT: True}, "x", None, True),
    ],
)
def test_expectations_from_the_run(
    attrs: dict[str, Any], tool: str | None, order: tuple[str, ...] | None, strict: bool
) -> None:
    resolved = resolve_expectations(make_trajectory(expectations=attrs))
    assert (resolved.expected_tool, resolved.expected_tool_order, resolved.strict) == (
        tool,
        order,
        strict,
    )
    assert resolved.source == "trajectory"


def test_options_win_over_the_run_and_the_run_strict_does_not_leak_into_them() -> None:
    trajectory = make_trajectory(
        expectations={semconv.TOOLSCORE_EXPECTED_TOOL: "b", semconv.TOOLSCORE_STRICT: "true"}
    )
    resolved = resolve_expectations(trajectory, expected_tool="a")
    assert (resolved.expected_tool, resolved.strict, resolved.source) == ("a", False, "options")
    # an explicit strict option applies to the run's own expectation too
    resolved = resolve_expectations(trajectory, strict=False)
    assert (resolved.expected_tool, resolved.strict) == ("b", False)


def test_no_expectation_anywhere() -> None:
    resolved = resolve_expectations(make_trajectory(), expected_tool_order=[])
    assert not resolved.present and resolved.source is None


def test_unreadable_run_expectation_raises_a_typed_error() -> None:
    trajectory = make_trajectory(
        expectations={semconv.TOOLSCORE_EXPECTED_TOOL: "a", semconv.TOOLSCORE_STRICT: "maybe"}
    )
    with pytest.raises(InvalidExpectationError):
        resolve_expectations(trajectory)


# --- Score.of_code: the instance validation gives, without validating -----------------------------


@settings(max_examples=200, deadline=None)
@given(
    name=st.text(max_size=5),
    value=st.one_of(st.none(), st.floats(allow_nan=False)),
    label=st.sampled_from(["pass", "fail", "no_tool_calls"]),
    explanation=st.text(max_size=8),
    details=st.dictionaries(st.text(max_size=3), st.one_of(st.none(), st.integers(), st.text(max_size=3),
                                                           st.lists(st.integers(), max_size=2)), max_size=3),
    n_calls=st.integers(0, 2),
)
def test_a_code_scorers_score_is_the_validated_one(name: str, value: float | None, label: str, explanation: str,
                                                   details: dict[str, Any], n_calls: int) -> None:
    calls = tuple(CallResult(i, f"c{i}", "t", None, 1.0) for i in range(n_calls))
    built = Score.of_code(name, value, label, explanation, dict(details), calls)
    validated = Score(name=name, value=value, label=label, explanation=explanation, details=dict(details),
                      call_results=calls)
    assert built == validated
    assert built.model_fields_set == validated.model_fields_set
    assert built.model_dump() == validated.model_dump()
    assert built.model_dump_json() == validated.model_dump_json()
    assert repr(built) == repr(validated)
    assert built.calls == validated.calls and built.outcome == validated.outcome
    assert pickle.loads(pickle.dumps(built)) == validated
    changed = built.model_copy(update={"value": 0.5})
    assert changed.value == 0.5 and built.value == value
