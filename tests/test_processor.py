"""ToolScoreSpanProcessor with the real SDK: every span out once, scores on the agent span,
events, evaluation spans and metrics; faults, bounds, shutdown and fork."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import SpanContext

from otel_toolscore import read_otlp_json
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
from otel_toolscore.runtime.replay import replay
from otel_toolscore.scorers.base import Score, Scorer
from tests.support import paths
from tests.support.clock import SteppedClock
from tests.support.pipeline import Pipeline, id_counts
from tests.support.spans import weather_run
from tests.support.timing import wait_for

FIXTURES = paths.traces(paths.FIXTURES) + paths.traces(paths.CAPTURES)


@pytest.mark.parametrize("path", FIXTURES, ids=paths.trace_id)
def test_every_fixture_replayed_through_the_processor(path: Path) -> None:
    spans = read_otlp_json(path)
    p = Pipeline(evaluation_spans=True)  # (the default makes none for scores the agent span carries)
    replay(spans, p.processor)
    assert p.processor.force_flush(10_000)
    out = p.exported()
    app_out = [s for s in out if s.instrumentation_scope is None or s.instrumentation_scope.name != "otel_toolscore"]
    evaluations = [s for s in out if s not in app_out]
    # every span exactly once
    assert id_counts(app_out) == id_counts(spans)
    # the run span carries the scores
    scored = [s for s in app_out if any(k.startswith("toolscore.") and k.endswith(".label") for k in s.attributes)]
    assert len(scored) >= 1, "no span carries toolscore.* attributes"
    run = scored[0]
    assert "toolscore.tool_call_validation.label" in run.attributes
    assert "toolscore.tool_result_verification.label" in run.attributes
    assert run.attributes["toolscore.tool_call_accuracy.label"] == "skipped"  # no expectation: skipped, never 0
    # one evaluation span per run, child of and linked to the run span
    assert evaluations
    ev = evaluations[0]
    assert ev.parent.span_id == run.context.span_id and ev.context.trace_id == run.context.trace_id
    assert any(link.context.span_id == run.context.span_id for link in ev.links)
    assert ev.attributes["openinference.span.kind"] == "EVALUATOR"
    # events parented to the run span
    records = [r.log_record for r in p.logs.get_finished_logs()]
    run_events = [r for r in records if r.span_id == run.context.span_id]
    names = {r.attributes["gen_ai.evaluation.name"] for r in run_events}
    assert {"tool_call_validation", "tool_result_verification"} <= names
    # metrics: a histogram point per scored scorer, with low-cardinality attributes only; none for
    # a skipped one (tool_call_validation of a stack that records no tool schema: docs/scorers.md, "No schema is no penalty")
    points = p.metric_points("gen_ai.evaluation.score")
    validated = run.attributes.get("toolscore.tool_call_validation.score") is not None
    assert validated or run.attributes["toolscore.tool_call_validation.label"] == "skipped"
    assert ("tool_call_validation" in {pt.attributes["gen_ai.evaluation.name"] for pt in points}) is validated
    for pt in points:
        assert set(pt.attributes) <= {"gen_ai.evaluation.name", "gen_ai.evaluation.score.label", "gen_ai.agent.name"}
    p.processor.shutdown()


def test_live_sdk_scores_ride_on_the_agent_span() -> None:
    p = Pipeline()
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    tracer = provider.get_tracer("app")
    weather_run(tracer, expected="get_weather")
    assert p.processor.force_flush(5_000)
    agent = next(s for s in p.exported() if s.name == "invoke_agent weather-bot")
    assert agent.attributes["toolscore.tool_call_accuracy.score"] == 1.0
    assert agent.attributes["toolscore.tool_call_accuracy.label"] == "pass"
    assert agent.attributes["toolscore.tool_call_validation.score"] == 1.0
    assert agent.attributes["toolscore.tool_result_verification.label"] == "pass"
    # three app spans + the agent span; the scores ride on it, so no evaluation span repeats them
    assert len(p.exported()) == 4
    provider.shutdown()


def test_rules_file_gives_expectations(tmp_path: Path) -> None:
    cfg = tmp_path / "toolscore.yaml"
    cfg.write_text("rules:\n  - agent: weather-.*\n    expected_tool: search_web\n")
    p = Pipeline(config_file=str(cfg))
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    weather_run(provider.get_tracer("app"))
    assert p.processor.force_flush(5_000)
    agent = next(s for s in p.exported() if s.name.startswith("invoke_agent"))
    assert agent.attributes["toolscore.tool_call_accuracy.score"] == 0.0
    provider.shutdown()


class Raising(Scorer):
    name = "raising"
    kind = "code"

    def _score(self, trajectory: Any) -> Score:
        raise RuntimeError("scorer bug")


class Hanging(Scorer):
    name = "hanging"
    kind = "code"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.release = threading.Event()

    def _score(self, trajectory: Any) -> Score:
        self.release.wait(self.seconds)
        return Score(name=self.name, value=1.0, label="pass", explanation="slow")


def test_a_raising_scorer_is_an_error_score_and_nothing_is_lost() -> None:
    p = Pipeline(scorers=[Raising()])
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    weather_run(provider.get_tracer("app"))
    assert p.processor.force_flush(5_000)
    agent = next(s for s in p.exported() if s.name.startswith("invoke_agent"))
    assert agent.attributes["toolscore.raising.label"] == "error"
    assert "toolscore.raising.score" not in agent.attributes  # a failure is not a 0
    provider.shutdown()


def test_a_hanging_scorer_cannot_hold_the_span_past_hold_timeout() -> None:
    hanging = Hanging(seconds=30)
    p = Pipeline(scorers=[hanging], hold_timeout=0.3, completion_grace=0.05)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    weather_run(provider.get_tracer("app"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(s.name.startswith("invoke_agent") for s in p.exported()):
        time.sleep(0.02)
    agent = next(s for s in p.exported() if s.name.startswith("invoke_agent"))
    assert not any(k.startswith("toolscore.") for k in agent.attributes)  # released unscored
    assert p.processor.stats["holds_expired"] == 1
    hanging.release.set()
    assert p.processor.force_flush(5_000)
    assert Counter(s.name for s in p.exported())["invoke_agent weather-bot"] == 1  # still exactly once
    provider.shutdown()


def test_late_children_wait_for_completion_grace() -> None:
    p = Pipeline(completion_grace=0.2, hold_timeout=5)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("request"):
        weather_run(tracer)
        # the request root stays open: the run is scored after the grace period, not at root end
        assert wait_for(lambda: any(s.name.startswith("invoke_agent") for s in p.exported()))
        assert any(s.name.startswith("invoke_agent") and "toolscore.tool_call_validation.label" in s.attributes
                   for s in p.exported())
    assert p.processor.force_flush(5_000)
    assert Counter(s.name for s in p.exported())["request"] == 1
    provider.shutdown()


def test_max_pending_traces_evicts_oldest_and_forwards_its_spans() -> None:
    p = Pipeline(max_pending_traces=2, completion_grace=30, hold_timeout=60)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    tracer = provider.get_tracer("app")
    from opentelemetry.trace import set_span_in_context

    roots = []
    children = []
    # three traces, each with an ended (held) agent span whose run waits for a child still open
    for i in range(3):
        root = tracer.start_span(f"root{i}")
        roots.append(root)
        with tracer.start_as_current_span("invoke_agent a", context=set_span_in_context(root),
                                          attributes={"gen_ai.operation.name": "invoke_agent"}):
            children.append(tracer.start_span("background"))
    assert p.processor.stats["evicted_max_pending_traces"] == 1
    assert sum(s.name == "invoke_agent a" for s in p.exported()) == 1  # the evicted trace's agent span left
    for span in children + roots:
        span.end()
    assert p.processor.force_flush(5_000)
    assert Counter(s.name for s in p.exported())["invoke_agent a"] == 3
    provider.shutdown()


def test_full_queue_drops_the_scoring_not_the_spans() -> None:
    hanging = Hanging(seconds=30)
    p = Pipeline(scorers=[hanging], queue_size=1, hold_timeout=60, completion_grace=0.01)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    tracer = provider.get_tracer("app")
    for _ in range(4):
        weather_run(tracer)
    time.sleep(0.2)
    assert p.processor.stats["dropped_queue_full"] >= 1
    hanging.release.set()
    assert p.processor.force_flush(10_000)
    counts = Counter(s.name for s in p.exported())
    assert counts["invoke_agent weather-bot"] == 4 and counts["execute_tool get_weather"] == 4
    provider.shutdown()


def test_drops_are_counted_off_the_app_thread_and_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full queue drops runs in the app's on_end; the metric adds (µs each) happen on the
    worker, and every dropped run is counted once by the time force_flush returns."""
    from otel_toolscore.outputs.otel import Emitter

    adders: list[str] = []
    original = Emitter.count_evaluation

    def spy(self: Emitter, name: str, outcome: str, n: int = 1) -> None:
        adders.append(threading.current_thread().name)
        original(self, name, outcome, n)

    monkeypatch.setattr(Emitter, "count_evaluation", spy)
    hanging = Hanging(seconds=30)
    p = Pipeline(scorers=[hanging], queue_size=1, hold_timeout=60, completion_grace=0.01)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    tracer = provider.get_tracer("app")
    for _ in range(6):
        weather_run(tracer)
    dropped = p.processor.stats["dropped_queue_full"]
    assert dropped >= 3
    assert threading.current_thread().name not in adders  # nothing counted on the app thread
    hanging.release.set()
    assert p.processor.force_flush(10_000)
    points = {pt.attributes["outcome"]: pt.value for pt in p.metric_points("toolscore.evaluations")}
    assert points["dropped"] == dropped and points["dropped"] + points.get("scored", 0) == 6
    evicted = {pt.attributes["reason"]: pt.value for pt in p.metric_points("toolscore.traces.evicted")}
    assert evicted == {"queue_full": dropped}
    provider.shutdown()


