"""ToolScoreSpanProcessor: scores agent runs inside the app's own span pipeline.

It wraps the exporting processor: ``ToolScoreSpanProcessor(BatchSpanProcessor(exporter))``.
Every span given to ``on_end`` reaches ``downstream.on_end`` exactly once. Spans go through at
once, except agent-like spans, which are held until their trace's code scores are ready (so the
scores can ride on them as attributes), never longer than ``hold_timeout``.

Threads: the app's threads only touch dicts under one short lock (``on_start``/``on_end``); a
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
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import queue
import threading
import time
import weakref
from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.util.types import AttributeValue

from otel_toolscore.config import ToolScoreSettings, load_settings
from otel_toolscore.conventions import classify
from otel_toolscore.emit import Emitter
from otel_toolscore.engine import Engine, RunResult
from otel_toolscore.otlp import copy_span
from otel_toolscore.scorers.base import Scorer

logger = logging.getLogger(__name__)

#: the timer releases a held span up to this much before its hold deadline (never after it), so
#: that one wake-up releases every hold falling due in that window instead of one each
_HOLD_SLACK_S = 0.005
#: the worker offers the GIL to the app's threads after scoring for this long
_YIELD_AFTER_S = 0.002
#: s; the longest a drop or eviction counted on an app thread waits to reach the metrics
_TALLY_FLUSH_S = 1.0


@dataclass(eq=False, slots=True)
class _Held:
    """An agent-like span waiting for its scores. ``released`` makes forwarding exactly-once."""

    span: ReadableSpan
    span_id: int
    deadline: float
    released: bool = False


@dataclass(eq=False, slots=True)
class _TraceBuffer:
    created: float
    spans: list[ReadableSpan] = field(default_factory=list)
    held: list[_Held] = field(default_factory=list)
    open: int = 0
    genai: bool = False
    root_ended: bool = False
    grace_deadline: float | None = None
    last_seen: float = 0.0  # quiet mode: when the trace's latest span arrived
    quiet_scheduled: bool = False


@dataclass(frozen=True)
class Backlog:
    """How full the processor's bounds are (``ToolScoreSpanProcessor.backlog()``)."""

    pending_traces: int
    oldest_pending_age_s: float | None
    queue_full: bool


@dataclass(slots=True)
class _Ready:
    trace_id: int
    spans: list[ReadableSpan]
    held: list[_Held]


class _ReadyQueue(queue.SimpleQueue):  # type: ignore[type-arg]
    """Completed traces for the worker. A SimpleQueue (put, get and the worker's wake-up happen
    in C, not through the Python-level Conditions of queue.Queue) with queue.Queue's bound.

    ``qsize()`` is exact for one producer; threads ending traces at the same moment may
    overshoot the bound by one item each.
    """

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def full(self) -> bool:
        return self.qsize() >= self.maxsize


def with_attributes(span: ReadableSpan, extra: dict[str, AttributeValue]) -> ReadableSpan:
    """A copy of an ended span with more attributes (ended SDK spans are immutable)."""
    return copy_span(span, attributes={**(span.attributes or {}), **extra})


