"""The processor's end of its scoring process (``scoring="process"``).

The processor's worker thread encodes batches of completed runs (``encode``) and its sender thread
hands them to the child (``deliver``; ``send`` does both); a receiver thread reads the answers
and gives each run's to ``on_answer``. The child (``_scoring_child``) is a
fresh interpreter started on the first batch (``subprocess``: fork+exec, safe in a threaded app,
and nothing of the app's ``__main__`` runs again, as it would in a multiprocessing "spawn"
child), fed over two pipes private to the pair.

Every run sent is answered exactly once, by whichever of these pops it from ``_inflight`` first:
its answer; the child's death (a crash, kill -9, or a child silent for ``hung_after`` with runs
in flight, which is killed), ``on_lost(items, OUTCOME_DIED)``; ``close``, ``on_lost(items,
"dropped")``. The next batch after a death starts a new child; a child that cannot start (it
does not answer ``ready``) makes the next start wait (doubling, up to ``_MAX_BACKOFF_S``), so
that it does not cost the app a process start per run.

After ``os.fork()`` of the app, ``reinit_after_fork`` (in the forked copy) forgets the parent's
child and closes the copy's ends of its pipes (left open, they would keep the child from ever
seeing the parent close them); the copy starts its own child when it first needs one.
"""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing import spawn
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore.config import ToolScoreSettings
from otel_toolscore.runtime import _handoff
from otel_toolscore.runtime._handoff import Pipe, RunAnswer

logger = logging.getLogger(__name__)

#: ``toolscore.evaluations{outcome}`` of a run the scoring process had when it died (or hung)
OUTCOME_DIED = "scoring_process_died"
#: s a new child has to import the package and answer that it is ready
_START_TIMEOUT_S = 60.0
_MAX_BACKOFF_S = 60.0
#: runs in one message to the child: enough to share a write and a wake-up, few enough that
#: the first answers of a batch come back soon
MAX_BATCH = 64

#: (what the caller sends and gets back, trace id, whether the trajectory is wanted, spans)
Run = tuple[Any, int, bool, Sequence[ReadableSpan]]


@dataclass(slots=True)
class Batch:
    """Runs encoded for the child (``ScoringProcess.encode``), not yet handed to one."""

    items: list[Any]  # what the caller sent, in order
    seqs: list[int]
    payload: bytes
    refused: set[int]  # the seqs of runs that could not be encoded (not in the payload)


class ScoringProcessError(ValueError):
    """Scorers that cannot be sent to a scoring process (raised when the processor is built)."""


class _Child:
    """One child process and the parent's ends of its two pipes."""

    def __init__(self, popen: subprocess.Popen[bytes], requests: Pipe, answers: Pipe) -> None:
        self.popen = popen
        self.requests = requests  # parent writes runs
        self.answers = answers  # parent reads answers
        self.started = time.monotonic()
        self.last_heard = self.started
        self.write_lock = threading.Lock()

    def close_ends(self) -> None:
        # The request end under the write lock: the worker may be writing to it (to a dead
        # child, that write fails at once), and a descriptor closed under a write could be
        # reused by the app before the write.
        with self.write_lock:
            _close(self.requests)
        _close(self.answers)


def _close(pipe: Pipe) -> None:
    try:
        pipe.close()
    except OSError:
        pass


