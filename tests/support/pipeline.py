"""``ToolScoreSpanProcessor`` wired to in-memory span, log and metric sinks: what an app's SDK
set-up exports, read back in the test."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_toolscore.runtime.processor import ToolScoreSpanProcessor

try:  # renamed in SDK 1.38
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter as InMemoryLogExporter
except ImportError:  # pragma: no cover - tests/constraints-min.txt
    from opentelemetry.sdk._logs.export import InMemoryLogExporter  # type: ignore[attr-defined,no-redef]

__all__ = ["InMemoryLogExporter", "Pipeline", "id_counts"]


class Pipeline:
    """A processor wired to in-memory span, log and metric sinks."""

    def __init__(self, scorers: Any = None, downstream: SpanProcessor | None = None, **settings_: Any) -> None:
        self.spans = InMemorySpanExporter()
        self.logs = InMemoryLogExporter()
        self.metrics = InMemoryMetricReader()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])
        self.downstream = downstream or SimpleSpanProcessor(self.spans)
        self.processor = ToolScoreSpanProcessor(
            self.downstream, scorers, meter_provider=self.meter_provider, logger_provider=self.logger_provider,
            **settings_,
        )

    def exported(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def metric_points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        out: list[Any] = []
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == name:
                        out.extend(m.data.data_points)
        return out


def id_counts(spans: Iterable[ReadableSpan]) -> Counter[tuple[int, int]]:
    """How many times each (trace id, span id) occurs: a span lost or repeated shows here."""
    return Counter((s.context.trace_id, s.context.span_id) for s in spans)