def test_shutdown_mid_flight_forwards_everything_held() -> None:
    hanging = Hanging(seconds=30)
    p = Pipeline(scorers=[hanging], hold_timeout=60, completion_grace=60)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    tracer = provider.get_tracer("app")
    for _ in range(3):
        weather_run(tracer)
    with SteppedClock(p.processor) as clock:
        p.processor.shutdown()
    # bounded: it waited for the scorer shutdown_timeout and no longer, and returned while the
    # scorer still hangs
    assert clock.waited == pytest.approx(p.processor.settings.shutdown_timeout)
    assert not hanging.release.is_set()
    assert Counter(s.name for s in p.exported())["invoke_agent weather-bot"] == 3
    hanging.release.set()


class RaisingDownstream(SpanProcessor):
    def __init__(self) -> None:
        self.seen: list[ReadableSpan] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("exporter down")

    def _on_ending(self, span: Any) -> None:
        raise RuntimeError("exporter down")

    def on_end(self, span: ReadableSpan) -> None:
        self.seen.append(span)
        raise RuntimeError("exporter down")


def test_a_raising_downstream_does_not_kill_the_worker() -> None:
    down = RaisingDownstream()
    p = Pipeline(downstream=down, evaluation_spans=True)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    tracer = provider.get_tracer("app")
    for _ in range(2):
        weather_run(tracer)  # a downstream failure never reaches the app
    assert p.processor.force_flush(5_000) is True
    assert p.processor._worker.is_alive()
    agents = [s for s in down.seen if s.name.startswith("invoke_agent")]
    assert len(agents) == 2  # each exactly once, and still scored although every forward raised
    assert all("toolscore.tool_call_validation.label" in s.attributes for s in agents)
    assert sum(s.name.startswith("evaluation") for s in down.seen) == 2 * 3  # one per score of each run
    p.processor.shutdown()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_works_after_fork() -> None:
    p = Pipeline()
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    tracer = provider.get_tracer("app")
    weather_run(tracer)
    pid = os.fork()
    if pid == 0:  # child: a fresh worker must score its own runs
        code = 1
        try:
            p.spans.clear()
            weather_run(tracer)
            ok = p.processor.force_flush(5_000)
            agent = [s for s in p.spans.get_finished_spans() if s.name.startswith("invoke_agent")]
            code = 0 if ok and len(agent) == 1 and "toolscore.tool_call_validation.label" in agent[0].attributes else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert p.processor.force_flush(5_000)
    provider.shutdown()


