"""Pass-through bases for span processors and exporters that wrap one delegate, and a base for
log record processors that only look at each record.

A wrapper (a counter, a tee, a retry, a timer) usually changes one method and forwards the rest;
written by hand, the forwarding is where one method gets forgotten (``_on_ending``, a
``force_flush`` timeout). A subclass overrides what it adds and calls ``super()`` or
``self._delegate`` for the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk._logs import LogRecordProcessor
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_toolscore.outputs.jsonlines import LogRecordExporter

__all__ = ["LogExporterWrapper", "LogRecordHook", "MetricExporterWrapper", "SpanExporterWrapper",
           "SpanProcessorWrapper"]


class LogRecordHook(LogRecordProcessor):  # type: ignore[misc]
    """A log record processor that looks at each record as it is emitted (``on_emit``; older SDKs
    call it ``emit``) and holds nothing to flush or shut down. Placed before the exporting
    processor, what it sets on the record is exported."""

    def emit(self, log_record: Any) -> None:  # the name older SDKs call
        self.on_emit(log_record)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class SpanProcessorWrapper(SpanProcessor):
    """Forwards ``on_start``, ``_on_ending``, ``on_end``, ``shutdown`` and ``force_flush`` to ``delegate``."""

    def __init__(self, delegate: SpanProcessor) -> None:
        self._delegate = delegate
        # Looked up once: older SDKs (1.37) have no _on_ending, and never call it.
        self._delegate_on_ending = getattr(delegate, "_on_ending", None)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._delegate.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Span) -> None:
        # The SDK calls it on every span just before on_end, while the span is still writable.
        hook = self._delegate_on_ending
        if hook is not None:
            hook(span)

    def on_end(self, span: ReadableSpan) -> None:
        self._delegate.on_end(span)

    def shutdown(self) -> None:
        self._delegate.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._delegate.force_flush(timeout_millis)


class SpanExporterWrapper(SpanExporter):
    """Forwards ``export``, ``shutdown`` and ``force_flush`` to ``delegate``."""

    def __init__(self, delegate: SpanExporter) -> None:
        self._delegate = delegate

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self._delegate.export(spans)

    def shutdown(self) -> None:
        self._delegate.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._delegate.force_flush(timeout_millis)


class LogExporterWrapper(LogRecordExporter):  # type: ignore[misc, valid-type]
    """Forwards ``export``, ``shutdown`` and ``force_flush`` to ``delegate`` (a log record exporter)."""

    def __init__(self, delegate: Any) -> None:
        self._delegate = delegate

    def export(self, batch: Sequence[Any]) -> Any:
        return self._delegate.export(batch)

    def shutdown(self) -> None:
        self._delegate.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return bool(self._delegate.force_flush(timeout_millis))


class MetricExporterWrapper(MetricExporter):
    """Forwards ``export``, ``shutdown`` and ``force_flush`` to ``delegate``, and asks the reader
    for the temporality and aggregation the delegate prefers (a wrapper must not change them)."""

    def __init__(self, delegate: MetricExporter) -> None:
        super().__init__(
            preferred_temporality=getattr(delegate, "_preferred_temporality", None),
            preferred_aggregation=getattr(delegate, "_preferred_aggregation", None),
        )
        self._delegate = delegate

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        return self._delegate.export(metrics_data, timeout_millis=timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._delegate.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._delegate.shutdown(timeout_millis=timeout_millis, **kwargs)
