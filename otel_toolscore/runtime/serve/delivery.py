"""Delivery to the sidecar's upstream: what ``serve`` accepted is kept until it is delivered.

The SDK's ``BatchSpanProcessor`` drops a batch its exporter fails to send (the OTLP exporter
retries inside its own timeout, then gives up). For a receiver that has answered 200 to the
sender that is a silent loss, so ``serve`` exports through ``RetryingExporter``: a failed batch
is retried with backoff until it is delivered, holding the batch processor's worker meanwhile
(what arrives queues behind it, bounded by ``serve``'s admission, which refuses new spans with
a retryable 503/UNAVAILABLE only when that buffer is full; ``failing`` (an attempt failed, or
has been running for longer than ``STALLED_AFTER_S``) sets the ``Retry-After`` it answers then
and the readiness it reports). Only when ``give_up()`` is called
(shutdown past its deadline) are batches counted as undelivered instead of sent.

``serve``'s own outputs, its evaluation records (log records) and metrics, go through the same
retry loop (``Retrier``) with ``RetryingLogExporter`` and ``RetryingMetricExporter``: what is
not delivered is counted by signal and reason, never dropped silently.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_toolscore.outputs.jsonlines import LogRecordExportResult
from otel_toolscore.runtime._wrap import LogExporterWrapper, MetricExporterWrapper, SpanExporterWrapper

logger = logging.getLogger(__name__)

#: s; the first wait before retrying a failed batch, doubled after each failure up to the max
RETRY_FIRST_S = 0.25
RETRY_MAX_S = 5.0
#: s; an export attempt still running after this long counts as failing: the SDK's OTLP exporter
#: retries a 503 inside its own timeout (10 s), and readiness should say so meanwhile
STALLED_AFTER_S = 1.0

#: the signals ``serve`` sends, as its undelivered counts name them
SPANS, LOG_RECORDS, METRIC_POINTS = "spans", "log_records", "metric_points"
#: why something was not delivered: retried until the stop's deadline passed
STOP_DEADLINE = "stop_deadline"
#: still in an export queue when the stop's deadline passed (never tried)
LEFT_IN_QUEUE = "left_in_queue"
#: not delivered by the stop, but kept in the on-disk queue: a restart delivers it
KEPT_ON_DISK = "kept_on_disk"
#: dropped from the on-disk queue, oldest first, to fit its bound
QUEUE_FULL = "queue_full"


class Retrier:
    """The retry loop of one signal: an attempt that fails is tried again with backoff until it
    succeeds or ``give_up()`` is called; then ``on_undelivered(signal, reason, n)`` counts it."""

    def __init__(self, signal: str, on_undelivered: Callable[[str, str, int], None]) -> None:
        self.signal = signal
        self._on_undelivered = on_undelivered
        self._give_up = threading.Event()
        self._failing_since: float | None = None
        self._attempt_since: float | None = None
        self._delay = RETRY_FIRST_S

    @property
    def failing(self) -> bool:
        """The latest attempt failed and nothing has been delivered since, or the attempt in
        progress has taken longer than ``STALLED_AFTER_S`` (a failing or stuck upstream)."""
        if self._failing_since is not None:
            return True
        started = self._attempt_since
        return started is not None and time.monotonic() - started > STALLED_AFTER_S

    def retry_after_s(self) -> int:
        """Whole seconds a refused sender should wait: the current backoff, at least 1."""
        return max(1, round(self._delay))

    def give_up(self) -> None:
        """Stop retrying: what is being retried and everything later is counted undelivered."""
        self._give_up.set()

    def deliver(self, attempt: Callable[[], bool], n: int) -> bool:
        """Run ``attempt`` until it returns True (True) or ``give_up()`` (False, ``n`` counted)."""
        while not self._give_up.is_set():
            if self._attempt(attempt):
                return True
            self._give_up.wait(self._delay)
            self._delay = min(self._delay * 2, RETRY_MAX_S)
        self._on_undelivered(self.signal, STOP_DEADLINE, n)
        return False

    def _attempt(self, attempt: Callable[[], bool]) -> bool:
        self._attempt_since = time.monotonic()
        try:
            ok = attempt()
        except Exception:  # an exporter bug is a failed attempt, retried like one
            logger.warning("otel-toolscore: exporting %s to the upstream raised", self.signal, exc_info=True)
            ok = False
        finally:
            self._attempt_since = None
        if ok:
            if self._failing_since is not None:
                logger.warning("otel-toolscore: upstream taking %s again after %.1f s", self.signal,
                               time.monotonic() - self._failing_since)
            self._failing_since = None
            self._delay = RETRY_FIRST_S
        elif self._failing_since is None:
            self._failing_since = time.monotonic()
            logger.warning("otel-toolscore: upstream export of %s failed; retrying, and buffering new data "
                           "while there is room", self.signal)
        return ok


class RetryingExporter(SpanExporterWrapper):
    """Retries each batch until the inner exporter delivers it or ``give_up()`` is called.

    ``on_done(n)`` is called once per batch when it leaves (delivered or given up);
    ``on_undelivered(n)`` for a batch given up; ``on_delivered(spans)`` for a batch delivered.
    """

    def __init__(self, inner: SpanExporter, on_done: Callable[[int], None],
                 on_undelivered: Callable[[int], None],
                 on_delivered: Callable[[Sequence[ReadableSpan]], None] | None = None) -> None:
        super().__init__(inner)
        self._on_done = on_done
        self._on_delivered = on_delivered
        self.retrier = Retrier(SPANS, lambda _signal, _reason, n: on_undelivered(n))

    @property
    def failing(self) -> bool:
        return self.retrier.failing

    def retry_after_s(self) -> int:
        return self.retrier.retry_after_s()

    def give_up(self) -> None:
        self.retrier.give_up()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        n = len(spans)
        try:
            delivered = self.retrier.deliver(lambda: self._delegate.export(spans) == SpanExportResult.SUCCESS, n)
            if delivered and self._on_delivered is not None:
                self._on_delivered(spans)
            return SpanExportResult.SUCCESS if delivered else SpanExportResult.FAILURE
        finally:
            self._on_done(n)

    def shutdown(self) -> None:
        self.retrier.give_up()
        super().shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return super().force_flush(timeout_millis) is not False


class RetryingLogExporter(LogExporterWrapper):
    """``serve``'s own log records (``gen_ai.evaluation.result`` events), retried as spans are;
    ``on_delivered(n)`` counts what the upstream took."""

    def __init__(self, inner: Any, retrier: Retrier, on_delivered: Callable[[int], None]) -> None:
        super().__init__(inner)
        self.retrier = retrier
        self._on_delivered = on_delivered

    def export(self, batch: Sequence[Any]) -> Any:
        n = len(batch)
        if self.retrier.deliver(lambda: self._delegate.export(batch) == LogRecordExportResult.SUCCESS, n):
            self._on_delivered(n)
            return LogRecordExportResult.SUCCESS
        return LogRecordExportResult.FAILURE

    def shutdown(self) -> None:
        self.retrier.give_up()
        super().shutdown()


def metric_points(metrics_data: Any) -> int:
    """The data points in a ``MetricsData``: what a metrics export carries."""
    return sum(len(getattr(metric.data, "data_points", ()) or ())
               for rm in getattr(metrics_data, "resource_metrics", ()) for sm in rm.scope_metrics
               for metric in sm.metrics)


class RetryingMetricExporter(MetricExporterWrapper):
    """``serve``'s own metrics, retried as spans are (counted in data points)."""

    def __init__(self, inner: MetricExporter, retrier: Retrier) -> None:
        super().__init__(inner)
        self.retrier = retrier

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        def attempt() -> bool:
            return self._delegate.export(metrics_data, timeout_millis=timeout_millis,
                                         **kwargs) == MetricExportResult.SUCCESS

        if self.retrier.deliver(attempt, metric_points(metrics_data)):
            return MetricExportResult.SUCCESS
        return MetricExportResult.FAILURE

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.retrier.give_up()
        super().shutdown(timeout_millis=timeout_millis, **kwargs)
