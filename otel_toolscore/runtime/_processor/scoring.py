"""The hand-off of completed runs to scoring: the worker thread (and, with
``scoring="process"``, the sender thread and the scoring process's answers).

Invariant kept here: every run submitted is done exactly once (``done``): scored and applied
(its held spans released with their scores), answered by the scoring process, or lost (dropped
at a full queue or at shutdown, or its child died) and counted once per scorer; in every case
its held spans are forwarded. ``outstanding`` counts runs submitted and not yet done, taken
before a run enters the queue, so that ``wait_idle`` (force_flush, shutdown) never sees an empty
queue and an idle worker while the worker holds a run.

``clock`` and ``wait`` are injectable: ``wait_idle`` (and the processor's ``force_flush`` and
``shutdown``) wait until a deadline read on that clock.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.outputs.otel import Emitter
from otel_toolscore.runtime import _handoff
from otel_toolscore.runtime._handoff import RunAnswer
from otel_toolscore.runtime._processor.forward import Forwarding, Held, Phase, guarded
from otel_toolscore.runtime._processor.ready import Anchors, Ready, ReadyQueue, span_id_of
from otel_toolscore.runtime._processor.tally import Tally
from otel_toolscore.runtime._scoring_process import MAX_BATCH, Batch, ScoringProcess
from otel_toolscore.runtime.engine import Engine, RunResult

logger = logging.getLogger("otel_toolscore.runtime.processor")

#: the worker offers the GIL to the app's threads after scoring for this long
_YIELD_AFTER_S = 0.002
#: s; the longest a drop or eviction counted on an app thread waits to reach the metrics
_TALLY_FLUSH_S = 1.0
#: s; scoring="process": the worker sends at most one batch this often (unless a batch is full)
_SEND_EVERY_S = 0.005
#: scoring="thread": with this many runs queued behind the one being scored, the worker packs
#: them (``pack_backlog``): a backlog that long is one the app's collector would walk
_PACK_AT = 64
#: s; woken by a run, the worker waits this long (at most a quarter of hold_timeout) for the
#: runs completing after it, and takes them together. Scoring runs one after another costs
#: the app's CPU about half of what it costs a run at a time (measured in real framework apps:
#: the scorers' code and data are still in the caches, the worker wakes once, and the app's
#: thread finds its own work less often evicted), and the agent spans wait far less than the
#: SDK's batch export does (5 s). A flush or shutdown cuts the wait short.
GATHER_S = 0.1


def _wait_on(idle: threading.Condition, timeout: float) -> bool:
    return idle.wait(timeout)


class Scoring:
    def __init__(self, engine: Engine, emitter: Emitter, remote: ScoringProcess | None, fwd: Forwarding,
                 tally: Tally, phase: Phase, stats: Counter[str], queue_size: int, *,
                 clock: Callable[[], float] = time.monotonic, gather_s: float = GATHER_S) -> None:
        self._engine = engine
        self._emitter = emitter
        self._remote = remote
        self._fwd = fwd
        self._tally = tally
        self._phase = phase
        self.stats = stats
        #: what deadlines are read on, and how ``wait_idle`` waits on ``idle`` (tests inject a
        #: clock of their own and assert on the deadlines and waits asked for)
        self.clock = clock
        self.wait: Callable[[threading.Condition, float], object] = _wait_on
        #: set by a flush or shutdown: the worker stops gathering and scores what it has
        self.hurry = threading.Event()
        self.gather_s = gather_s
        self.queue = ReadyQueue(queue_size)
        # Ready items submitted and not yet done, counted before they enter the queue: a count
        # taken by the worker after its get() would let force_flush see an empty queue and an
        # idle worker while the worker holds an item.
        self.outstanding = 0
        self.outstanding_lock = threading.Lock()
        self.idle = threading.Condition(threading.Lock())
        self._sent_at = 0.0  # scoring="process": when the worker last sent a batch
        self.worker = threading.Thread(target=self.work, name="otel-toolscore-worker", daemon=True)
        # scoring="process": the worker encodes batches as runs complete, the sender writes them
        # to the child (a write waits while the child is busy): runs wait encoded, not as spans.
        self.outbox: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self.sender = threading.Thread(target=self.deliver, name="otel-toolscore-sender", daemon=True)
        # scoring="thread": runs the worker took from a long queue and packed, next in line
        self.backlog: deque[Ready | None] = deque()

    def start(self) -> None:
        self.worker.start()
        if self._remote is not None:
            self.sender.start()

    def threads(self) -> tuple[threading.Thread, ...]:
        return (self.worker, self.sender)

    def submit(self, ready: Ready) -> None:
        """Hand a completed run to the worker (on the thread that completed it), or drop it,
        counted, its held spans forwarded, when the queue is full."""
        if not self.queue.full():
            with self.outstanding_lock:  # a plain lock: this is on the app's thread
                self.outstanding += 1
            self.queue.put(ready)
            return
        self._tally.queue_full()
        self._fwd.release_all(ready.held)

    def work(self) -> None:
        busy_since = 0.0  # when the worker started running without a break; 0: it was idle
        gathered = 0  # runs of the last gathering still queued: a batch taken on purpose, not a backlog
        while True:
            self._tally.flush(self._engine, self._emitter)
            backlog = self.backlog
            packed = bool(backlog)  # (the backlog comes first: its runs were queued before)
            try:
                item = backlog.popleft() if packed else self.queue.get(timeout=_TALLY_FLUSH_S)
            except (IndexError, queue.Empty):  # (IndexError: shutdown took the backlog's last run)
                continue
            if packed and item is not None:
                self.queue.park(-1)
            if item is None:
                self.outbox.put(None)
                return
            if not busy_since and self.gather_s > 0 and not self._phase.stopping:
                # Woken from idle by this run: the runs completing in the next moment come along.
                if self.hurry.wait(self.gather_s):
                    self.hurry.clear()
                gathered = self.queue.qsize() + 1
            gathered = max(0, gathered - 1)
            if self._remote is None and self.queue.qsize() - gathered >= _PACK_AT:
                self.pack_backlog()
                gathered = 0
            if not busy_since:
                busy_since = time.perf_counter()
            if self._remote is not None and not self._phase.shutdown:
                # The item is done when its answer comes (or its child dies), not now.
                if self.send(item):
                    self.outbox.put(None)
                    return
                if self.queue.empty():
                    busy_since = 0.0  # idle again: the next run gathers the ones after it
                continue
            try:
                if self._phase.shutdown:
                    # Queued when shutdown came: what it held has left unscored already.
                    self._engine.count_dropped()
                    self._fwd.release_all(item.held)
                else:
                    self.score(item)
            except BaseException:  # nothing a scorer raises (SystemExit included) may end the worker
                logger.warning("otel-toolscore scoring failed", exc_info=True)
                guarded(self._fwd.release_all, item.held)
            finally:
                self.done(1)
            # Let the app's threads have the GIL between runs once the worker has had it for a
            # while: a thread waiting for it would otherwise wait out the interpreter's switch
            # interval (5 ms). Not after every run: a waiting app thread keeps the GIL for that
            # long once it has it, and cheap runs (not sampled) would crawl.
            if self.queue.empty() and not self.backlog:
                busy_since = 0.0  # the next get() waits, and frees the GIL while it does
            elif time.perf_counter() - busy_since >= _YIELD_AFTER_S:
                time.sleep(0)
                busy_since = time.perf_counter()

    def score(self, item: Ready) -> None:
        spans = _handoff.unpack(item.trace_id, item.packed) if item.packed is not None else item.spans
        self.apply(item, self._engine.score(spans))

    def pack_backlog(self) -> None:
        """Take every run queued now into the worker's backlog, packed (``pack``): the app's
        garbage collector walks the spans of every run waiting, in every full collection it
        runs, which in a burst costs the app's threads more than packing costs the worker.
        The runs stay counted against the queue's bound until the worker takes them."""
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self.pack(item)
                self.queue.park(1)
            self.backlog.append(item)
            if item is None:
                return

    @staticmethod
    def pack(item: Ready) -> None:
        """The run's spans as ``_handoff.pack`` has them (``score`` unpacks them), and what
        ``apply`` may need of them besides."""
        try:
            packed = _handoff.pack(item.spans)
        except Exception:  # noqa: BLE001 - spans of a class of their own: kept as they are
            return
        if Scoring.let_go(item):
            item.packed = packed

    def apply(self, item: Ready, results: list[RunResult]) -> None:
        """Release the run's held spans (scored ones with their scores) and emit the rest."""
        engine = self._engine
        # A list per id: a buggy exporter or a replay can give two held spans one span id, and
        # each must still leave (one scored, the other as it is), not wait out hold_timeout.
        by_id: dict[str, list[Held]] = {}
        for h in item.held:
            by_id.setdefault(format(h.span_id, "016x"), []).append(h)
        spans_by_id: dict[int, ReadableSpan] | None = None
        emitted: list[tuple[RunResult, ReadableSpan | None, bool]] = []
        for result in results:
            run_id = result.trajectory.span_id or ""
            same = by_id.get(run_id)
            run_span = None
            attached = False  # the scores rode on the agent span
            if same:
                last = same[-1]
                run_span = last.readable()
                # The mark goes out whatever the span-attribute settings: it is what keeps
                # another scorer path (serve behind this app) from scoring the run again.
                scores = engine.prepared(result).span_attributes
                first = same.pop(0)
                attached = self._fwd.release(first, {**scores, sc.TOOLSCORE_SCORED: True},
                                             run_span if first is last else None) and bool(scores)
            if run_span is None:  # not held (a run under a wrapper's hold, a leftover)
                if spans_by_id is None:  # by the span id as the SDK holds it: no id formatted per span
                    spans_by_id = {s.context.span_id: s for s in item.spans}
                span_id = span_id_of(run_id)
                run_span = spans_by_id.get(span_id)  # type: ignore[arg-type]
                if run_span is None and item.anchors is not None:
                    run_span = item.anchors.span(span_id)
            emitted.append((result, run_span, attached))
        # Wrappers and non-run agent spans go out as they are.
        self._fwd.release_all([h for same in by_id.values() for h in same])
        if self._phase.shutdown:
            # Scored after shutdown gave up waiting: the spans left unscored, the downstream is
            # shut down; late scores would describe spans already exported without them.
            for _ in emitted:
                engine.count_dropped()
            return
        for result, run_span, attached in emitted:
            for evaluation in engine.emit(result, run_span, attached):
                self._fwd.forward(evaluation)
            engine.judge(result, run_span, self._fwd.forward_evaluation)

    # --- scoring="process": the worker sends, the scoring process's receiver thread emits -------

    def send(self, first: Ready) -> bool:
        """Encode ``first`` and the runs queued behind it (up to MAX_BATCH) as one message for the
        scoring process, for the sender to hand over (``deliver``). Each is done (``done``) when
        its answer comes, or when it is not sent. True when the queue's end mark was taken."""
        # Every wake-up of the worker (and every system call) takes the GIL back from the app's
        # thread: one send per _SEND_EVERY_S, the runs completed meanwhile together, costs the
        # app far less than one per run, and a run no more than those few ms.
        wait = self._sent_at + _SEND_EVERY_S - time.monotonic()
        if wait > 0 and self.queue.qsize() < MAX_BATCH - 1 and not self._phase.stopping:
            time.sleep(wait)
        batch, stop = [first], False
        while len(batch) < MAX_BATCH:
            try:
                item = self.queue.get_nowait()
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
                self._fwd.release_all(item.held)
            except BaseException:
                logger.warning("otel-toolscore scoring failed", exc_info=True)
                guarded(self._fwd.release_all, item.held)
            self.done(1)
        self._sent_at = time.monotonic()
        if not runs:
            return stop
        try:
            encoded = self._remote.encode(runs) if self._remote is not None else None
        except BaseException:  # the worker must not die; the runs leave unscored
            logger.warning("otel-toolscore: handing runs to the scoring process failed", exc_info=True)
            encoded = None
        if encoded is None:
            self.lost([r[0] for r in runs], "dropped")
            return stop
        for item, _, _, _ in runs:
            self.let_go(item)
        self.queue.park(len(encoded.items))
        self.outbox.put(encoded)
        return stop

    @staticmethod
    def let_go(item: Ready) -> bool:
        """The run's spans are encoded or packed (read for good): only what ``apply`` may still
        need of them is kept, and its held spans are packed. False when they are kept as they are."""
        try:
            item.anchors = Anchors(item.spans)
        except Exception:  # noqa: BLE001 - spans of a class of their own: kept as they are
            return False
        item.spans = ()
        for h in item.held:
            h.pack()
        return True

    def deliver(self) -> None:
        """The sender thread: hands the worker's batches to the scoring process, in order."""
        while True:
            batch = self.outbox.get()
            if batch is None:
                return
            # The batch in hand is work of its own until it is no longer counted against the
            # queue's bound: the child may answer its runs before ``deliver`` returns, and a
            # flush that returned then would leave them counted as waiting.
            with self.outstanding_lock:
                self.outstanding += 1
            try:
                unsent = self._remote.deliver(batch) if self._remote is not None else list(batch.items)
            except BaseException:  # the sender must not die; the runs leave unscored
                logger.warning("otel-toolscore: handing runs to the scoring process failed", exc_info=True)
                unsent = list(batch.items)  # (raised before any of them was in flight)
            finally:
                self.queue.park(-len(batch.items))
                self.done(1)
            if unsent:
                guarded(self.lost, unsent, "dropped")

    def answered(self, item: Ready, answer: RunAnswer) -> None:
        """The scoring process's answer for one run (on its receiver thread)."""
        try:
            for _ in range(answer.already_scored):
                self._engine.count_already_scored()
            if answer.error is not None:
                logger.warning("otel-toolscore scoring failed in the scoring process: %s", answer.error)
                self._fwd.release_all(item.held)
            else:
                self.apply(item, answer.results)
        except BaseException:
            logger.warning("otel-toolscore: emitting the scoring process's answer failed", exc_info=True)
            guarded(self._fwd.release_all, item.held)
        finally:
            self.done(1)

    def lost(self, items: list[Ready], outcome: str) -> None:
        """Runs the scoring process will not answer (it died with them, or they were never sent):
        counted once per scorer, their held spans forwarded unscored."""
        try:
            for name in self._engine.scorer_names:
                self._emitter.count_evaluation(name, outcome, len(items))
            self.stats[f"runs_{outcome}"] += len(items)
        finally:
            for item in items:
                guarded(self._fwd.release_all, item.held)
            self.done(len(items))

    def drop_at_shutdown(self, item: Ready) -> None:
        self.done(1)
        self.stats["dropped_shutdown"] += 1
        self._engine.count_dropped()
        self._fwd.release_all(item.held)

    def done(self, n: int) -> None:
        with self.outstanding_lock:
            self.outstanding -= n
        with self.idle:
            self.idle.notify_all()

    def wait_idle(self, deadline: float) -> bool:
        current = threading.current_thread()
        if current is self.worker or current is self.sender or (
                self._remote is not None and self._remote.is_receiver(current)):
            return False  # called from a scorer (or a downstream): the thread cannot wait for itself
        self.hurry.set()
        with self.idle:
            while self.outstanding > 0:
                remaining = deadline - self.clock()
                if remaining <= 0:
                    return False
                self.wait(self.idle, min(remaining, 0.05))
        return True

    def drop_waiting(self) -> None:
        """Shutdown: what the worker has not taken yet is dropped now, and counted before
        shutdown returns (the app's metrics pipeline usually shuts down next)."""
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self.drop_at_shutdown(item)
        while True:  # packed by the worker (scoring="thread"): as if still queued
            try:
                item = self.backlog.popleft()
            except IndexError:
                break
            if item is not None:
                self.queue.park(-1)
                self.drop_at_shutdown(item)
        while True:  # encoded and not yet handed to the child: as if still queued
            try:
                batch = self.outbox.get_nowait()
            except queue.Empty:
                break
            if batch is not None:
                self.queue.park(-len(batch.items))
                for item in batch.items:
                    self.drop_at_shutdown(item)
            else:  # the worker has stopped (a fork's copy shut down before): the sender stops too
                self.outbox.put(None)
                break
