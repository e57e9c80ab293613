"""A clock for a processor's own waits (``force_flush``, ``shutdown``): it stands still except
while the processor waits, and then moves by exactly the time asked for. A test asserts on what
the processor asked (``waited``, ``waits``), not on how long the machine took."""

from __future__ import annotations

import threading
from typing import Any


class SteppedClock:
    def __init__(self, processor: Any) -> None:
        self._scoring = processor._scoring
        self.now = 1_000.0
        self.waits: list[float] = []

    @property
    def waited(self) -> float:
        return sum(self.waits)

    def read(self) -> float:
        return self.now

    def wait(self, idle: threading.Condition, timeout: float) -> bool:
        idle.wait(0)  # the others may run; the time asked for passes on this clock at once
        self.waits.append(timeout)
        self.now += timeout
        return False

    def __enter__(self) -> SteppedClock:
        self._saved = (self._scoring.clock, self._scoring.wait)
        self._scoring.clock, self._scoring.wait = self.read, self.wait
        return self

    def __exit__(self, *exc: object) -> None:
        self._scoring.clock, self._scoring.wait = self._saved
