"""Clocks that tests move, so that a test asserts on what a component asked to wait for, not on
how long the machine took: ``SteppedClock`` for a processor's own waits (``force_flush``,
``shutdown``: it stands still except while the processor waits, and then moves by exactly the
time asked for); ``FakeClock`` moved by hand; ``Waits``, an injected async ``sleep`` that records
each wait and yields at once (the judge client's)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Waits:
    """An injected ``sleep``: records each wait the client asks for and yields at once."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        await asyncio.sleep(0)


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
