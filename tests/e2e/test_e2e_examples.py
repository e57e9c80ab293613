"""The example agents, run as real processes: the real ``openai`` client (or Pydantic AI) against
the scripted model on 127.0.0.1, real instrumentation, ``install()`` exporting over OTLP/HTTP to a
receiver the test starts. Every run comes back scored, with the expected verdicts."""

from __future__ import annotations

from collections import Counter

import pytest

from otel_toolscore import semconv
from otel_toolscore.ingest import decode_export_request
from tests.e2e.e2e_support import clean_env, require_examples_extra, run_python
from tests.support.otlp_sink import OtlpSink
from tests.support.paths import EXAMPLES, REPO

#: scenario → scorer → label every instrumentation stack must produce
EXPECTED = {
    "good": {"tool_call_accuracy": "pass", "tool_call_validation": "pass", "tool_result_verification": "pass"},
    "wrong_tool": {"tool_call_accuracy": "fail"},
    "bad_arguments": {"tool_call_accuracy": "pass", "tool_call_validation": "fail"},
    "hallucinated": {"tool_call_accuracy": "pass", "tool_result_verification": "fail"},
    "failing_tool": {"tool_call_accuracy": "pass", "tool_result_verification": "fail"},
}

EXAMPLE_MODULES = {
    "openai_v2_agent.py": ("openai", "opentelemetry.instrumentation.openai_v2"),
    "openinference_agent.py": ("openai", "openinference.instrumentation.openai"),
    "pydantic_ai_agent.py": ("pydantic_ai",),
}


def _questions() -> dict[str, str]:
    import sys

    sys.path.insert(0, str(EXAMPLES))
    try:
        import agent_common
    finally:
        sys.path.remove(str(EXAMPLES))
    return {s["user_question"]: s["name"] for s in agent_common.SCENARIOS}


def _attr(span, key):
    return (span.attributes or {}).get(key)


@pytest.mark.parametrize("example", sorted(EXAMPLE_MODULES))
def test_example_agent_is_scored(example: str) -> None:
    require_examples_extra(*EXAMPLE_MODULES[example])
    with OtlpSink() as sink:
        result = run_python([str(EXAMPLES / example)], clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=sink.url))
        assert result.returncode == 0, result.stdout + result.stderr
        spans = [s for m in sink.messages("traces") for s in decode_export_request(m)]
        logs = [r for m in sink.messages("logs") for rl in m.resource_logs for sl in rl.scope_logs
                for r in sl.log_records]
        metrics = {mm.name for m in sink.messages("metrics") for rm in m.resource_metrics
                   for sm in rm.scope_metrics for mm in sm.metrics}

    scored = [s for s in spans if _attr(s, "toolscore.tool_call_validation.score") is not None]
    evaluations = [s for s in spans if _attr(s, semconv.OI_SPAN_KIND) == semconv.OI_KIND_EVALUATOR]
    assert len(scored) == 5, [s.name for s in spans]
    # the agent spans carry the code scores: by default no evaluation span repeats them
    # (evaluation_spans: true makes one per score: tests/e2e/test_e2e_phoenix.py)
    assert evaluations == []

    # the verdicts, per scenario: the run is found by the user question the model was asked
    questions = _questions()
    by_trace: dict[int, str] = {}
    for span in spans:
        for value in (span.attributes or {}).values():
            if isinstance(value, str):
                for question, name in questions.items():
                    if question in value:
                        by_trace.setdefault(span.context.trace_id, name)
    labels = {by_trace[s.context.trace_id]: s for s in scored}
    assert set(labels) == set(EXPECTED)
    for scenario, expected in EXPECTED.items():
        for scorer, label in expected.items():
            if example == "pydantic_ai_agent.py" and scenario == "bad_arguments" and scorer == "tool_call_validation":
                continue  # Pydantic AI derives the schema from the signature: no email format to violate
            assert _attr(labels[scenario], f"toolscore.{scorer}.label") == label, (scenario, scorer)

    # events and metrics went out too
    events = [r for r in logs if r.event_name == semconv.GEN_AI_EVALUATION_RESULT]
    assert len(events) >= 15
    names = Counter(a.value.string_value for r in events for a in r.attributes if a.key == semconv.GEN_AI_EVALUATION_NAME)
    assert set(names) == {"tool_call_accuracy", "tool_call_validation", "tool_result_verification"}
    assert {semconv.METRIC_EVALUATION_SCORE, semconv.METRIC_TOOL_CALL_ISSUES, semconv.METRIC_EVALUATIONS} <= metrics


@pytest.mark.parametrize("example", sorted(EXAMPLE_MODULES))
def test_install_takes_at_most_three_lines(example: str) -> None:
    lines = [line for line in (EXAMPLES / example).read_text().splitlines()
             if "otel_toolscore" in line and not line.lstrip().startswith("#")]
    assert len(lines) <= 3, lines


def test_examples_pins_match_the_conformance_quirks() -> None:
    """openai-v2 2.4b0 imports a module util-genai ≥1.2b0 removed, and httpx: both pinned."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the test extra installs tomli
        import tomli as tomllib
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {req.split("==")[0].split("[")[0]: req.split("==")[1] for req in extras["examples"] if "==" in req}
    assert pins["opentelemetry-instrumentation-openai-v2"] == "2.4b0"
    assert pins["opentelemetry-util-genai"] == "1.1b0"
    assert "httpx" in pins
    # .ci/run builds .venv-phoenix from examples/requirements-phoenix.txt: the same pin as the extra
    phoenix = [line for line in (REPO / "examples" / "requirements-phoenix.txt").read_text().splitlines()
               if line and not line.startswith("#")]
    assert phoenix == extras["phoenix"]