class ToolScoreSpanProcessor(SpanProcessor):
    def __init__(
        self,
        downstream: SpanProcessor,
        scorers: Sequence[Scorer | str] | None = None,
        *,
        settings: ToolScoreSettings | None = None,
        completion: str = "open_spans",
        meter_provider: Any = None,
        logger_provider: Any = None,
        **overrides: Any,
    ) -> None:
        if completion not in ("open_spans", "quiet"):
            raise ValueError(f"completion must be 'open_spans' or 'quiet', not {completion!r}")
        # open_spans: in process, on_start is seen and open spans are counted. quiet: spans
        # arrive ended (sidecar, replayed files); a trace is complete when its root has arrived
        # and no span came for decision_wait.
        self._quiet = completion == "quiet"
        self._downstream = downstream
        # Looked up once: the SDK calls _on_ending for every span.
        self._downstream_on_ending = getattr(downstream, "_on_ending", None)
        self.settings = settings if settings is not None else load_settings(**overrides)
        # The hot path reads these on every span.
        self._max_spans = self.settings.max_spans_per_trace
        self._hold_timeout = self.settings.hold_timeout
        self._grace = self.settings.completion_grace
        self._hold_slack = min(_HOLD_SLACK_S, self._hold_timeout / 10)
        self._emitter = Emitter(self.settings, meter_provider=meter_provider, logger_provider=logger_provider)
        self._engine = Engine(self.settings, scorers, self._emitter)
        self._emitter.observe_pending(lambda: len(self._pending))
        self.stats: Counter[str] = Counter()
        self._init_state()
        if hasattr(os, "register_at_fork"):
            # Weak: the registration outlives the processor (there is no unregister).
            weak_reinit = weakref.WeakMethod(self._at_fork_reinit)
            os.register_at_fork(after_in_child=lambda: _call_weak(weak_reinit))

    # --- state and threads ---------------------------------------------------------------------

    def _init_state(self, start: bool = True) -> None:
        self._lock = threading.Lock()
        self._timer_wakeup = threading.Condition(self._lock)
        self._timer_until = 0.0  # when the sleeping timer wakes up by itself
        self._pending: OrderedDict[int, _TraceBuffer] = OrderedDict()
        self._deadlines: list[tuple[float, int, str, Any]] = []  # (when, seq, what, payload)
        # Held spans in hold order, which is deadline order (one hold_timeout for all): the
        # timer looks at the oldest unreleased one only, not at every hold.
        self._holds: deque[_Held] = deque()
        # Exactly-once forwarding of held spans; a lock of its own so that the worker and the
        # timer releasing spans never make the app's threads wait in on_start/on_end.
        self._release_lock = threading.Lock()
        # Drops and evictions decided on an app thread are tallied here and added to the
        # metrics by the worker: five SDK counter adds cost ~40 µs, which the app's on_end
        # would pay for every run dropped exactly when the process is overloaded.
        self._tally_lock = threading.Lock()
        self._tally: Counter[str] = Counter()
        self._seq = itertools.count()
        self._queue = _ReadyQueue(self.settings.queue_size)
        # ready items submitted and not yet done; counted at submit, not when the worker takes
        # them: between the worker's get() and its count, force_flush saw an empty queue and
        # nothing busy, and returned before the run was scored (seen on Python 3.13)
        self._busy = 0
        self._idle = threading.Condition(threading.Lock())
        self._stopping = False  # shutdown() has begun: a second call returns at once
        self._shutdown = False  # nothing more is held or scored; spans are only forwarded
        self._closed = False  # the downstream is shut down (or being shut down)
        self._worker = threading.Thread(target=self._work, name="otel-toolscore-worker", daemon=True)
        self._timer = threading.Thread(target=self._time, name="otel-toolscore-timer", daemon=True)
        if start:
            self._worker.start()
            self._timer.start()

    def _at_fork_reinit(self) -> None:
        # The child gets none of the parent's threads, and its locks may have been held by them
        # at the fork: all state is new. Its buffers and held spans are the parent's, which
        # forwards them; forwarded from the child too, they would reach the backend twice.
        stopping = self._stopping
        self._init_state(start=not stopping)
        if stopping:
            # Shut down (or shutting down) in the parent: it stays so in the child, without
            # threads, forwarding spans as they come.
            self._stopping = self._shutdown = self._closed = True
        self._engine.reinit_after_fork(start=not stopping)

    def _on_own_thread(self) -> bool:
        current = threading.current_thread()
        return current is self._worker or current is self._timer

    # --- hot path --------------------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        evicted: _TraceBuffer | None = None
        try:
            trace_id = span.context.trace_id
            with self._lock:
                if not self._shutdown:
                    buf = self._pending.get(trace_id)
                    if buf is None:
                        buf, evicted = self._new_buffer(trace_id, time.monotonic())
                    buf.open += 1
        except Exception:  # noqa: BLE001 - nothing may raise into the app
            logger.debug("otel-toolscore on_start failed", exc_info=True)
        if evicted is not None:
            self._evict(evicted, "max_pending_traces")
        try:
            self._downstream.on_start(span, parent_context=parent_context)
        except Exception:  # noqa: BLE001 - nothing may raise into the app
            logger.warning("otel-toolscore: downstream on_start failed", exc_info=True)

    def _on_ending(self, span: Span) -> None:
        hook = self._downstream_on_ending
        if hook is not None:
            try:
                hook(span)
            except Exception:  # noqa: BLE001 - nothing may raise into the app
                logger.warning("otel-toolscore: downstream _on_ending failed", exc_info=True)

    def on_end(self, span: ReadableSpan) -> None:
        hold = False
        ready: _Ready | None = None
        evicted: _TraceBuffer | None = None
        try:
            # Everything that needs no shared state is done before taking the lock.
            kind = classify(span)
            ctx = span.context
            trace_id = ctx.trace_id
            agent = kind == "agent"
            now = time.monotonic() if agent or self._quiet else 0.0
            held = _Held(span, ctx.span_id, now + self._hold_timeout) if agent else None
            with self._lock:
                buf = self._pending.get(trace_id) if not self._shutdown else None
                if buf is None and self._quiet and not self._shutdown:
                    buf, evicted = self._new_buffer(trace_id, now)
                if buf is not None:
                    if buf.open > 0:
                        buf.open -= 1
                    if len(buf.spans) >= self._max_spans:
                        evicted = self._pending.pop(trace_id)
                    else:
                        buf.spans.append(span)
                        if kind is not None:
                            buf.genai = True
                        if held is not None:
                            buf.held.append(held)
                            hold = True
                            self._holds.append(held)
                            self._wake_timer_by(held.deadline - self._hold_slack)
                        if self._quiet:
                            self._note_quiet(trace_id, buf, span, now)
                        else:
                            ready = self._check_complete(trace_id, buf, span)
                            if ready is None and held is not None and buf.grace_deadline is None:
                                # Children still open: score anyway once the grace period is
                                # over (a trace complete now needs no grace timer).
                                buf.grace_deadline = now + self._grace
                                self._schedule(buf.grace_deadline, "grace", trace_id)
        except Exception:  # noqa: BLE001 - nothing may raise into the app
            # A span already held sits in its buffer with a deadline: the timer releases it.
            logger.debug("otel-toolscore on_end failed", exc_info=True)
        if not hold:
            self._forward(span)
        if evicted is not None:
            self._evict(evicted, "max_spans_per_trace")
        if ready is not None:
            self._submit(ready)

    def _new_buffer(self, trace_id: int, now: float) -> tuple[_TraceBuffer, _TraceBuffer | None]:
        """Under the lock: a buffer for a new trace, evicting the oldest when at the cap."""
        evicted = None
        if len(self._pending) >= self.settings.max_pending_traces:
            _, evicted = self._pending.popitem(last=False)
        buf = _TraceBuffer(created=now)
        self._pending[trace_id] = buf
        return buf, evicted

    def _note_quiet(self, trace_id: int, buf: _TraceBuffer, ended: ReadableSpan, now: float) -> None:
        """Under the lock (quiet mode): remember activity; one timer entry per trace at a time."""
        parent = ended.parent
        if parent is None or parent.is_remote:
            buf.root_ended = True
        buf.last_seen = now
        if not buf.quiet_scheduled:
            buf.quiet_scheduled = True
            self._schedule(now + self.settings.decision_wait, "quiet", trace_id)

    def _check_complete(self, trace_id: int, buf: _TraceBuffer, ended: ReadableSpan) -> _Ready | None:
        """Under the lock: is this trace ready for scoring now?

        Ready when nothing started in it is still open and either an agent span has ended or
        its local root has (a GenAI trace without an agent span is one run, scored without a
        held span; a trace with no GenAI span at all needs no scoring and is dropped).
        """
        parent = ended.parent
        if parent is None or parent.is_remote:
            buf.root_ended = True
        if buf.open > 0 or not (buf.held or buf.root_ended):
            return None
        del self._pending[trace_id]
        if buf.held or buf.genai:
            return _Ready(trace_id, buf.spans, buf.held)
        return None

    def _schedule(self, when: float, what: str, payload: Any) -> None:
        # Under the lock.
        heapq.heappush(self._deadlines, (when, next(self._seq), what, payload))
        self._wake_timer_by(when)

    def _wake_timer_by(self, when: float) -> None:
        """Under the lock: make sure the timer is up by ``when``. It is woken only when it
        sleeps past that; while it is awake it looks at every deadline before sleeping again."""
        if when < self._timer_until:
            self._timer_until = when
            self._timer_wakeup.notify()

    # --- hand-off --------------------------------------------------------------------------------

    def _submit(self, ready: _Ready) -> None:
        if not self._queue.full():
            with self._idle:
                self._busy += 1
            self._queue.put(ready)
            return
        self.stats["dropped_queue_full"] += 1
        with self._tally_lock:
            self._tally["dropped"] += 1
            self._tally["queue_full"] += 1
        self._release_all(ready.held)

    def _evict(self, buf: _TraceBuffer, reason: str) -> None:
        self.stats[f"evicted_{reason}"] += 1
        with self._tally_lock:
            self._tally[reason] += 1
            if buf.held or buf.genai:  # a run that will not be scored, as for a full queue
                self._tally["dropped"] += 1
        self._release_all(buf.held)

    def _flush_tally(self) -> None:
        """Add the tallied drops and evictions to the metrics (off the app's threads)."""
        if not self._tally:  # unlocked peek: a count missed now is taken on the next call
            return
        with self._tally_lock:
            tally, self._tally = self._tally, Counter()
        try:
            dropped = tally.pop("dropped", 0)
            if dropped:
                self._engine.count_dropped(n=dropped)
            for reason, n in tally.items():
                self._emitter.count_evicted(reason, n)
        except Exception:  # noqa: BLE001 - counting must not stop the worker
            logger.warning("otel-toolscore: counting drops failed", exc_info=True)

    def _release(self, held: _Held, extra: dict[str, AttributeValue] | None = None) -> bool:
        """Forward a held span exactly once, with the scores' attributes when there are any."""
        with self._release_lock:
            if held.released:
                return False
            held.released = True
        span = held.span
        if extra:
            try:
                span = with_attributes(span, extra)
            except Exception:  # noqa: BLE001 - an unscored span beats a lost one
                logger.debug("otel-toolscore could not copy span", exc_info=True)
        self._forward(span)
        return True

    def _release_all(self, helds: list[_Held]) -> None:
        for h in helds:
            self._release(h)

    # --- timer thread: grace periods, hold deadlines, TTL ------------------------------------------

    def _time(self) -> None:
        while True:
            try:
                if not self._tick():
                    return
            except BaseException:  # noqa: BLE001 - the timer bounds every hold: it must not die
                logger.warning("otel-toolscore timer step failed", exc_info=True)
                time.sleep(0.01)

    def _tick(self) -> bool:
        """One round of the timer; False once shut down with nothing left to time."""
        holds = self._holds
        slack = self._hold_slack
        due: list[tuple[str, Any]] = []
        due_holds: list[_Held] = []
        expired: list[_TraceBuffer] = []
        with self._lock:
            if self._shutdown and not self._deadlines:
                return False
            now = time.monotonic()
            while self._deadlines and self._deadlines[0][0] <= now:
                _, _, what, payload = heapq.heappop(self._deadlines)
                due.append((what, payload))
            # Released holds are dropped from the front as they are met; an unreleased one
            # at the front is either due or is the next thing to wake up for.
            while holds and (holds[0].released or holds[0].deadline - slack <= now):
                h = holds.popleft()
                if not h.released:
                    due_holds.append(h)
            ttl = self.settings.trace_ttl
            while self._pending:
                tid, buf = next(iter(self._pending.items()))
                if now - buf.created < ttl:
                    break
                expired.append(self._pending.pop(tid))
            ready = []
            for what, payload in due:
                if what == "grace" and not self._quiet:
                    graced = self._pending.get(payload)
                    if graced is not None and graced.held:
                        del self._pending[payload]
                        ready.append(_Ready(payload, graced.spans, graced.held))
                elif what == "quiet":
                    r = self._quiet_due(payload, now)
                    if r is not None:
                        ready.append(r)
            if not due and not due_holds and not expired:
                wake = min(self._deadlines[0][0] if self._deadlines else now + min(ttl, 1.0),
                           holds[0].deadline - slack if holds else now + 1.0)
                timeout = min(max(wake - now, 0.0), 1.0)
                self._timer_until = now + timeout
                self._timer_wakeup.wait(timeout=timeout)
                return True
        # Each step on its own: what a failing one leaves undone must not strand the others
        # (they were taken off the timer's lists already).
        for h in due_holds:
            self._guarded(self._release_expired, h)
        for buf in expired:
            self._guarded(self._evict, buf, "trace_ttl")
        for r in ready:
            self._guarded(self._submit, r)
        return True

    def _release_expired(self, held: _Held) -> None:
        if self._release(held):
            self.stats["holds_expired"] += 1

    @staticmethod
    def _guarded(step: Any, *args: Any) -> None:
        try:
            step(*args)
        except BaseException:  # noqa: BLE001 - on the processor's own threads only
            logger.warning("otel-toolscore: %s failed", getattr(step, "__name__", step), exc_info=True)

    def _quiet_due(self, trace_id: int, now: float) -> _Ready | None:
        """Under the lock: a quiet-mode trace's timer fired."""
        buf = self._pending.get(trace_id)
        if buf is None:
            return None
        quiet_until = buf.last_seen + self.settings.decision_wait
        if now < quiet_until or not buf.root_ended:
            # Spans still arriving, or the root has not: look again later (TTL bounds the wait).
            self._schedule(max(quiet_until, now + self.settings.decision_wait / 4), "quiet", trace_id)
            return None
        del self._pending[trace_id]
        if buf.held or buf.genai:
            return _Ready(trace_id, buf.spans, buf.held)
        return None

    # --- worker thread: scoring ----------------------------------------------------------------

    def _work(self) -> None:
        busy_since = 0.0  # when the worker started running without a break; 0: it was idle
        while True:
            self._flush_tally()
            try:
                item = self._queue.get(timeout=_TALLY_FLUSH_S)
            except queue.Empty:
                continue
            if item is None:
                return
            if not busy_since:
                busy_since = time.perf_counter()
            try:
                if self._shutdown:
                    # Queued when shutdown came: what it held has left unscored already.
                    self._engine.count_dropped()
                    self._release_all(item.held)
                else:
                    self._score(item)
            except BaseException:  # noqa: BLE001 - nothing a scorer raises (SystemExit included) may end the worker
                logger.warning("otel-toolscore scoring failed", exc_info=True)
                self._guarded(self._release_all, item.held)
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()
            # Let the app's threads have the GIL between runs once the worker has had it for a
            # while: a thread waiting for it would otherwise wait out the interpreter's switch
            # interval (5 ms). Not after every run: a waiting app thread keeps the GIL for that
            # long once it has it, and cheap runs (not sampled) would crawl.
            if self._queue.empty():
                busy_since = 0.0  # the next get() waits, and frees the GIL while it does
            elif time.perf_counter() - busy_since >= _YIELD_AFTER_S:
                time.sleep(0)
                busy_since = time.perf_counter()

    def _score(self, item: _Ready) -> None:
        results = self._engine.score(item.spans)
        # A list per id: a buggy exporter or a replay can give two held spans one span id, and
        # each must still leave (one scored, the other as it is), not wait out hold_timeout.
        by_id: dict[str, list[_Held]] = {}
        for h in item.held:
            by_id.setdefault(format(h.span_id, "016x"), []).append(h)
        spans_by_id = {format(s.context.span_id, "016x"): s for s in item.spans}
        emitted: list[tuple[RunResult, ReadableSpan | None]] = []
        for result in results:
            run_id = result.trajectory.span_id or ""
            same = by_id.get(run_id)
            if same:
                self._release(same.pop(0), self._emitter.span_attributes(result.scores))
            emitted.append((result, spans_by_id.get(run_id)))
        # Wrappers and non-run agent spans go out as they are.
        self._release_all([h for same in by_id.values() for h in same])
        if self._shutdown:
            # Scored after shutdown gave up waiting: the spans left unscored, the downstream is
            # shut down; late scores would describe spans already exported without them.
            for _ in emitted:
                self._engine.count_dropped()
            return
        for result, run_span in emitted:
            for evaluation in self._engine.emit(result, run_span):
                self._forward(evaluation)
            self._engine.judge(result, run_span, self._forward_evaluation)

    def _forward(self, span: ReadableSpan) -> None:
        """Hand a span to the downstream processor. Its failure (an exporter bug) must neither
        reach the app nor stop this processor's own work after the call: it is logged."""
        try:
            self._downstream.on_end(span)
        except Exception:  # noqa: BLE001
            logger.warning("otel-toolscore: downstream on_end failed", exc_info=True)
        except BaseException:
            # KeyboardInterrupt/SystemExit belong to the app's thread that raised them; on the
            # worker or the timer they would end the thread that bounds every hold.
            if not self._on_own_thread():
                raise
            logger.warning("otel-toolscore: downstream on_end failed", exc_info=True)

    def _forward_evaluation(self, span: ReadableSpan) -> None:
        # Called from the judge loop's thread; after shutdown the downstream is gone.
        if not self._closed:
            self._forward(span)

    # --- flush and shutdown ----------------------------------------------------------------------

    def _drain_pending(self) -> list[_Ready]:
        """Under the lock: every trace whose agent span has ended is complete now."""
        ready = []
        for tid in [t for t, b in self._pending.items() if b.held or (b.genai and b.root_ended)]:
            buf = self._pending.pop(tid)
            ready.append(_Ready(tid, buf.spans, buf.held))
        return ready

    def _wait_idle(self, deadline: float) -> bool:
        if threading.current_thread() is self._worker:
            return False  # called from a scorer: the worker cannot wait for itself
        with self._idle:
            while self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(timeout=min(remaining, 0.05))
        return True

    def backlog(self) -> Backlog:
        """How full the processor's bounds are, for a receiver deciding whether to push back."""
        with self._lock:
            oldest = next(iter(self._pending.values())).created if self._pending else None
            pending = len(self._pending)
        return Backlog(pending_traces=pending, oldest_pending_age_s=None if oldest is None else time.monotonic() - oldest,
                       queue_full=self._queue.full())

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        done = False
        try:
            with self._lock:
                ready = self._drain_pending()
            for r in ready:
                self._submit(r)
            done = self._wait_idle(deadline)
            done = self._engine.wait_judges(max(0.0, deadline - time.monotonic())) and done
            self._flush_tally()  # counts taken on app threads reach the metrics before the flush
        except Exception:  # noqa: BLE001 - nothing may raise into the app
            logger.warning("otel-toolscore: force_flush failed", exc_info=True)
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        try:
            return bool(self._downstream.force_flush(remaining_ms)) and done
        except Exception:  # noqa: BLE001 - nothing may raise into the app
            logger.warning("otel-toolscore: downstream force_flush failed", exc_info=True)
            return False

    def shutdown(self) -> None:
        """Score what can be scored within ``shutdown_timeout`` (held spans wait no longer than
        ``hold_timeout``), forward everything still held unscored, stop the threads, shut down
        the downstream. Bounded whatever a scorer or judge does; safe from any thread, a
        scorer's included; a second call returns at once."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            ready = self._drain_pending()
            leftovers = [h for b in self._pending.values() for h in b.held]
            self._pending.clear()
        now = time.monotonic()
        deadline = now + self.settings.shutdown_timeout
        try:
            for r in ready:
                self._submit(r)
            self._wait_idle(min(deadline, now + self.settings.hold_timeout))
        except Exception:  # noqa: BLE001 - what is held must still leave
            logger.warning("otel-toolscore: shutdown failed while scoring", exc_info=True)
        with self._lock:
            self._shutdown = True
            stranded = list(self._holds)
            self._holds.clear()
            self._deadlines.clear()
            self._timer_wakeup.notify()
        # Whatever is still held (scoring too slow, queue full) leaves now, unscored.
        self._release_all(leftovers + stranded)
        # What the worker has not taken yet is dropped now, and counted before shutdown returns
        # (the app's metrics pipeline usually shuts down next).
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self.stats["dropped_shutdown"] += 1
                self._engine.count_dropped()
                self._release_all(item.held)
                with self._idle:
                    self._busy -= 1
        self._flush_tally()
        self._queue.put(None)
        current = threading.current_thread()
        for thread in (self._worker, self._timer):
            if thread is not current:
                # Daemon threads: one stuck in a hanging scorer cannot keep the process alive,
                # so waiting for it is only tidiness, not worth more than a second.
                thread.join(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
        try:
            self._engine.close(max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001
            logger.warning("otel-toolscore: closing the judges failed", exc_info=True)
        self._closed = True
        try:
            self._downstream.shutdown()
        except Exception:  # noqa: BLE001 - nothing may raise into the app
            logger.warning("otel-toolscore: downstream shutdown failed", exc_info=True)


def _call_weak(ref: weakref.WeakMethod[Any]) -> None:
    """Call a weakly held method if its object is still alive (after-fork hooks)."""
    method = ref()
    if method is None:
        return
    try:
        method()
    except Exception:  # noqa: BLE001 - an error in an at-fork hook is only printed, never raised
        logger.warning("otel-toolscore: re-initialising after fork failed", exc_info=True)
