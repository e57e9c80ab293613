"""Runs waiting to be scored wait packed, not as the app's spans.

scoring="process": runs waiting for the scoring process wait encoded.

The worker encodes a batch as soon as it takes it and lets go of the runs' spans (an ended SDK
span is ~11 objects the app's garbage collector walks in every full collection); a sender thread
writes the batches to the child. The queue's bound still counts those runs until they are handed
over, a run whose span is not held still gets its evaluation spans, and every span still leaves
exactly once. scoring="thread": a queue longer than ``_PACK_AT`` is packed by the worker
(``_pack_backlog``), the same encoding without the pickle, and scored as it would have been.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import SpanContext, TraceFlags, TraceState

from otel_toolscore.runtime.processor import _Anchors
from tests.support.pipeline import Pipeline, id_counts
from tests.support.spans import weather_run
from tests.test_process_mode import Slow, _agents, _outcomes, _setup


def _inflight_items(p: Any) -> list[Any]:
    remote = p.processor._remote
    with remote._lock:
        return [item for item, _ in remote._inflight.values()]


def test_runs_waiting_for_the_child_keep_no_spans(tmp_path: Path) -> None:
    # The first run keeps the child busy for a while: the rest wait, sent and unanswered.
    p, tracer = _setup([Slow(1.0, marker=str(tmp_path / "slow")), "tool_call_validation"], hold_timeout=30.0)
    try:
        for _ in range(6):
            weather_run(tracer)
        deadline = time.monotonic() + 60
        while len(_inflight_items(p)) < 6:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        items = _inflight_items(p)
        assert all(item.spans == () and item.anchors is not None for item in items)
        assert all(len(item.held) == 1 for item in items)  # the agent span, held for its scores
        assert p.processor.force_flush(60_000)
        agents = _agents(p)
        assert len(agents) == 6 and all("toolscore.slow.label" in s.attributes for s in agents)
        assert max(id_counts(p.exported()).values()) == 1
    finally:
        p.processor.shutdown()


def _big_run(tracer: Any, blob: str) -> None:
    """An agent run whose encoding outgrows the pipe's buffer: its writes wait for the child."""
    with tracer.start_as_current_span("invoke_agent bot", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bot", "app.blob": blob}), \
            tracer.start_as_current_span("execute_tool get_weather", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.arguments": '{"city": "Oslo"}', "gen_ai.tool.call.result": '{"temp": 5}'}):
        pass


def test_the_queue_bound_counts_runs_encoded_and_not_yet_handed_over(tmp_path: Path) -> None:
    # The child is busy with the first run; each later run is larger than the pipe holds, so
    # the sender waits on its write while the worker encodes the next ones. Were those not
    # counted against queue_size, the worker would drain the queue into memory without bound
    # and nothing would ever be dropped.
    p, tracer = _setup([Slow(2.0, marker=str(tmp_path / "slow"))], hold_timeout=30.0, queue_size=3)
    try:
        blob = "x" * 300_000
        _big_run(tracer, blob)
        deadline = time.monotonic() + 60
        while not (tmp_path / "slow").exists():  # the child is scoring the first run
            assert time.monotonic() < deadline
            time.sleep(0.01)
        peak = 0
        for _ in range(30):
            _big_run(tracer, blob)
            queue = p.processor._queue
            peak = max(peak, queue.qsize() + queue.parked)
            time.sleep(0.01)  # the worker takes each run (and encodes it) before the next
        assert p.processor.stats["dropped_queue_full"] > 0
        assert peak <= 3 + 1  # the bound, overshot by at most the one run being submitted
        assert p.processor.force_flush(60_000)
        assert len(_agents(p)) == 31
        assert max(id_counts(p.exported()).values()) == 1
        assert p.processor._queue.parked == 0
    finally:
        p.processor.shutdown()