def test_code_scorers_only_never_import_litellm() -> None:
    code = (
        "import sys, json\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "import otel_toolscore\n"
        "from otel_toolscore.runtime.processor import ToolScoreSpanProcessor\n"
        "p = ToolScoreSpanProcessor(SimpleSpanProcessor(InMemorySpanExporter()))\n"
        "tp = TracerProvider(); tp.add_span_processor(p)\n"
        "t = tp.get_tracer('x')\n"
        "with t.start_as_current_span('invoke_agent a', attributes={'gen_ai.operation.name': 'invoke_agent'}):\n"
        "    with t.start_as_current_span('chat', attributes={'gen_ai.operation.name': 'chat'}): pass\n"
        "p.force_flush(); tp.shutdown()\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('litellm', 'openai'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# --- property: random trees, interleavings, scorer faults, tiny queues, shutdown mid-flight -------


class Flaky(Scorer):
    kind = "code"

    def __init__(self, name: str, mode: str) -> None:
        self.name = name
        self.mode = mode

    def _score(self, trajectory: Any) -> Score:
        if self.mode == "raise":
            raise ValueError("flaky")
        if self.mode == "slow":
            time.sleep(0.002)
        return Score(name=self.name, value=1.0, label="pass", explanation="ok")


KINDS = [
    {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
    {"gen_ai.operation.name": "chat"},
    {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t"},
    {"openinference.span.kind": "AGENT"},
    {},
]


@st.composite
def span_forests(draw: Any) -> list[ReadableSpan]:
    spans = []
    next_id = 1
    for trace in range(draw(st.integers(1, 4))):
        trace_id = 0x1000 + trace
        n = draw(st.integers(1, 10))
        ids = []
        for _ in range(n):
            parent = draw(st.sampled_from([None, *ids])) if ids else None
            start = draw(st.integers(0, 100))
            end = start + draw(st.integers(0, 50))
            attrs = draw(st.sampled_from(KINDS))
            ctx = SpanContext(trace_id, next_id, False)
            spans.append(ReadableSpan(
                name=f"s{next_id}", context=ctx,
                parent=SpanContext(trace_id, parent, False) if parent else None,
                attributes=attrs, start_time=start, end_time=end,
            ))
            ids.append(next_id)
            next_id += 1
    return spans


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    forest=span_forests(),
    modes=st.lists(st.sampled_from(["ok", "raise", "slow"]), min_size=1, max_size=3),
    queue_size=st.integers(1, 4),
    max_pending=st.integers(1, 5),
    shutdown_early=st.booleans(),
    order_seed=st.randoms(use_true_random=False),
)
def test_no_span_lost_duplicated_or_held_too_long(forest: list[ReadableSpan], modes: list[str], queue_size: int,
                                                  max_pending: int, shutdown_early: bool, order_seed: Any) -> None:
    scorers = [Flaky(f"f{i}", m) for i, m in enumerate(modes)]
    hold_timeout = 0.5
    timed = TimedDownstream()
    p = Pipeline(scorers=scorers, queue_size=queue_size, max_pending_traces=max_pending, downstream=timed,
                 hold_timeout=hold_timeout, completion_grace=0.01, max_spans_per_trace=6)
    # interleave traces: replay each trace's events, shuffled across traces but ordered within
    per_trace: dict[int, list[ReadableSpan]] = {}
    for s in forest:
        per_trace.setdefault(s.context.trace_id, []).append(s)
    class Recorder:
        def __init__(self) -> None:
            self.events: list[tuple[str, ReadableSpan]] = []
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            self.events.append(("start", span))
        def on_end(self, span: Any) -> None:
            self.events.append(("end", span))
    streams = []
    for spans in per_trace.values():
        rec = Recorder()
        replay(spans, rec)  # type: ignore[arg-type]
        streams.append(rec.events)
    ended_at: dict[tuple[int, int], float] = {}
    cut = order_seed.randint(0, len(forest)) if shutdown_early else None
    ends = 0
    while any(streams):
        stream = order_seed.choice([s for s in streams if s])
        kind, span = stream.pop(0)
        if kind == "start":
            p.processor.on_start(span)
        else:
            ended_at[(span.context.trace_id, span.context.span_id)] = time.monotonic()
            p.processor.on_end(span)
            ends += 1
            if cut is not None and ends == cut:
                p.processor.shutdown()
    if cut is None:
        assert p.processor.force_flush(10_000)
    p.processor.shutdown()
    exported = [(s, t) for s, t in timed.seen
                if s.instrumentation_scope is None or s.instrumentation_scope.name != "otel_toolscore"]
    assert id_counts([s for s, _ in exported]) == id_counts(forest)
    # none held past hold_timeout (plus scheduling slack for a loaded 2-core CI machine)
    delays = [t - ended_at[(s.context.trace_id, s.context.span_id)] for s, t in exported]
    assert max(delays) <= hold_timeout + 1.0, max(delays)


@st.composite
def multi_run_traces(draw: Any) -> tuple[list[ReadableSpan], set[int]]:
    """Traces holding several agent runs in a row under a non-agent root (a web request), some
    with a nested sub-agent, some with children that end after their agent span (late). Returns
    the spans and the ids of the outermost agent spans that have activity ending in time."""
    spans: list[ReadableSpan] = []
    expected: set[int] = set()
    next_id = 1
    for trace in range(draw(st.integers(1, 3))):
        trace_id = 0x2000 + trace
        root_id, next_id = next_id, next_id + 1
        t = 0
        for run in range(draw(st.integers(1, 3))):
            agent_id, next_id = next_id, next_id + 1
            start, t = t, t + 10
            kids = draw(st.lists(st.sampled_from(["chat", "tool", "late_chat", "late_other", "sub_agent"]),
                                 min_size=1, max_size=4))
            for kid in kids:
                kid_id, next_id = next_id, next_id + 1
                late = kid.startswith("late")
                attrs = ({} if kid == "late_other" else KINDS[2] if kid == "tool"
                         else {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"sub{kid_id}"}
                         if kid == "sub_agent" else KINDS[1])
                kid_start, t = t, t + 5
                kid_end = t + 1000 if late else t
                spans.append(ReadableSpan(name=f"{kid}{kid_id}", context=SpanContext(trace_id, kid_id, False),
                                          parent=SpanContext(trace_id, agent_id, False), attributes=attrs,
                                          start_time=kid_start, end_time=kid_end))
                if kid == "sub_agent":  # its own chat, so that it is a run
                    chat_id, next_id = next_id, next_id + 1
                    spans.append(ReadableSpan(name=f"chat{chat_id}", context=SpanContext(trace_id, chat_id, False),
                                              parent=SpanContext(trace_id, kid_id, False), attributes=KINDS[1],
                                              start_time=kid_start + 1, end_time=kid_end - 1))
            t += 5
            spans.append(ReadableSpan(name=f"agent{agent_id}", context=SpanContext(trace_id, agent_id, False),
                                      parent=SpanContext(trace_id, root_id, False),
                                      attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"a{run}"},
                                      start_time=start, end_time=t))
            if any(k in ("chat", "tool") for k in kids):  # activity of its own: not a wrapper
                expected.add(agent_id)
            t += 5
        spans.append(ReadableSpan(name=f"request{root_id}", context=SpanContext(trace_id, root_id, False),
                                  parent=None, attributes={}, start_time=0, end_time=t + 2000))
    return spans, expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces=multi_run_traces(), pauses=st.lists(st.booleans(), max_size=40), grace=st.sampled_from([0.0, 0.005, 0.02]),
       order_seed=st.randoms(use_true_random=False))
