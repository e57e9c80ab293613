"""tool_call_accuracy (docs/scorers.md), worked examples included."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_toolscore import semconv
from otel_toolscore.scorers import ScorerConfigError, ToolCallAccuracy
from otel_toolscore.scorers.tool_call_accuracy import is_subsequence
from otel_toolscore.trajectory import Trajectory
from tests.support.trajectory_factory import make_trajectory


def calls(*tool_names: str) -> Trajectory:
    return make_trajectory([(name, {}, {}) for name in tool_names])


def value(trajectory: Trajectory, **options: Any) -> float | None:
    return ToolCallAccuracy(**options).score(trajectory).value


# Every worked example of docs/scorers.md, tool_call_accuracy: (options, calls, non-strict/flexible, strict).
WORKED_EXAMPLES = [
    ({"expected_tool": "weather"}, ["search", "weather", "calendar"], 1, 0),
    ({"expected_tool": "weather"}, ["weather", "weather"], 1, 1),
    ({"expected_tool": "weather"}, [], 0, 0),
    ({"expected_tool_order": ["search", "weather"]}, ["search", "log", "weather"], 1, 0),
    ({"expected_tool_order": ["search", "weather", "calendar"]}, ["search", "weather"], 0, 0),
    ({"expected_tool_order": ["auth", "fetch"]}, ["fetch", "auth"], 0, 0),
    ({"expected_tool_order": ["A", "B"]}, ["B", "A", "B"], 1, 0),
    ({"expected_tool_order": ["A", "A"]}, ["A", "B", "A"], 1, 0),
]


@pytest.mark.parametrize(("options", "called", "flexible", "strict"), WORKED_EXAMPLES)
def test_worked_examples(
    options: dict[str, Any], called: list[str], flexible: int, strict: int
) -> None:
    trajectory = calls(*called)
    assert value(trajectory, **options) == flexible
    assert value(trajectory, strict=True, **options) == strict


def test_labels_follow_the_value() -> None:
    assert ToolCallAccuracy(expected_tool="a").score(calls("a")).label == "pass"
    assert ToolCallAccuracy(expected_tool="a").score(calls("b")).label == "fail"


def test_order_equal_sequence_passes_strict() -> None:
    assert value(calls("auth", "fetch"), expected_tool_order=["auth", "fetch"], strict=True) == 1


def test_order_mode_ignores_expected_tool() -> None:
    trajectory = calls("a", "b")
    assert value(trajectory, expected_tool="zzz", expected_tool_order=["a", "b"]) == 1


def test_no_calls_in_order_mode_is_zero() -> None:
    assert value(calls(), expected_tool_order=["a"]) == 0


def test_details_single_mode() -> None:
    trajectory = calls("search", "weather")
    score = ToolCallAccuracy(expected_tool="weather", strict=True).score(trajectory)
    details = score.details
    assert details["expected_tool"] == "weather"
    assert details["expected_tool_order"] is None
    assert details["strict"] is True
    assert details["actual_tools"] == ["search", "weather"]
    assert details["has_tool_calls"] is True
    assert details["correct_tool_called"] is False  # strict-aware
    assert details["correct_order_called"] is None
    assert details["tool_calls"] == [
        {"id": "call_0", "name": "search", "span_id": "span000000000000"},
        {"id": "call_1", "name": "weather", "span_id": "span000000000001"},
    ]
    assert set(details) >= {
        "expected_tool",
        "expected_tool_order",
        "strict",
        "actual_tools",
        "has_tool_calls",
        "correct_tool_called",
        "correct_order_called",
        "tool_calls",
    }


def test_details_order_mode() -> None:
    details = ToolCallAccuracy(expected_tool_order="a,b").score(calls("a", "x", "b")).details
    assert details["expected_tool_order"] == ["a", "b"]
    assert details["correct_order_called"] is True
    assert details["correct_tool_called"] is False  # no expected_tool in order mode
    with_tool = ToolCallAccuracy(expected_tool="x", expected_tool_order=["a", "b"])
    assert with_tool.score(calls("a", "x", "b")).details["correct_tool_called"] is True


def test_no_calls_details() -> None:
    score = ToolCallAccuracy(expected_tool="a").score(calls())
    assert score.value == 0 and score.details["has_tool_calls"] is False
    assert "No tool was called" in score.explanation


# --- configuration and expectations ---------------------------------------------------------


def test_no_expectation_is_a_configuration_error() -> None:
    with pytest.raises(ScorerConfigError):
        ToolCallAccuracy()
    with pytest.raises(ScorerConfigError):
        ToolCallAccuracy(expected_tool_order=[], strict=True)
    with pytest.raises(ScorerConfigError):
        ToolCallAccuracy(expected_tool="a", strict="perhaps")  # type: ignore[arg-type]


def test_per_run_mode_skips_runs_without_expectations() -> None:
    scorer = ToolCallAccuracy.from_trajectory_expectations()
    score = scorer.score(calls("a"))
    assert score.value is None and score.label == "skipped" and score.error is None
    assert ToolCallAccuracy(expectations="from_run").score(calls()).label == "skipped"


@pytest.mark.parametrize(
    ("attrs", "called", "expected"),
    [
        ({semconv.TOOLSCORE_EXPECTED_TOOL: "a"}, ["a", "b"], 1.0),
        ({semconv.TOOLSCORE_EXPECTED_TOOL: "a", semconv.TOOLSCORE_STRICT: "true"}, ["a", "b"], 0.0),
        ({semconv.TOOLSCORE_EXPECTED_TOOL: "a", semconv.TOOLSCORE_STRICT: True}, ["a", "a"], 1.0),
        ({semconv.TOOLSCORE_EXPECTED_TOOL_ORDER: ["a", "b"]}, ["a", "x", "b"], 1.0),
        ({semconv.TOOLSCORE_EXPECTED_TOOL_ORDER: "a,b"}, ["a", "x", "b"], 1.0),
        (
            {semconv.TOOLSCORE_EXPECTED_TOOL_ORDER: "a,b", semconv.TOOLSCORE_STRICT: "true"},
            ["a", "x", "b"],
            0.0,
        ),
    ],
)
def test_expectations_from_the_trajectory(
    attrs: dict[str, Any], called: list[str], expected: float
) -> None:
    trajectory = make_trajectory([(n, {}, {}) for n in called], expectations=attrs)
    score = ToolCallAccuracy.from_trajectory_expectations().score(trajectory)
    assert score.value == expected
    assert score.details["expectation_source"] == "trajectory"


def test_options_override_trajectory_expectations() -> None:
    trajectory = make_trajectory(
        [("b", {}, {})], expectations={semconv.TOOLSCORE_EXPECTED_TOOL: "a"}
    )
    assert ToolCallAccuracy(expected_tool="b").score(trajectory).value == 1.0
    scorer = ToolCallAccuracy(expected_tool="b", expectations="from_run")
    assert scorer.score(trajectory).value == 1.0


def test_unreadable_trajectory_expectation_is_an_error_not_a_score() -> None:
    trajectory = make_trajectory(
        [("a", {}, {})],
        expectations={semconv.TOOLSCORE_EXPECTED_TOOL: "a", semconv.TOOLSCORE_STRICT: "maybe"},
    )
    score = ToolCallAccuracy.from_trajectory_expectations().score(trajectory)
    assert score.value is None and score.error == "invalid_expectation"


def test_broken_trajectory_gives_an_error_score(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(self: Trajectory) -> list[Any]:
        raise RuntimeError("reader bug")

    monkeypatch.setattr(Trajectory, "tool_calls", property(explode))
    score = ToolCallAccuracy(expected_tool="a").score(make_trajectory())
    assert score.value is None and score.label == "error" and score.error == "RuntimeError"


def test_unnamed_calls_never_match() -> None:
    trajectory = make_trajectory([(None, {}, {})])
    assert value(trajectory, expected_tool="a") == 0
    assert ToolCallAccuracy(expected_tool="a").score(trajectory).details["actual_tools"] == [None]


# --- properties -------------------------------------------------------------------------------

TOOLS = st.sampled_from(["a", "b", "c", "d"])


@st.composite
def sequence_and_subsequence(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    actual = draw(st.lists(TOOLS, min_size=1, max_size=8))
    keep = draw(st.lists(st.booleans(), min_size=len(actual), max_size=len(actual)))
    expected = [name for name, k in zip(actual, keep, strict=True) if k]
    return actual, expected or actual[:1]


@given(sequence_and_subsequence())
def test_any_subsequence_scores_one_in_flexible_mode(pair: tuple[list[str], list[str]]) -> None:
    actual, expected = pair
    assert value(calls(*actual), expected_tool_order=expected) == 1


@given(st.lists(TOOLS, max_size=8), st.lists(TOOLS, min_size=1, max_size=4))
def test_strict_pass_implies_flexible_pass(actual: list[str], expected: list[str]) -> None:
    trajectory = calls(*actual)
    strict = value(trajectory, expected_tool_order=expected, strict=True)
    flexible = value(trajectory, expected_tool_order=expected)
    assert strict <= flexible  # type: ignore[operator]
    assert (strict == 1) == (actual == expected)


@given(st.lists(TOOLS, max_size=8), TOOLS)
def test_single_tool_strict_implies_non_strict(actual: list[str], expected: str) -> None:
    trajectory = calls(*actual)
    strict = value(trajectory, expected_tool=expected, strict=True)
    assert strict <= value(trajectory, expected_tool=expected)  # type: ignore[operator]
    assert (strict == 1) == (bool(actual) and set(actual) == {expected})


@given(st.lists(TOOLS, max_size=8), st.lists(TOOLS, max_size=4))
def test_is_subsequence_matches_a_brute_force_definition(
    actual: list[str], expected: list[str]
) -> None:
    from itertools import combinations

    brute = any(
        [actual[i] for i in idx] == expected
        for idx in combinations(range(len(actual)), len(expected))
    )
    assert is_subsequence(expected, actual) == brute
