"""The timer thread: completion grace, hold deadlines, quiet waits, trace TTL.

Invariant kept here: no span is held past ``hold_timeout`` (less ``hold_slack``, never more),
whatever the worker, a scorer or the scoring process does: the timer releases a hold that falls
due unscored (``stats["holds_expired"]``) and keeps its run to be scored. It also ends what the
buffers cannot end by themselves: a run whose descendants are still open at its grace deadline
(scored on what it has), a quiet trace with no span for ``decision_wait``, a trace older than
``trace_ttl`` (evicted).

``clock`` and ``wait`` are injectable: tests drive ``tick`` on a clock of their own and assert on
what it released and how long it asked to sleep.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from otel_toolscore.config import ToolScoreSettings
from otel_toolscore.runtime._processor.forward import Held, Phase, guarded
from otel_toolscore.runtime._processor.ready import Ready

if TYPE_CHECKING:
    from otel_toolscore.runtime._processor.buffers import Buffers, TraceBuffer

logger = logging.getLogger("otel_toolscore.runtime.processor")

#: the timer releases a held span up to this much before its hold deadline (never after it), so
#: that one wake-up releases every hold falling due in that window instead of one each
HOLD_SLACK_S = 0.005


class Timer:
    def __init__(self, settings: ToolScoreSettings, quiet: bool, lock: threading.Lock, phase: Phase, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._quiet = quiet
        self._phase = phase
        self.clock = clock
        self.wakeup = threading.Condition(lock)
        #: how the timer sleeps (under the lock) until its next deadline or a wake-up
        self.wait: Callable[[float], object] = self.wakeup.wait
        self._until = 0.0  # when the sleeping timer wakes up by itself
        self.deadlines: list[tuple[float, int, str, Any]] = []  # (when, seq, what, payload)
        self._seq = itertools.count()
        # Held spans in hold order, which is deadline order (one hold_timeout for all): the
        # timer looks at the oldest unreleased one only, not at every hold.
        self.holds: deque[Held] = deque()
        self.slack = min(HOLD_SLACK_S, settings.hold_timeout / 10)
        self.thread = threading.Thread(target=self._run, name="otel-toolscore-timer", daemon=True)
        # wired by the processor once its parts exist
        self.buffers: Buffers | None = None
        self.release_expired: Callable[[Held], None] = lambda held: None
        self.evict: Callable[[TraceBuffer, str], None] = lambda buf, reason: None
        self.submit: Callable[[Ready], None] = lambda ready: None
        self.check_hung: Callable[[], None] | None = None

    # --- under the lock -------------------------------------------------------------------------

    def hold(self, buf: TraceBuffer, held: Held) -> None:
        buf.held.append(held)
        self.holds.append(held)
        self._wake_by(held.deadline - self.slack)

    def schedule(self, when: float, what: str, payload: Any) -> None:
        heapq.heappush(self.deadlines, (when, next(self._seq), what, payload))
        self._wake_by(when)

    def _wake_by(self, when: float) -> None:
        """Make sure the timer is up by ``when``. It is woken only when it sleeps past that;
        while it is awake it looks at every deadline before sleeping again."""
        if when < self._until:
            self._until = when
            self.wakeup.notify()

    def stop(self) -> list[Held]:
        """Shutdown: nothing more to time. Returns the holds it had (to be released unscored)."""
        stranded = list(self.holds)
        self.holds.clear()
        self.deadlines.clear()
        self.wakeup.notify()
        return stranded

    # --- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                if not self.tick():
                    return
            except BaseException:  # the timer bounds every hold: it must not die
                logger.warning("otel-toolscore timer step failed", exc_info=True)
                time.sleep(0.01)

    def tick(self) -> bool:
        """One round of the timer; False once shut down with nothing left to time."""
        if self.check_hung is not None:
            guarded(self.check_hung)  # (the timer wakes at least once a second)
        buffers = self.buffers
        assert buffers is not None
        holds = self.holds
        slack = self.slack
        due: list[tuple[str, Any]] = []
        due_holds: list[Held] = []
        expired: list[TraceBuffer] = []
        with self.wakeup:
            if self._phase.shutdown and not self.deadlines:
                return False
            now = self.clock()
            while self.deadlines and self.deadlines[0][0] <= now:
                _, _, what, payload = heapq.heappop(self.deadlines)
                due.append((what, payload))
            # Released holds are dropped from the front as they are met; an unreleased one
            # at the front is either due or is the next thing to wake up for.
            while holds and (holds[0].released or holds[0].deadline - slack <= now):
                h = holds.popleft()
                if not h.released:
                    due_holds.append(h)
            ttl = self._settings.trace_ttl
            pending = buffers.pending
            while pending:
                tid, buf = next(iter(pending.items()))
                if now - buf.created < ttl:
                    break
                expired.append(pending.pop(tid))
            ready: list[Ready] = []
            for what, payload in due:
                if what == "grace" and not self._quiet:
                    # A run whose descendants are still open at its grace deadline is scored on
                    # what it has; its late spans are forwarded only (counted as late_spans).
                    trace_id, run_id = payload
                    graced = pending.get(trace_id)
                    if graced is not None and run_id in graced.runs:
                        ready.append(buffers.complete_run(trace_id, graced, run_id))
                        buffers.finish_if_idle(trace_id, graced, ready)
                elif what == "quiet":
                    r = buffers.quiet_due(payload, now)
                    if r is not None:
                        ready.append(r)
            if not due and not due_holds and not expired:
                wake = min(self.deadlines[0][0] if self.deadlines else now + min(ttl, 1.0),
                           holds[0].deadline - slack if holds else now + 1.0)
                timeout = min(max(wake - now, 0.0), 1.0)
                self._until = now + timeout
                self.wait(timeout)
                return True
        # Each step on its own: what a failing one leaves undone must not strand the others
        # (they were taken off the timer's lists already).
        for h in due_holds:
            guarded(self.release_expired, h)
        for buf in expired:
            guarded(self.evict, buf, "trace_ttl")
        for r in ready:
            guarded(self.submit, r)
        return True
