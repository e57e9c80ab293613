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
from opentelemetry.sdk.trace import SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_toolscore import otel_env
from otel_toolscore.config import load_settings
from otel_toolscore.processor import ToolScoreSpanProcessor
from otel_toolscore.scorers.base import Scorer


def _span_downstream(span_exporter: SpanExporter | None) -> SpanProcessor:
    """What the scoring processor forwards to: the given exporter, else what
    OTEL_TRACES_EXPORTER names (otlp, console, several, or none: spans are scored, not exported)."""
    made = [span_exporter] if span_exporter is not None else otel_env.exporters("traces")
    processors = [BatchSpanProcessor(exporter) for exporter in made]
    if len(processors) == 1:
        return processors[0]
    multi = SynchronousMultiSpanProcessor()  # none: a processor that drops, with no thread
    for processor in processors:
        multi.add_span_processor(processor)
    return multi


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
) -> ToolScoreSpanProcessor | None:
    """Build (or use) the tracer, meter and logger providers and add the scoring processor.

    Spans go to ``span_exporter`` (default: OTLP from the ``OTEL_EXPORTER_OTLP_*`` variables)
    through ``ToolScoreSpanProcessor(BatchSpanProcessor(exporter))``. Give ``tracer_provider``
    only if it does not already export spans itself, or every span is exported twice: an app
    with its own exporting processor should wrap that processor in ``ToolScoreSpanProcessor``.
    Settings come from keyword arguments, ``OTEL_TOOLSCORE_*`` variables, and the YAML file
    named by ``config_file`` or ``OTEL_TOOLSCORE_CONFIG``, in that order of precedence.

    The SDK's variables mean what they mean to the SDK (``otel_env``): with
    ``OTEL_SDK_DISABLED=true`` nothing is installed and None is returned;
    ``OTEL_{TRACES,METRICS,LOGS}_EXPORTER`` pick ``otlp``, ``console`` or ``none`` per signal;
    a protocol other than ``grpc`` or ``http/protobuf`` is a ``ConfigError``.
    """
    resolved = load_settings(config_file, **settings)
    if otel_env.sdk_disabled():
        # The SDK's own switch: no providers, no processor, no thread; the app runs untouched.
        return None
    otel_env.check()  # a mistyped exporter or protocol fails here, whole, naming the variable
    resource = tracer_provider.resource if tracer_provider is not None else Resource.create()
    metric_exporters = otel_env.exporters("metrics") if meter_provider is None and resolved.metrics else []
    log_exporters = otel_env.exporters("logs") if logger_provider is None and resolved.events else []
    if metric_exporters:  # OTEL_METRICS_EXPORTER=none: no provider and no reader thread
        meter_provider = MeterProvider(resource=resource, metric_readers=[
            PeriodicExportingMetricReader(exporter) for exporter in metric_exporters])
        if set_global:
            metrics.set_meter_provider(meter_provider)
    if log_exporters:
        logger_provider = LoggerProvider(resource=resource)
        for exporter in log_exporters:
            logger_provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
        if set_global:
            set_logger_provider(logger_provider)
    if tracer_provider is None:
        tracer_provider = TracerProvider(resource=resource)
        if set_global:
            trace.set_tracer_provider(tracer_provider)
    processor = ToolScoreSpanProcessor(
        _span_downstream(span_exporter), scorers, settings=resolved,
        meter_provider=meter_provider, logger_provider=logger_provider,
    )
    tracer_provider.add_span_processor(processor)
    return processor
