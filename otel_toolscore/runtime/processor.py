"""ToolScoreSpanProcessor: scores agent runs inside the app's own span pipeline.

It wraps the exporting processor: ``ToolScoreSpanProcessor(BatchSpanProcessor(exporter))``.
Every span given to ``on_end`` reaches ``downstream.on_end`` exactly once. Spans go through at
once, except agent-like spans, which are held until their run's code scores are ready (so the
scores can ride on them as attributes), never longer than ``hold_timeout``.

Completion is per outermost agent run, not per trace: a run (its agent span and subtree, nested
sub-agents included) is scored when its agent span has ended and none of its descendants is
open, or at ``completion_grace`` after its agent span ended; other runs of the same trace (a web
request invoking two agents) do not wait for it nor it for them. A span ending after its run
was scored is forwarded and counted (``stats["late_spans"]``). A trace without an agent run is
one run, complete when nothing of it is open and its local root has ended.

Threads: the app's threads only touch dicts under one short lock (``on_start``/``on_end``, or
``on_end_many`` for a batch of ended spans, as ``serve`` hands over a request); a
worker thread scores completed traces from a bounded queue; a timer thread handles grace
periods, hold deadlines and TTLs. The downstream processor is never called under the lock.

Failures: whatever a scorer raises (SystemExit and KeyboardInterrupt included) is its error
score; whatever the downstream raises is logged, on the app's threads too, except that
SystemExit and KeyboardInterrupt raised on an app thread stay the app's. A downstream that
hangs in ``on_end`` blocks its caller, as forwarding is synchronous like the SDK's: the app's
thread for spans not held, the worker or the timer for held ones; the timer still releases the
holds behind a stuck worker, and ``shutdown`` returns within ``shutdown_timeout`` and about a
second (plus the downstream's own shutdown). After a fork the child starts afresh: the parent's
held spans are the parent's to forward.

The work is done by the parts in ``runtime/_processor/`` (docs/design.md, "The processor's
parts"): ``buffers`` (per-trace buffers, completion per run, the bounds), ``timer`` (grace, hold
deadlines, TTL), ``scoring`` (the worker, the scoring process's hand-off), ``forward`` (the
downstream, held spans exactly once), ``tally`` (counts taken on the app's threads). This class
takes the SDK's calls, holds the one lock, and wires the parts; each states the invariant it keeps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from otel_toolscore import _fork
from otel_toolscore.config import TRACE_ID_LIMIT, ToolScoreSettings, load_settings
from otel_toolscore.conventions import classify
from otel_toolscore.outputs.otel import Emitter
from otel_toolscore.runtime._handoff import RunAnswer
from otel_toolscore.runtime._processor.buffers import Buffers, TraceBuffer
from otel_toolscore.runtime._processor.forward import Forwarding, Held, Phase, with_attributes
from otel_toolscore.runtime._processor.ready import Anchors, Ready
from otel_toolscore.runtime._processor.scoring import GATHER_S, Scoring
from otel_toolscore.runtime._processor.tally import Tally
from otel_toolscore.runtime._processor.timer import Timer
from otel_toolscore.runtime._scoring_process import ScoringProcess
from otel_toolscore.runtime.engine import Engine, RunResult
from otel_toolscore.scorers.base import Scorer

__all__ = ["Backlog", "ToolScoreSpanProcessor", "with_attributes"]

logger = logging.getLogger(__name__)

# the parts' names as they were when they lived here (tests and benchmarks import them)
_Held, _Ready, _Anchors = Held, Ready, Anchors


@dataclass(frozen=True)
class Backlog:
    """How full the processor's bounds are (``ToolScoreSpanProcessor.backlog()``)."""

    pending_traces: int
    oldest_pending_age_s: float | None
    queue_full: bool


