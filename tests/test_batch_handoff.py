"""``on_end_many`` (how ``serve`` hands a request's spans to the processor) against ``on_end``
span by span: the same spans forwarded at once and in the same order, the same spans held, the
same evictions and counts, and after the flush the same exported spans, scores included."""

from __future__ import annotations

import threading
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanContext

from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
from tests.support.pipeline import Pipeline, id_counts
from tests.support.spans import weather_run

_SCOPE = "otel_toolscore"
_FLAT = [
    {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
    {"gen_ai.operation.name": "chat"},
    {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"},
    {"openinference.span.kind": "AGENT"},
    {},
]


def _weather_spans() -> list[ReadableSpan]:
    """One real agent run (scored with non-trivial attributes), as ended spans."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    sink = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(sink))
    weather_run(provider.get_tracer("app"), expected="get_weather")
    provider.shutdown()
    return list(sink.get_finished_spans())


_WEATHER = _weather_spans()


class _Recording(SpanProcessor):
    def __init__(self) -> None:
        self.seen: list[ReadableSpan] = []
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.seen.append(span)


def _respan(span: ReadableSpan, trace_id: int, id_base: int) -> ReadableSpan:
    parent = span.parent
    return ReadableSpan(
        name=span.name, context=SpanContext(trace_id, id_base + span.context.span_id % 1000, False),
        parent=SpanContext(trace_id, id_base + parent.span_id % 1000, False) if parent else None,
        attributes=dict(span.attributes or {}), start_time=span.start_time, end_time=span.end_time)


@st.composite
def requests(draw: Any) -> list[list[ReadableSpan]]:
    """Traces (a weather run, or a small random forest) interleaved, cut into requests."""
    spans: list[ReadableSpan] = []
    for trace in range(draw(st.integers(1, 5))):
        # high bits vary so that a sample rate below 1 keeps some traces and not others
        trace_id = (draw(st.integers(0, 2**63)) << 64) | draw(st.integers(1, 2**64 - 1))
        if draw(st.booleans()):
            spans += [_respan(s, trace_id, 10_000 * (trace + 1)) for s in _WEATHER]
            continue
        ids: list[int] = []
        for i in range(draw(st.integers(1, 8))):
            span_id = 10_000 * (trace + 1) + i + 1
            parent = draw(st.sampled_from([None, *ids])) if ids else None
            spans.append(ReadableSpan(
                name=f"s{span_id}", context=SpanContext(trace_id, span_id, False),
                parent=SpanContext(trace_id, parent, draw(st.booleans())) if parent else None,
                attributes=draw(st.sampled_from(_FLAT)), start_time=1, end_time=2))
            ids.append(span_id)
    order = draw(st.permutations(range(len(spans))))
    spans = [spans[i] for i in order]
    cuts = sorted(draw(st.lists(st.integers(0, len(spans)), max_size=4)))
    out, start = [], 0
    for cut in [*cuts, len(spans)]:
        out.append(spans[start:cut])
        start = cut
    return out


def _state(proc: ToolScoreSpanProcessor) -> dict[int, tuple[Any, ...]]:
    return {tid: ([s.context.span_id for s in b.spans], [h.span_id for h in b.held], b.genai, b.root_ended)
            for tid, b in proc._pending.items()}


def _exported(rec: _Recording) -> tuple[list[Any], list[Any]]:
    app = [(s.context.trace_id, s.context.span_id, sorted(s.attributes.items()))
           for s in rec.seen if s.instrumentation_scope is None or s.instrumentation_scope.name != _SCOPE]
    evaluations = sorted((s.name, s.parent.span_id if s.parent else None, sorted(s.attributes.items()))
                         for s in rec.seen if s.instrumentation_scope is not None
                         and s.instrumentation_scope.name == _SCOPE)
    return app, evaluations


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=requests(), max_spans=st.integers(2, 12), max_pending=st.integers(1, 6),
       rate=st.sampled_from([1.0, 0.5, 0.0]), shutdown_before_last=st.booleans())
def test_on_end_many_is_on_end_span_by_span(batches: list[list[ReadableSpan]], max_spans: int, max_pending: int,
                                            rate: float, shutdown_before_last: bool) -> None:
    outcomes = []
    for batched in (False, True):
        rec = _Recording()
        # Nothing completes or expires while the spans are handed over: the timer stays out of it.
        p = Pipeline(downstream=rec, max_spans_per_trace=max_spans, max_pending_traces=max_pending,
                     default_sample_rate=rate, hold_timeout=60, decision_wait=60)
        quiet = ToolScoreSpanProcessor(rec, completion="quiet", settings=p.processor.settings,
                                       meter_provider=p.meter_provider, logger_provider=p.logger_provider)
        p.processor.shutdown()
        rec.seen.clear()
        for i, batch in enumerate(batches):
            if shutdown_before_last and i == len(batches) - 1:
                quiet.shutdown()
            if batched:
                quiet.on_end_many(batch)
            else:
                for span in batch:
                    quiet.on_end(span)
        # (evaluation spans, which shutdown may emit here, have random ids: compared below)
        at_once = [(s.context.trace_id, s.context.span_id) for s in rec.seen if s.instrumentation_scope is None]
        state = _state(quiet)
        stats = dict(quiet.stats)
        assert shutdown_before_last or quiet.force_flush(10_000)
        quiet.shutdown()
        outcomes.append((at_once, state, stats, _exported(rec)))
        every = [s for batch in batches for s in batch]
        assert id_counts(s for s in rec.seen if s.instrumentation_scope is None) == id_counts(every)
    assert outcomes[0] == outcomes[1]


def test_a_trace_evicted_at_max_pending_traces_releases_its_held_span_at_once() -> None:
    """Quiet mode: a new trace over max_pending_traces evicts the oldest, whose held agent span
    leaves then (not at hold_timeout) and is counted, by on_end and on_end_many alike."""
    for batched in (False, True):
        rec = _Recording()
        p = Pipeline(downstream=rec)
        p.processor.shutdown()
        quiet = ToolScoreSpanProcessor(rec, completion="quiet", meter_provider=p.meter_provider,
                                       logger_provider=p.logger_provider, max_pending_traces=1, hold_timeout=60,
                                       decision_wait=60)
        first = _respan(_WEATHER[-1], 1, 100)  # the agent span (ends last): held
        second = _respan(_WEATHER[-1], 2, 200)
        assert second.parent is None and first.parent is None
        if batched:
            quiet.on_end_many([first, second])
        else:
            quiet.on_end(first)
            quiet.on_end(second)
        assert [s.context.trace_id for s in rec.seen] == [1]
        assert quiet.stats["evicted_max_pending_traces"] == 1
        quiet.shutdown()
