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
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanContext, TraceFlags
from opentelemetry.util.types import AttributeValue

from otel_toolscore import _fork
from otel_toolscore import semconv as sc
from otel_toolscore.config import TRACE_ID_LIMIT, ToolScoreSettings, load_settings
from otel_toolscore.conventions import classify
from otel_toolscore.ingest import copy_span
from otel_toolscore.outputs.otel import Emitter
from otel_toolscore.runtime import _handoff
from otel_toolscore.runtime._handoff import Packed, PackedSpan, RunAnswer, pack_held, reads_fields, unpack_held
from otel_toolscore.runtime._scoring_process import MAX_BATCH, Batch, ScoringProcess
from otel_toolscore.runtime.engine import Engine, RunResult
from otel_toolscore.scorers.base import Scorer

logger = logging.getLogger(__name__)

#: the timer releases a held span up to this much before its hold deadline (never after it), so
#: that one wake-up releases every hold falling due in that window instead of one each
_HOLD_SLACK_S = 0.005
#: the worker offers the GIL to the app's threads after scoring for this long
_YIELD_AFTER_S = 0.002
#: s; the longest a drop or eviction counted on an app thread waits to reach the metrics
_TALLY_FLUSH_S = 1.0
#: s; scoring="process": the worker sends at most one batch this often (unless a batch is full)
_SEND_EVERY_S = 0.005
#: scoring="thread": with this many runs queued behind the one being scored, the worker packs
#: them (``_pack_backlog``): a backlog that long is one the app's collector would walk
_PACK_AT = 64
#: at least this many traces evicted at max_spans_per_trace are remembered (docs/reliability.md,
#: "Runs larger than the span bound"), so that their later spans are only forwarded
_TOO_LARGE_KEPT = 1024
_UNKNOWN = object()
#: the tally's key for runs evicted at max_spans_per_trace (an outcome, not an eviction reason)
_TOO_LARGE = "runs too_large"


@dataclass(eq=False, slots=True)
class _Held:
    """An agent-like span waiting for its scores. ``released`` makes forwarding exactly-once.

    Once its run has left the app's queue (handed to the child, or packed in a backlog) the span
    is kept packed (``pack``, ``_handoff.pack_held``), rebuilt when it is released. Once released
    it is let go (``None``), unless its run may still be scored (``_release(keep=True)``): the
    timer's list of holds keeps a released hold until its deadline comes round, and the app's
    garbage collector would walk the span (~12 objects) in every full collection until then."""

    span: ReadableSpan | PackedSpan | None
    span_id: int
    deadline: float
    released: bool = False

    def pack(self) -> None:
        span = self.span
        if not self.released and type(span) is not tuple:
            packed = pack_held(span)  # type: ignore[arg-type]
            if packed is not None:
                # one store: a thread releasing it meanwhile reads either form, both whole
                self.span = packed

    def readable(self) -> ReadableSpan | None:
        """The span; None once released and let go (``_apply`` then finds it among the run's)."""
        span = self.span  # read once (see pack)
        return unpack_held(span) if type(span) is tuple else span  # type: ignore[arg-type, return-value]


@dataclass(eq=False, slots=True)
class _PendingRun:
    """An outermost agent run whose agent span has ended while descendants are still open."""

    open: int  # descendants of the agent span still open
    grace_deadline: float


class _TraceBuffer:
    """One trace's spans not scored yet, and what completion per run needs to know of it.

    Completion is per outermost agent run (docs/design.md, "Completion"): a trace can hold several
    runs, each scored on its own subtree when its agent span and its descendants have ended.
    ``parents`` (ended spans) and the live ``open_ids`` spans let a span find the run it belongs to.
    """

    # A plain slotted class, not a dataclass: one is made per sampled trace on the app's
    # thread, and literals are cheaper than a dataclass's default factories (~0.25 µs a trace).
    __slots__ = ("created", "spans", "held", "open_ids", "parents", "agents", "runs", "scored", "had_run",
                 "genai", "root_ended", "last_seen", "quiet_scheduled")

    def __init__(self, created: float) -> None:
        self.created = created
        self.spans: list[ReadableSpan] = []  # ended, not yet given to scoring
        self.held: list[_Held] = []
        self.open_ids: dict[int, Span] = {}  # open spans by id
        self.parents: dict[int, int | None] = {}  # ended spans' local parents
        self.agents: set[int] = set()  # span ids known to be agent-like
        self.runs: dict[int, _PendingRun] = {}  # ended runs waiting for descendants
        self.scored: set[int] = set()  # runs handed to scoring: their late spans only pass
        self.had_run = False  # an agent run of this trace was scored: leftover spans are not a run
        self.genai = False
        self.root_ended = False
        self.last_seen = 0.0  # quiet mode: when the trace's latest span arrived
        self.quiet_scheduled = False


