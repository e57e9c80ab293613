"""What the app's threads count: runs dropped at a full queue, traces evicted, runs too large.

Invariant kept here: every run the processor does not score is counted once per scorer
(``toolscore.evaluations``: ``dropped``, ``too_large``), and every eviction once
(``toolscore.traces.evicted``). Counted on an app thread, a count is only tallied under a short
lock; the worker adds the tally to the metrics (``flush``): five SDK counter adds cost ~40 µs,
which the app's ``on_end`` would pay for every run dropped exactly when the process is
overloaded.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from otel_toolscore.outputs.otel import Emitter
from otel_toolscore.runtime.engine import Engine

logger = logging.getLogger("otel_toolscore.runtime.processor")

#: the tally's keys for runs not scored (outcomes); every other key is an eviction reason
_DROPPED, _TOO_LARGE = "runs dropped", "runs too_large"
#: the eviction reason of a trace that outgrew max_spans_per_trace
TOO_LARGE_REASON = "max_spans_per_trace"


class Tally:
    def __init__(self, stats: Counter[str]) -> None:
        self.stats = stats  # the processor's ``stats`` (tests and benchmarks read it)
        self._lock = threading.Lock()
        self._tally: Counter[str] = Counter()

    def evicted(self, reason: str, run_lost: bool) -> None:
        """A trace left its buffer unscored (``reason``); ``run_lost``: it held a run, which is
        dropped (or, evicted at max_spans_per_trace, skipped as too large to score)."""
        self.stats[f"evicted_{reason}"] += 1
        too_large = reason == TOO_LARGE_REASON
        if too_large and run_lost:
            self.stats["runs_too_large"] += 1
        with self._lock:
            self._tally[reason] += 1
            if run_lost:
                self._tally[_TOO_LARGE if too_large else _DROPPED] += 1

    def queue_full(self) -> None:
        """A completed run found the queue full: dropped, as an eviction ``queue_full``."""
        self.stats["dropped_queue_full"] += 1
        with self._lock:
            self._tally[_DROPPED] += 1
            self._tally["queue_full"] += 1

    def flush(self, engine: Engine, emitter: Emitter) -> None:
        """Add the tallied counts to the metrics (off the app's threads)."""
        if not self._tally:  # unlocked peek: a count missed now is taken on the next call
            return
        with self._lock:
            tally, self._tally = self._tally, Counter()
        try:
            dropped = tally.pop(_DROPPED, 0)
            if dropped:
                engine.count_dropped(n=dropped)
            too_large = tally.pop(_TOO_LARGE, 0)
            if too_large:
                engine.count_dropped(n=too_large, outcome="too_large")
            for reason, n in tally.items():
                emitter.count_evicted(reason, n)
        except Exception:  # counting must not stop the worker
            logger.warning("otel-toolscore: counting drops failed", exc_info=True)
