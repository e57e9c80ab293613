"""The code scorers on real traces from real instrumentation libraries, against labels.json: the
shared fixtures and this repository's conformance captures (those read exactly; a capture whose
stack's pending.json lists it is not read exactly yet, so its scores would say nothing).

Each fixture file is read (OTLP/JSON), assembled, and its outermost run scored. A failure here is
either a scorer bug or a reader/assembly bug; the message names the stack and scenario.
"""

from __future__ import annotations

import json
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import pytest

from otel_toolscore.assemble import build_trajectories
from otel_toolscore.ingest import read_otlp_json
from otel_toolscore.scorers import ToolCallAccuracy, ToolCallValidation, ToolResultVerification
from otel_toolscore.trajectory import Trajectory
from tests.support.paths import CAPTURES, FIXTURES, trace_id, traces

LABELS_PATH = FIXTURES / "labels.json"
ARGUMENT_ISSUES = frozenset(
    {"missing_required_param", "type_mismatch", "schema_violation", "invalid_arguments"}
)


def _read_exactly(path: Path) -> bool:
    pending = path.parent / "pending.json"
    reasons = json.loads(pending.read_text()) if pending.is_file() else {}
    return path.stem not in reasons and "*" not in reasons


FILES = traces(FIXTURES) + [p for p in traces(CAPTURES) if p.name not in ("labels.json", "stacks.json")
                            and _read_exactly(p)]
IDS = [trace_id(path) for path in FILES]


@lru_cache(maxsize=2)
def _labels(corpus: Path) -> dict[str, Any]:
    return json.loads((corpus / "labels.json").read_text())


@cache
def outermost(path: Path) -> Trajectory:
    runs = [t for t in build_trajectories(read_otlp_json(path)) if not t.nested]
    assert runs, f"{path}: no outermost trajectory assembled"
    return runs[0]


def scenario(path: Path) -> dict[str, Any]:
    return _labels(path.parent.parent)["scenarios"][path.stem]


def issue_types(call_report: dict[str, Any]) -> set[str]:
    return {issue["type"] for issue in call_report["issues"]}


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_tool_call_accuracy_matches_the_labels(path: Path) -> None:
    expected = scenario(path)["expected_scores"]
    tool = scenario(path)["expected_tool"]
    trajectory = outermost(path)
    if tool is None:  # the captures' no_tool: tool_call_accuracy has no "expect no call" mode to check
        assert scenario(path)["expected_tools"] == [] and trajectory.tool_calls == []
        return
    if isinstance(tool, list):  # the captures' sequential_chain: an expected order
        flexible = ToolCallAccuracy(expected_tool_order=tool).score(trajectory)
        strict = ToolCallAccuracy(expected_tool_order=tool, strict=True).score(trajectory)
        assert flexible.value == expected["order_flexible"], flexible.explanation
        assert strict.value == expected["order_strict"], strict.explanation
        return
    non_strict = ToolCallAccuracy(expected_tool=tool).score(trajectory)
    strict = ToolCallAccuracy(expected_tool=tool, strict=True).score(trajectory)
    assert non_strict.value == expected["tool_selection_non_strict"], non_strict.explanation
    assert strict.value == expected["tool_selection_strict"], strict.explanation


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_tool_call_validation_finds_exactly_the_labelled_argument_problems(path: Path) -> None:
    score = ToolCallValidation(schemas=_labels(path.parent.parent)["tool_schemas"]).score(outermost(path))
    assert score.error is None, score.explanation
    reports = score.details["tool_calls"]
    if path.stem == "bad_arguments":
        send = [r for r in reports if r["name"] == "send_email"]
        assert send, f"no send_email call in {[r['name'] for r in reports]}"
        issues = {(i["type"], i["path"]) for i in send[0]["issues"]}
        assert ("missing_required_param", "subject") in issues, issues
        assert ("schema_violation", "to") in issues, issues
        violation = next(i for i in send[0]["issues"] if i["type"] == "schema_violation")
        assert "format" in violation["message"]
        assert send[0]["valid"] is True  # high issues, none critical
    else:
        for report in reports:
            assert not issue_types(report) & ARGUMENT_ISSUES, report
    assert scenario(path)["arguments_valid"] is (path.stem != "bad_arguments")


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_tool_result_verification_matches_the_labels(path: Path) -> None:
    label = scenario(path)
    score = ToolResultVerification().score(outermost(path))
    assert score.error is None, score.explanation
    reports = score.details["tool_calls"]
    found = [issue_types(report) for report in reports]
    if label["tool_call_failed"]:
        assert any("error_result" in types for types in found), found
    else:
        assert not any("error_result" in types for types in found), found
    if not label["hallucinated"]:
        assert not any("hallucinated_content" in types for types in found), reports
    elif path.is_relative_to(CAPTURES):  # the captures' made-up answer states what no result says
        assert any("hallucinated_content" in types for types in found), reports
    # every answer in these scenarios reflects its results honestly
    assert not any("contradicts_response" in types for types in found), reports
    if not path.is_relative_to(CAPTURES):  # the captures' scripted answers need not use every result
        assert all(report["integrated"] for report in reports), reports


CLEAN = [(path, id_) for path, id_ in zip(FILES, IDS, strict=True) if path.stem != "bad_arguments"]


@pytest.mark.parametrize("path", [p for p, _ in CLEAN], ids=[i for _, i in CLEAN])
def test_in_trace_tool_definitions_give_no_false_argument_issues(path: Path) -> None:
    """Without the schemas option the schemas come from the trace; where a stack records none
    (B, D3, M1) the calls are unchecked (docs/scorers.md, "No schema is no penalty"), never argument
    errors in a clean scenario."""
    score = ToolCallValidation().score(outermost(path))
    for report in score.details["tool_calls"]:
        assert not issue_types(report) & ARGUMENT_ISSUES, report
