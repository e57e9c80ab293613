"""``tool_call_accuracy``: did the agent call the expected tool(s)? (docs/scorers.md,
tool_call_accuracy)

Binary and deterministic. Two modes:

* order mode (``expected_tool_order`` non-empty; ``expected_tool`` is then ignored for the
  value): strict = the called sequence equals the expected one exactly; flexible = the expected
  sequence is a subsequence of the called one (a tool expected twice must be called twice, in
  order). This follows the documented relative-order intent, not Mastra's first-occurrence code.
* single-tool mode: non-strict = the expected tool is among the calls; strict = every call goes
  to the expected tool (repeated calls of it pass, as in parallel calls for two cities).

No tool calls → 0. Expectations come from the options, or (``expectations="from_run"``) from
each run's ``toolscore.*`` attributes; a run without any is ``skipped``, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from otel_toolscore.scorers._common import is_text_or_none
from otel_toolscore.scorers.base import (
    LABEL_FAIL,
    LABEL_PASS,
    BuildInputs,
    Expectations,
    InvalidExpectationError,
    Score,
    Scorer,
    ScorerConfigError,
    parse_bool,
    parse_expected_tool,
    parse_tool_order,
    resolve_expectations,
)
from otel_toolscore.scorers.results import CallResult, json_view
from otel_toolscore.trajectory import Trajectory

ExpectationMode = Literal["options", "from_run"]


def is_subsequence(expected: Sequence[str | None], actual: Sequence[str | None]) -> bool:
    """True when ``expected`` appears in ``actual`` in order, other items allowed in between.

    Greedy matching is exact for subsequences: taking the earliest match never rules out a
    later one, so duplicates in ``expected`` need as many ordered occurrences in ``actual``.
    """
    position = 0
    for name in actual:
        if position < len(expected) and name == expected[position]:
            position += 1
    return position == len(expected)


def single_tool_called(expected: str, actual: Sequence[str | None], strict: bool) -> bool:
    if not actual:
        return False
    if strict:
        return all(name == expected for name in actual)
    return expected in actual


class ToolCallAccuracy(Scorer):
    """Binary check of the called tools against an expected tool or tool order."""

    name = "tool_call_accuracy"
    kind = "code"

    def __init__(
        self,
        expected_tool: str | None = None,
        expected_tool_order: Sequence[str] | str | None = None,
        strict: bool | None = None,
        *,
        expectations: ExpectationMode = "options",
    ) -> None:
        if expectations not in ("options", "from_run"):
            raise ScorerConfigError(
                f"expectations must be 'options' or 'from_run', got {expectations!r}"
            )
        try:
            self.expected_tool = parse_expected_tool(expected_tool)
            self.expected_tool_order = parse_tool_order(expected_tool_order)
            self.strict = parse_bool(strict)
        except InvalidExpectationError as exc:
            # the same parsers read run attributes; in options they are configuration mistakes
            raise ScorerConfigError(str(exc)) from exc
        self.expectations: ExpectationMode = expectations
        if expectations == "options" and not (self.expected_tool or self.expected_tool_order):
            raise ScorerConfigError(
                "tool_call_accuracy needs expected_tool or expected_tool_order "
                "(or expectations='from_run' to read them from each run's toolscore.* attributes)"
            )

    @classmethod
    def from_trajectory_expectations(cls, strict: bool | None = None) -> ToolCallAccuracy:
        """The per-run mode: expectations read from each run's ``toolscore.*`` attributes."""
        return cls(strict=strict, expectations="from_run")

    @classmethod
    def from_options(cls, options: dict[str, Any], inputs: BuildInputs) -> ToolCallAccuracy:
        """Named without an expected tool: each run's own expectation (runs without one are skipped)."""
        if options.get("expected_tool") or parse_tool_order(options.get("expected_tool_order")):
            return cls(**options)
        return cls.from_trajectory_expectations(strict=options.get("strict"))

    @classmethod
    def for_default_set(cls, options: dict[str, Any], inputs: BuildInputs) -> ToolCallAccuracy | None:
        """In the default set only with an expectation: given, or each run's own (per run)."""
        expected_tool = options.get("expected_tool")
        order = parse_tool_order(options.get("expected_tool_order"))
        strict = options.get("strict")
        if expected_tool or order:
            return cls(expected_tool=expected_tool, expected_tool_order=order, strict=strict)
        if inputs.per_run_expectations:
            return cls.from_trajectory_expectations(strict=strict)
        return None

    def _score(self, trajectory: Trajectory) -> Score:
        expectation = resolve_expectations(
            trajectory, self.expected_tool, self.expected_tool_order, self.strict
        )
        if not expectation.present:
            return Score.skipped(
                self.name,
                "No expected tool for this run. Set one with a rule in the config file "
                "(rules: [{agent: REGEX, expected_tool: NAME}]), the toolscore.expected_tool / "
                "toolscore.expected_tool_order attribute on the agent span, or the scorer's "
                "expected_tool option (score --expected-tool).",
                details={"expectation_source": None},
            )
        return judge(self.name, trajectory, expectation)

    def _details_are_json(self, result: Score) -> bool:
        # ``judge``'s details (a subclass may write others): flags and names it made, the
        # expectation's names, and each call's id, name and span id; JSON when those are text.
        if type(self) is not ToolCallAccuracy or result.call_results is None:
            return False
        details = result.details
        order = details.get("expected_tool_order")
        return (is_text_or_none(details.get("expected_tool"))
                and (order is None or (type(order) is list and all(type(x) is str for x in order)))
                and all(is_text_or_none(r.call_id) and is_text_or_none(r.name) and is_text_or_none(r.span_id)
                        for r in result.call_results))


