"""Completion per agent run (docs/design.md, "Completion"): a trace holding several runs (a supervisor
and its sub-agent, a web request invoking two agents) gets every run scored once, on all of its
spans, whatever the other runs of the trace are doing; what ends after its run was scored is
forwarded and counted. Real SDK TracerProvider, real timing (grace shortened)."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from tests.support.pipeline import Pipeline, id_counts

GRACE = 0.2  # completion_grace in these tests; "slow" steps last well past it
SLOW = GRACE + 0.4

USER = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Weather in Oslo, and a summary?"}]}])


def _chat(tracer: Any, output: list[dict[str, Any]], seconds: float = 0.0, user: bool = False) -> None:
    attrs = {"gen_ai.operation.name": "chat",
             "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": output}])}
    if user:
        attrs["gen_ai.input.messages"] = USER
    with tracer.start_as_current_span("chat m", attributes=attrs):
        time.sleep(seconds)


def _tool(tracer: Any, name: str, call_id: str) -> None:
    with tracer.start_as_current_span(f"execute_tool {name}", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.arguments": '{"city": "Oslo"}', "gen_ai.tool.call.result": '{"temp": "5C"}',
    }):
        pass


def _agent(tracer: Any, name: str, expected: str | None = None) -> Any:
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
    if expected:
        attrs["toolscore.expected_tool"] = expected
    return tracer.start_as_current_span(f"invoke_agent {name}", attributes=attrs)


def _supervisor(tracer: Any, wait_before_final: float = 0.0, final_chat: float = 0.0) -> None:
    """A supervisor that calls get_weather, then a sub-agent, then (after a pause, or with a slow
    final model call) answers."""
    with _agent(tracer, "supervisor", expected="get_weather"):
        _chat(tracer, [{"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}],
              user=True)
        _tool(tracer, "get_weather", "c1")
        with _agent(tracer, "summariser"):
            _chat(tracer, [{"type": "text", "content": "Cold and clear."}], user=True)
        time.sleep(wait_before_final)
        _chat(tracer, [{"type": "text", "content": "5C in Oslo: cold and clear."}], seconds=final_chat)


def _setup(**settings: Any) -> tuple[Pipeline, TracerProvider, Any]:
    # an evaluation span per score names the run it scored (_evaluated)
    p = Pipeline(completion_grace=GRACE, hold_timeout=10, **{"evaluation_spans": True, **settings})
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    return p, provider, provider.get_tracer("app")


def _agent_span(p: Pipeline, name: str) -> ReadableSpan:
    [span] = [s for s in p.exported() if s.name == f"invoke_agent {name}"]
    return span


def _evaluated(p: Pipeline) -> Counter:
    """How many times each evaluated (agent) span was scored: evaluation spans are one per score,
    so a run scored once has each evaluation name once."""
    per_name = Counter((s.parent.span_id, s.name) for s in p.exported() if s.name.startswith("evaluation"))
    times: Counter = Counter()
    for (parent, _name), n in per_name.items():
        times[parent] = max(times[parent], n)
    return times


def test_supervisor_pausing_after_its_sub_agent_is_scored_on_all_its_tool_calls() -> None:
    p, provider, tracer = _setup()
    _supervisor(tracer, wait_before_final=SLOW)
    assert p.processor.force_flush(5_000)
    sup = _agent_span(p, "supervisor")
    assert sup.attributes["toolscore.tool_call_accuracy.score"] == 1.0, sup.attributes.get(
        "toolscore.tool_call_accuracy.explanation")
    # the sub-agent is a run of its own, scored once; the supervisor once too
    sub = _agent_span(p, "summariser")
    evaluated = _evaluated(p)
    assert evaluated[sup.context.span_id] == 1 and evaluated[sub.context.span_id] == 1
    assert "toolscore.tool_call_validation.label" in sub.attributes
    provider.shutdown()


def test_supervisor_with_a_slow_final_model_call_is_scored() -> None:
    p, provider, tracer = _setup()
    _supervisor(tracer, final_chat=SLOW)
    assert p.processor.force_flush(5_000)
    sup = _agent_span(p, "supervisor")
    assert sup.attributes["toolscore.tool_call_accuracy.score"] == 1.0
    assert _evaluated(p)[sup.context.span_id] == 1
    provider.shutdown()


def test_two_runs_in_one_web_request_are_both_scored() -> None:
    p, provider, tracer = _setup()
    with tracer.start_as_current_span("POST /chat"):
        for name, slow in (("first", 0.0), ("second", SLOW)):
            with _agent(tracer, name, expected="get_weather"):
                _chat(tracer, [{"type": "tool_call", "id": "c1", "name": "get_weather",
                                "arguments": {"city": "Oslo"}}], user=True)
                _tool(tracer, "get_weather", "c1")
                _chat(tracer, [{"type": "text", "content": "5C."}], seconds=slow)
        # the first run is scored while the request is still open, without waiting for it
        assert "toolscore.tool_call_accuracy.score" in _agent_span(p, "first").attributes
    assert p.processor.force_flush(5_000)
    for name in ("first", "second"):
        span = _agent_span(p, name)
        assert span.attributes["toolscore.tool_call_accuracy.score"] == 1.0, name
        assert _evaluated(p)[span.context.span_id] == 1, name
    provider.shutdown()


def test_a_span_ending_after_its_run_was_scored_is_forwarded_and_counted() -> None:
    p, provider, tracer = _setup()
    with tracer.start_as_current_span("POST /chat"):
        with _agent(tracer, "first", expected="get_weather"):
            straggler = tracer.start_span("background upload")
            _chat(tracer, [{"type": "tool_call", "id": "c1", "name": "get_weather",
                            "arguments": {"city": "Oslo"}}], user=True)
            _tool(tracer, "get_weather", "c1")
        deadline = time.monotonic() + 5
        while "toolscore.tool_call_accuracy.score" not in _agent_span_or_empty(p, "first"):
            assert time.monotonic() < deadline, "the run was not scored at its grace"
            time.sleep(0.01)
        straggler.end()  # late: forwarded, not taken into the next run
        with _agent(tracer, "second", expected="get_weather"):
            _chat(tracer, [{"type": "tool_call", "id": "c2", "name": "get_weather",
                            "arguments": {"city": "Oslo"}}], user=True)
            _tool(tracer, "get_weather", "c2")
    assert p.processor.force_flush(5_000)
    assert p.processor.stats["late_spans"] == 1
    assert [s.name for s in p.exported()].count("background upload") == 1
    second = _agent_span(p, "second")
    assert second.attributes["toolscore.tool_call_accuracy.score"] == 1.0
    assert sum(_evaluated(p).values()) == 2
    app_spans = [s for s in p.exported() if not s.name.startswith("evaluation")]
    assert max(id_counts(app_spans).values()) == 1
    provider.shutdown()


def _agent_span_or_empty(p: Pipeline, name: str) -> dict[str, Any]:
    spans = [s for s in p.exported() if s.name == f"invoke_agent {name}"]
    return dict(spans[0].attributes) if spans else {}


def test_force_flush_waits_for_the_run_the_worker_has_just_taken(monkeypatch: Any) -> None:
    """The worker takes an item off the queue and only then starts on it: force_flush must
    wait for it all the same (it used to see an empty queue and an idle worker, and return)."""
    p, provider, tracer = _setup()
    queue = p.processor._queue
    real_get = queue.get

    def slow_get(*args: Any, **kwargs: Any) -> Any:
        item = real_get(*args, **kwargs)
        if item is not None:
            time.sleep(0.3)  # the gap between taking an item and working on it, widened
        return item

    monkeypatch.setattr(queue, "get", slow_get)
    time.sleep(1.2)  # the worker's pending get() times out (1 s) and the next one is slow_get
    with _agent(tracer, "solo", expected="get_weather"):
        _chat(tracer, [{"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}],
              user=True)
    time.sleep(0.05)  # the worker has taken the run
    assert p.processor.force_flush(5_000)
    assert "toolscore.tool_call_accuracy.score" in _agent_span(p, "solo").attributes
    provider.shutdown()
