"""What stops a judge storm: a circuit breaker and a request budget per judge model.

During a judge outage (a 500 storm, a dead endpoint) every evaluation would otherwise make its
1 + max_retries attempts: 50 runs, 200 requests, each one waited for. The breaker counts
consecutive failed attempts (5xx, 408, 429, timeouts, connection errors) of one model at one
endpoint, whichever client or scorer made them:

- closed: requests go; a success resets the count. While the last attempt failed, or before the
  model has answered once, requests go one at a time, so a model down from the start, or failing
  now, sees at most ``threshold`` requests before the breaker opens, however many runs wait;
- open (``threshold`` consecutive failures): no request is made; an evaluation that would have
  made one ends at once as an error score ``judge_circuit_open`` (counted in ``skipped``);
- half-open (``cooldown_s`` after it opened): one probe request goes; its success closes the
  breaker, its failure opens it again for another cool-down.

The request budget caps the attempts sent to a model in any 60 seconds, retries included (the
cost cap only counts what litellm can price; the budget counts requests). Both keep their state
per (model, api_base) for the life of the process; the clock is injectable, so tests move time
instead of waiting for it. See docs/reliability.md, "Judge storms".
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from otel_toolscore import _fork

Clock = Callable[[], float]
State = Literal["closed", "open", "half_open"]

#: the seconds a request budget counts over
BUDGET_WINDOW_S = 60.0


class CircuitOpen(Exception):
    """No request: the breaker is open (or its one probe is under way)."""


@dataclass
class BreakerStats:
    opened: int = 0  # times the breaker opened
    probes: int = 0  # half-open probe requests sent
    skipped: int = 0  # evaluations ended without a request (judge_circuit_open)
    retries_cut: int = 0  # retries not made (their evaluation ends with the failure it retried)


class CircuitBreaker:
    """One judge model's breaker (see the module's docstring). Thread-safe; the waiting for a
    turn happens on the caller's event loop (one lock per loop: the judge loop is re-created
    after a fork)."""

    def __init__(self, threshold: int = 5, cooldown_s: float = 30.0, *, clock: Clock = time.monotonic) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.stats = BreakerStats()
        self._lock = threading.Lock()
        self._failures = 0
        self._answered = False  # has the model answered once: until then, one request at a time
        self._opened_at: float | None = None
        self._probing = False
        self._turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()
        _fork.reinit_in_child(self._after_fork)

    def _after_fork(self) -> None:
        # a fork while another thread held the lock would leave the child's held forever; the
        # child's judge loop is a new one, with new turns
        self._lock = threading.Lock()
        self._turns = weakref.WeakKeyDictionary()

    @property
    def state(self) -> State:
        with self._lock:
            return self._state()

    def _state(self) -> State:
        if self._opened_at is None:
            return "closed"
        return "half_open" if self.clock() - self._opened_at >= self.cooldown_s else "open"

    async def acquire(self, *, retry: bool = False) -> Ticket:
        """Permission for one request (``retry``: a retry of a failed one): a ticket to
        ``release`` with its outcome. Raises ``CircuitOpen`` when no request may go; waits for
        its turn while requests go one at a time."""
        ticket = self._try(retry=retry)
        if ticket is not None:
            return ticket
        loop = asyncio.get_running_loop()
        turn = self._turns.get(loop)
        if turn is None:
            turn = self._turns[loop] = asyncio.Lock()
        await turn.acquire()
        try:
            # another request may have changed everything while this one waited
            ticket = self._try(cautious=True, retry=retry)
        except BaseException:
            turn.release()
            raise
        if ticket is None:  # pragma: no cover - _try(cautious=True) returns or raises
            turn.release()
            raise AssertionError("unreachable")
        ticket.turn = turn
        return ticket

    def _try(self, cautious: bool = False, retry: bool = False) -> Ticket | None:
        """A ticket now, None to wait for a turn, or ``CircuitOpen``."""
        with self._lock:
            state = self._state()
            if state == "open" or (state == "half_open" and self._probing):
                if retry:
                    self.stats.retries_cut += 1
                else:
                    self.stats.skipped += 1
                raise CircuitOpen(self._why())
            if state == "half_open":
                self._probing = True
                self.stats.probes += 1
                return Ticket(self, probe=True)
            if self._answered and self._failures == 0:
                return Ticket(self)
            return Ticket(self) if cautious else None

    def _why(self) -> str:
        assert self._opened_at is not None
        left = max(0.0, self.cooldown_s - (self.clock() - self._opened_at))
        return (f"the judge's circuit breaker is open after {self.threshold} consecutive failed requests; "
                f"no request made (next probe in {left:.0f} s)")

    def _settle(self, ticket: Ticket, outcome: Literal["success", "failure", "none"]) -> None:
        with self._lock:
            if ticket.probe:
                self._probing = False
            if outcome == "success":
                self._failures, self._answered, self._opened_at = 0, True, None
            elif outcome == "failure":
                self._failures += 1
                if ticket.probe or (self._opened_at is None and self._failures >= self.threshold):
                    self._opened_at = self.clock()
                    self.stats.opened += 1
        if ticket.turn is not None:
            ticket.turn.release()
            ticket.turn = None


@dataclass
class Ticket:
    breaker: CircuitBreaker
    probe: bool = False
    turn: asyncio.Lock | None = None
    _done: bool = field(default=False, repr=False)

    def release(self, outcome: Literal["success", "failure", "none"]) -> None:
        """``success``: the model answered; ``failure``: a failure the breaker counts; ``none``:
        no request was made after all, or its failure says nothing of the model's health."""
        if not self._done:
            self._done = True
            self.breaker._settle(self, outcome)


class RequestBudget:
    """Requests sent to one model in the last ``BUDGET_WINDOW_S`` seconds."""

    def __init__(self, *, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self.refused = 0
        self._sent: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        _fork.reinit_in_child(self._after_fork)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()

    def take(self, limit: int) -> bool:
        """Count one request if fewer than ``limit`` went in the window; False (and nothing
        counted) otherwise."""
        with self._lock:
            now = self.clock()
            while self._sent and self._sent[0] <= now - BUDGET_WINDOW_S:
                self._sent.popleft()
            if len(self._sent) >= limit:
                self.refused += 1
                return False
            self._sent.append(now)
            return True


@dataclass
class ModelGuard:
    """The breaker and the budget of one judge model at one endpoint."""

    breaker: CircuitBreaker
    budget: RequestBudget


_GUARDS: dict[tuple[str, str | None], ModelGuard] = {}
_GUARDS_LOCK = threading.Lock()


def _guards_lock_after_fork() -> None:
    global _GUARDS_LOCK
    _GUARDS_LOCK = threading.Lock()


_fork.register(after_in_child=_guards_lock_after_fork)


def guard_for(model: str, api_base: str | None, threshold: int, cooldown_s: float) -> ModelGuard:
    """The process's guard of ``model`` at ``api_base``, shared by every client of it (the
    first client's threshold and cool-down set the breaker)."""
    key = (model, api_base)
    with _GUARDS_LOCK:
        guard = _GUARDS.get(key)
        if guard is None:
            guard = _GUARDS[key] = ModelGuard(CircuitBreaker(threshold, cooldown_s), RequestBudget())
        return guard


def reset_guards() -> None:
    """Forget every model's breaker and budget (tests; a process that re-configures its judges)."""
    with _GUARDS_LOCK:
        _GUARDS.clear()
