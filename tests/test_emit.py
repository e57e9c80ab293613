"""outputs/otel.py against the real SDK pieces: in-memory metric reader, log exporter, span exporter and
the OTLP encoders. Exact names, attributes, values and parenting; each switch turns its output
off; nothing raises."""

from __future__ import annotations

import gc
import logging
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider

try:  # SDK >= 1.38; the lowest SDK this package supports (1.37) has LogData
    from opentelemetry.sdk._logs import ReadableLogRecord
except ImportError:  # pragma: no cover - tests/constraints-min.txt
    from opentelemetry.sdk._logs import LogData as ReadableLogRecord  # type: ignore[assignment]
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import otel_toolscore
from otel_toolscore.config import ConfigError, ToolScoreSettings, load_settings
from otel_toolscore.outputs import _prepare as otel_prepare
from otel_toolscore.outputs import otel as otel_outputs
from otel_toolscore.outputs.otel import SCORE_BUCKETS, Emitter, truncate
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
from otel_toolscore.scorers import ToolCallValidation
from otel_toolscore.scorers.base import Score
from otel_toolscore.trajectory import ToolCall, Trajectory
from tests.support.pipeline import InMemoryLogExporter as InMemoryLogRecordExporter

AGENT = "weather-agent"
TOOL_SPAN_1 = "00000000000000a1"
EXPLANATION = "1 of 2 tool call(s) have issues: missing_required_param ×1."

ACCURACY = Score(
    name="tool_call_accuracy", value=1.0, label="pass", explanation="Called get_weather."
)
VALIDATION = Score(
    name="tool_call_validation",
    value=0.65,
    label="fail",
    explanation=EXPLANATION,
    details={
        "tool_calls": [
            {"tool_call_id": "call_1", "name": "get_weather", "score": 1.0, "issues": []},
            {
                "tool_call_id": "call_2",
                "name": "send_email",
                "score": 0.3,
                "issues": [
                    {
                        "type": "missing_required_param",
                        "severity": "high",
                        "message": "'to' is required",
                    },
                    {"type": "type_mismatch", "severity": "medium", "message": "bad subject"},
                ],
            },
        ],
        "issue_counts": {"missing_required_param": 1, "type_mismatch": 1},
    },
)
SKIPPED = Score.skipped("tool_call_accuracy", "No expected tool for this run.")
ERROR = Score.failed("tool_result_verification", RuntimeError("boom"))