def test_every_run_of_a_trace_is_scored_once(traces: tuple[list[ReadableSpan], set[int]], pauses: list[bool],
                                             grace: float, order_seed: Any) -> None:
    """Several runs per trace, sub-agents, late children, runs completing at their grace or by
    their last child, traces interleaved: every span out once, every outermost run that has
    activity scored exactly once, no run scored twice."""
    forest, expected = traces
    timed = TimedDownstream()
    # (an evaluation span per score: each names the run it scored)
    p = Pipeline(scorers=[Flaky("f", "ok")], downstream=timed, hold_timeout=5, completion_grace=grace,
                 evaluation_spans=True)
    streams = []
    for tid in sorted({s.context.trace_id for s in forest}):
        class Recorder:
            def __init__(self) -> None:
                self.events: list[tuple[str, ReadableSpan]] = []
            def on_start(self, span: Any, parent_context: Any = None) -> None:
                self.events.append(("start", span))
            def on_end(self, span: Any) -> None:
                self.events.append(("end", span))
        rec = Recorder()
        replay([s for s in forest if s.context.trace_id == tid], rec)  # type: ignore[arg-type]
        streams.append(rec.events)
    ends = 0
    while any(streams):
        stream = order_seed.choice([s for s in streams if s])
        kind, span = stream.pop(0)
        if kind == "start":
            p.processor.on_start(span)
        else:
            p.processor.on_end(span)
            if ends < len(pauses) and pauses[ends]:
                # graces run out here: after an agent span (before its late children end), or in
                # the middle of the next run (a slow model call)
                time.sleep(grace + 0.02)
            ends += 1
    assert p.processor.force_flush(10_000)
    p.processor.shutdown()
    out = [s for s, _ in timed.seen]
    app = [s for s in out if s.instrumentation_scope is None or s.instrumentation_scope.name != "otel_toolscore"]
    assert id_counts(app) == id_counts(forest)
    evaluated = Counter(s.parent.span_id for s in out if s not in app)
    assert max(evaluated.values(), default=0) <= 1, "a run was scored twice"
    assert expected <= set(evaluated), f"runs not scored: {expected - set(evaluated)}"


