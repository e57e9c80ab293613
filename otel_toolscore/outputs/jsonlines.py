"""OTLP/JSON lines files, what the Collector's file exporter writes: spans, log records and metrics,
one export request per line (``otel-toolscore score`` reads the span files back).

Also the SDK's log exporter interface under the name each SDK gives it, for every log exporter here.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from google.protobuf.json_format import MessageToDict
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

try:  # SDK ≥ 1.39 names it LogRecordExporter; older ones LogExporter
    from opentelemetry.sdk._logs.export import LogRecordExporter
except ImportError:  # pragma: no cover - depends on the installed SDK
    from opentelemetry.sdk._logs.export import LogExporter as LogRecordExporter  # type: ignore[no-redef]
try:
    from opentelemetry.sdk._logs.export import LogRecordExportResult
except ImportError:  # pragma: no cover
    from opentelemetry.sdk._logs.export import LogExportResult as LogRecordExportResult  # type: ignore[no-redef, assignment]

__all__ = [
    "JsonLinesLogExporter",
    "JsonLinesMetricExporter",
    "JsonLinesSpanExporter",
    "LogRecordExportResult",
    "LogRecordExporter",
    "otlp_json",
]


_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def _hex_ids(node: Any) -> Any:
    """proto3 JSON writes bytes as base64; OTLP/JSON wants trace and span ids as hex."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)
    return node


def otlp_json(message: Any) -> str:
    """One export request as an OTLP/JSON line (integer enums, hex ids, int64 as strings)."""
    return json.dumps(_hex_ids(MessageToDict(message, use_integers_for_enums=True)), ensure_ascii=False)


class _JsonLines:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._file: TextIO | None = path.open("w", encoding="utf-8")

    def write(self, message: Any) -> None:
        line = otlp_json(message)
        with self._lock:
            if self._file is not None:
                self._file.write(line + "\n")
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


class JsonLinesSpanExporter(SpanExporter):
    """Spans as ``ExportTraceServiceRequest`` JSON lines (``otel-toolscore score`` reads them)."""

    def __init__(self, path: Path) -> None:
        self._out = _JsonLines(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        self._out.write(encode_spans(spans))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._out.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class JsonLinesLogExporter(LogRecordExporter):  # type: ignore[misc, valid-type]
    """Log records (the evaluation events) as ``ExportLogsServiceRequest`` JSON lines."""

    def __init__(self, path: Path) -> None:
        self._out = _JsonLines(path)

    def export(self, batch: Sequence[Any]) -> Any:
        from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs

        self._out.write(encode_logs(batch))
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        self._out.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class JsonLinesMetricExporter(MetricExporter):
    """Metrics as ``ExportMetricsServiceRequest`` JSON lines (cumulative)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._out = _JsonLines(path)

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        from opentelemetry.exporter.otlp.proto.common.metrics_encoder import (
            encode_metrics,
        )

        self._out.write(encode_metrics(metrics_data))
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._out.close()

