"""The processor's parts (``runtime/_processor/``), each on its own, on the invariant it keeps
(docs/design.md, "The processor's parts"): forwarding exactly once, bounded buffers, no run
scored twice, no hold past its deadline (on an injected clock), every run submitted done once."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags

from otel_toolscore.config import load_settings
from otel_toolscore.conventions import classify
from otel_toolscore.outputs.otel import Emitter
from otel_toolscore.runtime._processor.buffers import TOO_LARGE_KEPT, Buffers, TraceBuffer
from otel_toolscore.runtime._processor.forward import Forwarding, Held, Phase
from otel_toolscore.runtime._processor.ready import Ready
from otel_toolscore.runtime._processor.scoring import Scoring
from otel_toolscore.runtime._processor.tally import Tally
from otel_toolscore.runtime._processor.timer import Timer
from otel_toolscore.runtime.engine import Engine
from tests.support.spans import weather_run

SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def _span(trace: int, sid: int, parent: int | None = None, name: str = "s", attrs: Any = None) -> ReadableSpan:
    return ReadableSpan(name=name, context=SpanContext(trace, sid, False, SAMPLED),
                        parent=SpanContext(trace, parent, False, SAMPLED) if parent is not None else None,
                        attributes=attrs or {}, start_time=1, end_time=2)


class _Memory:
    """The real SDK's exporting processor over an in-memory exporter."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.processor = SimpleSpanProcessor(self.exporter)

    def ids(self) -> Counter[int]:
        return Counter(s.context.span_id for s in self.exporter.get_finished_spans())


# --- forward: every span reaches the downstream exactly once ---------------------------------------