class TimedDownstream(SpanProcessor):
    """Records when each span reaches it."""

    def __init__(self) -> None:
        self.seen: list[tuple[ReadableSpan, float]] = []
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.seen.append((span, time.monotonic()))


@pytest.mark.parametrize("path", FIXTURES[::7], ids=paths.trace_id)
def test_quiet_mode_scores_spans_that_arrive_already_ended(path: Path) -> None:
    """The sidecar path: no on_start; complete = root arrived and decision_wait of quiet."""
    spans = read_otlp_json(path)
    p = Pipeline(decision_wait=0.1, hold_timeout=5)
    quiet = ToolScoreSpanProcessor(p.downstream, completion="quiet", meter_provider=p.meter_provider,
                                   logger_provider=p.logger_provider, decision_wait=0.1, hold_timeout=5)
    for span in sorted(spans, key=lambda s: s.end_time or 0):
        quiet.on_end(span)
    # the scored agent span comes without a flush: quiet completion fired
    assert wait_for(lambda: any("toolscore.tool_call_validation.label" in s.attributes for s in p.exported()))
    assert wait_for(lambda: len(p.exported()) >= len(spans))
    out = [s for s in p.exported() if s.instrumentation_scope is None or s.instrumentation_scope.name != "otel_toolscore"]
    assert id_counts(out) == id_counts(spans)
    quiet.shutdown()
    p.processor.shutdown()


