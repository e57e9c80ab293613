"""Admission: ``serve`` never accepts what it would have to drop.

The spans of a request are reserved against the bound of the export queue before any of them
enters the processor; a request that does not fit, or comes while the scoring processor is at
its bounds, is refused as a whole with a retryable 503/UNAVAILABLE. A failing upstream is not a
reason in itself: while there is room, what comes is accepted and waits to be delivered.
"""

from __future__ import annotations

import threading

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from otel_toolscore.runtime._wrap import SpanProcessorWrapper
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
from otel_toolscore.runtime.serve._protocol import RETRY_AFTER_S, Rejection
from otel_toolscore.runtime.serve.delivery import RetryingExporter

__all__ = ["Backlog", "ByteBudget", "CountingProcessor", "refusal", "scoring_full"]


class Backlog:
    """Spans handed to the export queue and not yet exported, plus reservations of admitted requests."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._entered = 0
        self._left = 0
        self._reserved = 0

    def queued(self) -> int:
        with self._lock:
            return self._entered - self._left

    def try_reserve(self, n: int) -> int | None:
        """Reserve room for ``n`` spans; None when they fit, else how many are waiting."""
        with self._lock:
            waiting = self._entered - self._left + self._reserved
            if waiting + n > self.limit:
                return waiting
            self._reserved += n
            return None

    def release(self, n: int) -> None:
        with self._lock:
            self._reserved -= n

    def entered(self, n: int = 1) -> None:
        with self._lock:
            self._entered += n

    def left(self, n: int) -> None:
        with self._lock:
            self._left += n


class ByteBudget:
    """Bytes of HTTP request bodies being received at once, across connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._used = 0

    def take(self, n: int) -> bool:
        with self._lock:
            if self._used + n > self.limit:
                return False
            self._used += n
            return True

    def give_back(self, n: int) -> None:
        with self._lock:
            self._used -= n


class CountingProcessor(SpanProcessorWrapper):
    """Counts the spans entering the export queue (the scoring processor's downstream)."""

    def __init__(self, inner: SpanProcessor, backlog: Backlog) -> None:
        super().__init__(inner)
        self._backlog = backlog

    def on_end(self, span: ReadableSpan) -> None:
        self._backlog.entered()
        self._delegate.on_end(span)


def scoring_full(proc: ToolScoreSpanProcessor | None) -> str | None:
    """Why scoring cannot take another trace now, or None. Reads the processor's bounds."""
    if proc is None:
        return "not started"
    backlog = proc.backlog()
    pending, age = backlog.pending_traces, backlog.oldest_pending_age_s
    if pending >= proc.settings.max_pending_traces and age is not None:
        # Full of young traces: load is too high, the client should back off. Full of old
        # ones (a root that never arrives keeps a trace until trace_ttl): refusing would stop
        # all traffic for minutes, so the processor evicts the oldest instead (its spans are
        # forwarded unscored, counted in toolscore.traces.evicted).
        stale_after = proc.settings.hold_timeout + proc.settings.decision_wait
        if age < stale_after:
            return f"{pending} traces are waiting to complete (max_pending_traces)"
    if backlog.queue_full:
        return "the scoring queue is full (queue_size)"
    return None


def refusal(
    n: int, proc: ToolScoreSpanProcessor | None, backlog: Backlog, delivery: RetryingExporter | None
) -> Rejection | None:
    """Why a request of ``n`` spans is refused now, or None: then room for them is reserved in
    ``backlog`` (``release(n)`` once they are in the processor)."""
    # A failing upstream alone is no reason to refuse: what is accepted waits in the buffer and
    # is retried until delivered, while the sender's own exporter would give up within its
    # timeout (docs/reliability.md, "`serve` never acknowledges"). Only a full buffer pushes back.
    why = scoring_full(proc)
    waiting = backlog.try_reserve(n) if why is None else None
    if why is None and waiting is not None:
        why = f"{waiting} spans are waiting for the upstream (max_queued_spans {backlog.limit})"
        if delivery is not None and delivery.failing:
            why += "; the upstream is failing"
            return Rejection(503, "UNAVAILABLE", f"busy, retry later: {why}", delivery.retry_after_s())
    if why is not None:
        return Rejection(503, "UNAVAILABLE", f"busy, retry later: {why}", RETRY_AFTER_S)
    return None
