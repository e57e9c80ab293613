"""Shared pieces: no-op exporters, telemetry providers, machine description, statistics."""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_toolscore.runtime._wrap import SpanProcessorWrapper
from tests.support.paths import REPO


class CountingExporter(SpanExporter):
    """A no-op span exporter that counts what it is given (and nothing else)."""

    def __init__(self) -> None:
        self.count = 0
        self.scored = 0  # agent spans that arrived carrying toolscore.* attributes
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self.count += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def telemetry_providers(kind: str, reader: Any = None) -> tuple[Any, Any, str]:
    """(meter_provider, logger_provider, description) for the processor's events and metrics.

    ``sdk``: the SDK's MeterProvider (a manual reader that is never collected, so every record
    is aggregated as in production) and LoggerProvider with a BatchLogRecordProcessor into a
    no-op exporter: the full cost of producing the telemetry, no I/O.
    ``noop``: the API's no-op providers (what an app that configured no metrics/logs gets).
    ``reader``: the SDK MeterProvider's reader, when the caller reads the metrics afterwards.
    """
    if kind == "noop":
        from opentelemetry._logs import NoOpLoggerProvider
        from opentelemetry.metrics import NoOpMeterProvider

        return NoOpMeterProvider(), NoOpLoggerProvider(), "API no-op MeterProvider and LoggerProvider"
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import (
        BatchLogRecordProcessor,
        LogRecordExporter,
        LogRecordExportResult,
    )
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    class _NoOpLogs(LogRecordExporter):
        def export(self, batch: Any) -> LogRecordExportResult:
            return LogRecordExportResult.SUCCESS

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    lp = LoggerProvider()
    lp.add_log_record_processor(BatchLogRecordProcessor(_NoOpLogs()))
    mp = MeterProvider(metric_readers=[reader if reader is not None else InMemoryMetricReader()])
    return mp, lp, ("SDK MeterProvider (in-memory reader, never collected) and SDK LoggerProvider "
                    "with BatchLogRecordProcessor(no-op exporter)")




def child_env() -> dict[str, str]:
    """Environment for a benchmark's subprocess: it runs in the same directory and imports the
    same ``otel_toolscore`` as this process (PYTHONPATH first, so an older checkout can be
    measured), and finds ``benchmarks`` from anywhere."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (env.get("PYTHONPATH"), str(REPO)) if x)
    return env


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import otel_toolscore

        package = os.path.dirname(otel_toolscore.__file__ or "")
    except ImportError:
        package = None
    return {
        "package": package,
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": model,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
    }


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median and spread (min, max) of repeated measurements."""
    vals = sorted(values)
    return {"median": statistics.median(vals), "min": vals[0], "max": vals[-1], "n": len(vals)}


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(q / 100 * (len(sorted_values) - 1)))))
    return sorted_values[k]


def rss_bytes() -> int:
    """Current resident set size (Linux /proc; falls back to the peak elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def cpu_seconds() -> float:
    """CPU time of the whole process (all threads)."""
    return time.process_time()


def thread_cpu_seconds() -> float:
    return time.thread_time()


def emit_json(result: dict[str, Any]) -> None:
    """The last line a benchmark prints: its result as JSON, for run.py to collect."""
    print("RESULT " + json.dumps(result, default=str), flush=True)


class TimedProcessor(SpanProcessorWrapper):
    """Times the wrapped processor's on_start/on_end, call by call."""

    def __init__(self, inner: SpanProcessor) -> None:
        super().__init__(inner)
        self.starts: dict[int, int] = {}
        self.endings = 0
        self.pairs: list[int] = []  # on_start + on_end ns, per span
        self.agent_pairs: list[int] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        t = time.perf_counter_ns()
        self._delegate.on_start(span, parent_context)
        self.starts[id(span)] = time.perf_counter_ns() - t

    def _on_ending(self, span: Span) -> None:
        # The SDK calls this on every span just before on_end (the span is still writable).
        t = time.perf_counter_ns()
        self._delegate._on_ending(span)
        self.endings = time.perf_counter_ns() - t

    def on_end(self, span: ReadableSpan) -> None:
        t = time.perf_counter_ns()
        self._delegate.on_end(span)
        d = time.perf_counter_ns() - t + self.starts.pop(id(span), 0) + self.endings
        (self.agent_pairs if span.parent is None else self.pairs).append(d)
