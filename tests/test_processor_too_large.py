"""A run larger than ``max_spans_per_trace`` (issue 30): never scored as whole from a fragment;
skipped, counted once per scorer as ``too_large`` and evicted once, every span forwarded once;
in-app (spans start and end live) and as ``serve`` hands spans over (quiet, ``on_end_many``).
docs/reliability.md, "Runs larger than the span bound"."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from otel_toolscore.runtime.replay import replay
from tests.support.pipeline import Pipeline, id_counts

TRACE = 0x5EED
CHILDREN = 50_000  # with the agent span: 50,001 spans, ten times the default bound
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(
    [{"role": "assistant", "parts": [{"type": "tool_call", "id": "c", "name": "f", "arguments": {}}]}])}
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "f", "gen_ai.tool.call.arguments": "{}"}


def _huge_run(trace: int = TRACE, children: int = CHILDREN) -> list[ReadableSpan]:
    """One agent span (id 1) with ``children`` chat and tool calls under it, in time order
    (sampled: the SDK's exporting processor drops the others). One resource for all: a span
    built without one detects its own (~0.3 ms each)."""
    resource = Resource({"service.name": "big"})
    sampled = TraceFlags(TraceFlags.SAMPLED)
    parent = SpanContext(trace, 1, False, sampled)
    kids = [ReadableSpan(name="chat" if i % 2 else "execute_tool f", context=SpanContext(trace, 2 + i, False, sampled),
                         parent=parent, attributes=CHAT if i % 2 else TOOL, start_time=10 + 2 * i,
                         end_time=11 + 2 * i, resource=resource) for i in range(children)]
    agent = ReadableSpan(name="invoke_agent big", context=parent, parent=None,
                         attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "big"},
                         start_time=1, end_time=10 + 2 * children + 5, resource=resource)
    return [*kids, agent]


def _outcomes(p: Pipeline, metric: str, key: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for pt in p.metric_points(metric):
        out[pt.attributes[key]] += pt.value
    return out


def _check(p: Pipeline, spans: list[ReadableSpan]) -> None:
    assert p.processor.force_flush(30_000)
    out = p.exported()
    app = [s for s in out if s.instrumentation_scope is None]
    # every span once, none scored, no evaluation span
    assert id_counts(app) == id_counts(spans)
    assert len(app) == len(out) == CHILDREN + 1
    assert not any(k.startswith("toolscore.") for s in out for k in (s.attributes or {}))
    # skipped once per scorer, not dropped 9 times and scored once
    names = set(p.processor._engine.scorer_names)
    per_scorer = Counter()
    for pt in p.metric_points("toolscore.evaluations"):
        per_scorer[(pt.attributes["gen_ai.evaluation.name"], pt.attributes["outcome"])] += pt.value
    assert per_scorer == {(name, "too_large"): 1 for name in names}
    assert _outcomes(p, "toolscore.traces.evicted", "reason") == {"max_spans_per_trace": 1}
    assert p.processor.stats["evicted_max_spans_per_trace"] == 1
    assert p.processor.stats["runs_too_large"] == 1


def test_a_50001_span_run_in_app_is_skipped_too_large_and_counted_once() -> None:
    spans = _huge_run()
    p = Pipeline(completion_grace=0.05, hold_timeout=5)
    try:
        replay(spans, p.processor)  # on_start and on_end, as the SDK calls them in the app
        _check(p, spans)
    finally:
        p.processor.shutdown()


@pytest.mark.parametrize("batch", [1, 512])
def test_a_50001_span_run_through_serve_s_hand_over_is_skipped_too_large_and_counted_once(batch: int) -> None:
    """``serve`` hands each request's spans to the same processor in quiet mode (``on_end_many``);
    ``batch=1`` goes span by span through ``on_end``."""
    spans = _huge_run()
    p = Pipeline(completion="quiet", decision_wait=0.05, hold_timeout=5)
    try:
        for i in range(0, len(spans), batch):
            if batch == 1:
                p.processor.on_end(spans[i])
            else:
                p.processor.on_end_many(spans[i:i + batch])
        _check(p, spans)
    finally:
        p.processor.shutdown()


def test_the_next_run_after_a_too_large_one_is_scored() -> None:
    """The mark is per trace: a normal run of another trace is scored as before."""
    p = Pipeline(completion_grace=0.05, hold_timeout=5, max_spans_per_trace=100)
    try:
        replay(_huge_run(trace=1, children=300), p.processor)
        replay(_huge_run(trace=2, children=10), p.processor)
        assert p.processor.force_flush(10_000)
        agents = {s.context.trace_id: s for s in p.exported() if s.name == "invoke_agent big"}
        assert "toolscore.scored" not in agents[1].attributes
        assert agents[2].attributes["toolscore.scored"] is True
        assert p.processor.stats["runs_too_large"] == 1
    finally:
        p.processor.shutdown()


def test_a_50001_span_run_sent_to_serve_is_skipped_too_large_and_counted_once() -> None:
    """The real sidecar: the run over OTLP/HTTP (protobuf, 2,000 spans a request) on loopback."""
    import urllib.request

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_toolscore.runtime.serve import ToolScoreServer
    from tests.support.spans import pb_body

    spans = _huge_run()
    exported = InMemorySpanExporter()
    reader = InMemoryMetricReader()
    server = ToolScoreServer(span_exporter=exported, grpc_port=None, http_port=0, decision_wait=0.2,
                             events=False, meter_provider=MeterProvider(metric_readers=[reader]))
    addresses = server.start()
    try:
        for i in range(0, len(spans), 2_000):
            request = urllib.request.Request(f"{addresses.http_endpoint}/v1/traces", data=pb_body(spans[i:i + 2_000]),
                                             headers={"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(request, timeout=60) as answer:
                assert answer.status == 200
        processor = server.processor
        assert processor is not None
        names = set(processor._engine.scorer_names)
    finally:
        assert server.stop(60)
    out = list(exported.get_finished_spans())
    assert id_counts(out) == id_counts(spans)  # every span once, and nothing else (no evaluation span)
    assert not any(k.startswith("toolscore.") for s in out for k in (s.attributes or {}))
    data = reader.get_metrics_data()
    outcomes: Counter[tuple[str, str]] = Counter()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "toolscore.evaluations":
                    for pt in m.data.data_points:
                        outcomes[(pt.attributes["gen_ai.evaluation.name"], pt.attributes["outcome"])] += pt.value
    assert outcomes == {(name, "too_large"): 1 for name in names}