@dataclass(frozen=True)
class Backlog:
    """How full the processor's bounds are (``ToolScoreSpanProcessor.backlog()``)."""

    pending_traces: int
    oldest_pending_age_s: float | None
    queue_full: bool


class _Anchors(tuple):  # type: ignore[type-arg]
    """What a run's evaluation spans need of its spans once the spans themselves have gone to
    the scoring process (``scoring="process"``) or are packed (a thread-mode backlog): a span's
    context and resource, for a run whose span is not held (``_apply``).

    ONE tuple, so that a waiting run costs the app's garbage collector one object here (an ended
    SDK span is ~11 it walks in every full collection): ``(index, *entries)``, ``index`` a dict
    of ints (span id -> entry; untracked), the entries flattened, ``_ENTRY`` values each:
    (trace id, is remote, flags, state, resource), which the spans of a run mostly share."""

    __slots__ = ()

    def __new__(cls, spans: Sequence[ReadableSpan]) -> _Anchors:
        index: dict[int, int] = {}  # span id -> position of its entry in the tuple
        flat: list[Any] = [index]
        seen: dict[tuple[int, bool, int, int, int], int] = {}
        last: tuple[Any, ...] = ()
        at = -1
        for span in spans:
            # the SDK's own fields when its class reads them as ReadableSpan does (see _handoff)
            fields = getattr(span, "__dict__", None) if reads_fields(type(span)) else None
            ctx, resource = (fields["_context"], fields["_resource"]) if fields is not None else (
                span.context, span.resource)
            if ctx is None:
                continue
            if not last or ctx[0] != last[0] or ctx[2] is not last[1] or ctx[3] != last[2] \
                    or ctx[4] is not last[3] or resource is not last[4]:
                key = (ctx[0], ctx[2], ctx[3], id(ctx[4]), id(resource))
                found = seen.get(key)
                # the flags as an int: the SDK's TraceFlags (one per span) is an object it walks
                entry = (ctx[0], ctx[2], int(ctx[3]), ctx[4], resource)
                if found is None:
                    found = seen[key] = len(flat)
                    flat += entry
                at, last = found, entry
            index[ctx[1]] = at  # the last span of an id, as the spans' lookup by id has it
        return super().__new__(cls, flat)

    def span(self, span_id: int | None) -> ReadableSpan | None:
        """A stand-in for the span of this id: its context and resource, nothing else."""
        if span_id is None:
            return None
        at = self[0].get(span_id)
        if at is None:
            return None
        trace_id, is_remote, flags, state, resource = self[at:at + _ENTRY]
        return ReadableSpan(name="", context=SpanContext(trace_id, span_id, is_remote, TraceFlags(flags), state),
                            resource=resource)


_ENTRY = 5  # values per _Anchors entry


@dataclass(slots=True)
class _Ready:
    trace_id: int
    #: emptied (the shared ``()``: not one more object the collector walks) once the spans are
    #: encoded or packed
    spans: Sequence[ReadableSpan]
    held: list[_Held]
    #: set (and ``spans`` emptied) once the spans are encoded for the child (scoring="process")
    #: or packed in a backlog (scoring="thread", ``packed``)
    anchors: _Anchors | None = None
    packed: Packed | None = None


class _ReadyQueue(queue.SimpleQueue):  # type: ignore[type-arg]
    """Completed traces for the worker. A SimpleQueue (put, get and the worker's wake-up happen
    in C, not through the Python-level Conditions of queue.Queue) with queue.Queue's bound.

    With ``scoring="process"`` the bound also counts the runs the worker has encoded and the
    sender not yet handed to the child (``park``): they wait as the queue's runs did.

    ``qsize()`` is exact for one producer; threads ending traces at the same moment may
    overshoot the bound by one item each.
    """

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize
        self.parked = 0
        self._parked_lock = threading.Lock()

    def park(self, n: int) -> None:
        with self._parked_lock:
            self.parked += n

    def full(self) -> bool:
        return self.qsize() + self.parked >= self.maxsize


def with_attributes(span: ReadableSpan, extra: dict[str, AttributeValue]) -> ReadableSpan:
    """A copy of an ended span with more attributes (ended SDK spans are immutable)."""
    # Merged from the plain dict inside the SDK's BoundedAttributes when there is one: the
    # mapping the span shows is read key by key through Python-level methods.
    own: Any = None
    if type(span).attributes is ReadableSpan.attributes:  # (not a class showing other ones)
        own = getattr(span, "_attributes", None)
        own = getattr(own, "_dict", own)
    if type(own) is not dict:
        own = span.attributes or {}
    return copy_span(span, attributes={**own, **extra})