class ToolScoreSpanProcessor(SpanProcessor):
    def __init__(
        self,
        downstream: SpanProcessor,
        scorers: Sequence[Scorer | str] | None = None,
        *,
        settings: ToolScoreSettings | None = None,
        completion: str = "open_spans",
        scoring: str | None = None,
        meter_provider: Any = None,
        logger_provider: Any = None,
        run_metric_attributes: Callable[[str], Mapping[str, Any]] | None = None,
        **overrides: Any,
    ) -> None:
        if completion not in ("open_spans", "quiet"):
            raise ValueError(f"completion must be 'open_spans' or 'quiet', not {completion!r}")
        # open_spans: in process, on_start is seen and open spans are counted. quiet: spans
        # arrive ended (sidecar, replayed files); a trace is complete when its root has arrived
        # and no span came for decision_wait.
        self._quiet = completion == "quiet"
        if scoring not in (None, "thread", "process"):
            raise ValueError(f"scoring must be 'thread' or 'process', not {scoring!r}")
        self._downstream = downstream
        # Looked up once: the SDK calls _on_ending for every span.
        self._downstream_on_ending = getattr(downstream, "_on_ending", None)
        self.settings = settings if settings is not None else load_settings(scoring=scoring, **overrides)
        if scoring is not None and scoring != self.settings.scoring:
            self.settings = self.settings.model_copy(update={"scoring": scoring})
        # The hot path reads it on every agent span.
        self._hold_timeout = self.settings.hold_timeout
        # run_metric_attributes: more attributes on a run's score metrics, by its trace id (serve's:
        # the app the run came from)
        self._emitter = Emitter(self.settings, meter_provider=meter_provider, logger_provider=logger_provider,
                                run_metric_attributes=run_metric_attributes)
        self._engine = Engine(self.settings, scorers, self._emitter)
        # Sampling is decided on the trace id when a span starts: a trace no scorer samples is
        # never buffered, classified or assembled, only forwarded. None: every trace is sampled.
        self._trace_bound = self._engine.trace_bound()
        # scoring="process": code scorers run in a child process (started with the first run),
        # off the app's GIL; this process only emits what it answers. Scorers that cannot be
        # sent to it fail here (ScoringProcessError), not on the first run.
        self._remote = ScoringProcess(self.settings, self._engine.code_scorers, self._answered, self._lost) \
            if self.settings.scoring == "process" else None
        self._emitter.observe_pending(lambda: len(self._pending))
        self.stats: Counter[str] = Counter()
        self._init_state()
        _fork.reinit_in_child(self._at_fork_reinit)

    # --- the parts, and their threads --------------------------------------------------------------

    def _init_state(self, start: bool = True) -> None:
        self._lock = threading.Lock()
        self._phase = Phase()
        self._fwd = Forwarding(self._downstream, self._phase, self._on_own_thread)
        self._timer_part = timer = Timer(self.settings, self._quiet, self._lock, self._phase)
        self._buffers = buffers = Buffers(self.settings, self._quiet, timer, self.stats)
        self._tally = Tally(self.stats)
        self._scoring = scoring = Scoring(self._engine, self._emitter, self._remote, self._fwd, self._tally,
                                          self._phase, self.stats, self.settings.queue_size,
                                          gather_s=min(GATHER_S, self.settings.hold_timeout / 4))
        timer.buffers = buffers
        timer.release_expired = self._release_expired
        timer.evict = self._evict
        timer.submit = self._submit_ready
        timer.check_hung = self._remote.check_hung if self._remote is not None else None
        # bound here: the hot path reads them on every span
        self._pending = buffers.pending
        self._too_large = buffers.too_large
        self._add_live = buffers.add_live
        self._add_quiet = buffers.add_quiet
        self._forward = self._fwd.forward
        if start:
            scoring.start()
            timer.thread.start()

    def _at_fork_reinit(self) -> None:
        # The child gets none of the parent's threads, and its locks may have been held by them
        # at the fork: all state is new. Its buffers and held spans are the parent's, which
        # forwards them; forwarded from the child too, they would reach the backend twice.
        stopping = self._phase.stopping
        self._init_state(start=not stopping)
        if stopping:
            # Shut down (or shutting down) in the parent: it stays so in the child, without
            # threads, forwarding spans as they come.
            self._phase.stopping = self._phase.shutdown = self._phase.closed = True
        self._engine.reinit_after_fork(start=not stopping)
        if self._remote is not None:
            self._remote.reinit_after_fork(start=not stopping)

    def _on_own_thread(self) -> bool:
        current = threading.current_thread()
        return current in self._scoring.threads() or current is self._timer_part.thread or (
            self._remote is not None and self._remote.is_receiver(current))

    # --- hot path --------------------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        evicted: TraceBuffer | None = None
        try:
            # A SpanContext is a tuple (trace_id, span_id, is_remote, ...) whose named
            # properties are Python calls; indexing it is not (the hot path reads five per span).
            ctx = span.context
            trace_id = ctx[0]
            bound = self._trace_bound
            if bound is None or trace_id & TRACE_ID_LIMIT < bound:  # (else: only forwarded)
                with self._lock:
                    buf = self._pending.get(trace_id) if not self._phase.shutdown else None
                    if buf is None and not self._phase.shutdown and trace_id not in self._too_large:
                        buf, evicted = self._new_buffer(trace_id, time.monotonic())
                    if buf is not None:
                        if not self._quiet:
                            # The live span is kept while open: its parent, and whether it is an
                            # agent, are read from it only when a walk up the tree needs them (not
                            # here, on every span's start).
                            span_id = ctx[1]
                            buf.open_ids[span_id] = span
                            if buf.runs:
                                # A child starting late under a run that has ended: the run waits for it
                                # too (within its grace).
                                owner = self._buffers.owner(buf, span_id)
                                if owner is not None and owner in buf.runs:
                                    buf.runs[owner].open += 1
        except Exception:  # nothing may raise into the app
            logger.debug("otel-toolscore on_start failed", exc_info=True)
        if evicted is not None:
            self._evict(evicted, "max_pending_traces")
        try:
            self._downstream.on_start(span, parent_context=parent_context)
        except Exception:  # nothing may raise into the app
            logger.warning("otel-toolscore: downstream on_start failed", exc_info=True)

    def _on_ending(self, span: Span) -> None:
        hook = self._downstream_on_ending
        if hook is not None:
            try:
                hook(span)
            except Exception:  # nothing may raise into the app
                logger.warning("otel-toolscore: downstream _on_ending failed", exc_info=True)

    def on_end(self, span: ReadableSpan) -> None:
        hold = False
        ready: list[Ready] | None = None
        evicted: TraceBuffer | None = None
        crowded: TraceBuffer | None = None  # evicted at max_pending_traces by this span's new buffer
        try:
            ctx = span.context
            trace_id, span_id = ctx[0], ctx[1]  # (trace_id, span_id: see on_start)
            bound = self._trace_bound
            if bound is not None and trace_id & TRACE_ID_LIMIT >= bound:
                # not sampled: never buffered (see on_start), only forwarded
                self._forward(span)
                return
            # Everything that needs no shared state is done before taking the lock.
            kind = classify(span)
            agent = kind == "agent"
            now = time.monotonic() if agent or self._quiet else 0.0
            held = Held(span, span_id, now + self._hold_timeout) if agent else None
            with self._lock:
                buf = self._pending.get(trace_id) if not self._phase.shutdown else None
                if buf is None and self._quiet and not self._phase.shutdown and trace_id not in self._too_large:
                    buf, crowded = self._new_buffer(trace_id, now)
                if buf is not None:
                    if self._quiet:
                        hold, evicted = self._add_quiet(trace_id, buf, span, kind, held, now)
                    else:
                        hold, evicted, ready = self._add_live(trace_id, span_id, buf, span, kind, held, now)
        except Exception:  # nothing may raise into the app
            # A span already held sits in its buffer with a deadline: the timer releases it.
            logger.debug("otel-toolscore on_end failed", exc_info=True)
        if not hold:
            self._forward(span)
        if crowded is not None:
            self._evict(crowded, "max_pending_traces")
        if evicted is not None:
            self._evict(evicted, "max_spans_per_trace")
        if ready:
            for r in ready:
                self._submit(r)

    def on_end_many(self, spans: Sequence[ReadableSpan]) -> None:
        """``on_end`` for each span in order, in one call: how ``serve`` hands over a request.

        The outcome is the one of ``on_end`` span by span (holds, what is forwarded and in which
        order, evictions, sampling, shutdown); the cost is one lock and one pass over the spans
        instead of a lock, a clock read and a dozen calls per span on the receiver's thread.
        Completion without ``on_start`` ("quiet") only; otherwise it calls ``on_end`` per span.
        """
        if not self._quiet:
            for span in spans:
                self.on_end(span)
            return
        bound = self._trace_bound
        # Outside the lock, as on_end: each span's ids and kind; None: only forwarded (not
        # sampled, or its look failed, which on_end answers the same way).
        looked: list[tuple[int, int, str | None] | None] = []
        for span in spans:
            try:
                ctx = span.context
                trace_id = ctx[0]
                if bound is not None and trace_id & TRACE_ID_LIMIT >= bound:
                    looked.append(None)
                else:
                    looked.append((trace_id, ctx[1], classify(span)))
            except Exception:  # nothing may raise into the app
                logger.debug("otel-toolscore on_end failed", exc_info=True)
                looked.append(None)
        # What leaves after the lock, in on_end's order: each span not held, then a buffer it
        # evicted (with the reason).
        after: list[ReadableSpan | tuple[TraceBuffer, str]] = []
        now = time.monotonic()
        deadline = now + self._hold_timeout
        pending = self._pending
        with self._lock:
            shutdown = self._phase.shutdown
            for span, seen in zip(spans, looked):
                if seen is None or shutdown:
                    after.append(span)
                    continue
                held = False
                crowded = None
                try:
                    trace_id, span_id, kind = seen
                    buf = pending.get(trace_id)
                    if buf is None:
                        if trace_id in self._too_large:
                            after.append(span)
                            continue
                        buf, crowded = self._new_buffer(trace_id, now)
                    held, full = self._add_quiet(trace_id, buf, span, kind,
                                                 Held(span, span_id, deadline) if kind == "agent" else None, now)
                    if full is not None:
                        after.append(span)
                        after.append((full, "max_spans_per_trace"))
                        continue
                except Exception:  # nothing may raise into the app; a held span has its deadline
                    logger.debug("otel-toolscore on_end failed", exc_info=True)
                if not held:
                    after.append(span)
                if crowded is not None:
                    after.append((crowded, "max_pending_traces"))
        for out in after:
            if type(out) is tuple:
                self._evict(*out)
            else:
                self._forward(out)  # type: ignore[arg-type]

    def _new_buffer(self, trace_id: int, now: float) -> tuple[TraceBuffer, TraceBuffer | None]:
        """Under the lock: a buffer for a new trace (and the oldest, evicted at the cap)."""
        return self._buffers.new_buffer(trace_id, now)

    def _evict(self, buf: TraceBuffer, reason: str) -> None:
        """A trace leaves its buffer unscored (after the lock): counted, its held spans forwarded."""
        self._tally.evicted(reason, bool(buf.held or buf.runs or buf.genai))
        self._fwd.release_all(buf.held)

    def _submit(self, ready: Ready) -> None:
        self._scoring.submit(ready)

    def _submit_ready(self, ready: Ready) -> None:
        # the timer's submit: through ``_submit``, which a benchmark replaces to keep the worker idle
        self._submit(ready)

    def _release_expired(self, held: Held) -> None:
        if self._fwd.release(held, keep=True):
            self.stats["holds_expired"] += 1

    # --- flush and shutdown ----------------------------------------------------------------------

    def backlog(self) -> Backlog:
        """How full the processor's bounds are, for a receiver deciding whether to push back."""
        with self._lock:
            oldest = next(iter(self._pending.values())).created if self._pending else None
            pending = len(self._pending)
        return Backlog(pending_traces=pending, oldest_pending_age_s=None if oldest is None else time.monotonic() - oldest,
                       queue_full=self._scoring.queue.full())

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        clock = self._scoring.clock
        deadline = clock() + timeout_millis / 1000
        done = False
        try:
            with self._lock:
                ready = self._buffers.drain()
            for r in ready:
                self._submit(r)
            done = self._scoring.wait_idle(deadline)
            done = self._engine.wait_judges(max(0.0, deadline - clock())) and done
            self._tally.flush(self._engine, self._emitter)  # counts taken on app threads reach the metrics before the flush
        except Exception:  # nothing may raise into the app
            logger.warning("otel-toolscore: force_flush failed", exc_info=True)
        remaining_ms = max(0, int((deadline - clock()) * 1000))
        try:
            # None is success: SpanProcessor.force_flush is a bare ``pass`` in SDK 1.37, and a
            # downstream that does not override it has nothing to flush.
            return self._downstream.force_flush(remaining_ms) is not False and done
        except Exception:  # nothing may raise into the app
            logger.warning("otel-toolscore: downstream force_flush failed", exc_info=True)
            return False

    def shutdown(self) -> None:
        """Score what can be scored within ``shutdown_timeout`` (held spans wait no longer than
        ``hold_timeout``), forward everything still held unscored, stop the threads, shut down
        the downstream. Bounded whatever a scorer or judge does; safe from any thread, a
        scorer's included; a second call returns at once."""
        phase, scoring = self._phase, self._scoring
        clock = scoring.clock
        with self._lock:
            if phase.stopping:
                return
            phase.stopping = True
            ready = self._buffers.drain()
            leftovers = [h for b in self._pending.values() for h in b.held]
            self._pending.clear()
        now = clock()
        deadline = now + self.settings.shutdown_timeout
        try:
            for r in ready:
                self._submit(r)
            scoring.wait_idle(min(deadline, now + self.settings.hold_timeout))
        except Exception:  # what is held must still leave
            logger.warning("otel-toolscore: shutdown failed while scoring", exc_info=True)
        with self._lock:
            phase.shutdown = True
            stranded = self._timer_part.stop()
        # Whatever is still held (scoring too slow, queue full) leaves now, unscored.
        self._fwd.release_all(leftovers + stranded)
        scoring.drop_waiting()
        self._tally.flush(self._engine, self._emitter)
        scoring.queue.put(None)
        current = threading.current_thread()
        for thread in (*scoring.threads(), self._timer_part.thread):
            if not thread.is_alive():
                continue
            if thread is not current:
                # Daemon threads: one stuck in a hanging scorer cannot keep the process alive,
                # so waiting for it is only tidiness, not worth more than a second.
                thread.join(timeout=min(1.0, max(0.0, deadline - clock())))
        if self._remote is not None:
            try:
                # in-flight answers have had their wait (above); what is left is counted dropped
                self._remote.close(max(0.0, deadline - clock()))
            except Exception:
                logger.warning("otel-toolscore: stopping the scoring process failed", exc_info=True)
        try:
            self._engine.close(max(0.0, deadline - clock()))
        except Exception:
            logger.warning("otel-toolscore: closing the judges failed", exc_info=True)
        phase.closed = True
        try:
            self._downstream.shutdown()
        except Exception:  # nothing may raise into the app
            logger.warning("otel-toolscore: downstream shutdown failed", exc_info=True)

    # --- the parts as they were reached before the split (tests, benchmarks) ------------------------

    def _answered(self, item: Ready, answer: RunAnswer) -> None:
        self._scoring.answered(item, answer)

    def _lost(self, items: list[Ready], outcome: str) -> None:
        self._scoring.lost(items, outcome)

    def _score(self, item: Ready) -> None:
        self._scoring.score(item)

    def _apply(self, item: Ready, results: list[RunResult]) -> None:
        self._scoring.apply(item, results)

    def _pack(self, item: Ready) -> None:
        self._scoring.pack(item)

    def _release(self, held: Held, extra: Any = None, span: ReadableSpan | None = None, keep: bool = False) -> bool:
        return self._fwd.release(held, extra, span, keep)

    @property
    def _queue(self) -> Any:
        return self._scoring.queue

    @property
    def _backlog(self) -> Any:
        return self._scoring.backlog

    @property
    def _worker(self) -> threading.Thread:
        return self._scoring.worker

    @property
    def _timer(self) -> threading.Thread:
        return self._timer_part.thread

    @property
    def _holds(self) -> Any:
        return self._timer_part.holds

    @property
    def _outstanding(self) -> int:
        return self._scoring.outstanding

    @_outstanding.setter
    def _outstanding(self, n: int) -> None:
        self._scoring.outstanding = n