def judge(name: str, trajectory: Trajectory, expectation: Expectations) -> Score:
    calls = trajectory.tool_calls
    results = tuple([CalledTool(index, call.id, call.name, call.span_id) for index, call in enumerate(calls)])
    actual = [result.name for result in results]
    strict = expectation.strict
    order = list(expectation.expected_tool_order or ())
    tool = expectation.expected_tool

    correct_tool = single_tool_called(tool, actual, strict) if tool else False
    correct_order: bool | None = None
    if order:
        correct_order = actual == order if strict else is_subsequence(order, actual)
        passed = bool(actual) and correct_order
    else:
        passed = correct_tool

    details: dict[str, Any] = {
        "expected_tool": tool,
        "expected_tool_order": order or None,
        "strict": strict,
        "actual_tools": actual,
        "has_tool_calls": bool(calls),
        "correct_tool_called": correct_tool,
        "correct_order_called": correct_order,
        "tool_calls": json_view(results),
        "expectation_source": expectation.source,
    }
    return Score.of_code(
        name=name,
        value=1.0 if passed else 0.0,
        label=LABEL_PASS if passed else LABEL_FAIL,
        explanation=_explain(actual, tool, order, strict, passed),
        details=details,
        call_results=results,
    )


@dataclass(slots=True)
class CalledTool(CallResult):
    """A call of the run as tool_call_accuracy lists it: no per-call score, no issues."""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.call_id, "name": self.name, "span_id": self.span_id}


def _names(names: Sequence[str | None]) -> str:
    return "[" + ", ".join(name or "<unnamed>" for name in names) + "]"


def _explain(
    actual: Sequence[str | None], tool: str | None, order: list[str], strict: bool, passed: bool
) -> str:
    if not actual:
        wanted = _names(order) if order else repr(tool)
        return f"No tool was called; expected {wanted}."
    called = _names(actual)
    if order:
        if strict:
            verdict = "matches" if passed else "does not match"
            return (
                f"Called {called}, which {verdict} the expected sequence {_names(order)} exactly."
            )
        verdict = "contains" if passed else "does not contain"
        return f"Called {called}, which {verdict} {_names(order)} in that relative order."
    if strict:
        if passed:
            return f"Every call went to the expected tool {tool!r} ({called})."
        return f"Called {called}; strict mode requires every call to go to {tool!r}."
    if passed:
        return f"The expected tool {tool!r} was called ({called})."
    return f"The expected tool {tool!r} was not called ({called})."