def _span_id_of(hex_id: str) -> int | None:
    """The span id a run's hex id names; None for text that is no span id as formatted here."""
    try:
        span_id = int(hex_id, 16)
    except ValueError:
        return None
    return span_id if format(span_id, "016x") == hex_id else None


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
        # The hot path reads these on every span.
        self._max_spans = self.settings.max_spans_per_trace
        # every span seen of a trace is remembered (with its parent) until the trace is done
        self._max_parents = 4 * self._max_spans
        self._hold_timeout = self.settings.hold_timeout
        self._grace = self.settings.completion_grace
        self._hold_slack = min(_HOLD_SLACK_S, self._hold_timeout / 10)
        self._emitter = Emitter(self.settings, meter_provider=meter_provider, logger_provider=logger_provider)
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
        # Traces evicted at max_spans_per_trace, oldest first: their later spans are forwarded
        # only, never buffered again, so no fragment of a run too large to buffer is scored as
        # if it were the whole run. Bounded: the oldest mark goes first.
        self._too_large: OrderedDict[int, None] = OrderedDict()
        self._too_large_kept = max(_TOO_LARGE_KEPT, self.settings.max_pending_traces)
        self._seq = itertools.count()
        self._queue = _ReadyQueue(self.settings.queue_size)
        # Ready items submitted and not yet done, counted before they enter the queue: a count
        # taken by the worker after its get() would let force_flush see an empty queue and an
        # idle worker while the worker holds an item.
        self._outstanding = 0
        self._outstanding_lock = threading.Lock()
        self._idle = threading.Condition(threading.Lock())
        self._stopping = False  # shutdown() has begun: a second call returns at once
        self._sent_at = 0.0  # scoring="process": when the worker last sent a batch
        self._shutdown = False  # nothing more is held or scored; spans are only forwarded
        self._closed = False  # the downstream is shut down (or being shut down)
        self._worker = threading.Thread(target=self._work, name="otel-toolscore-worker", daemon=True)
        self._timer = threading.Thread(target=self._time, name="otel-toolscore-timer", daemon=True)
        # scoring="process": the worker encodes batches as runs complete, the sender writes them
        # to the child (a write waits while the child is busy): runs wait encoded, not as spans.
        self._outbox: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self._sender = threading.Thread(target=self._deliver, name="otel-toolscore-sender", daemon=True)
        # scoring="thread": runs the worker took from a long queue and packed, next in line
        self._backlog: deque[_Ready | None] = deque()
        if start:
            self._worker.start()
            self._timer.start()
            if self._remote is not None:
                self._sender.start()

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
        if self._remote is not None:
            self._remote.reinit_after_fork(start=not stopping)

    def _on_own_thread(self) -> bool:
        current = threading.current_thread()
        return current is self._worker or current is self._timer or current is self._sender or (
            self._remote is not None and self._remote.is_receiver(current))

    # --- hot path --------------------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        evicted: _TraceBuffer | None = None
        try:
            # A SpanContext is a tuple (trace_id, span_id, is_remote, ...) whose named
            # properties are Python calls; indexing it is not (the hot path reads five per span).
            ctx = span.context
            trace_id = ctx[0]
            bound = self._trace_bound
            if bound is None or trace_id & TRACE_ID_LIMIT < bound:  # (else: only forwarded)
                with self._lock:
                    buf = self._pending.get(trace_id) if not self._shutdown else None
                    if buf is None and not self._shutdown and trace_id not in self._too_large:
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
                                owner = self._owner(buf, span_id)
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
        ready: list[_Ready] | None = None
        evicted: _TraceBuffer | None = None
        crowded: _TraceBuffer | None = None  # evicted at max_pending_traces by this span's new buffer
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
            held = _Held(span, span_id, now + self._hold_timeout) if agent else None
            with self._lock:
                buf = self._pending.get(trace_id) if not self._shutdown else None
                if buf is None and self._quiet and not self._shutdown and trace_id not in self._too_large:
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
        after: list[ReadableSpan | tuple[_TraceBuffer, str]] = []
        now = time.monotonic()
        deadline = now + self._hold_timeout
        pending = self._pending
        with self._lock:
            shutdown = self._shutdown
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
                                                 _Held(span, span_id, deadline) if kind == "agent" else None, now)
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

    def _hold(self, buf: _TraceBuffer, held: _Held) -> None:
        # Under the lock.
        buf.held.append(held)
        self._holds.append(held)
        self._wake_timer_by(held.deadline - self._hold_slack)

    def _add_quiet(self, trace_id: int, buf: _TraceBuffer, span: ReadableSpan, kind: str | None,
                   held: _Held | None, now: float) -> tuple[bool, _TraceBuffer | None]:
        """Under the lock (quiet mode): buffer the span; the timer decides completion."""
        if len(buf.spans) >= self._max_spans:
            return False, self._too_big(trace_id)
        buf.spans.append(span)
        if kind is not None:
            buf.genai = True
        if held is not None:
            self._hold(buf, held)
        self._note_quiet(trace_id, buf, span, now)
        return held is not None, None

    def _add_live(self, trace_id: int, span_id: int, buf: _TraceBuffer, span: ReadableSpan, kind: str | None,
                  held: _Held | None, now: float) -> tuple[bool, _TraceBuffer | None, list[_Ready] | None]:
        """Under the lock (open_spans mode): buffer an ending span and complete what it completes.

        Returns (held, evicted buffer, runs completed or None). Every span of
        the app goes through here: the common case (no run ended yet in the trace, not an agent
        span, something still open) is kept to a few dict operations.
        """
        ready: list[_Ready] = []
        was_open = buf.open_ids.pop(span_id, None) is not None
        parent = span.parent
        if parent is None or parent[2]:  # (is_remote)
            buf.root_ended = True
            buf.parents[span_id] = None
            is_root = True
        else:
            buf.parents[span_id] = parent[1]  # (span_id)
            is_root = False
        if held is not None:
            buf.agents.add(span_id)
        owner = self._owner(buf, span_id) if (buf.runs or buf.scored) else None
        if owner is not None and owner in buf.scored:
            # Ends after its run was scored (the run's grace ran out): forwarded, counted, not
            # taken into another run.
            self.stats["late_spans"] += 1
            if not buf.open_ids:
                self._finish_if_idle(trace_id, buf, ready)
            return False, None, ready
        if len(buf.spans) >= self._max_spans or len(buf.parents) >= self._max_parents:
            return False, self._too_big(trace_id), None
        buf.spans.append(span)
        if kind is not None:
            buf.genai = True
        if held is not None:
            self._hold(buf, held)
        if owner is not None:
            run = buf.runs[owner]
            if was_open:
                run.open -= 1
            if run.open <= 0:
                ready.append(self._complete_run(trace_id, buf, owner))
        elif held is not None and (is_root or not self._has_agent_ancestor(buf, span_id)):
            # An outermost run's agent span: complete once its own descendants have ended,
            # whatever else of the trace is still open; else at completion_grace.
            still_open = sum(1 for o in buf.open_ids if self._is_under(buf, o, span_id)) if buf.open_ids else 0
            if still_open == 0:
                ready.append(self._complete_run(trace_id, buf, span_id, pending=False))
            else:
                deadline = now + self._grace
                buf.runs[span_id] = _PendingRun(open=still_open, grace_deadline=deadline)
                self._schedule(deadline, "grace", (trace_id, span_id))
        if not buf.open_ids:
            self._finish_if_idle(trace_id, buf, ready)
        return held is not None, None, ready

    def _too_big(self, trace_id: int) -> _TraceBuffer:
        """Under the lock: the trace has outgrown max_spans_per_trace. Its buffer goes (the caller
        evicts it) and the trace is marked, so that its later spans are only forwarded: a later
        fragment scored would be scored as the whole run (docs/reliability.md, "Runs larger
        than the span bound")."""
        marks = self._too_large
        marks[trace_id] = None
        if len(marks) > self._too_large_kept:
            marks.popitem(last=False)
        return self._pending.pop(trace_id)

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

    @staticmethod
    def _parent_of(buf: _TraceBuffer, span_id: int) -> int | None:
        """Under the lock: the local parent of a span of this buffer (ended: recorded; open: read
        from the live span), None for a local root or a span this buffer does not know."""
        parent = buf.parents.get(span_id, _UNKNOWN)
        if parent is not _UNKNOWN:
            return parent  # type: ignore[return-value]
        live = buf.open_ids.get(span_id)
        ctx = live.parent if live is not None else None
        return ctx.span_id if ctx is not None and not ctx.is_remote else None

    def _parent_chain(self, buf: _TraceBuffer, span_id: int) -> Iterator[int]:
        """Under the lock: the span's ancestors known to this buffer, nearest first (bounded, so
        a parent cycle in a buggy trace cannot loop)."""
        cur = self._parent_of(buf, span_id)
        for _ in range(len(buf.parents) + len(buf.open_ids)):
            if cur is None:
                return
            yield cur
            cur = self._parent_of(buf, cur)

    def _owner(self, buf: _TraceBuffer, span_id: int) -> int | None:
        """Under the lock: the ended run (pending or scored) this span belongs to, if any."""
        for a in self._parent_chain(buf, span_id):
            if a in buf.runs or a in buf.scored:
                return a
        return None

    def _has_agent_ancestor(self, buf: _TraceBuffer, span_id: int) -> bool:
        """Under the lock: is an ancestor an agent span (ended, or open and agent-like now)?"""
        agents, open_spans = buf.agents, buf.open_ids
        for a in self._parent_chain(buf, span_id):
            if a in agents:
                return True
            live = open_spans.get(a)
            if live is not None and classify(live) == "agent":
                agents.add(a)
                return True
        return False

    def _is_under(self, buf: _TraceBuffer, span_id: int, top: int) -> bool:
        return any(a == top for a in self._parent_chain(buf, span_id))

    def _complete_run(self, trace_id: int, buf: _TraceBuffer, run_id: int, pending: bool = True) -> _Ready:
        """Under the lock: take an outermost run's spans (its agent span and its subtree) out of
        the buffer for scoring. O(spans buffered for the trace), once per run."""
        if pending:
            del buf.runs[run_id]
        buf.scored.add(run_id)
        buf.had_run = True
        if self._parent_of(buf, run_id) is None and not buf.open_ids and not buf.runs:
            # The usual case, an agent span at the root of a trace with nothing else going on:
            # everything buffered is this run's (as whole-trace scoring had it), no walk needed.
            mine_all, held_all = buf.spans, buf.held
            buf.spans, buf.held = [], []
            buf.genai = False
            return _Ready(trace_id, mine_all, held_all)
        memo: dict[int, bool] = {run_id: True}

        def inside(sid: int) -> bool:
            chain = [sid]
            found = False
            for a in self._parent_chain(buf, sid):
                known = memo.get(a)
                if known is not None:
                    found = known
                    break
                chain.append(a)
            for c in chain:
                memo.setdefault(c, found)
            return memo[sid]

        mine: list[ReadableSpan] = []
        rest: list[ReadableSpan] = []
        for s in buf.spans:
            (mine if inside(s.context.span_id) else rest).append(s)
        buf.spans = rest
        held_mine = [h for h in buf.held if memo.get(h.span_id)]
        if held_mine:
            buf.held = [h for h in buf.held if not memo.get(h.span_id)]
        # What is left (the request around the runs, spans outside any run) is rarely GenAI.
        buf.genai = any(classify(s) is not None for s in rest)
        return _Ready(trace_id, mine, held_mine)

    def _finish_if_idle(self, trace_id: int, buf: _TraceBuffer, ready: list[_Ready]) -> None:
        """Under the lock: nothing of the trace is open any more (and its root has ended): its
        runs were scored as they completed; what is left is scored only as a trace without an
        agent run (one run at its local root) or for agent spans no run took; then it is gone."""
        if buf.open_ids or buf.runs or not (buf.root_ended or buf.had_run):
            return
        del self._pending[trace_id]
        r = self._leftover(trace_id, buf)
        if r is not None:
            ready.append(r)

    @staticmethod
    def _leftover(trace_id: int, buf: _TraceBuffer) -> _Ready | None:
        if buf.held or (buf.genai and not buf.had_run):
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
            with self._outstanding_lock:  # a plain lock: this is on the app's thread
                self._outstanding += 1
            self._queue.put(ready)
            return
        self.stats["dropped_queue_full"] += 1
        with self._tally_lock:
            self._tally["dropped"] += 1
            self._tally["queue_full"] += 1
        self._release_all(ready.held)

    def _evict(self, buf: _TraceBuffer, reason: str) -> None:
        self.stats[f"evicted_{reason}"] += 1
        # a run that will not be scored: dropped, as for a full queue, or too large to score
        lost = bool(buf.held or buf.runs or buf.genai)
        too_large = reason == "max_spans_per_trace"
        if too_large and lost:
            self.stats["runs_too_large"] += 1
        with self._tally_lock:
            self._tally[reason] += 1
            if lost:
                self._tally[_TOO_LARGE if too_large else "dropped"] += 1
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
            too_large = tally.pop(_TOO_LARGE, 0)
            if too_large:
                self._engine.count_dropped(n=too_large, outcome="too_large")
            for reason, n in tally.items():
                self._emitter.count_evicted(reason, n)
        except Exception:  # counting must not stop the worker
            logger.warning("otel-toolscore: counting drops failed", exc_info=True)

    def _release(self, held: _Held, extra: dict[str, AttributeValue] | None = None,
                 span: ReadableSpan | None = None, keep: bool = False) -> bool:
        """Forward a held span exactly once, with the scores' attributes when there are any
        (``span``: the held span already rebuilt, when it was packed). ``keep``: its run is still
        to be scored, and ``_apply`` reads the span then; else it is let go."""
        with self._release_lock:
            if held.released:
                return False
            held.released = True
        if span is None:
            span = held.readable()
            assert span is not None  # let go only by its release, which is this one
        if not keep:
            held.span = None
        if extra:
            try:
                span = with_attributes(span, extra)
            except Exception:  # an unscored span beats a lost one
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
            except BaseException:  # the timer bounds every hold: it must not die
                logger.warning("otel-toolscore timer step failed", exc_info=True)
                time.sleep(0.01)

    def _tick(self) -> bool:
        """One round of the timer; False once shut down with nothing left to time."""
        if self._remote is not None:
            self._guarded(self._remote.check_hung)  # (the timer wakes at least once a second)
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
                    # A run whose descendants are still open at its grace deadline is scored on
                    # what it has; its late spans are forwarded only (counted as late_spans).
                    trace_id, run_id = payload
                    graced = self._pending.get(trace_id)
                    if graced is not None and run_id in graced.runs:
                        ready.append(self._complete_run(trace_id, graced, run_id))
                        self._finish_if_idle(trace_id, graced, ready)
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
        if self._release(held, keep=True):
            self.stats["holds_expired"] += 1

    @staticmethod
    def _guarded(step: Any, *args: Any) -> None:
        try:
            step(*args)
        except BaseException:  # on the processor's own threads only
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
            backlog = self._backlog
            packed = bool(backlog)  # (the backlog comes first: its runs were queued before)
            try:
                item = backlog.popleft() if packed else self._queue.get(timeout=_TALLY_FLUSH_S)
            except (IndexError, queue.Empty):  # (IndexError: shutdown took the backlog's last run)
                continue
            if packed and item is not None:
                self._queue.park(-1)
            if item is None:
                self._outbox.put(None)
                return
            if self._remote is None and self._queue.qsize() >= _PACK_AT:
                self._pack_backlog()
            if not busy_since:
                busy_since = time.perf_counter()
            if self._remote is not None and not self._shutdown:
                # The item is done when its answer comes (or its child dies), not now.
                if self._send(item):
                    self._outbox.put(None)
                    return
                continue
            try:
                if self._shutdown:
                    # Queued when shutdown came: what it held has left unscored already.
                    self._engine.count_dropped()
                    self._release_all(item.held)
                else:
                    self._score(item)
            except BaseException:  # nothing a scorer raises (SystemExit included) may end the worker
                logger.warning("otel-toolscore scoring failed", exc_info=True)
                self._guarded(self._release_all, item.held)
            finally:
                self._done(1)
            # Let the app's threads have the GIL between runs once the worker has had it for a
            # while: a thread waiting for it would otherwise wait out the interpreter's switch
            # interval (5 ms). Not after every run: a waiting app thread keeps the GIL for that
            # long once it has it, and cheap runs (not sampled) would crawl.
            if self._queue.empty() and not self._backlog:
                busy_since = 0.0  # the next get() waits, and frees the GIL while it does
            elif time.perf_counter() - busy_since >= _YIELD_AFTER_S:
                time.sleep(0)
                busy_since = time.perf_counter()

    def _score(self, item: _Ready) -> None:
        spans = _handoff.unpack(item.trace_id, item.packed) if item.packed is not None else item.spans
        self._apply(item, self._engine.score(spans))

    def _pack_backlog(self) -> None:
        """Take every run queued now into the worker's backlog, packed (``_pack``): the app's
        garbage collector walks the spans of every run waiting, in every full collection it
        runs, which in a burst costs the app's threads more than packing costs the worker.
        The runs stay counted against the queue's bound until the worker takes them."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self._pack(item)
                self._queue.park(1)
            self._backlog.append(item)
            if item is None:
                return

    @staticmethod
    def _pack(item: _Ready) -> None:
        """The run's spans as ``_handoff.pack`` has them (``_score`` unpacks them), and what
        ``_apply`` may need of them besides."""
        try:
            packed = _handoff.pack(item.spans)
        except Exception:  # noqa: BLE001 - spans of a class of their own: kept as they are
            return
        if ToolScoreSpanProcessor._let_go(item):
            item.packed = packed

    def _apply(self, item: _Ready, results: list[RunResult]) -> None:
        """Release the run's held spans (scored ones with their scores) and emit the rest."""
        engine = self._engine
        # A list per id: a buggy exporter or a replay can give two held spans one span id, and
        # each must still leave (one scored, the other as it is), not wait out hold_timeout.
        by_id: dict[str, list[_Held]] = {}
        for h in item.held:
            by_id.setdefault(format(h.span_id, "016x"), []).append(h)
        spans_by_id: dict[int, ReadableSpan] | None = None
        emitted: list[tuple[RunResult, ReadableSpan | None]] = []
        for result in results:
            run_id = result.trajectory.span_id or ""
            same = by_id.get(run_id)
            run_span = None
            if same:
                last = same[-1]
                run_span = last.readable()
                # The mark goes out whatever the span-attribute settings: it is what keeps
                # another scorer path (serve behind this app) from scoring the run again.
                extra = {**engine.prepared(result).span_attributes, sc.TOOLSCORE_SCORED: True}
                first = same.pop(0)
                self._release(first, extra, run_span if first is last else None)
            if run_span is None:  # not held (a run under a wrapper's hold, a leftover)
                if spans_by_id is None:  # by the span id as the SDK holds it: no id formatted per span
                    spans_by_id = {s.context.span_id: s for s in item.spans}
                span_id = _span_id_of(run_id)
                run_span = spans_by_id.get(span_id)  # type: ignore[arg-type]
                if run_span is None and item.anchors is not None:
                    run_span = item.anchors.span(span_id)
            emitted.append((result, run_span))
        # Wrappers and non-run agent spans go out as they are.
        self._release_all([h for same in by_id.values() for h in same])
        if self._shutdown:
            # Scored after shutdown gave up waiting: the spans left unscored, the downstream is
            # shut down; late scores would describe spans already exported without them.
            for _ in emitted:
                engine.count_dropped()
            return
        for result, run_span in emitted:
            for evaluation in engine.emit(result, run_span):
                self._forward(evaluation)
            engine.judge(result, run_span, self._forward_evaluation)

    # --- scoring="process": the worker sends, the scoring process's receiver thread emits -------

    def _send(self, first: _Ready) -> bool:
        """Encode ``first`` and the runs queued behind it (up to MAX_BATCH) as one message for the
        scoring process, for the sender to hand over (``_deliver``). Each is done (``_done``) when
        its answer comes, or when it is not sent. True when the queue's end mark was taken."""
        # Every wake-up of the worker (and every system call) takes the GIL back from the app's
        # thread: one send per _SEND_EVERY_S, the runs completed meanwhile together, costs the
        # app far less than one per run, and a run no more than those few ms.
        wait = self._sent_at + _SEND_EVERY_S - time.monotonic()
        if wait > 0 and self._queue.qsize() < MAX_BATCH - 1 and not self._stopping:
            time.sleep(wait)
        batch, stop = [first], False
        while len(batch) < MAX_BATCH:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                stop = True
                break
            batch.append(item)
        runs = []
        for item in batch:
            try:
                if self._engine.any_sampled(item.trace_id):
                    runs.append((item, item.trace_id, self._engine.judged(item.trace_id), item.spans))
                    continue
                # sampled by no scorer: nothing to score or emit, as engine.score has it
                self._release_all(item.held)
            except BaseException:
                logger.warning("otel-toolscore scoring failed", exc_info=True)
                self._guarded(self._release_all, item.held)
            self._done(1)
        self._sent_at = time.monotonic()
        if not runs:
            return stop
        try:
            encoded = self._remote.encode(runs) if self._remote is not None else None
        except BaseException:  # the worker must not die; the runs leave unscored
            logger.warning("otel-toolscore: handing runs to the scoring process failed", exc_info=True)
            encoded = None
        if encoded is None:
            self._lost([r[0] for r in runs], "dropped")
            return stop
        for item, _, _, _ in runs:
            self._let_go(item)
        self._queue.park(len(encoded.items))
        self._outbox.put(encoded)
        return stop

    @staticmethod
    def _let_go(item: _Ready) -> bool:
        """The run's spans are encoded or packed (read for good): only what ``_apply`` may still
        need of them is kept, and its held spans are packed. False when they are kept as they are."""
        try:
            item.anchors = _Anchors(item.spans)
        except Exception:  # noqa: BLE001 - spans of a class of their own: kept as they are
            return False
        item.spans = ()
        for h in item.held:
            h.pack()
        return True

    def _deliver(self) -> None:
        """The sender thread: hands the worker's batches to the scoring process, in order."""
        while True:
            batch = self._outbox.get()
            if batch is None:
                return
            # The batch in hand is work of its own until it is no longer counted against the
            # queue's bound: the child may answer its runs before ``deliver`` returns, and a
            # flush that returned then would leave them counted as waiting.
            with self._outstanding_lock:
                self._outstanding += 1
            try:
                unsent = self._remote.deliver(batch) if self._remote is not None else list(batch.items)
            except BaseException:  # the sender must not die; the runs leave unscored
                logger.warning("otel-toolscore: handing runs to the scoring process failed", exc_info=True)
                unsent = list(batch.items)  # (raised before any of them was in flight)
            finally:
                self._queue.park(-len(batch.items))
                self._done(1)
            if unsent:
                self._guarded(self._lost, unsent, "dropped")

    def _answered(self, item: _Ready, answer: RunAnswer) -> None:
        """The scoring process's answer for one run (on its receiver thread)."""
        try:
            for _ in range(answer.already_scored):
                self._engine.count_already_scored()
            if answer.error is not None:
                logger.warning("otel-toolscore scoring failed in the scoring process: %s", answer.error)
                self._release_all(item.held)
            else:
                self._apply(item, answer.results)
        except BaseException:
            logger.warning("otel-toolscore: emitting the scoring process's answer failed", exc_info=True)
            self._guarded(self._release_all, item.held)
        finally:
            self._done(1)

    def _lost(self, items: list[_Ready], outcome: str) -> None:
        """Runs the scoring process will not answer (it died with them, or they were never sent):
        counted once per scorer, their held spans forwarded unscored."""
        try:
            for name in self._engine.scorer_names:
                self._emitter.count_evaluation(name, outcome, len(items))
            self.stats[f"runs_{outcome}"] += len(items)
        finally:
            for item in items:
                self._guarded(self._release_all, item.held)
            self._done(len(items))

    def _forward(self, span: ReadableSpan) -> None:
        """Hand a span to the downstream processor. Its failure (an exporter bug) must neither
        reach the app nor stop this processor's own work after the call: it is logged."""
        try:
            self._downstream.on_end(span)
        except Exception:
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
        """Under the lock: every run whose agent span has ended is complete now (force_flush,
        shutdown); a trace with nothing open left goes with it."""
        ready: list[_Ready] = []
        for tid, buf in list(self._pending.items()):
            if self._quiet:
                if buf.held or (buf.genai and buf.root_ended):
                    del self._pending[tid]
                    ready.append(_Ready(tid, buf.spans, buf.held))
                continue
            for run_id in list(buf.runs):
                ready.append(self._complete_run(tid, buf, run_id))
            if not buf.open_ids and (buf.root_ended or buf.had_run or buf.held):
                del self._pending[tid]
                r = self._leftover(tid, buf)
                if r is not None:
                    ready.append(r)
        return ready

    def _drop_at_shutdown(self, item: _Ready) -> None:
        self._done(1)
        self.stats["dropped_shutdown"] += 1
        self._engine.count_dropped()
        self._release_all(item.held)

    def _done(self, n: int) -> None:
        with self._outstanding_lock:
            self._outstanding -= n
        with self._idle:
            self._idle.notify_all()

    def _wait_idle(self, deadline: float) -> bool:
        current = threading.current_thread()
        if current is self._worker or current is self._sender or (
                self._remote is not None and self._remote.is_receiver(current)):
            return False  # called from a scorer (or a downstream): the thread cannot wait for itself
        with self._idle:
            while self._outstanding > 0:
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
        except Exception:  # nothing may raise into the app
            logger.warning("otel-toolscore: force_flush failed", exc_info=True)
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
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
        except Exception:  # what is held must still leave
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
                self._drop_at_shutdown(item)
        while True:  # packed by the worker (scoring="thread"): as if still queued
            try:
                item = self._backlog.popleft()
            except IndexError:
                break
            if item is not None:
                self._queue.park(-1)
                self._drop_at_shutdown(item)
        while True:  # encoded and not yet handed to the child: as if still queued
            try:
                batch = self._outbox.get_nowait()
            except queue.Empty:
                break
            if batch is not None:
                self._queue.park(-len(batch.items))
                for item in batch.items:
                    self._drop_at_shutdown(item)
            else:  # the worker has stopped (a fork's copy shut down before): the sender stops too
                self._outbox.put(None)
                break
        self._flush_tally()
        self._queue.put(None)
        current = threading.current_thread()
        for thread in (self._worker, self._timer, self._sender):
            if not thread.is_alive():
                continue
            if thread is not current:
                # Daemon threads: one stuck in a hanging scorer cannot keep the process alive,
                # so waiting for it is only tidiness, not worth more than a second.
                thread.join(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
        if self._remote is not None:
            try:
                # in-flight answers have had their wait (above); what is left is counted dropped
                self._remote.close(max(0.0, deadline - time.monotonic()))
            except Exception:
                logger.warning("otel-toolscore: stopping the scoring process failed", exc_info=True)
        try:
            self._engine.close(max(0.0, deadline - time.monotonic()))
        except Exception:
            logger.warning("otel-toolscore: closing the judges failed", exc_info=True)
        self._closed = True
        try:
            self._downstream.shutdown()
        except Exception:  # nothing may raise into the app
            logger.warning("otel-toolscore: downstream shutdown failed", exc_info=True)