def test_quiet_mode_waits_for_the_root() -> None:
    p = Pipeline()
    quiet = ToolScoreSpanProcessor(p.downstream, completion="quiet", meter_provider=p.meter_provider,
                                   logger_provider=p.logger_provider, decision_wait=0.05, hold_timeout=5)
    spans = read_otlp_json(FIXTURES[0])
    root = next(s for s in spans if s.parent is None)
    for s in spans:
        if s is not root:
            quiet.on_end(s)
    time.sleep(0.3)
    assert not any(k.startswith("toolscore.") for s in p.exported() for k in s.attributes)
    quiet.on_end(root)
    assert quiet.force_flush(5_000)
    assert any(k.startswith("toolscore.") for s in p.exported() for k in s.attributes)
    quiet.shutdown()


# --- LLM (async) scorers: after the agent span has left, never holding it ------------------------


class AsyncJudge(Scorer):
    """A test scorer with the LLM scorers' async interface (the real ones talk to litellm)."""

    kind = "llm"

    def __init__(self, name: str = "judge", delay: float = 0.05, fail: bool = False, hang: bool = False) -> None:
        self.name = name
        self.delay, self.fail, self.hang = delay, fail, hang
        self.calls = 0

    async def ascore(self, trajectory: Any) -> Score:
        import asyncio

        self.calls += 1
        if self.hang:
            await asyncio.Event().wait()
        await asyncio.sleep(self.delay)
        if self.fail:
            raise ConnectionError("judge down")
        return Score(name=self.name, value=0.75, label="good", explanation=f"{len(trajectory.tool_calls)} calls")

    def _score(self, trajectory: Any) -> Score:  # pragma: no cover - the engine uses ascore
        raise AssertionError("sync path not used by the processor")


