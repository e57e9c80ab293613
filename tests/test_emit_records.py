"""outputs/_log_records.py: the event records built for the SDK's Logger are the ones its own
path builds (differential: the same emission through both, compared field by field and as the
OTLP log encoder writes them), and whatever that path would change takes the SDK's own path."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.sdk._logs import LoggerProvider, LogRecordLimits
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource

from otel_toolscore.config import ToolScoreSettings
from otel_toolscore.outputs import _log_records
from otel_toolscore.outputs.otel import Emission, Emitter, _EventRecord
from tests.support.pipeline import InMemoryLogExporter

if _log_records.ReadWriteLogRecord is None:  # pragma: no cover - an older SDK: its own path only
    pytest.skip("no ReadWriteLogRecord in this SDK", allow_module_level=True)

RUN_SPAN = "00000000000000b2"
CALL_SPAN = "00000000000000a1"


def _emission() -> Emission:
    e = Emission("0000000000000000000000000000abcd", RUN_SPAN, "agent")
    e.events = [
        [(None, False, {"gen_ai.evaluation.name": "acc", "gen_ai.evaluation.score.value": 1.0,
                        "gen_ai.evaluation.score.label": "pass", "gen_ai.agent.name": "agent"}),
         (CALL_SPAN, False, {"gen_ai.evaluation.name": "acc", "gen_ai.evaluation.score.value": 0.5,
                             "gen_ai.tool.name": "get_weather", "gen_ai.evaluation.explanation": "é…" * 40})],
        [(None, True, {"gen_ai.evaluation.name": "val", "error.type": "ValueError"})],
        [(None, False, {})],
    ]
    return e


def _send(limits: LogRecordLimits | None, fast: bool, emission: Emission | None = None) -> list[Any]:
    exporter = InMemoryLogExporter()
    provider = LoggerProvider(resource=Resource({"service.name": "t"}), log_record_limits=limits)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    emitter = Emitter(ToolScoreSettings(metrics=False), logger_provider=provider)
    if not fast:
        emitter._records = None
    emitter.send(emission or _emission(), None)
    return list(exporter.get_finished_logs())


def _fields(record: Any) -> tuple[Any, ...]:
    api = record.log_record
    return (api.trace_id, api.span_id, api.trace_flags, api.severity_number, api.severity_text, api.body,
            api.event_name, dict(api.attributes), api.attributes.dropped, type(api.attributes).__name__,
            record.resource, record.instrumentation_scope, record.limits.max_log_record_attributes,
            type(api))


def _encoded(records: list[Any]) -> bytes:
    message = encode_logs(records)
    for resource_logs in message.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for log in scope_logs.log_records:
                log.ClearField("time_unix_nano")
                log.ClearField("observed_time_unix_nano")
    return message.SerializeToString(deterministic=True)


@pytest.mark.parametrize("limits", [None, LogRecordLimits(max_attributes=3), LogRecordLimits(max_attribute_length=8)],
                         ids=["default", "few_attributes", "short_values"])
def test_records_are_the_sdks_own(limits: LogRecordLimits | None) -> None:
    ours, theirs = _send(limits, fast=True), _send(limits, fast=False)
    assert len(ours) == len(theirs) == 4
    assert [_fields(r) for r in ours] == [_fields(r) for r in theirs]
    assert _encoded(ours) == _encoded(theirs)


def test_the_maker_is_used_where_nothing_would_change() -> None:
    provider = LoggerProvider()
    emitter = Emitter(ToolScoreSettings(metrics=False), logger_provider=provider)
    assert emitter._records is not None
    context = otel_context()
    assert emitter._records.make(*context, SeverityNumber.INFO, "e", {"a": "b", "n": 1.0, "ok": True}) is not None
    # what the SDK's cleaning would change, or might: its own path
    assert emitter._records.make(*context, SeverityNumber.INFO, "e", {"a": ["b"]}) is None
    assert emitter._records.make(*context, SeverityNumber.INFO, "e", {"": "b"}) is None

    class Text(str):
        pass

    assert emitter._records.make(*context, SeverityNumber.INFO, "e", {"a": Text("b")}) is None
    limited = Emitter(ToolScoreSettings(metrics=False),
                      logger_provider=LoggerProvider(log_record_limits=LogRecordLimits(max_attribute_length=8)))
    assert limited._records is None  # values might be cut: every record takes the SDK's path


def test_a_logger_not_the_sdks_gets_no_maker() -> None:
    class OwnLogger:
        def emit(self, record: Any = None, **kwargs: Any) -> None:
            pass

    assert _log_records.RecordMaker.of(OwnLogger(), _EventRecord) is None


def test_an_sdk_record_of_other_fields_gets_no_maker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_log_records, "_API_FIELDS", (*_log_records._API_FIELDS, "new_field"))
    assert _log_records.RecordMaker.of(LoggerProvider().get_logger("x"), _EventRecord) is None


def otel_context() -> Any:
    from otel_toolscore.outputs.otel import _context, _span_context

    context = _context("0000000000000000000000000000abcd", CALL_SPAN)
    return context, _span_context(context)


# --- histogram points (outputs/_metric_points.py) ---------------------------------------------------


def _points(fast: bool, exemplars: str) -> bytes:
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import AlwaysOnExemplarFilter, MeterProvider, TraceBasedExemplarFilter
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    from otel_toolscore.outputs import _metric_points

    reader = InMemoryMetricReader()
    exemplar_filter = AlwaysOnExemplarFilter() if exemplars == "always" else TraceBasedExemplarFilter()
    provider = MeterProvider(metric_readers=[reader], resource=Resource({"service.name": "t"}),
                             exemplar_filter=exemplar_filter)
    emitter = Emitter(ToolScoreSettings(events=False), meter_provider=provider)
    if not fast:
        emitter._record_score = emitter._score_histogram.record
    else:
        assert isinstance(getattr(emitter._record_score, "__self__", None), _metric_points.PointRecorder)
    emission = Emission("0000000000000000000000000000abcd", RUN_SPAN, "agent")
    # a negative, a NaN and an infinite value: the SDK warns and drops them, on either path
    emission.metrics = [("acc", "scored", 1.0, "pass", ()), ("val", "scored", 0.25, "fail", (("t", "error", "tool"),)),
                        ("acc", "scored", 0.5, "pass", ()), ("odd", "scored", -1.0, None, ()),
                        ("odd", "scored", float("nan"), None, ()), ("odd", "scored", float("inf"), None, ()),
                        ("skip", "skipped", None, None, ())]
    span = NonRecordingSpan(SpanContext(0xABCD, 0xB2, False, TraceFlags(TraceFlags.SAMPLED)))
    from opentelemetry import context as otel_context_api

    token = otel_context_api.attach(set_span_in_context(span))  # the exemplars' span, when kept
    try:
        emitter.send(emission, None)
    finally:
        otel_context_api.detach(token)
    emitter.flush_counts()
    message = encode_metrics(reader.get_metrics_data())

    def zero(m: Any) -> None:
        for field, value in m.ListFields():
            if field.name.endswith("time_unix_nano"):
                m.ClearField(field.name)
            elif field.type == field.TYPE_MESSAGE:
                repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
                for item in value if repeated else [value]:
                    zero(item)

    zero(message)
    return message.SerializeToString(deterministic=True)


@pytest.mark.parametrize("exemplars", ["trace_based", "always"])
def test_histogram_points_are_the_sdks_own(exemplars: str) -> None:
    ours, theirs = _points(True, exemplars), _points(False, exemplars)
    assert b"acc" in theirs and b"val" in theirs
    assert ours == theirs


def test_a_histogram_not_the_sdks_gets_no_recorder() -> None:
    from otel_toolscore.outputs._metric_points import PointRecorder

    class OwnHistogram:
        def record(self, value: float, attributes: Any = None, context: Any = None) -> None:
            pass

    assert PointRecorder.of(OwnHistogram()) is None


# --- the processor over recorded and synthetic runs, fast paths on and off --------------------------


def _processor_exports(runs: list[list[Any]], fast: bool) -> tuple[bytes, bytes]:
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from benchmarks.emit_dump import _zero_times
    from benchmarks.throughput import ready_item
    from otel_toolscore.runtime.processor import ToolScoreSpanProcessor

    class Null:
        def on_end(self, span: Any) -> None:
            pass

        def shutdown(self) -> None:
            pass

    logs = InMemoryLogExporter()
    resource = Resource({"service.name": "t"})
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    reader = InMemoryMetricReader()
    proc = ToolScoreSpanProcessor(Null(), meter_provider=MeterProvider(metric_readers=[reader], resource=resource),
                                  logger_provider=logger_provider, call_events="all")
    emitter = proc._emitter
    assert emitter._records is not None and emitter._record_score != emitter._score_histogram.record
    if not fast:
        emitter._records = None
        emitter._record_score = emitter._score_histogram.record
    for spans in runs:
        proc._score(ready_item(spans))
    emitter.flush_counts()
    log_message, metric_message = encode_logs(logs.get_finished_logs()), encode_metrics(reader.get_metrics_data())
    _zero_times(log_message)
    _zero_times(metric_message)
    proc.shutdown()
    return log_message.SerializeToString(deterministic=True), metric_message.SerializeToString(deterministic=True)


def test_the_processor_exports_the_same_with_and_without_the_fast_paths() -> None:
    from benchmarks.throughput import synthetic
    from benchmarks.workload import fixture_runs

    runs = [spans for _, spans in fixture_runs()] + synthetic(10, 40, seed0=11)
    fast_logs, fast_metrics = _processor_exports(runs, fast=True)
    sdk_logs, sdk_metrics = _processor_exports(runs, fast=False)
    assert len(fast_logs) > 10_000 and b"gen_ai.evaluation.score" in fast_metrics
    assert fast_logs == sdk_logs
    assert fast_metrics == sdk_metrics
