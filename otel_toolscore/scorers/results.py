"""Typed per-call results: what a scorer found about each tool call of a run.

Scorers build them; every output (OpenTelemetry events and metrics, the table, the pytest
plugin's messages) reads them; ``details["tool_calls"]`` is their JSON view (``json_view``).
A scorer with per-call fields of its own subclasses ``CallResult`` and extends ``to_dict``.

A scorer that writes only JSON (a custom one) is read back once, here (``read_call_results``):
the one place that copes with whatever such details hold.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from otel_toolscore.trajectory import ToolCall, Trajectory

#: a call with an issue at least this bad fails (its per-call label, a scorer's pass/fail)
BLOCKING_SEVERITIES = frozenset({"high", "critical"})
SEVERITY_ORDER: dict[str, int] = {"low": 0, "medium": 1, "high": 2, "critical": 3}

_R = TypeVar("_R", bound="CallResult")


@dataclass(slots=True)  # (not frozen: see CallResult)
class Issue:
    """One problem found in one tool call (the ``issues`` entries of per-call details)."""

    type: str
    severity: str
    message: str | None
    path: str | None = None
    expected: Any = None
    actual: Any = None
    #: what would fix it; reported in the call's ``suggestions``, not inside the issue
    suggestion: str | None = None
    #: what a person paged by the issue checks it against: ``sentence`` (of the response),
    #: ``fact`` (as written), ``result`` (the part of the result it contradicts)
    evidence: Mapping[str, str] | None = None

    @property
    def blocking(self) -> bool:
        return self.severity in BLOCKING_SEVERITIES

    def to_dict(self) -> dict[str, Any]:
        out = {
            "type": self.type,
            "severity": self.severity,
            "path": self.path,
            "message": self.message,
            "expected": self.expected,
            "actual": self.actual,
        }
        if self.evidence:
            out.update(self.evidence)
        return out


# Not frozen, though never changed once a scorer returns it: a frozen dataclass sets each field
# through object.__setattr__ (8x the cost of a plain one), and a run builds one per call per scorer.
@dataclass(slots=True)
class CallResult:
    """A scorer's verdict on one tool call of the run it scored."""

    #: position of the call in ``trajectory.tool_calls``
    index: int
    call_id: str | None
    name: str | None
    #: the call's own span, where its per-call event goes; None: the run span
    span_id: str | None
    #: None: the scorer gives this call no score of its own (no per-call event)
    score: float | None = None
    issues: tuple[Issue, ...] = ()

    @classmethod
    def of(cls: type[_R], call: ToolCall, index: int, **fields: Any) -> _R:
        """The result about ``call``, the ``index``-th of its run, identified by the call itself."""
        return cls(index, call.id, call.name, call.span_id, **fields)

    @property
    def blocking(self) -> bool:
        return any(issue.blocking for issue in self.issues)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.call_id,
            "name": self.name,
            "score": self.score,
            "issues": [issue.to_dict() for issue in self.issues],
        }

    def _pinned(self, trajectory: Trajectory, by_id: Mapping[str, ToolCall]) -> CallResult:
        """This result with the call it is about: a scorer's own results know it already."""
        return self


def json_view(results: Iterable[CallResult]) -> list[dict[str, Any]]:
    """``details["tool_calls"]``: the results as JSON."""
    return [result.to_dict() for result in results]


def pin_to_calls(results: Sequence[CallResult], trajectory: Trajectory) -> list[CallResult]:
    """Each result with the name, id and span of the run's call it is about, for the outputs
    that attach a result to the call's span."""
    if not any(isinstance(result, _ReadBack) for result in results):
        return list(results)
    by_id: dict[str, ToolCall] = {}
    for call in trajectory.tool_calls:  # the first call with each id, built once per run
        if call.id is not None:
            by_id.setdefault(call.id, call)
    return [result._pinned(trajectory, by_id) for result in results]


# --- JSON written by a scorer that gives no typed results ---------------------------------------


@dataclass(slots=True)
class _ReadBack(CallResult):
    """A result read back from a JSON-only scorer's details: its call is what the JSON claims."""

    def _pinned(self, trajectory: Trajectory, by_id: Mapping[str, ToolCall]) -> CallResult:
        # The JSON names the call by id, else by its position (scorers report calls in run
        # order); the name check keeps a report from being pinned on the wrong span.
        call = by_id.get(self.call_id) if self.call_id is not None else None
        if call is None and self.index < len(trajectory.tool_calls):
            at = trajectory.tool_calls[self.index]
            if self.name is None or at.name is None or at.name == self.name:
                call = at
        if call is None:
            return self
        return replace(self, name=self.name or call.name, call_id=self.call_id or call.id, span_id=call.span_id)


def read_call_results(details: Any) -> tuple[CallResult, ...]:
    """The per-call results in a details mapping (``tool_calls``: a list of objects with
    ``tool_call_id``, ``name``, ``score``, ``issues``), anything else left out."""
    calls = details.get("tool_calls") if isinstance(details, Mapping) else None
    if not isinstance(calls, (list, tuple)):
        return ()
    return tuple(
        _read_call(index, report) for index, report in enumerate(calls) if isinstance(report, Mapping)
    )


def _read_call(index: int, report: Mapping[str, Any]) -> CallResult:
    issues = report.get("issues")
    return _ReadBack(
        index=index,
        call_id=_text(report.get("tool_call_id")),
        name=_text(report.get("name")),
        span_id=None,
        score=_number(report.get("score")),
        issues=tuple(_read_issue(i) for i in issues if isinstance(i, Mapping))
        if isinstance(issues, (list, tuple)) else (),
    )


def _read_issue(issue: Mapping[str, Any]) -> Issue:
    path = issue.get("path")
    message = issue.get("message")
    return Issue(
        type=str(issue.get("type")),
        severity=str(issue.get("severity")),
        message=message if message is None or isinstance(message, str) else str(message),
        path=str(path) if path else None,
        expected=issue.get("expected"),
        actual=issue.get("actual"),
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> float | None:
    # bool is an int; a True "score" in details would be a scorer bug, not a score of 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


__all__ = [
    "BLOCKING_SEVERITIES",
    "SEVERITY_ORDER",
    "CallResult",
    "Issue",
    "json_view",
    "pin_to_calls",
    "read_call_results",
]