def test_llm_scores_arrive_after_the_agent_span_as_events_and_an_evaluation_span() -> None:
    judge = AsyncJudge(delay=0.3)
    p = Pipeline(scorers=["tool_call_validation", judge])
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    weather_run(provider.get_tracer("app"))
    assert wait_for(lambda: any(s.name.startswith("invoke_agent") for s in p.exported()))
    agent = next(s for s in p.exported() if s.name.startswith("invoke_agent"))
    assert "toolscore.tool_call_validation.label" in agent.attributes
    assert "toolscore.judge.label" not in agent.attributes  # the span did not wait for the judge
    assert p.processor.force_flush(5_000)  # waits for judges in flight
    evals = [s for s in p.exported() if s.name == "evaluation judge"]
    assert len(evals) == 1 and evals[0].parent.span_id == agent.context.span_id
    records = [r.log_record for r in p.logs.get_finished_logs()]
    judged = [r for r in records if r.attributes.get("gen_ai.evaluation.name") == "judge"]
    assert judged and judged[0].attributes["gen_ai.evaluation.score.value"] == 0.75
    assert judged[0].span_id == agent.context.span_id
    provider.shutdown()


def test_a_failing_judge_is_an_error_evaluation_never_a_zero() -> None:
    p = Pipeline(scorers=[AsyncJudge(fail=True)])
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    weather_run(provider.get_tracer("app"))
    assert p.processor.force_flush(5_000)
    records = [r.log_record for r in p.logs.get_finished_logs()
               if r.log_record.attributes.get("gen_ai.evaluation.name") == "judge"]
    assert records and records[0].attributes.get("error.type")
    assert "gen_ai.evaluation.score.value" not in records[0].attributes
    points = [pt for pt in p.metric_points("gen_ai.evaluation.score") if pt.attributes["gen_ai.evaluation.name"] == "judge"]
    assert points == []
    provider.shutdown()


