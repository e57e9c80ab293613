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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_toolscore.runtime._wrap import SpanExporterWrapper

logger = logging.getLogger(__name__)

#: s; the first wait before retrying a failed batch, doubled after each failure up to the max
RETRY_FIRST_S = 0.25
RETRY_MAX_S = 5.0
#: s; an export attempt still running after this long counts as failing: the SDK's OTLP exporter
#: retries a 503 inside its own timeout (10 s), and readiness should say so meanwhile
STALLED_AFTER_S = 1.0


class RetryingExporter(SpanExporterWrapper):
    """Retries each batch until the inner exporter delivers it or ``give_up()`` is called.

    ``on_done(n)`` is called once per batch when it leaves (delivered or given up);
    ``on_undelivered(n)`` for a batch given up.
    """

    def __init__(self, inner: SpanExporter, on_done: Callable[[int], None],
                 on_undelivered: Callable[[int], None]) -> None:
        super().__init__(inner)
        self._on_done = on_done
        self._on_undelivered = on_undelivered
        self._give_up = threading.Event()
        self._failing_since: float | None = None
        self._attempt_since: float | None = None
        self._delay = RETRY_FIRST_S

    @property
    def failing(self) -> bool:
        """The latest attempt failed and no batch has been delivered since, or the attempt in
        progress has taken longer than ``STALLED_AFTER_S`` (a failing or stuck upstream)."""
        if self._failing_since is not None:
            return True
        started = self._attempt_since
        return started is not None and time.monotonic() - started > STALLED_AFTER_S

    def retry_after_s(self) -> int:
        """Whole seconds a refused sender should wait: the current backoff, at least 1."""
        return max(1, round(self._delay))

    def give_up(self) -> None:
        """Stop retrying: the batch being retried and every later one are counted undelivered."""
        self._give_up.set()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        n = len(spans)
        try:
            while not self._give_up.is_set():
                if self._attempt(spans):
                    return SpanExportResult.SUCCESS
                self._give_up.wait(self._delay)
                self._delay = min(self._delay * 2, RETRY_MAX_S)
            self._on_undelivered(n)
            return SpanExportResult.FAILURE
        finally:
            self._on_done(n)

    def _attempt(self, spans: Sequence[ReadableSpan]) -> bool:
        self._attempt_since = time.monotonic()
        try:
            ok = self._delegate.export(spans) == SpanExportResult.SUCCESS
        except Exception:  # an exporter bug is a failed attempt, retried like one
            logger.warning("otel-toolscore: exporting to the upstream raised", exc_info=True)
            ok = False
        finally:
            self._attempt_since = None
        if ok:
            if self._failing_since is not None:
                logger.warning("otel-toolscore: upstream delivering again after %.1f s",
                               time.monotonic() - self._failing_since)
            self._failing_since = None
            self._delay = RETRY_FIRST_S
        elif self._failing_since is None:
            self._failing_since = time.monotonic()
            logger.warning("otel-toolscore: upstream export failed; retrying, and buffering new spans "
                           "while there is room")
        return ok

    def shutdown(self) -> None:
        self._give_up.set()
        super().shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return super().force_flush(timeout_millis) is not False
