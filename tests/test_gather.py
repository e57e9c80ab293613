"""The worker takes runs together (issue 32): woken by a completed run, it waits ``gather_s`` for
the runs completing after it, then scores them back to back; a flush or shutdown cuts the wait
short; the wait never exceeds a quarter of ``hold_timeout``; a gathered batch is not packed as if
it were a backlog."""

from __future__ import annotations

import threading
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from otel_toolscore.runtime._processor.scoring import GATHER_S
from tests.support.pipeline import Pipeline
from tests.support.spans import weather_run
from tests.support.timing import wait_for


class _CountingEvent(threading.Event):
    """The worker's ``hurry``: how often the worker started a gathering wait, and for how long."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return super().wait(timeout)


def _pipeline(gather_s: float, **settings: Any) -> tuple[Pipeline, TracerProvider, _CountingEvent]:
    p = Pipeline(scorers=["tool_call_accuracy"], **settings)
    hurry = _CountingEvent()
    p.processor._scoring.hurry = hurry
    p.processor._scoring.gather_s = gather_s
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    return p, provider, hurry


def _scored(p: Pipeline) -> int:
    return sum(1 for s in p.exported() if "toolscore.tool_call_accuracy.label" in (s.attributes or {}))


def test_runs_completing_while_the_worker_gathers_are_scored_in_one_go_and_a_flush_cuts_the_wait() -> None:
    # a gathering wait far longer than the test: only the flush can end it
    p, provider, hurry = _pipeline(gather_s=600.0)
    tracer = provider.get_tracer("app")
    weather_run(tracer, expected="get_weather")
    assert wait_for(lambda: hurry.waits == [600.0])  # the first run woke the worker: it gathers
    for _ in range(4):
        weather_run(tracer, expected="get_weather")
    assert _scored(p) == 0  # all five wait together
    done: list[bool] = []
    flusher = threading.Thread(target=lambda: done.append(p.processor.force_flush(10_000)))
    flusher.start()
    flusher.join(timeout=20)
    assert done == [True]
    assert _scored(p) == 5
    assert hurry.waits == [600.0]  # one gathering for the five runs
    provider.shutdown()


def test_without_a_flush_a_run_is_scored_once_the_gathering_wait_is_over() -> None:
    p, provider, hurry = _pipeline(gather_s=0.05)
    weather_run(provider.get_tracer("app"), expected="get_weather")
    assert wait_for(lambda: _scored(p) == 1)
    assert hurry.waits == [0.05]
    provider.shutdown()


def test_shutdown_cuts_the_gathering_wait_short() -> None:
    p, provider, hurry = _pipeline(gather_s=600.0)
    weather_run(provider.get_tracer("app"), expected="get_weather")
    assert wait_for(lambda: hurry.waits == [600.0])
    stopper = threading.Thread(target=provider.shutdown)
    stopper.start()
    stopper.join(timeout=20)
    assert not stopper.is_alive()
    assert _scored(p) == 1  # scored within shutdown, not dropped


def test_the_gathering_wait_is_at_most_a_quarter_of_hold_timeout() -> None:
    assert Pipeline(hold_timeout=0.2).processor._scoring.gather_s == 0.05
    assert Pipeline().processor._scoring.gather_s == GATHER_S <= 2.0 / 4


def test_a_gathered_batch_is_not_packed_as_a_backlog() -> None:
    p, provider, hurry = _pipeline(gather_s=600.0)
    packed: list[int] = []
    scoring = p.processor._scoring
    original = scoring.pack_backlog

    def pack_backlog() -> None:
        packed.append(scoring.queue.qsize())
        original()
    scoring.pack_backlog = pack_backlog  # type: ignore[method-assign]
    tracer = provider.get_tracer("app")
    weather_run(tracer, expected="get_weather")
    assert wait_for(lambda: hurry.waits == [600.0])
    for _ in range(100):  # more than the backlog threshold (64), all within the gathering
        weather_run(tracer, expected="get_weather")
    assert p.processor.force_flush(30_000)
    assert _scored(p) == 101 and packed == []
    provider.shutdown()