def test_a_judge_that_never_answers_does_not_hang_shutdown_or_the_app() -> None:
    judge = AsyncJudge(hang=True)
    p = Pipeline(scorers=[judge], shutdown_timeout=0.5)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    tracer = provider.get_tracer("app")
    for _ in range(3):
        weather_run(tracer)
    assert p.processor.force_flush(500) is False  # judges still in flight
    assert Counter(s.name for s in p.exported())["invoke_agent weather-bot"] == 3
    with SteppedClock(p.processor) as clock:
        provider.shutdown()
    # bounded by shutdown_timeout, with the judges still unanswered: their runs counted dropped
    assert clock.waited <= 0.5 + 1e-9
    assert judge.calls == 3
    points = {pt.attributes["outcome"]: pt.value for pt in p.metric_points("toolscore.evaluations")}
    assert points == {"dropped": 3}


def test_llm_inflight_bound_drops_and_counts() -> None:
    judge = AsyncJudge(hang=True)
    p = Pipeline(scorers=[judge], llm_max_inflight=2, shutdown_timeout=0.2)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    tracer = provider.get_tracer("app")
    for _ in range(5):
        weather_run(tracer)
    p.processor.force_flush(300)

    def dropped() -> float:
        points = [pt for pt in p.metric_points("toolscore.evaluations")
                  if pt.attributes.get("outcome") == "dropped" and pt.attributes.get("gen_ai.evaluation.name") == "judge"]
        return points[0].value if points else 0

    deadline = time.monotonic() + 10  # the worker may still be reaching the last runs on a loaded machine
    while dropped() < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert dropped() == 3
    assert Counter(s.name for s in p.exported())["invoke_agent weather-bot"] == 5
    provider.shutdown()


def test_force_flush_is_true_over_a_downstream_whose_force_flush_returns_none() -> None:
    """SpanProcessor.force_flush is a bare ``pass`` in SDK 1.37 (None): a downstream that does
    not override it has nothing to flush, which is success, not a failed flush."""

    class Plain(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list[ReadableSpan] = []

        def on_end(self, span: ReadableSpan) -> None:
            self.spans.append(span)

        def force_flush(self, timeout_millis: int = 30000) -> Any:
            return None  # what the 1.37 base class returns

    plain = Plain()
    p = Pipeline(downstream=plain, evaluation_spans=True)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    weather_run(provider.get_tracer("app"))
    assert p.processor.force_flush(5_000) is True
    # the run's four spans and its evaluation spans (one per score) all reached the downstream
    assert len([s for s in plain.spans if not s.name.startswith("evaluation")]) == 4
    assert len(plain.spans) == 4 + len(p.processor._engine.scorer_names)
    provider.shutdown()


# --- sampling decided when a trace's first span starts ----------------------------------------


def test_a_trace_no_scorer_samples_is_never_buffered_only_forwarded() -> None:
    from otel_toolscore.config import sampled

    p = Pipeline(default_sample_rate=0.5, sample_rates={"tool_call_accuracy": 0.25})
    buffered: list[int] = []
    new_buffer = p.processor._new_buffer

    def spy(trace_id: int, now: float) -> Any:
        buffered.append(trace_id)
        return new_buffer(trace_id, now)

    p.processor._new_buffer = spy  # type: ignore[method-assign]
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    tracer = provider.get_tracer("t")
    for _ in range(60):
        weather_run(tracer, expected="get_weather")
    assert p.processor.force_flush(10_000)
    agents = [s for s in p.exported() if s.name.startswith("invoke_agent")]
    kept = {s.context.trace_id for s in agents if sampled(s.context.trace_id, 0.5)}
    assert 10 < len(kept) < 50  # both kinds of trace are in the sample
    # the highest rate decides: a trace that no scorer samples is never buffered
    assert set(buffered) == kept
    app_spans = [s for s in p.exported() if not s.name.startswith("evaluation")]
    counts = id_counts(app_spans)
    assert len(counts) == 60 * 4 and set(counts.values()) == {1}  # every span forwarded, once
    for span in agents:
        scored = any(k.startswith("gen_ai.evaluation.") or k.startswith("toolscore.score") for k in span.attributes or {})
        assert scored == (span.context.trace_id in kept), span.attributes
    p.processor.shutdown()
