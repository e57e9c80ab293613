"""The scorer registry (one line per scorer) and the typed per-call results every output reads."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

from otel_toolscore.config import ToolScoreSettings
from otel_toolscore.outputs.otel import Emitter
from otel_toolscore.scorers import SCORERS, Score, ToolCallValidation, default_code_scorers
from otel_toolscore.scorers.base import build_scorers
from otel_toolscore.scorers.registry import BUILTIN, CODE_SCORERS, LLM_SCORERS, ScorerEntry, column
from otel_toolscore.scorers.results import BLOCKING_SEVERITIES, CallResult, Issue, json_view
from otel_toolscore.scorers.run import run_scorers
from tests.support.pipeline import InMemoryLogExporter
from tests.support.trajectory_factory import make_call, make_trajectory


@pytest.mark.parametrize("entry", BUILTIN, ids=lambda e: e.name)
def test_every_line_names_a_class_of_that_name_and_kind(entry: ScorerEntry) -> None:
    cls = entry.load()
    assert (cls.name, cls.kind) == (entry.name, entry.kind)
    assert SCORERS[entry.name] is cls


def test_a_line_that_disagrees_with_its_class_fails_when_read() -> None:
    wrong = ScorerEntry("tool_call_accuracy", "llm", "tool_call_accuracy:ToolCallAccuracy", "accuracy")
    with pytest.raises(TypeError, match="registry line"):
        wrong.load()


def test_kinds_and_columns_come_from_the_registry() -> None:
    assert set(CODE_SCORERS) | set(LLM_SCORERS) == {e.name for e in BUILTIN}
    assert [s.name for s in build_scorers(None)] == list(CODE_SCORERS)
    assert column("tool_call_validation") == "arguments"
    assert column("my_own_scorer") == "my_own_scorer"


def _run() -> Any:
    return make_trajectory(
        [("get_weather", {"city": 1}, None), ("send_email", {"to": "a@b.c"}, {"ok": True})],
        output="It is 12°C and sunny.",
    )


def test_details_are_the_json_view_of_the_typed_results() -> None:
    trajectory = _run()
    for score in run_scorers(trajectory, default_code_scorers(expected_tool="get_weather")):
        assert score.call_results is not None, score.name
        assert score.details["tool_calls"] == json_view(score.call_results)
        assert [r.index for r in score.calls] == list(range(len(trajectory.tool_calls)))
        assert [r.span_id for r in score.calls] == [c.span_id for c in trajectory.tool_calls]
        # the typed results stay out of the JSON a score is written as
        assert "call_results" not in score.to_dict()
        json.dumps(score.to_dict())


def test_blocking_is_high_or_critical() -> None:
    assert BLOCKING_SEVERITIES == {"high", "critical"}
    issue = Issue("type_mismatch", "high", "bad")
    assert issue.blocking and not Issue("empty_result", "low", "").blocking
    result = CallResult(index=0, call_id=None, name="x", span_id=None, score=0.3, issues=(issue,))
    assert result.blocking


def test_json_only_details_are_read_back_once() -> None:
    score = Score(name="custom", value=0.5, details={"tool_calls": [
        "junk",
        {"tool_call_id": "c1", "name": "a", "score": 0.4, "issues": [
            {"type": "x", "severity": "high", "message": "m", "path": "p"}, "junk"]},
        {"name": 5, "score": True, "issues": {"not": "a list"}},
    ]})  # fmt: skip
    first, second = score.calls
    assert (first.index, first.call_id, first.name, first.score) == (1, "c1", "a", 0.4)
    assert first.issues == (Issue("x", "high", "m", path="p"),) and first.blocking
    assert (second.index, second.name, second.score, second.issues) == (2, None, None, ())
    assert Score(name="odd", details={"tool_calls": {"a": 1}}).calls == ()


def test_per_call_events_go_to_the_calls_own_span_even_when_ids_repeat() -> None:
    # Some runs reuse a call id (tau-bench has a few): the result knows its call, so the event
    # of the second call is not pinned on the first call's span.
    calls = [make_call("a", {}, "x", index=i, id="same", span_id=f"{i + 1:016x}") for i in range(2)]
    trajectory = make_trajectory(calls)
    exporter = InMemoryLogExporter()
    logs = LoggerProvider()
    logs.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    # every scored call, clean ones included (the default sends only calls with issues)
    emitter = Emitter(ToolScoreSettings(metrics=False, call_events="all"), logger_provider=logs)
    # (a schema for "a": a call with no schema known is unchecked, and gets no event of its own)
    emitter.emit_events(trajectory, [ToolCallValidation(schemas={"a": {"type": "object"}}).score(trajectory)])
    _run, *per_call = exporter.get_finished_logs()
    assert [format(r.log_record.span_id, "016x") for r in per_call] == [c.span_id for c in calls]
    logs.shutdown()
