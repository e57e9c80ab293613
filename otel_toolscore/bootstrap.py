"""``install()``: one call that puts otel-toolscore into an app's OpenTelemetry set-up."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry._logs import set_logger_provider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_toolscore.config import load_settings
from otel_toolscore.processor import ToolScoreSpanProcessor
from otel_toolscore.scorers.base import Scorer

_GRPC = "grpc"


def _protocol(signal: str) -> str:
    """OTLP protocol per the standard variables; the spec's default is http/protobuf."""
    return (os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf").strip().lower()


def _exporters() -> tuple[Any, Any, Any]:
    """Span, metric and log exporters configured from the standard OTEL_EXPORTER_OTLP_* variables."""
    if _protocol("TRACES") == _GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    if _protocol("METRICS") == _GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    if _protocol("LOGS") == _GRPC:
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    return OTLPSpanExporter(), OTLPMetricExporter(), OTLPLogExporter()


def install(
    tracer_provider: TracerProvider | None = None,
    *,
    scorers: Sequence[Scorer | str] | None = None,
    span_exporter: SpanExporter | None = None,
    meter_provider: MeterProvider | None = None,
    logger_provider: LoggerProvider | None = None,
    config_file: str | os.PathLike[str] | None = None,
    set_global: bool = True,
    **settings: Any,
) -> ToolScoreSpanProcessor:
    """Build (or use) the tracer, meter and logger providers and add the scoring processor.

    Spans go to ``span_exporter`` (default: OTLP from the ``OTEL_EXPORTER_OTLP_*`` variables)
    through ``ToolScoreSpanProcessor(BatchSpanProcessor(exporter))``. Give ``tracer_provider``
    only if it does not already export spans itself, or every span is exported twice: an app
    with its own exporting processor should wrap that processor in ``ToolScoreSpanProcessor``.
    Settings come from keyword arguments, ``OTEL_TOOLSCORE_*`` variables, and the YAML file
    named by ``config_file`` or ``OTEL_TOOLSCORE_CONFIG``, in that order of precedence.
    """
    resolved = load_settings(config_file, **settings)
    resource = tracer_provider.resource if tracer_provider is not None else Resource.create()
    need_metrics = meter_provider is None and resolved.metrics
    need_logs = logger_provider is None and resolved.events
    if span_exporter is None or need_metrics or need_logs:
        default_spans, default_metrics, default_logs = _exporters()
        span_exporter = span_exporter or default_spans
    if need_metrics:
        meter_provider = MeterProvider(resource=resource,
                                       metric_readers=[PeriodicExportingMetricReader(default_metrics)])
        if set_global:
            metrics.set_meter_provider(meter_provider)
    if need_logs:
        logger_provider = LoggerProvider(resource=resource)
        logger_provider.add_log_record_processor(BatchLogRecordProcessor(default_logs))
        if set_global:
            set_logger_provider(logger_provider)
    if tracer_provider is None:
        tracer_provider = TracerProvider(resource=resource)
        if set_global:
            trace.set_tracer_provider(tracer_provider)
    processor = ToolScoreSpanProcessor(
        BatchSpanProcessor(span_exporter), scorers, settings=resolved,
        meter_provider=meter_provider, logger_provider=logger_provider,
    )
    tracer_provider.add_span_processor(processor)
    return processor