def _spec(settings: ToolScoreSettings, code_scorers: Sequence[Any]) -> bytes:
    """What a child needs, pickled once here so that a scorer that cannot cross to it fails
    when the processor is built, not on the first run."""
    for scorer in code_scorers:
        cls = type(scorer)
        if cls.__module__ == "__main__":
            # pickle names a class by module; the child's __main__ is not the app's
            raise ScoringProcessError(
                f"scoring='process': scorer {cls.__qualname__} is defined in __main__, which the scoring "
                "process does not import; define it in a module, or use scoring='thread'")
    try:
        scorers = pickle.dumps((settings, list(code_scorers)), pickle.HIGHEST_PROTOCOL)
        pickle.loads(scorers)  # what a child will do with it
        # the path first: the child needs it to import the scorers' modules
        spec = pickle.dumps((list(sys.path), scorers), pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise ScoringProcessError(
            f"scoring='process': the scorers cannot be sent to the scoring process ({type(exc).__name__}: "
            f"{exc}); use scorers that pickle, or scoring='thread'") from exc
    return spec


class ScoringProcess:
    def __init__(self, settings: ToolScoreSettings, code_scorers: Sequence[Any],
                 on_answer: Callable[[Any, RunAnswer], None],
                 on_lost: Callable[[list[Any], str], None]) -> None:
        self._spec = _spec(settings, code_scorers)
        self._on_answer = on_answer
        self._on_lost = on_lost
        #: a child with runs in flight that says nothing for this long is taken as hung
        self.hung_after = max(30.0, 10 * settings.hold_timeout)
        self.stats = {"started": 0, "died": 0, "runs_lost": 0}
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._inflight: dict[int, tuple[Any, _Child]] = {}
        self._seq = itertools.count()
        self._child: _Child | None = None
        self._receivers: list[threading.Thread] = []
        self._closed = False
        self._backoff = 0.0
        self._not_before = 0.0  # no start before this (monotonic)

    @property
    def pid(self) -> int | None:
        """The running child's process id, if one runs."""
        child = self._child
        return child.popen.pid if child is not None else None

    def is_receiver(self, thread: threading.Thread) -> bool:
        return thread in self._receivers

    # --- sending ---------------------------------------------------------------------------------

    def encode(self, runs: Sequence[Run]) -> Batch:
        """Runs as one message for whichever child ``deliver`` finds: the runs' spans are read
        here and not after, so the caller can let them go (see the processor's ``_Anchors``)."""
        with self._lock:
            seqs = [next(self._seq) for _ in runs]
        payload, refused = self._encode(runs, seqs)
        return Batch([run[0] for run in runs], seqs, payload, refused)

    def send(self, runs: Sequence[Run]) -> list[Any]:
        """``deliver(encode(runs))``."""
        return self.deliver(self.encode(runs)) if runs else []

    def deliver(self, batch: Batch) -> list[Any]:
        """Hand an encoded batch to the child; returns the items that could not be handed (no
        child could be started, or a run that could not be encoded): the caller forwards their
        spans unscored."""
        items, seqs, refused = batch.items, batch.seqs, batch.refused
        if not items:
            return []
        child = self._running_child()
        if child is None:
            return list(items)
        with self._lock:
            if self._child is not child:  # died meanwhile: its runs are lost, these were never its
                return list(items)
            # (only the current child's runs are ever in flight: _gone takes a dead one's all)
            if not self._inflight:  # busy from now: its silence counts from here (check_hung)
                child.last_heard = time.monotonic()
            for seq, item in zip(seqs, items, strict=True):
                if seq not in refused:
                    self._inflight[seq] = (item, child)
        unsent = [item for seq, item in zip(seqs, items, strict=True) if seq in refused]
        try:
            with child.write_lock:
                child.requests.send(batch.payload)
        except BaseException as exc:
            # What this batch put in flight comes back, unless the receiver took it already
            # (the child's death); whatever else the child had is the receiver's.
            with self._lock:
                back = [self._inflight.pop(seq)[0] for seq in seqs if seq in self._inflight]
            if not isinstance(exc, (OSError, ValueError)):
                return unsent + back  # not the pipe: these were not sent
            # The pipe broke: the child died (the next batch starts a new one).
            logger.debug("otel-toolscore: writing to the scoring process failed", exc_info=True)
            self._kill(child)
            if back:
                self._lost(back, OUTCOME_DIED)
        return unsent

    @staticmethod
    def _encode(runs: Sequence[Run], seqs: list[int]) -> tuple[bytes, set[int]]:
        rows = [(seq, trace_id, want, spans) for seq, (_, trace_id, want, spans) in zip(seqs, runs, strict=True)]
        try:
            return _handoff.encode_runs(rows), set()
        except Exception:  # noqa: BLE001 - one odd span (a ReadableSpan subclass's values) must not cost the batch
            good, refused = [], set()
            for row in rows:
                try:
                    _handoff.encode_runs([row])
                    good.append(row)
                except Exception:
                    logger.warning("otel-toolscore: a run could not be sent to the scoring process", exc_info=True)
                    refused.add(row[0])
            return _handoff.encode_runs(good), refused

    def _running_child(self) -> _Child | None:
        with self._lock:
            if self._closed:
                return None
            child = self._child
        if child is not None:
            return child
        if time.monotonic() < self._not_before:
            return None
        return self._start()

    def _start(self) -> _Child | None:
        """A new child, ready; None when it could not start (logged, and the next try waits)."""
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        requests, answers = Pipe(req_w), Pipe(ans_r)
        child_ends = (Pipe(req_r), Pipe(ans_w))
        try:
            popen = subprocess.Popen(
                [spawn.get_executable(), "-m", "otel_toolscore.runtime._scoring_child", str(req_r), str(ans_w)],
                pass_fds=(req_r, ans_w), stdin=subprocess.DEVNULL,
            )
        except Exception:
            logger.error("otel-toolscore: could not start the scoring process", exc_info=True)
            for conn in (requests, answers, *child_ends):
                conn.close()
            self._wait_longer()
            return None
        for conn in child_ends:  # the child's now: the parent sees EOF when the child is gone
            conn.close()
        child = _Child(popen, requests, answers)
        self.stats["started"] += 1
        problem = None
        try:
            requests.send(self._spec)
            if answers.poll(_START_TIMEOUT_S):
                reply = answers.recv()
                if reply != b"ready":
                    problem = reply.decode("utf-8", "replace")
            else:
                problem = f"no answer in {_START_TIMEOUT_S:.0f} s"
        except (OSError, EOFError) as exc:
            problem = f"it exited ({popen.poll()}): {exc}"
        if problem is None:
            self._backoff = 0.0
        else:
            logger.error("otel-toolscore: the scoring process did not start: %s", problem)
            self._kill(child)
            child.close_ends()
            self._wait_longer()
            return None
        with self._lock:
            if self._closed:
                stale = child
            else:
                stale, self._child = None, child
        if stale is not None:
            self._kill(stale)
            stale.close_ends()
            return None
        receiver = threading.Thread(target=self._receive, args=(child,), name="otel-toolscore-scoring-answers",
                                    daemon=True)
        self._receivers = [t for t in self._receivers if t.is_alive()] + [receiver]
        receiver.start()
        return child

    def _wait_longer(self) -> None:
        self._backoff = min(max(1.0, 2 * self._backoff), _MAX_BACKOFF_S)
        self._not_before = time.monotonic() + self._backoff

    # --- receiving -------------------------------------------------------------------------------

    def _receive(self, child: _Child) -> None:
        # A blocking read, no poll: one system call per message (see Pipe). A hung child is
        # found by check_hung instead.
        try:
            while True:
                message = child.answers.recv()
                child.last_heard = time.monotonic()
                for seq, answer in _handoff.decode_answers(message):
                    with self._lock:
                        entry = self._inflight.pop(seq, None)
                    if entry is not None:
                        self._on_answer(entry[0], answer)
        except (EOFError, OSError):
            pass  # the child is gone (or its pipe closed by close())
        except Exception:
            logger.warning("otel-toolscore: reading the scoring process's answers failed", exc_info=True)
            self._kill(child)
        self._gone(child)

    def check_hung(self) -> None:
        """Kill a child that has had runs in flight and said nothing for ``hung_after`` (its
        receiver then counts its runs lost). The processor's timer calls this as it wakes."""
        child = self._child
        if child is None or time.monotonic() - child.last_heard <= self.hung_after:
            return
        if self._inflight:
            logger.warning("otel-toolscore: the scoring process answered nothing for %.0f s with runs in flight: "
                           "restarting it", self.hung_after)
            self._kill(child)

    def _gone(self, child: _Child) -> None:
        """The child's pipe is closed: it exited, died or was killed. Its runs are lost."""
        with self._lock:
            mine = [seq for seq, (_, c) in self._inflight.items() if c is child]
            items = [self._inflight.pop(seq)[0] for seq in mine]
            if self._child is child:
                self._child = None
            closed = self._closed
        code = self._reap(child)
        child.close_ends()
        if not closed:
            self.stats["died"] += 1
            logger.warning("otel-toolscore: the scoring process exited (%s) with %d run(s) in flight; they leave "
                           "unscored and a new one starts with the next run", code, len(items))
        if items:
            self._lost(items, "dropped" if closed else OUTCOME_DIED)

    def _lost(self, items: list[Any], outcome: str) -> None:
        if outcome == OUTCOME_DIED:
            self.stats["runs_lost"] += len(items)
        try:
            self._on_lost(items, outcome)
        except Exception:
            logger.warning("otel-toolscore: releasing the scoring process's runs failed", exc_info=True)

    @staticmethod
    def _kill(child: _Child) -> None:
        try:
            child.popen.kill()
        except OSError:
            pass

    @staticmethod
    def _reap(child: _Child) -> int | None:
        try:
            return child.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # closed its pipe but lives on: it goes now
            child.popen.kill()
            return child.popen.wait()

    # --- shutdown and fork -------------------------------------------------------------------------

    def close(self, timeout_s: float) -> None:
        """Stop the child: it finishes the batch it is scoring, sees its pipe closed and exits;
        killed at ``timeout_s``. Runs still in flight then go to ``on_lost(…, "dropped")``."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        with self._lock:
            self._closed = True
            child = self._child
        if child is not None:
            # A worker blocked writing to a stuck child holds the write lock: killing the child
            # ends that write (the pipe breaks) before the descriptor is closed under it.
            if not child.write_lock.acquire(timeout=max(timeout_s, 0.0)):
                self._kill(child)
                child.write_lock.acquire()
            try:
                child.requests.close()
            finally:
                child.write_lock.release()
            try:
                child.popen.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                self._kill(child)
        for receiver in self._receivers:
            if receiver is not threading.current_thread():
                # it takes the runs the child had as it sees the pipe close; not worth more than a second
                receiver.join(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
        with self._lock:  # what no receiver took (none running, or one still busy)
            items = [item for item, _ in self._inflight.values()]
            self._inflight.clear()
        if items:
            self._lost(items, "dropped")

    def reinit_after_fork(self, start: bool = True) -> None:
        """In a forked copy of the app: the parent's child and runs are the parent's."""
        inherited = self._child
        self._init_state()
        self._closed = not start
        if inherited is not None:
            # Closing the copy's descriptors leaves the parent's open; the process is not ours
            # to wait for or kill. Not under its write lock: a thread of the parent may have
            # held it at the fork, and no other thread runs here.
            _close(inherited.requests)
            _close(inherited.answers)