def test_anchors_stand_in_for_the_spans_evaluation_spans_hang_from() -> None:
    # What _apply takes of a run span that is not held: its context, field for field, and its
    # resource; the last span of an id, as a lookup by id over the spans has it.
    state = TraceState([("k", "v")])
    r1, r2 = Resource({"a": "1"}), Resource({"a": "2"})
    spans = [
        ReadableSpan(name="a", context=SpanContext(7, 1, False, TraceFlags(1), state), resource=r1),
        ReadableSpan(name="b", context=SpanContext(7, 2, True, TraceFlags(0)), resource=r2),
        ReadableSpan(name="c", context=SpanContext(7, 3, False, TraceFlags(1), state), resource=r1),
        ReadableSpan(name="d", context=SpanContext(7, 2, False, TraceFlags(1), state), resource=r1),
        ReadableSpan(name="no context", context=None),
    ]
    anchors = _Anchors(spans)
    by_id = {s.context.span_id: s for s in spans if s.context is not None}
    for span_id, span in by_id.items():
        stand_in = anchors.span(span_id)
        assert stand_in is not None
        assert stand_in.context == span.context and stand_in.context.is_valid == span.context.is_valid
        assert stand_in.context.trace_state is span.context.trace_state
        assert stand_in.resource is span.resource
    assert anchors.span(4) is None and anchors.span(None) is None


# --- scoring="thread": a long queue is packed by the worker ---------------------------------------


class _Steady(Slow):
    """Every run takes ``seconds``; the marker is created as the first starts."""

    def _score(self, trajectory: Any) -> Any:
        Path(str(self.marker)).touch()
        time.sleep(self.seconds)
        return super()._score(trajectory)


def _thread_setup(slow: Slow, **settings: Any) -> tuple[Pipeline, Any]:
    # (evaluation spans on: one per score counts the scores given)
    p = Pipeline([slow, "tool_call_validation"], scoring="thread", hold_timeout=30.0, queue_size=500,
                 evaluation_spans=True, **settings)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    return p, provider.get_tracer("app")


def _packed_backlog(p: Pipeline, tracer: Any, runs: int, marker: Path) -> list[Any]:
    # The first run keeps the worker busy (its slow scorer has started: the marker); the rest queue
    # up behind it, past _PACK_AT, and are packed when the worker takes the next one. (Runs that
    # complete while the worker gathers, before it scores, are one batch, not a backlog.)
    weather_run(tracer)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for _ in range(runs - 1):
        weather_run(tracer)
    while not p.processor._backlog:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return [item for item in list(p.processor._backlog) if item is not None]


def test_a_long_queue_waits_packed_and_is_scored_as_it_would_be(tmp_path: Path) -> None:
    p, tracer = _thread_setup(Slow(1.0, marker=str(tmp_path / "slow")))
    try:
        waiting = _packed_backlog(p, tracer, 100, tmp_path / "slow")
        assert waiting and all(item.packed is not None and item.spans == () for item in waiting)
        assert p.processor.force_flush(60_000)
        agents = _agents(p)
        assert len(agents) == 100 and max(id_counts(p.exported()).values()) == 1
        scores = {k: v for k, v in agents[0].attributes.items() if k.startswith("toolscore.tool_call_validation")}
        assert scores and all(
            {k: v for k, v in a.attributes.items() if k.startswith("toolscore.tool_call_validation")} == scores
            for a in agents)
        evaluations = [s for s in p.exported() if s.name.startswith("evaluation ")]
        assert len(evaluations) == 200  # two scorers, every run
        assert p.processor._queue.parked == 0
    finally:
        p.processor.shutdown()


def test_shutdown_drops_a_packed_backlog_and_forwards_every_span_once(tmp_path: Path) -> None:
    p, tracer = _thread_setup(_Steady(0.1, marker=str(tmp_path / "slow")), shutdown_timeout=0.2)
    _packed_backlog(p, tracer, 100, tmp_path / "slow")
    p.processor.shutdown()
    agents = _agents(p)
    assert len(agents) == 100 and max(id_counts(p.exported()).values()) == 1
    assert p.processor.stats["dropped_shutdown"] >= 90  # the packed runs, and any still queued
    # each run counted once; the one being scored as shutdown gave up, when its scorer returns
    deadline = time.monotonic() + 10
    while sum(n for (name, _), n in _outcomes(p).items() if name == "slow") < 100:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert sum(n for (name, _), n in _outcomes(p).items() if name == "slow") == 100