def test_a_held_span_is_forwarded_once_whoever_releases_it() -> None:
    memory = _Memory()
    fwd = Forwarding(memory.processor, Phase(), own_thread=lambda: False)
    helds = [Held(_span(1, i), i, 0.0) for i in range(1, 201)]
    start = threading.Barrier(8)

    def release_all() -> None:
        start.wait()
        fwd.release_all(helds)

    threads = [threading.Thread(target=release_all) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert memory.ids() == Counter(range(1, 201))  # each once, none lost
    assert all(h.released and h.span is None for h in helds)  # let go once forwarded
    assert not fwd.release(helds[0])


def test_a_scored_release_carries_the_attributes_and_keep_keeps_the_span() -> None:
    memory = _Memory()
    fwd = Forwarding(memory.processor, Phase(), own_thread=lambda: False)
    held = Held(_span(1, 7, attrs={"a": 1}), 7, 0.0)
    assert fwd.release(held, {"toolscore.scored": True}, keep=True)
    assert held.span is not None  # its run may still be scored: apply reads it then
    (out,) = memory.exporter.get_finished_spans()
    assert dict(out.attributes) == {"a": 1, "toolscore.scored": True}


class _Raising(SpanProcessor):
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def on_end(self, span: ReadableSpan) -> None:
        raise self.exc


def test_a_failing_downstream_never_raises_into_a_caller_but_the_app_keeps_its_interrupts() -> None:
    own = [False]
    fwd = Forwarding(_Raising(RuntimeError("exporter bug")), Phase(), own_thread=lambda: own[0])
    fwd.forward(_span(1, 1))  # logged
    fwd = Forwarding(_Raising(KeyboardInterrupt()), Phase(), own_thread=lambda: own[0])
    with pytest.raises(KeyboardInterrupt):  # the app's thread: its own interrupt
        fwd.forward(_span(1, 1))
    own[0] = True
    fwd.forward(_span(1, 1))  # the worker or the timer: logged, the thread lives on


# --- buffers: bounded memory, no run scored twice ----------------------------------------------------


def _buffers(**settings: Any) -> tuple[Buffers, Timer, Counter[str]]:
    s = load_settings(**settings)
    stats: Counter[str] = Counter()
    timer = Timer(s, False, threading.Lock(), Phase())  # not started: only its lists are used
    return Buffers(s, False, timer, stats), timer, stats


def test_at_most_max_pending_traces_are_buffered_the_oldest_evicted() -> None:
    buffers, _, _ = _buffers(max_pending_traces=3)
    evicted = [buffers.new_buffer(trace, 0.0)[1] for trace in range(1, 6)]
    assert list(buffers.pending) == [3, 4, 5]
    assert evicted[:3] == [None, None, None] and all(isinstance(e, TraceBuffer) for e in evicted[3:])


def test_a_trace_is_evicted_at_max_spans_and_marked_and_the_marks_are_bounded() -> None:
    buffers, _, _ = _buffers(max_spans_per_trace=3, max_pending_traces=10)  # marks kept: 1024
    buf, _ = buffers.new_buffer(1, 0.0)
    outcomes = [buffers.add_live(1, sid, buf, _span(1, sid, parent=99), None, None, 0.0)[1] for sid in range(1, 5)]
    assert outcomes[:3] == [None, None, None] and outcomes[3] is buf  # the fourth span evicts it
    assert 1 not in buffers.pending and 1 in buffers.too_large
    for trace in range(2, TOO_LARGE_KEPT + 100):
        buffers.new_buffer(trace, 0.0)
        buffers.too_big(trace)
    assert len(buffers.too_large) == TOO_LARGE_KEPT  # the oldest marks go first
    assert 1 not in buffers.too_large and TOO_LARGE_KEPT + 99 in buffers.too_large


def test_a_run_leaves_its_buffer_once_and_its_late_span_only_passes() -> None:
    buffers, timer, stats = _buffers()
    agent = {"gen_ai.operation.name": "invoke_agent"}
    buf, _ = buffers.new_buffer(1, 0.0)
    buf.open_ids[3] = _span(1, 3, parent=2)  # a child of the run, still open
    buffers.add_live(1, 2, buf, _span(1, 2, name="invoke_agent a", attrs=agent), "agent",
                     Held(_span(1, 2), 2, 10.0), 0.0)
    assert list(buf.runs) == [2]  # ended, waiting for its child (or its grace)
    ready = buffers.complete_run(1, buf, 2)  # the grace ran out
    assert [s.context.span_id for s in ready.spans] == [2] and len(ready.held) == 1
    held, evicted, again = buffers.add_live(1, 3, buf, _span(1, 3, parent=2), None, None, 0.0)
    assert not held and evicted is None and not again  # not a second run, not buffered
    assert stats["late_spans"] == 1 and buf.spans == []


# --- timer: no hold past its deadline (an injected clock) ----------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def read(self) -> float:
        return self.now

    def sleep(self, timeout: float) -> None:
        self.sleeps.append(timeout)


def test_a_hold_is_released_at_its_deadline_and_not_before() -> None:
    clock = _Clock()
    settings = load_settings(hold_timeout=0.5, trace_ttl=60)
    timer = Timer(settings, False, threading.Lock(), Phase(), clock=clock.read)
    timer.wait = clock.sleep
    buffers = Buffers(settings, False, timer, Counter())
    timer.buffers = buffers
    released: list[Held] = []
    timer.release_expired = released.append
    buf, _ = buffers.new_buffer(1, clock.now)
    held = Held(_span(1, 1), 1, clock.now + 0.5)
    with timer.wakeup:
        timer.hold(buf, held)
    assert timer.tick() and released == []
    assert clock.sleeps == [pytest.approx(0.5 - timer.slack)]  # it asked to sleep until the deadline
    clock.now += 0.5 - timer.slack - 0.001
    timer.tick()
    assert released == []
    clock.now += 0.001
    timer.tick()
    assert released == [held]  # due: released by the timer, whatever the worker does


def test_a_trace_older_than_its_ttl_is_evicted_by_the_timer() -> None:
    clock = _Clock()
    settings = load_settings(trace_ttl=30)
    timer = Timer(settings, False, threading.Lock(), Phase(), clock=clock.read)
    timer.wait = clock.sleep
    timer.buffers = buffers = Buffers(settings, False, timer, Counter())
    evicted: list[tuple[TraceBuffer, str]] = []
    timer.evict = lambda buf, reason: evicted.append((buf, reason))
    buffers.new_buffer(1, clock.now)
    clock.now += 29.9
    timer.tick()
    assert evicted == []
    clock.now += 0.1
    timer.tick()
    assert [reason for _, reason in evicted] == ["trace_ttl"] and not buffers.pending


# --- scoring and tally: every run submitted done once; what is not scored counted once ----------------


def _runs(n: int) -> list[Ready]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for _ in range(n):
        weather_run(provider.get_tracer("t"))
    by_trace: dict[int, list[ReadableSpan]] = {}
    for s in memory.get_finished_spans():
        by_trace.setdefault(s.context.trace_id, []).append(s)
    return [Ready(tid, spans, [Held(s, s.context.span_id, float("inf")) for s in spans if classify(s) == "agent"])
            for tid, spans in by_trace.items()]


def test_every_run_submitted_is_done_once_scored_or_dropped_and_counted() -> None:
    settings = load_settings()
    reader = InMemoryMetricReader()
    emitter = Emitter(settings, meter_provider=MeterProvider(metric_readers=[reader]))
    engine = Engine(settings, None, emitter)
    memory = _Memory()
    stats: Counter[str] = Counter()
    phase = Phase()
    fwd = Forwarding(memory.processor, phase, own_thread=lambda: False)
    tally = Tally(stats)
    scoring = Scoring(engine, emitter, None, fwd, tally, phase, stats, queue_size=2)
    runs = _runs(3)
    for run in runs:  # the worker is not started: two wait in the queue, the third finds it full
        scoring.submit(run)
    assert scoring.outstanding == 2 and stats["dropped_queue_full"] == 1
    scoring.start()
    assert scoring.wait_idle(scoring.clock() + 30)
    assert scoring.outstanding == 0
    agents = [s for s in memory.exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert sorted(s.attributes.get("toolscore.scored", False) for s in agents) == [False, True, True]
    emitter.flush_counts()
    counts: Counter[str] = Counter()
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "toolscore.evaluations":
                    for pt in m.data.data_points:
                        counts[pt.attributes["outcome"]] += pt.value
    names = len(engine.scorer_names)
    # each run once per scorer: the two taken scored (or skipped: no expectation), the third dropped
    assert counts["dropped"] == names and sum(counts.values()) == 3 * names
    scoring.queue.put(None)
    scoring.worker.join(10)


def test_wait_idle_asks_for_no_more_than_its_deadline() -> None:
    settings = load_settings()
    emitter = Emitter(settings)
    stats: Counter[str] = Counter()
    phase = Phase()
    scoring = Scoring(Engine(settings, None, emitter), emitter, None,
                      Forwarding(_Memory().processor, phase, own_thread=lambda: False), Tally(stats), phase, stats,
                      queue_size=4)
    clock = _Clock()
    waits: list[float] = []

    def wait(idle: threading.Condition, timeout: float) -> None:
        waits.append(timeout)
        clock.now += timeout

    scoring.clock, scoring.wait = clock.read, wait
    scoring.submit(_runs(1)[0])  # never taken: the worker is not started
    assert scoring.wait_idle(clock.now + 0.3) is False
    assert sum(waits) == pytest.approx(0.3) and max(waits) <= 0.05


def test_the_tally_counts_each_eviction_once_and_a_too_large_run_as_too_large() -> None:
    stats: Counter[str] = Counter()
    tally = Tally(stats)
    tally.evicted("max_spans_per_trace", run_lost=True)
    tally.evicted("max_pending_traces", run_lost=True)
    tally.evicted("trace_ttl", run_lost=False)
    settings = load_settings()
    reader = InMemoryMetricReader()
    emitter = Emitter(settings, meter_provider=MeterProvider(metric_readers=[reader]))
    engine = Engine(settings, None, emitter)
    tally.flush(engine, emitter)
    tally.flush(engine, emitter)  # nothing twice
    emitter.flush_counts()
    seen: Counter[tuple[str, str]] = Counter()
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for pt in m.data.data_points:
                    key = pt.attributes.get("outcome") or pt.attributes.get("reason")
                    seen[(m.name, key)] += pt.value
    names = len(engine.scorer_names)
    assert seen == {("toolscore.evaluations", "too_large"): names, ("toolscore.evaluations", "dropped"): names,
                    ("toolscore.traces.evicted", "max_spans_per_trace"): 1,
                    ("toolscore.traces.evicted", "max_pending_traces"): 1, ("toolscore.traces.evicted", "trace_ttl"): 1}
    assert stats == {"evicted_max_spans_per_trace": 1, "evicted_max_pending_traces": 1, "evicted_trace_ttl": 1,
                     "runs_too_large": 1}
