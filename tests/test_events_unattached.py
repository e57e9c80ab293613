"""``events: unattached``: a run's ``gen_ai.evaluation.result`` event only for a score the agent
span does not carry (an LLM judge's, a code score whose span left before it, every score with
``span_attributes`` off); the tool calls' own events still go out, since no attribute carries
them. Issue 32: the run events repeat the agent span's attributes, and each costs the app the
SDK's record and its OTLP encoding (~0.24 M instructions a run event in BENCHMARKS.md's count). The default stays ``true``."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from otel_toolscore.config import load_settings
from tests.support.pipeline import Pipeline
from tests.support.spans import weather_run
from tests.support.timing import wait_for
from tests.test_evaluation_spans_default import CODE, _agent, _run
from tests.test_processor import AsyncJudge, Hanging


def _events(p: Pipeline) -> tuple[Counter[str], Counter[str]]:
    """Event names by evaluation, on the agent span and on tool spans."""
    agent_id = _agent(p).context.span_id
    on_run: Counter[str] = Counter()
    on_calls: Counter[str] = Counter()
    for r in p.logs.get_finished_logs():
        name = r.log_record.attributes["gen_ai.evaluation.name"]
        (on_run if r.log_record.span_id == agent_id else on_calls)[name] += 1
    return on_run, on_calls


@pytest.mark.parametrize("scoring", ["thread", "process"])
def test_scores_on_the_agent_span_get_no_run_event_but_tool_calls_keep_theirs(scoring: str) -> None:
    p = Pipeline(scorers=CODE, events="unattached", call_events="all", scoring=scoring)
    provider = _run(p)
    agent = _agent(p)
    for name in CODE:
        assert f"toolscore.{name}.label" in agent.attributes
    on_run, on_calls = _events(p)
    assert on_run == Counter()
    assert on_calls["tool_call_validation"] == 1  # the get_weather call's own event
    # the metrics (the dashboard's and the alerts' source) are the same as ever
    assert {pt.attributes["gen_ai.evaluation.name"] for pt in p.metric_points("gen_ai.evaluation.score")} == set(CODE)
    provider.shutdown()


def test_the_default_is_an_event_for_every_score() -> None:
    assert load_settings().events is True
    p = Pipeline(scorers=CODE, call_events="all")
    provider = _run(p)
    on_run, on_calls = _events(p)
    assert on_run == Counter(CODE)
    assert on_calls["tool_call_validation"] == 1
    provider.shutdown()


def test_a_judged_score_comes_after_the_span_left_so_it_gets_its_event() -> None:
    p = Pipeline(scorers=[*CODE, AsyncJudge(delay=0.01)], events="unattached")
    provider = _run(p)
    on_run, _ = _events(p)
    assert on_run == Counter({"judge": 1})
    provider.shutdown()


def test_a_code_score_whose_agent_span_left_before_it_gets_its_event() -> None:
    hanging = Hanging(seconds=30)
    p = Pipeline(scorers=[hanging], events="unattached", hold_timeout=0.3, completion_grace=0.05)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    weather_run(provider.get_tracer("app"))
    assert wait_for(lambda: any(s.name.startswith("invoke_agent") for s in p.exported()))
    hanging.release.set()
    assert p.processor.force_flush(5_000)
    on_run, _ = _events(p)
    assert on_run == Counter({"hanging": 1})
    provider.shutdown()


def test_with_span_attributes_off_every_score_gets_its_event() -> None:
    p = Pipeline(scorers=CODE, events="unattached", span_attributes=False)
    provider = _run(p)
    on_run, _ = _events(p)
    assert on_run == Counter(CODE)
    provider.shutdown()


def test_the_run_events_left_out_are_what_the_agent_span_carries() -> None:
    every, lighter = Pipeline(scorers=CODE), Pipeline(scorers=CODE, events="unattached")
    for p in (every, lighter):
        _run(p).shutdown()
    carried = _agent(lighter).attributes
    for r in every.logs.get_finished_logs():
        attributes = r.log_record.attributes
        name = attributes["gen_ai.evaluation.name"]
        assert carried[f"toolscore.{name}.score"] == attributes["gen_ai.evaluation.score.value"]
        assert carried[f"toolscore.{name}.label"] == attributes["gen_ai.evaluation.score.label"]
        assert carried[f"toolscore.{name}.explanation"] == attributes["gen_ai.evaluation.explanation"]


#: the two outputs that take "unattached" besides a boolean (evaluation spans: issue 32, stop 37)
_SETTINGS = [("OTEL_TOOLSCORE_EVENTS", "events"), ("OTEL_TOOLSCORE_EVALUATION_SPANS", "evaluation_spans")]


@pytest.mark.parametrize(("variable", "setting"), _SETTINGS)
@pytest.mark.parametrize(("value", "expected"), [("unattached", "unattached"), ("true", True), ("false", False),
                                                 ("1", True), ("0", False)])
def test_the_variable_takes_unattached_or_a_boolean(monkeypatch: pytest.MonkeyPatch, variable: str, setting: str,
                                                    value: str, expected: Any) -> None:
    monkeypatch.setenv(variable, value)
    assert getattr(load_settings(), setting) == expected


@pytest.mark.parametrize(("variable", "setting"), _SETTINGS)
def test_any_other_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, variable: str, setting: str) -> None:
    monkeypatch.setenv(variable, "sometimes")
    with pytest.raises(Exception, match=setting):
        load_settings()