#: no OTEL_* variable of the machine running the tests leaks in
pytestmark = pytest.mark.usefixtures("clean_otel_env")


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def meter_provider(reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    provider = MeterProvider(metric_readers=[reader])
    yield provider
    provider.shutdown()


@pytest.fixture
def log_exporter() -> InMemoryLogRecordExporter:
    return InMemoryLogRecordExporter()


@pytest.fixture
def logger_provider(log_exporter: InMemoryLogRecordExporter) -> Iterator[LoggerProvider]:
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def make_emitter(meter_provider: MeterProvider, logger_provider: LoggerProvider) -> Any:
    def make(**settings: Any) -> Emitter:
        return Emitter(
            ToolScoreSettings(**settings),
            meter_provider=meter_provider,
            logger_provider=logger_provider,
        )

    return make


@pytest.fixture
def agent_span() -> ReadableSpan:
    """A real finished agent span, as the processor would hold it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-app"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("app").start_as_current_span(f"invoke_agent {AGENT}"):
        pass
    (span,) = exporter.get_finished_spans()
    return span


@pytest.fixture
def trajectory(agent_span: ReadableSpan) -> Trajectory:
    assert agent_span.context is not None
    return Trajectory(
        trace_id=format(agent_span.context.trace_id, "032x"),
        span_id=format(agent_span.context.span_id, "016x"),
        agent_name=AGENT,
        input="Weather in Paris, then mail it to me",
        steps=[
            ToolCall(id="call_1", name="get_weather", span_id=TOOL_SPAN_1),
            ToolCall(id="call_2", name="send_email", span_id=None),
        ],
    )


def metrics(reader: InMemoryMetricReader) -> dict[str, Any]:
    data = reader.get_metrics_data()
    if data is None:
        return {}
    return {
        metric.name: metric
        for resource_metrics in data.resource_metrics
        for scope_metrics in resource_metrics.scope_metrics
        for metric in scope_metrics.metrics
    }


def points(reader: InMemoryMetricReader, name: str) -> dict[frozenset[Any], Any]:
    metric = metrics(reader)[name]
    return {frozenset(dict(p.attributes or {}).items()): p for p in metric.data.data_points}


def attrs(record: ReadableLogRecord) -> dict[str, Any]:
    return dict(record.log_record.attributes or {})


# --- span attributes --------------------------------------------------------------------------


def test_span_attributes(make_emitter: Any) -> None:
    emitter = make_emitter()
    assert emitter.span_attributes([ACCURACY, VALIDATION, ERROR]) == {
        "toolscore.tool_call_accuracy.score": 1.0,
        "toolscore.tool_call_accuracy.label": "pass",
        "toolscore.tool_call_accuracy.explanation": "Called get_weather.",
        "toolscore.tool_call_validation.score": 0.65,
        "toolscore.tool_call_validation.label": "fail",
        "toolscore.tool_call_validation.explanation": EXPLANATION,
        "toolscore.tool_result_verification.label": "error",
        "toolscore.tool_result_verification.explanation": (
            "Scorer tool_result_verification failed: boom"
        ),
        "toolscore.tool_result_verification.error": "RuntimeError",
    }


def test_skipped_and_error_scores_carry_no_value(make_emitter: Any) -> None:
    emitter = make_emitter()
    assert emitter.span_attributes([SKIPPED]) == {
        "toolscore.tool_call_accuracy.label": "skipped",
        "toolscore.tool_call_accuracy.explanation": "No expected tool for this run.",
    }
    attributes = emitter.span_attributes([ERROR])
    assert "toolscore.tool_result_verification.score" not in attributes
    assert attributes["toolscore.tool_result_verification.error"] == "RuntimeError"
    # no label given, no value, no error: the outcome still shows as "skipped"
    bare = Score(name="x")
    assert emitter.span_attributes([bare]) == {"toolscore.x.label": "skipped"}


def test_explanation_is_truncated_with_ellipsis(make_emitter: Any) -> None:
    emitter = make_emitter(explanation_max_chars=10)
    score = Score(name="s", value=0.5, label="fail", explanation="abcdefghijKLMNOP")
    explanation = emitter.span_attributes([score])["toolscore.s.explanation"]
    assert explanation == "abcdefghi…" and len(explanation) == 10
    exact = Score(name="s", value=0.5, explanation="abcdefghij")
    assert emitter.span_attributes([exact])["toolscore.s.explanation"] == "abcdefghij"
    assert truncate("abc", 1) == "…"


def test_span_attributes_switch(make_emitter: Any) -> None:
    assert make_emitter(span_attributes=False).span_attributes([ACCURACY]) == {}


# --- evaluation span --------------------------------------------------------------------------


def test_evaluation_span_one_score(
    make_emitter: Any, trajectory: Trajectory, agent_span: ReadableSpan
) -> None:
    (span,) = make_emitter().evaluation_spans(trajectory, [VALIDATION], agent_span)
    assert span.context is not None and agent_span.context is not None
    assert span.name == "evaluation tool_call_validation"
    assert span.parent == agent_span.context
    assert span.context.trace_id == agent_span.context.trace_id
    assert span.context.span_id not in (0, agent_span.context.span_id)
    assert span.context.trace_flags == agent_span.context.trace_flags
    assert [link.context for link in span.links] == [agent_span.context]
    assert span.resource is agent_span.resource
    assert span.instrumentation_scope is not None
    assert span.instrumentation_scope.name == "otel_toolscore"
    assert span.instrumentation_scope.version == otel_toolscore.__version__
    assert span.kind is SpanKind.INTERNAL
    assert span.status.status_code is StatusCode.UNSET
    assert span.start_time is not None and span.start_time == span.end_time
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "evaluation",
        "openinference.span.kind": "EVALUATOR",
        "gen_ai.evaluation.name": "tool_call_validation",
        "gen_ai.evaluation.score.value": 0.65,
        "gen_ai.evaluation.score.label": "fail",
        "gen_ai.evaluation.explanation": EXPLANATION,
        "gen_ai.agent.name": AGENT,
        "evaluations.0.evaluation.name": "tool_call_validation",
        "evaluations.0.evaluation.score": 0.65,
        "evaluations.0.evaluation.label": "fail",
        "evaluations.0.evaluation.explanation": EXPLANATION,
    }


def test_several_scores_are_one_span_each_searchable_by_gen_ai_evaluation_name(
    make_emitter: Any, trajectory: Trajectory, agent_span: ReadableSpan
) -> None:
    emitter = make_emitter(explanation_max_chars=8)
    spans = emitter.evaluation_spans(trajectory, [ACCURACY, SKIPPED, ERROR], agent_span)
    assert [s.name for s in spans] == [
        "evaluation tool_call_accuracy", "evaluation tool_call_accuracy", "evaluation tool_result_verification"]
    assert len({s.context.span_id for s in spans}) == 3
    assert all(s.parent == agent_span.context for s in spans)
    assert [dict(s.attributes or {}) for s in spans] == [
        {
            "gen_ai.operation.name": "evaluation",
            "openinference.span.kind": "EVALUATOR",
            "gen_ai.agent.name": AGENT,
            "gen_ai.evaluation.name": "tool_call_accuracy",
            "gen_ai.evaluation.score.value": 1.0,
            "gen_ai.evaluation.score.label": "pass",
            "gen_ai.evaluation.explanation": "Called …",
            "evaluations.0.evaluation.name": "tool_call_accuracy",
            "evaluations.0.evaluation.score": 1.0,
            "evaluations.0.evaluation.label": "pass",
            "evaluations.0.evaluation.explanation": "Called …",
        },
        {
            "gen_ai.operation.name": "evaluation",
            "openinference.span.kind": "EVALUATOR",
            "gen_ai.agent.name": AGENT,
            "gen_ai.evaluation.name": "tool_call_accuracy",
            "gen_ai.evaluation.score.label": "skipped",
            "gen_ai.evaluation.explanation": "No expe…",
            "evaluations.0.evaluation.name": "tool_call_accuracy",
            "evaluations.0.evaluation.label": "skipped",
            "evaluations.0.evaluation.explanation": "No expe…",
        },
        {
            "gen_ai.operation.name": "evaluation",
            "openinference.span.kind": "EVALUATOR",
            "gen_ai.agent.name": AGENT,
            "gen_ai.evaluation.name": "tool_result_verification",
            "gen_ai.evaluation.score.label": "error",
            "gen_ai.evaluation.explanation": "Scorer …",
            "error.type": "RuntimeError",
            "evaluations.0.evaluation.name": "tool_result_verification",
            "evaluations.0.evaluation.label": "error",
            "evaluations.0.evaluation.explanation": "Scorer …",
        },
    ]
    # what a Jaeger/Tempo search "gen_ai.evaluation.name=… gen_ai.evaluation.score.label=fail" matches
    found = [s for s in spans if s.attributes.get("gen_ai.evaluation.score.label") == "pass"
             and s.attributes.get("gen_ai.evaluation.name") == "tool_call_accuracy"]
    assert found == [spans[0]]


def test_evaluation_span_error_score_has_error_type(
    make_emitter: Any, trajectory: Trajectory, agent_span: ReadableSpan
) -> None:
    (span,) = make_emitter().evaluation_spans(trajectory, [ERROR], agent_span)
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "RuntimeError"
    assert "gen_ai.evaluation.score.value" not in attributes
    assert span.status.status_code is StatusCode.UNSET


def test_evaluation_spans_go_through_a_real_exporter_and_encoder(
    make_emitter: Any, trajectory: Trajectory, agent_span: ReadableSpan
) -> None:
    spans = make_emitter().evaluation_spans(trajectory, [ACCURACY, VALIDATION], agent_span)
    assert len(spans) == 2
    exporter = InMemorySpanExporter()
    for span in spans:
        SimpleSpanProcessor(exporter).on_end(span)
    assert exporter.get_finished_spans() == tuple(spans)
    request = encode_spans(spans)
    encoded = request.resource_spans[0].scope_spans[0].spans
    assert agent_span.context is not None
    assert len(encoded) == 2
    for one in encoded:
        assert one.parent_span_id == agent_span.context.span_id.to_bytes(8, "big")
        assert one.links[0].span_id == one.parent_span_id
        names = {kv.key: kv.value.string_value for kv in one.attributes}
        assert names["gen_ai.operation.name"] == "evaluation"
    assert request.resource_spans[0].scope_spans[0].scope.name == "otel_toolscore"


def test_evaluation_span_switch_and_empty(
    make_emitter: Any, trajectory: Trajectory, agent_span: ReadableSpan
) -> None:
    assert make_emitter(evaluation_spans=False).evaluation_spans(
        trajectory, [ACCURACY], agent_span
    ) == []
    assert make_emitter().evaluation_spans(trajectory, [], agent_span) == []


def test_each_evaluation_span_gets_a_new_id(
    make_emitter: Any, trajectory: Trajectory, agent_span: ReadableSpan
) -> None:
    emitter = make_emitter()
    ids = {emitter.evaluation_spans(trajectory, [ACCURACY], agent_span)[0].context.span_id
           for _ in range(20)}  # fmt: skip
    assert len(ids) == 20


# --- events -----------------------------------------------------------------------------------


def test_events_one_per_score_parented_to_the_run_span(
    make_emitter: Any, log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory
) -> None:
    make_emitter().emit_events(trajectory, [ACCURACY, SKIPPED, ERROR])
    records = log_exporter.get_finished_logs()
    assert len(records) == 3
    for record in records:
        assert record.log_record.event_name == "gen_ai.evaluation.result"
        assert format(record.log_record.trace_id, "032x") == trajectory.trace_id
        assert format(record.log_record.span_id, "016x") == trajectory.span_id
        assert record.instrumentation_scope is not None
        assert record.instrumentation_scope.name == "otel_toolscore"
    accuracy, skipped, error = records
    assert attrs(accuracy) == {
        "gen_ai.evaluation.name": "tool_call_accuracy",
        "gen_ai.evaluation.score.value": 1.0,
        "gen_ai.evaluation.score.label": "pass",
        "gen_ai.evaluation.explanation": "Called get_weather.",
        "gen_ai.agent.name": AGENT,
    }
    assert accuracy.log_record.severity_number is SeverityNumber.INFO
    assert attrs(skipped) == {
        "gen_ai.evaluation.name": "tool_call_accuracy",
        "gen_ai.evaluation.score.label": "skipped",
        "gen_ai.evaluation.explanation": "No expected tool for this run.",
        "gen_ai.agent.name": AGENT,
    }
    assert attrs(error) == {
        "gen_ai.evaluation.name": "tool_result_verification",
        "gen_ai.evaluation.score.label": "error",
        "gen_ai.evaluation.explanation": "Scorer tool_result_verification failed: boom",
        "error.type": "RuntimeError",
        "gen_ai.agent.name": AGENT,
    }
    assert error.log_record.severity_number is SeverityNumber.WARN


def test_per_call_events_parented_to_tool_spans(
    make_emitter: Any, log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory
) -> None:
    make_emitter(call_events="all").emit_events(trajectory, [VALIDATION])
    run, call_1, call_2 = log_exporter.get_finished_logs()
    assert attrs(run)["gen_ai.evaluation.score.value"] == 0.65
    assert format(call_1.log_record.span_id, "016x") == TOOL_SPAN_1
    assert format(call_1.log_record.trace_id, "032x") == trajectory.trace_id
    assert attrs(call_1) == {
        "gen_ai.evaluation.name": "tool_call_validation",
        "gen_ai.evaluation.score.value": 1.0,
        "gen_ai.evaluation.score.label": "pass",
        "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.agent.name": AGENT,
    }
    # call_2 ran under no span of its own: its result sits on the run span
    assert format(call_2.log_record.span_id, "016x") == trajectory.span_id
    assert attrs(call_2) == {
        "gen_ai.evaluation.name": "tool_call_validation",
        "gen_ai.evaluation.score.value": 0.3,
        "gen_ai.evaluation.score.label": "fail",  # a high-severity issue
        "gen_ai.evaluation.explanation": "missing_required_param: 'to' is required; "
        "type_mismatch: bad subject",
        "gen_ai.tool.name": "send_email",
        "gen_ai.tool.call.id": "call_2",
        "gen_ai.agent.name": AGENT,
    }
    for record in (run, call_1, call_2):
        assert record.log_record.event_name == "gen_ai.evaluation.result"


def test_per_call_matching_by_index_when_ids_are_missing(
    make_emitter: Any, log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory
) -> None:
    no_ids = trajectory.model_copy(
        update={"steps": [ToolCall(name="get_weather", span_id=TOOL_SPAN_1),
                          ToolCall(name="send_email", span_id="00000000000000b2")]}
    )  # fmt: skip
    score = Score(
        name="tool_result_verification",
        value=0.5,
        label="fail",
        details={"tool_calls": [
            {"tool_call_id": None, "name": "get_weather", "score": 0.8,
             "issues": [{"type": "missing_result", "severity": "medium"}]},
            {"tool_call_id": None, "name": "other_tool", "score": 0.2, "issues": []},
            {"tool_call_id": None, "name": "x", "score": "not a number", "issues": []},
        ]},
    )  # fmt: skip
    make_emitter().emit_events(no_ids, [score])
    _run, first, second = log_exporter.get_finished_logs()
    assert format(first.log_record.span_id, "016x") == TOOL_SPAN_1
    assert attrs(first)["gen_ai.evaluation.score.label"] == "pass"  # medium issue only
    assert attrs(first)["gen_ai.evaluation.explanation"] == "missing_result"
    assert "gen_ai.tool.call.id" not in attrs(first)
    # position 1 holds send_email, the report is about other_tool: not pinned on that span
    assert format(second.log_record.span_id, "016x") == no_ids.span_id
    assert attrs(second)["gen_ai.tool.name"] == "other_tool"


def test_events_from_a_real_scorer(
    make_emitter: Any, log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory
) -> None:
    schemas = {
        "get_weather": {"type": "object"},
        "send_email": {"type": "object", "required": ["to"]},
    }
    with_args = trajectory.model_copy(
        update={"steps": [
            ToolCall(id="call_1", name="get_weather", arguments={}, has_result=True,
                     result="sunny", span_id=TOOL_SPAN_1),
            ToolCall(id="call_2", name="send_email", arguments={}, has_result=True,
                     result="ok", span_id="00000000000000b2"),
        ]}
    )  # fmt: skip
    score = ToolCallValidation(schemas=schemas).score(with_args)
    make_emitter(call_events="all").emit_events(with_args, [score])
    run, call_1, call_2 = log_exporter.get_finished_logs()
    assert attrs(run)["gen_ai.evaluation.score.value"] == score.value
    assert format(call_1.log_record.span_id, "016x") == TOOL_SPAN_1
    assert format(call_2.log_record.span_id, "016x") == "00000000000000b2"
    assert attrs(call_2)["gen_ai.tool.call.id"] == "call_2"
    assert attrs(call_2)["gen_ai.evaluation.score.label"] == "fail"
    assert "missing_required_param" in attrs(call_2)["gen_ai.evaluation.explanation"]


def test_events_encode_as_otlp(
    make_emitter: Any, log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory
) -> None:
    make_emitter(call_events="all").emit_events(trajectory, [VALIDATION])
    request = encode_logs(log_exporter.get_finished_logs())
    encoded = request.resource_logs[0].scope_logs[0].log_records
    assert [r.event_name for r in encoded] == ["gen_ai.evaluation.result"] * 3
    assert encoded[1].span_id == bytes.fromhex(TOOL_SPAN_1)
    assert encoded[0].trace_id == bytes.fromhex(trajectory.trace_id)


def test_event_explanations_are_truncated(
    make_emitter: Any, log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory
) -> None:
    make_emitter(explanation_max_chars=12).emit_events(trajectory, [VALIDATION])
    run, call_2 = log_exporter.get_finished_logs()
    assert attrs(run)["gen_ai.evaluation.explanation"] == EXPLANATION[:11] + "…"
    assert len(attrs(call_2)["gen_ai.evaluation.explanation"]) == 12


def test_events_switch(
    make_emitter: Any, log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory
) -> None:
    make_emitter(events=False).emit_events(trajectory, [ACCURACY, VALIDATION])
    assert log_exporter.get_finished_logs() == ()


def _call_ids(log_exporter: InMemoryLogRecordExporter) -> list[str | None]:
    """Per record, the tool call it is about (None: a run-level event)."""
    return [attrs(record).get("gen_ai.tool.call.id") for record in log_exporter.get_finished_logs()]


def test_call_events_default_to_calls_with_issues(
    make_emitter: Any, log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory
) -> None:
    make_emitter().emit_events(trajectory, [ACCURACY, VALIDATION])
    # call_1 scored 1.0 with no issue: only the run-level events and call_2's
    assert _call_ids(log_exporter) == [None, None, "call_2"]
    assert ToolScoreSettings().call_events == "issues"


def test_call_events_issues_keep_a_score_below_one_without_issues(
    make_emitter: Any, log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory
) -> None:
    score = Score(name="custom", value=0.5, details={"tool_calls": [
        {"tool_call_id": "call_1", "name": "get_weather", "score": 0.5, "issues": []},
        {"tool_call_id": "call_2", "name": "send_email", "score": 1.0, "issues": []},
    ]})  # fmt: skip
    make_emitter(call_events="issues").emit_events(trajectory, [score])
    assert _call_ids(log_exporter) == [None, "call_1"]


@pytest.mark.parametrize(("which", "expected"), [
    ("all", [None, None, "call_1", "call_2"]),
    ("issues", [None, None, "call_2"]),
    ("none", [None, None]),
])  # fmt: skip
def test_call_events_switch(
    make_emitter: Any, log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory,
    which: str, expected: list[str | None],
) -> None:
    make_emitter(call_events=which).emit_events(trajectory, [ACCURACY, VALIDATION])
    assert _call_ids(log_exporter) == expected


def test_call_events_all_is_off_with_events_off(
    make_emitter: Any, log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory
) -> None:
    make_emitter(events=False, call_events="all").emit_events(trajectory, [VALIDATION])
    assert log_exporter.get_finished_logs() == ()


def test_call_events_from_config_file_env_and_processor_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "toolscore.yaml"
    config.write_text("call_events: all\n", "utf-8")
    assert load_settings(config).call_events == "all"
    monkeypatch.setenv("OTEL_TOOLSCORE_CALL_EVENTS", "none")
    assert load_settings(config).call_events == "none"  # environment over the file
    processor = ToolScoreSpanProcessor(SimpleSpanProcessor(InMemorySpanExporter()), call_events="all")
    try:
        assert processor.settings.call_events == "all"  # argument over the environment
    finally:
        processor.shutdown()
    with pytest.raises(ConfigError, match="call_events"):
        load_settings(call_events="some")


def test_each_explanation_is_redacted_once_for_all_outputs(
    meter_provider: MeterProvider, logger_provider: LoggerProvider,
    log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory, agent_span: ReadableSpan,
) -> None:
    seen: list[str] = []

    def hook(text: str) -> str:
        seen.append(text)
        return text.replace("issues", "[HOOK]")

    emitter = Emitter(ToolScoreSettings(), meter_provider=meter_provider,
                      logger_provider=logger_provider, redact=hook)  # fmt: skip
    span_attributes = emitter.span_attributes([ACCURACY, VALIDATION])
    emitter.emit_events(trajectory, [ACCURACY, VALIDATION])
    (_, validation_span) = emitter.evaluation_spans(trajectory, [ACCURACY, VALIDATION], agent_span)
    # once per run-level explanation, once for call_2's issues (its event is its only output)
    assert sorted(seen) == sorted([ACCURACY.explanation, EXPLANATION, "missing_required_param: "
                                   "'to' is required; type_mismatch: bad subject"])
    redacted = EXPLANATION.replace("issues", "[HOOK]")
    assert span_attributes["toolscore.tool_call_validation.explanation"] == redacted
    assert attrs(log_exporter.get_finished_logs()[1])["gen_ai.evaluation.explanation"] == redacted
    assert validation_span.attributes is not None
    assert validation_span.attributes["gen_ai.evaluation.explanation"] == redacted
    # the next run with the same explanation reuses it; another text is worked out
    emitter.span_attributes([VALIDATION.model_copy(), ACCURACY.model_copy(update={"explanation": "other"})])
    assert seen.count(EXPLANATION) == 1 and seen.count("other") == 1


def test_remembered_explanations_are_bounded(make_emitter: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(otel_prepare, "_REMEMBERED_TEXTS", 3)
    emitter = make_emitter()
    for i in range(10):
        emitter.span_attributes([ACCURACY.model_copy(update={"explanation": f"text {i}"})])
    assert list(emitter._preparer._explained) == ["text 7", "text 8", "text 9"]
    long = "x " * otel_prepare._REMEMBERED_TEXT_CHARS  # worked out each time, never kept
    assert emitter.span_attributes([ACCURACY.model_copy(update={"explanation": long})])
    assert long not in emitter._preparer._explained


# --- metrics ----------------------------------------------------------------------------------


def test_score_histogram(
    make_emitter: Any, reader: InMemoryMetricReader, trajectory: Trajectory
) -> None:
    emitter = make_emitter()
    emitter.record_metrics(trajectory, [ACCURACY, VALIDATION, SKIPPED, ERROR])
    emitter.record_metrics(trajectory, [VALIDATION.model_copy(update={"value": 0.15})])
    metric = metrics(reader)["gen_ai.evaluation.score"]
    assert metric.unit == "1"
    by_attrs = points(reader, "gen_ai.evaluation.score")
    assert set(by_attrs) == {
        frozenset({("gen_ai.evaluation.name", "tool_call_accuracy"),
                   ("gen_ai.evaluation.score.label", "pass"),
                   ("gen_ai.agent.name", AGENT)}),
        frozenset({("gen_ai.evaluation.name", "tool_call_validation"),
                   ("gen_ai.evaluation.score.label", "fail"),
                   ("gen_ai.agent.name", AGENT)}),
    }  # fmt: skip
    fail = ("gen_ai.evaluation.score.label", "fail")
    validation = next(p for k, p in by_attrs.items() if fail in k)
    assert isinstance(validation, HistogramDataPoint)
    assert tuple(validation.explicit_bounds) == SCORE_BUCKETS
    assert SCORE_BUCKETS == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    assert validation.count == 2 and validation.sum == pytest.approx(0.8)
    # 0.15 in (0.1, 0.2], 0.65 in (0.6, 0.7]
    assert list(validation.bucket_counts) == [0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0]


def test_evaluations_counter_by_outcome(
    make_emitter: Any, reader: InMemoryMetricReader, trajectory: Trajectory
) -> None:
    emitter = make_emitter()
    emitter.record_metrics(trajectory, [ACCURACY, VALIDATION, SKIPPED, ERROR])
    emitter.count_evaluation("tool_call_validation", "dropped")
    counts = {
        tuple(sorted(k)): p.value for k, p in points(reader, "toolscore.evaluations").items()
    }
    name, outcome = "gen_ai.evaluation.name", "outcome"
    assert counts == {
        ((name, "tool_call_accuracy"), (outcome, "scored")): 1,
        ((name, "tool_call_accuracy"), (outcome, "skipped")): 1,
        ((name, "tool_call_validation"), (outcome, "scored")): 1,
        ((name, "tool_call_validation"), (outcome, "dropped")): 1,
        ((name, "tool_result_verification"), (outcome, "error")): 1,
    }


def test_issue_counter(
    make_emitter: Any, reader: InMemoryMetricReader, trajectory: Trajectory
) -> None:
    make_emitter().record_metrics(trajectory, [VALIDATION, VALIDATION])
    issues = points(reader, "toolscore.tool_call.issues")
    counts = {frozenset(k): p.value for k, p in issues.items()}
    base = {("gen_ai.evaluation.name", "tool_call_validation"), ("gen_ai.tool.name", "send_email")}
    assert counts == {
        frozenset(base | {("issue.type", "missing_required_param"), ("issue.severity", "high")}): 2,
        frozenset(base | {("issue.type", "type_mismatch"), ("issue.severity", "medium")}): 2,
    }


def test_metric_attributes_carry_no_content(
    make_emitter: Any, reader: InMemoryMetricReader, trajectory: Trajectory
) -> None:
    emitter = make_emitter()
    emitter.record_metrics(trajectory, [ACCURACY, VALIDATION, SKIPPED, ERROR])
    emitter.count_evicted("ttl")
    emitter.record_judge(1.5, 0.002, "gpt-4o-mini")
    allowed = {"gen_ai.evaluation.name", "gen_ai.evaluation.score.label", "gen_ai.agent.name",
               "issue.type", "issue.severity", "gen_ai.tool.name", "outcome", "reason",
               "gen_ai.request.model"}  # fmt: skip
    forbidden_values = {
        trajectory.trace_id, trajectory.span_id, TOOL_SPAN_1, "call_1", "call_2",
        trajectory.input, EXPLANATION, ACCURACY.explanation, SKIPPED.explanation,
        ERROR.explanation, "'to' is required",
    }  # fmt: skip
    seen = 0
    for metric in metrics(reader).values():
        for point in metric.data.data_points:
            attributes = dict(point.attributes or {})
            assert set(attributes) <= allowed, metric.name
            assert not forbidden_values & set(attributes.values()), metric.name
            seen += 1
    assert seen >= 8


def test_metric_series_per_agent_label_and_outcome_over_many_runs(
    make_emitter: Any, reader: InMemoryMetricReader, trajectory: Trajectory
) -> None:
    # The emitter keeps each attribute set built once: runs of another agent, another label or
    # another outcome must still land in series of their own, counted once per run.
    emitter = make_emitter()
    other = trajectory.model_copy(update={"agent_name": "other-agent"})
    failing = ACCURACY.model_copy(update={"value": 0.0, "label": "fail"})
    for _ in range(3):
        emitter.record_metrics(trajectory, [ACCURACY, SKIPPED])
        emitter.record_metrics(other, [ACCURACY, ERROR])
        emitter.record_metrics(other, [failing])
    histogram = {
        (dict(k).get("gen_ai.agent.name"), dict(k).get("gen_ai.evaluation.score.label")): p.count
        for k, p in points(reader, "gen_ai.evaluation.score").items()
    }
    assert histogram == {(AGENT, "pass"): 3, ("other-agent", "pass"): 3, ("other-agent", "fail"): 3}
    evaluations = {
        (dict(k)["gen_ai.evaluation.name"], dict(k)["outcome"]): p.value
        for k, p in points(reader, "toolscore.evaluations").items()
    }
    assert evaluations == {
        ("tool_call_accuracy", "scored"): 9,
        ("tool_call_accuracy", "skipped"): 3,
        ("tool_result_verification", "error"): 3,
    }


def test_invented_tool_names_are_bounded(
    make_emitter: Any, reader: InMemoryMetricReader, trajectory: Trajectory, monkeypatch: Any
) -> None:
    monkeypatch.setattr("otel_toolscore.outputs.otel.MAX_TOOL_NAMES", 2)
    issue = [{"type": "tool_not_found", "severity": "critical"}]
    score = Score(name="tool_call_validation", value=0.0, label="fail", details={"tool_calls": [
        {"name": f"made_up_{i}", "score": 0.0, "issues": issue} for i in range(5)
    ]})  # fmt: skip
    make_emitter().record_metrics(trajectory, [score])
    tools = [dict(k)["gen_ai.tool.name"] for k in points(reader, "toolscore.tool_call.issues")]
    assert sorted(tools) == ["_other", "made_up_0", "made_up_1"]


class _CountingAdds:
    """Wraps a counter's ``add``: how many adds reached the SDK."""

    def __init__(self, counter: Any) -> None:
        self.calls = 0
        self._add = counter.add

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        self._add(*args, **kwargs)


def test_counts_are_summed_until_a_collection_and_exact_at_each(
    make_emitter: Any, reader: InMemoryMetricReader, trajectory: Trajectory, monkeypatch: Any
) -> None:
    emitter = make_emitter()
    adds = _CountingAdds(emitter._evaluations_counter)
    monkeypatch.setattr(emitter._evaluations_counter, "add", adds)
    for _ in range(50):
        emitter.record_metrics(trajectory, [ACCURACY, SKIPPED])
    assert adds.calls == 0  # summed, not yet the SDK's
    name, outcome = "gen_ai.evaluation.name", "outcome"

    def evaluations() -> dict[tuple[str, str], int]:
        return {(dict(k)[name], dict(k)[outcome]): p.value for k, p in points(reader, "toolscore.evaluations").items()}

    assert evaluations() == {("tool_call_accuracy", "scored"): 50, ("tool_call_accuracy", "skipped"): 50}
    assert adds.calls == 2  # one add per series, at the collection
    emitter.record_metrics(trajectory, [ACCURACY])
    emitter.count_evaluation("tool_call_accuracy", "dropped", 3)
    assert evaluations() == {("tool_call_accuracy", "scored"): 51, ("tool_call_accuracy", "skipped"): 50,
                             ("tool_call_accuracy", "dropped"): 3}


def test_counts_wait_for_a_collection_no_longer_than_a_second(
    make_emitter: Any, trajectory: Trajectory, monkeypatch: Any
) -> None:
    # (a provider that never collects, or one set as the global after the emitter was built)
    emitter = make_emitter()
    adds = _CountingAdds(emitter._issues_counter)
    monkeypatch.setattr(emitter._issues_counter, "add", adds)
    emitter.record_metrics(trajectory, [VALIDATION])
    assert adds.calls == 0
    monkeypatch.setattr(otel_outputs, "_COUNTS_WAIT_S", 0.0)
    emitter.record_metrics(trajectory, [VALIDATION])
    assert adds.calls == 2  # both issue series, twice each, in one add each
    emitter.flush_counts()
    assert adds.calls == 2


def test_counts_of_a_discarded_emitter_still_reach_the_next_collection(
    meter_provider: MeterProvider, reader: InMemoryMetricReader, trajectory: Trajectory
) -> None:
    emitter = Emitter(ToolScoreSettings(), meter_provider=meter_provider)
    emitter.record_metrics(trajectory, [ACCURACY])
    del emitter
    gc.collect()
    (point,) = points(reader, "toolscore.evaluations").values()
    assert point.value == 1


def test_a_forked_emitter_forgets_the_counts_its_parent_adds(
    make_emitter: Any, reader: InMemoryMetricReader, trajectory: Trajectory
) -> None:
    emitter = make_emitter()
    emitter.record_metrics(trajectory, [ACCURACY])
    emitter._at_fork_reinit()  # what the fork hook runs in the child
    emitter.record_metrics(trajectory, [SKIPPED])
    outcomes = {dict(k)["outcome"]: p.value for k, p in points(reader, "toolscore.evaluations").items()}
    assert outcomes == {"skipped": 1}


def test_prepare_then_send_is_what_each_output_emits_alone(
    meter_provider: MeterProvider, reader: InMemoryMetricReader, logger_provider: LoggerProvider,
    log_exporter: InMemoryLogRecordExporter, trajectory: Trajectory, agent_span: ReadableSpan,
) -> None:  # fmt: skip
    scores = [ACCURACY, VALIDATION, SKIPPED, ERROR]
    emitter = Emitter(ToolScoreSettings(call_events="all"), meter_provider=meter_provider,
                      logger_provider=logger_provider)  # fmt: skip
    # the emission crosses the scoring process's pipe as pickle
    emission = pickle.loads(pickle.dumps(emitter.prepare(trajectory, scores)))
    assert emission.span_attributes == emitter.span_attributes(scores)
    together = emitter.send(emission, agent_span)
    events_together, metrics_together = _records(log_exporter), _metric_values(reader)
    alone = emitter.evaluation_spans(trajectory, scores, agent_span)
    emitter.emit_events(trajectory, scores)
    emitter.record_metrics(trajectory, scores)
    assert [(s.name, dict(s.attributes or {})) for s in together] == [(s.name, dict(s.attributes or {})) for s in alone]
    assert _records(log_exporter) == events_together * 2
    assert _metric_values(reader) == {k: v * 2 for k, v in metrics_together.items()}


def _records(log_exporter: InMemoryLogRecordExporter) -> list[Any]:
    return [(r.log_record.span_id, r.log_record.severity_number, list(attrs(r).items()))
            for r in log_exporter.get_finished_logs()]


def _metric_values(reader: InMemoryMetricReader) -> dict[Any, Any]:
    out = {}
    for name, metric in metrics(reader).items():
        for point in metric.data.data_points:
            out[(name, frozenset(dict(point.attributes or {}).items()))] = getattr(point, "value", None) or point.count
    return out


def test_pipeline_health_metrics(
    make_emitter: Any, reader: InMemoryMetricReader, meter_provider: MeterProvider
) -> None:
    emitter = make_emitter()
    emitter.count_evicted("max_pending_traces", 3)
    emitter.count_evicted("ttl")
    emitter.count_evicted("ttl", 0)  # nothing evicted: no-op
    emitter.observe_pending(lambda: 4)
    # a second processor on the same provider: the gauge reports both
    other = Emitter(ToolScoreSettings(), meter_provider=meter_provider)
    other.observe_pending(lambda: 3)
    emitter.record_judge(0.75, 0.0125, "gpt-4o-mini")
    emitter.record_judge(1.25, None, "gpt-4o-mini")

    evictions = points(reader, "toolscore.traces.evicted")
    evicted = {dict(k)["reason"]: p.value for k, p in evictions.items()}
    assert evicted == {"max_pending_traces": 3, "ttl": 1}
    (pending,) = points(reader, "toolscore.traces.pending").values()
    assert pending.value == 7
    duration = metrics(reader)["toolscore.judge.duration"]
    assert duration.unit == "s"
    (point,) = duration.data.data_points
    assert dict(point.attributes) == {"gen_ai.request.model": "gpt-4o-mini"}
    assert point.count == 2 and point.sum == pytest.approx(2.0)
    cost = metrics(reader)["toolscore.judge.cost"]
    assert cost.unit == "USD"
    (point,) = cost.data.data_points
    assert point.value == pytest.approx(0.0125)


class _Pending:
    def __init__(self, n: int) -> None:
        self.n = n

    def count(self) -> int:
        return self.n


def test_pending_gauge_forgets_discarded_owners(
    make_emitter: Any, reader: InMemoryMetricReader
) -> None:
    emitter = make_emitter()
    kept, dropped = _Pending(2), _Pending(5)
    emitter.observe_pending(kept.count)
    emitter.observe_pending(dropped.count)
    (point,) = points(reader, "toolscore.traces.pending").values()
    assert point.value == 7
    del dropped
    gc.collect()
    (point,) = points(reader, "toolscore.traces.pending").values()
    assert point.value == 2


def test_failing_pending_callback_does_not_hide_others(
    make_emitter: Any, reader: InMemoryMetricReader
) -> None:
    emitter = make_emitter()
    emitter.observe_pending(lambda: 1 // 0)
    emitter.observe_pending(lambda: 6)
    (point,) = points(reader, "toolscore.traces.pending").values()
    assert point.value == 6


def test_metrics_switch(
    make_emitter: Any, reader: InMemoryMetricReader, trajectory: Trajectory
) -> None:
    emitter = make_emitter(metrics=False)
    emitter.record_metrics(trajectory, [ACCURACY, VALIDATION])
    emitter.count_evaluation("x", "dropped")
    emitter.count_evicted("ttl")
    emitter.observe_pending(lambda: 1)
    emitter.record_judge(1.0, 1.0, "m")
    assert metrics(reader) == {}


# --- never raise ------------------------------------------------------------------------------


class _BrokenLogger:
    def emit(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("exporter down")


class _BrokenLoggerProvider:
    def get_logger(self, *args: Any, **kwargs: Any) -> _BrokenLogger:
        return _BrokenLogger()


def emit_errors(reader: InMemoryMetricReader) -> dict[str, int]:
    found = metrics(reader).get("toolscore.emit.errors")
    if found is None:
        return {}
    return {dict(p.attributes)["output"]: p.value for p in found.data.data_points}


def test_broken_logger_is_counted_not_raised(
    meter_provider: MeterProvider, reader: InMemoryMetricReader, trajectory: Trajectory
) -> None:
    emitter = Emitter(
        ToolScoreSettings(),
        meter_provider=meter_provider,
        logger_provider=_BrokenLoggerProvider(),  # type: ignore[arg-type]
    )
    emitter.emit_events(trajectory, [ACCURACY, VALIDATION])
    assert emit_errors(reader) == {"events": 2}  # one per score: the second still tried



def test_a_failing_output_warns_once_then_logs_at_debug(
    meter_provider: MeterProvider, trajectory: Trajectory, caplog: pytest.LogCaptureFixture
) -> None:
    # A broken output fails on every run: one warning says so, the rest go to debug.
    emitter = Emitter(
        ToolScoreSettings(),
        meter_provider=meter_provider,
        logger_provider=_BrokenLoggerProvider(),  # type: ignore[arg-type]
    )
    with caplog.at_level(logging.DEBUG, logger="otel_toolscore"):
        for _ in range(3):
            emitter.emit_events(trajectory, [ACCURACY])
    failed = [r for r in caplog.records if r.getMessage() == "otel-toolscore: emitting events failed"]
    assert [r.levelno for r in failed] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert all(r.exc_info for r in failed)

def test_bad_trajectory_ids_are_counted_not_raised(
    make_emitter: Any, reader: InMemoryMetricReader, log_exporter: InMemoryLogRecordExporter
) -> None:
    bad = Trajectory(trace_id="not-hex", span_id="zz", agent_name=AGENT)
    make_emitter().emit_events(bad, [ACCURACY])
    assert log_exporter.get_finished_logs() == ()
    assert emit_errors(reader) == {"events": 1}


def test_broken_instrument_is_counted_not_raised(
    make_emitter: Any, reader: InMemoryMetricReader, trajectory: Trajectory, monkeypatch: Any
) -> None:
    emitter = make_emitter()

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(emitter, "_record_score", boom)  # the score histogram's record (or its fast path)
    monkeypatch.setattr(emitter._judge_duration, "record", boom)
    emitter.record_metrics(trajectory, [ACCURACY, SKIPPED])
    emitter.record_judge(1.0, None, "m")
    assert emit_errors(reader) == {"metrics": 2}
    # the skipped score was still counted
    outcomes = {dict(k)["outcome"] for k in points(reader, "toolscore.evaluations")}
    assert outcomes == {"scored", "skipped"}


def test_odd_details_and_spans_do_not_raise(
    make_emitter: Any, reader: InMemoryMetricReader, trajectory: Trajectory,
    log_exporter: InMemoryLogRecordExporter,
) -> None:  # fmt: skip
    emitter = make_emitter()
    odd = Score(name="odd", value=0.5, details={"tool_calls": ["x", {"score": True}, None]})
    odd2 = Score(name="odd2", value=0.5, details={"tool_calls": {"not": "a list"}})
    emitter.record_metrics(trajectory, [odd, odd2])
    emitter.emit_events(trajectory, [odd, odd2])
    assert len(log_exporter.get_finished_logs()) == 2  # run-level only
    unborn = ReadableSpan(name="no context")
    assert emitter.evaluation_spans(trajectory, [ACCURACY], unborn) == []
    assert emit_errors(reader) == {}


def test_uses_global_providers_by_default(monkeypatch: Any, reader: InMemoryMetricReader) -> None:
    provider = MeterProvider(metric_readers=[reader])
    monkeypatch.setattr("otel_toolscore.outputs.otel.get_meter_provider", lambda: provider)
    exporter = InMemoryLogRecordExporter()
    logs = LoggerProvider()
    logs.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    monkeypatch.setattr("otel_toolscore.outputs.otel.get_logger_provider", lambda: logs)
    emitter = Emitter(ToolScoreSettings())
    emitter.count_evaluation("x", "dropped")
    emitter.emit_events(
        Trajectory(trace_id="1" * 32, span_id="2" * 16), [ACCURACY]
    )
    assert "toolscore.evaluations" in metrics(reader)
    assert len(exporter.get_finished_logs()) == 1
    provider.shutdown()
    logs.shutdown()


class _RefusingProvider:
    def get_meter(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no meter")

    def get_logger(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no logger")


def test_refusing_providers_turn_outputs_off(trajectory: Trajectory) -> None:
    emitter = Emitter(
        ToolScoreSettings(),
        meter_provider=_RefusingProvider(),  # type: ignore[arg-type]
        logger_provider=_RefusingProvider(),  # type: ignore[arg-type]
    )
    emitter.record_metrics(trajectory, [ACCURACY])
    emitter.emit_events(trajectory, [ACCURACY])
    emitter.observe_pending(lambda: 1)
    assert emitter.span_attributes([ACCURACY])["toolscore.tool_call_accuracy.score"] == 1.0
