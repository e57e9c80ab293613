"""``install()``: one call that puts otel-toolscore into an app's OpenTelemetry set-up."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry._logs import get_logger_provider, set_logger_provider
from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_toolscore.config import load_settings
from otel_toolscore.outputs.otel import _is_unset
from otel_toolscore.runtime import otel_env
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
from otel_toolscore.scorers.base import Scorer

_log = logging.getLogger(__name__)


class InstallError(RuntimeError):
    """install() cannot put scoring into this OpenTelemetry set-up; the message says what to do."""


class _FanOut(SpanProcessor):
    """The processors a provider had before install(), behind one ToolScoreSpanProcessor: each
    still gets every span exactly once (the agent span with its scores), in their old order."""

    def __init__(self, processors: Sequence[SpanProcessor]) -> None:
        self._processors = tuple(processors)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for p in self._processors:
            p.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Span) -> None:
        for p in self._processors:
            hook = getattr(p, "_on_ending", None)
            if hook is not None:
                hook(span)

    def on_end(self, span: ReadableSpan) -> None:
        for p in self._processors:
            p.on_end(span)

    def shutdown(self) -> None:
        for p in self._processors:
            p.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        ok = True
        for p in self._processors:
            remaining = max(0, int((deadline - time.monotonic()) * 1000))
            ok = p.force_flush(remaining) is not False and ok  # None: SDK 1.37's base class
        return ok


def _existing_tracer_provider() -> TracerProvider | None:
    """The app's global SDK TracerProvider, None when there is none; InstallError for a global
    provider that is not the SDK's (spans cannot be wrapped there)."""
    provider = trace.get_tracer_provider()
    if _is_unset(provider):
        return None
    if isinstance(provider, TracerProvider):
        return provider
    raise InstallError(
        f"the global TracerProvider is a {type(provider).__module__}.{type(provider).__name__}, not the "
        "OpenTelemetry SDK's: install() can only add scoring to an SDK TracerProvider. Wrap the processor "
        "that exports your spans instead: ToolScoreSpanProcessor(BatchSpanProcessor(exporter)), added to "
        "your provider, or pass install(tracer_provider=...) an SDK TracerProvider."
    )


def _attach(provider: TracerProvider, make: Callable[[SpanProcessor], ToolScoreSpanProcessor], own_exporter: SpanExporter | None) -> ToolScoreSpanProcessor:
    """Put one ToolScoreSpanProcessor in front of the processors the provider already has.

    The SDK keeps them in a tuple on its multi-processor; it is replaced under that object's
    lock, so spans starting meanwhile see either the old set or the new one, never both.
    """
    active = getattr(provider, "_active_span_processor", None)
    lock = getattr(active, "_lock", None)
    if active is None or lock is None or not isinstance(getattr(active, "_span_processors", None), tuple):
        raise InstallError(
            "this TracerProvider's processors cannot be reached (an SDK version install() does not "
            "know): wrap your exporting processor in ToolScoreSpanProcessor instead"
        )
    with lock:
        existing = list(active._span_processors)
        for p in existing:
            if isinstance(p, ToolScoreSpanProcessor):
                _log.warning("otel-toolscore: install() called again; scoring is already installed")
                return p
        if own_exporter is not None or not existing:
            # Nothing exports yet (or the app asked for an exporter of its own): add what
            # OTEL_TRACES_EXPORTER names, or the given exporter.
            existing.append(_span_downstream(own_exporter))
        processor: ToolScoreSpanProcessor = make(existing[0] if len(existing) == 1 else _FanOut(existing))
        active._span_processors = (processor,)
    return processor


def _global_or_none(getter: Any) -> Any:
    provider = getter()
    return None if _is_unset(provider) else provider


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
    """Add scoring to the app's OpenTelemetry set-up, building what it lacks.

    Tracer provider: ``tracer_provider``, else the global one. An SDK TracerProvider that
    already has processors (the usual case, and what ``opentelemetry-instrument`` sets up) gets
    one ``ToolScoreSpanProcessor`` in front of them, so every span still reaches each of them
    exactly once; one without processors gets ``ToolScoreSpanProcessor(BatchSpanProcessor(
    span_exporter))``. With no global provider, one is built (and set global unless
    ``set_global=False``). A global provider that is not the SDK's is an ``InstallError`` that
    says what to do instead.

    Meter and logger providers: the ones given, else the global ones, else new ones exporting
    over OTLP (``OTEL_EXPORTER_OTLP_*``), set global unless ``set_global=False``.

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
    if tracer_provider is None:
        tracer_provider = _existing_tracer_provider()
    if meter_provider is None:
        meter_provider = _global_or_none(metrics.get_meter_provider)
    if logger_provider is None:
        logger_provider = _global_or_none(get_logger_provider)
    resource = tracer_provider.resource if tracer_provider is not None else Resource.create()
    metric_exporters = otel_env.exporters("metrics") if meter_provider is None and resolved.metrics else []
    log_exporters = otel_env.exporters("logs") if logger_provider is None and resolved.events else []
    # OTEL_{METRICS,LOGS}_EXPORTER=none with no provider of the app's: that output is off on
    # purpose, not lost (no provider, no reader thread, no "go nowhere" warning).
    off = {name: False for name, exporters, provider in (("metrics", metric_exporters, meter_provider),
                                                        ("events", log_exporters, logger_provider))
           if getattr(resolved, name) and provider is None and not exporters}
    if off:
        resolved = resolved.model_copy(update=off)
    if metric_exporters:
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

    def make(downstream: SpanProcessor) -> ToolScoreSpanProcessor:
        return ToolScoreSpanProcessor(downstream, scorers, settings=resolved,
                                      meter_provider=meter_provider, logger_provider=logger_provider)

    return _attach(tracer_provider, make, span_exporter)
