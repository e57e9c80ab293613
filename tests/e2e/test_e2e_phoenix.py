"""Arize Phoenix as the trace backend: the OpenInference example agent exports over OTLP/HTTP to a
Phoenix the test starts on 127.0.0.1 (own working directory, no telemetry), and Phoenix's REST
API shows each agent span with its toolscore.* attributes and the evaluation span in its trace."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from otel_toolscore.demo_agent.phoenix import PHOENIX_INSTALL_HINT, Phoenix, find_phoenix
from tests.e2e.e2e_support import clean_env, require_examples_extra, run_python
from tests.support.paths import EXAMPLES

PROJECT = "toolscore-e2e"


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Any:
    command = find_phoenix()
    if command is None:
        pytest.skip(f"Arize Phoenix is not installed: {PHOENIX_INSTALL_HINT}")
    server = Phoenix(command, tmp_path_factory.mktemp("phoenix")).start(timeout=180)
    yield server
    server.stop()


def _get(url: str) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        return json.load(response)


def _spans(phoenix: Phoenix) -> list[dict[str, Any]]:
    try:
        return _get(f"{phoenix.url}/v1/projects/{PROJECT}/spans?limit=1000")["data"]
    except OSError:  # the project appears with its first span
        return []


def test_phoenix_shows_scores_on_the_agent_span_and_the_evaluation_span(phoenix: Phoenix) -> None:
    require_examples_extra("openai", "openinference.instrumentation.openai")
    env = clean_env(
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=phoenix.traces_endpoint,
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={PROJECT}",
        # Phoenix takes traces only: the events and metrics stay off; an evaluation span per score
        # is what Phoenix shows as an evaluation (off by default: docs/backends.md)
        OTEL_TOOLSCORE_EVENTS="false",
        OTEL_TOOLSCORE_EVALUATION_SPANS="true",
        OTEL_TOOLSCORE_METRICS="false",
    )
    result = run_python([str(EXAMPLES / "openinference_agent.py")], env)
    assert result.returncode == 0, result.stdout + result.stderr

    deadline = time.monotonic() + 60
    spans = _spans(phoenix)
    while time.monotonic() < deadline and sum(s["span_kind"] == "EVALUATOR" for s in spans) < 15:
        time.sleep(0.5)
        spans = _spans(phoenix)

    agents = [s for s in spans if s["span_kind"] == "AGENT"]
    evaluations = [s for s in spans if s["span_kind"] == "EVALUATOR"]
    # one evaluation span per score: 5 runs × 3 code scorers
    assert len(agents) == 5 and len(evaluations) == 15, [(s["name"], s["span_kind"]) for s in spans]
    by_id = {s["context"]["span_id"]: s for s in agents}
    per_agent: dict[str, dict[str, dict]] = {}
    for evaluation in evaluations:
        agent = by_id[evaluation["parent_id"]]  # a child of the agent span …
        assert evaluation["context"]["trace_id"] == agent["context"]["trace_id"]  # … in its trace
        attrs = evaluation["attributes"]
        assert evaluation["name"] == f"evaluation {attrs['gen_ai.evaluation.name']}"
        assert attrs["gen_ai.operation.name"] == "evaluation"
        per_agent.setdefault(evaluation["parent_id"], {})[attrs["gen_ai.evaluation.name"]] = attrs
    verdicts = []
    for span_id, agent in by_id.items():
        attrs = agent["attributes"]
        for scorer in ("tool_call_accuracy", "tool_call_validation", "tool_result_verification"):
            assert isinstance(attrs[f"toolscore.{scorer}.score"], float)
            assert attrs[f"toolscore.{scorer}.label"] in ("pass", "fail")
            # the same verdict in the GenAI and OpenInference forms on its evaluation span
            evaluation = per_agent[span_id][scorer]
            assert evaluation["gen_ai.evaluation.score.value"] == attrs[f"toolscore.{scorer}.score"]
            assert evaluation["evaluations.0.evaluation.score"] == attrs[f"toolscore.{scorer}.score"]
        verdicts.append((attrs["toolscore.expected_tool"], attrs["toolscore.tool_call_accuracy.label"],
                         attrs["toolscore.tool_call_validation.label"], attrs["toolscore.tool_result_verification.label"]))
    assert sorted(verdicts) == sorted([
        ("get_weather", "pass", "pass", "pass"),  # good
        ("get_weather", "fail", "pass", "pass"),  # wrong tool
        ("send_email", "pass", "fail", "pass"),  # bad arguments
        ("get_weather", "pass", "pass", "fail"),  # hallucinated answer
        ("fetch_data", "pass", "pass", "fail"),  # failing tool
    ])

    # and the GraphQL API (what Phoenix's UI reads) counts the five traces in the project
    query = json.dumps({"query": "{ projects { edges { node { name traceCount } } } }"}).encode()
    request = urllib.request.Request(f"{phoenix.url}/graphql", data=query, headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        projects = {e["node"]["name"]: e["node"]["traceCount"] for e in json.load(response)["data"]["projects"]["edges"]}
    assert projects.get(PROJECT) == 5, projects

