"""``evaluation_spans``: by default ("unattached") an evaluation span carries only a score the agent
span does not (an LLM judge's, which comes after the span left; a code score whose span left
before it); ``true`` one per score, ``false`` none. Issue 32: the evaluation spans repeated what
the agent span's attributes carry, and were the largest part of what scoring made the app export."""

from __future__ import annotations

from collections import Counter
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from tests.support.pipeline import Pipeline
from tests.support.spans import weather_run
from tests.support.timing import wait_for
from tests.test_processor import AsyncJudge, Hanging

CODE = ["tool_call_accuracy", "tool_call_validation", "tool_result_verification"]


def _run(p: Pipeline) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    weather_run(provider.get_tracer("app"), expected="get_weather")
    assert p.processor.force_flush(5_000)
    return provider


def _evaluations(p: Pipeline) -> Counter[str]:
    return Counter(s.name for s in p.exported() if s.name.startswith("evaluation "))


def _agent(p: Pipeline) -> Any:
    return next(s for s in p.exported() if s.name.startswith("invoke_agent"))


def test_the_default_puts_code_scores_on_the_agent_span_and_in_events_not_in_evaluation_spans() -> None:
    p = Pipeline(scorers=CODE)
    provider = _run(p)
    agent = _agent(p)
    for name in CODE:
        assert f"toolscore.{name}.label" in agent.attributes
    assert _evaluations(p) == Counter()
    events = {r.log_record.attributes["gen_ai.evaluation.name"] for r in p.logs.get_finished_logs()
              if r.log_record.span_id == agent.context.span_id}
    assert set(CODE) <= events
    assert {pt.attributes["gen_ai.evaluation.name"] for pt in p.metric_points("gen_ai.evaluation.score")} >= {
        "tool_call_accuracy"}
    provider.shutdown()


def test_true_is_one_evaluation_span_per_score_false_is_none() -> None:
    every = Pipeline(scorers=CODE, evaluation_spans=True)
    provider = _run(every)
    assert _evaluations(every) == Counter({f"evaluation {name}": 1 for name in CODE})
    provider.shutdown()
    none = Pipeline(scorers=[*CODE, AsyncJudge(delay=0.01)], evaluation_spans=False)
    provider = _run(none)
    assert _evaluations(none) == Counter()
    assert any(r.log_record.attributes["gen_ai.evaluation.name"] == "judge" for r in none.logs.get_finished_logs())
    provider.shutdown()


def test_a_judged_score_comes_after_the_span_left_so_it_gets_an_evaluation_span() -> None:
    p = Pipeline(scorers=[*CODE, AsyncJudge(delay=0.01)])
    provider = _run(p)
    assert _evaluations(p) == Counter({"evaluation judge": 1})
    (judged,) = [s for s in p.exported() if s.name == "evaluation judge"]
    assert judged.parent is not None and judged.parent.span_id == _agent(p).context.span_id
    assert judged.attributes["gen_ai.evaluation.score.value"] == 0.75
    provider.shutdown()


def test_a_code_score_whose_agent_span_left_before_it_gets_an_evaluation_span() -> None:
    hanging = Hanging(seconds=30)
    p = Pipeline(scorers=[hanging], hold_timeout=0.3, completion_grace=0.05)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    weather_run(provider.get_tracer("app"))
    assert wait_for(lambda: any(s.name.startswith("invoke_agent") for s in p.exported()))
    assert not any(k.startswith("toolscore.") for k in _agent(p).attributes)  # left unscored at hold_timeout
    hanging.release.set()
    assert p.processor.force_flush(5_000)
    assert _evaluations(p) == Counter({"evaluation hanging": 1})
    provider.shutdown()


def test_with_span_attributes_off_every_score_gets_an_evaluation_span() -> None:
    p = Pipeline(scorers=CODE, span_attributes=False)
    provider = _run(p)
    assert _evaluations(p) == Counter({f"evaluation {name}": 1 for name in CODE})
    assert not any(k.startswith("toolscore.") and k.endswith((".label", ".score")) for k in _agent(p).attributes)
    provider.shutdown()


# (its variable's values: tests/test_events_unattached.py, with ``events``')


def test_the_agent_span_and_the_events_say_the_same_with_or_without_evaluation_spans() -> None:
    with_spans, without = Pipeline(scorers=CODE, evaluation_spans=True), Pipeline(scorers=CODE)
    for p in (with_spans, without):
        _run(p).shutdown()
    a = {k: v for k, v in _agent(with_spans).attributes.items() if k.startswith("toolscore.")}
    b = {k: v for k, v in _agent(without).attributes.items() if k.startswith("toolscore.")}
    assert a == b and "toolscore.tool_call_accuracy.score" in a

    def events(p: Pipeline) -> list[dict[str, Any]]:
        return sorted((dict(r.log_record.attributes) for r in p.logs.get_finished_logs()), key=repr)
    assert events(with_spans) == events(without) != []
