"""Prometheus as the metrics backend: the openai-v2 example agent serves its metrics with
opentelemetry-exporter-prometheus, a real Prometheus started by the test on 127.0.0.1 scrapes it
with the shipped alert rules loaded, and its HTTP API shows the score histogram per scorer and
agent, the issue counter, and answers every query of the shipped Grafana dashboard."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.e2e_support import clean_env, free_port, require_examples_extra
from tests.e2e.promql import RULES, dashboard_queries
from tests.support.otlp_sink import OtlpSink
from tests.support.paths import EXAMPLES, REPO

SCORERS = {"tool_call_accuracy", "tool_call_validation", "tool_result_verification"}
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str) -> Any:
    with _OPENER.open(url, timeout=10) as response:
        return json.load(response)


class _Prometheus:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = _get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert answer["status"] == "success", (expr, answer)
        return answer["data"]["result"]

    def values(self, expr: str, *labels: str) -> dict[tuple[str, ...], float]:
        return {tuple(r["metric"].get(label, "") for label in labels): float(r["value"][1]) for r in self.query(expr)}


@pytest.fixture
def scraped(tmp_path: Path) -> Iterator[_Prometheus]:
    """The example app (metrics on 127.0.0.1) and a Prometheus scraping it every second."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus is not installed (Debian package prometheus; .ci/run installs it)")
    pytest.importorskip("opentelemetry.exporter.prometheus",
                        reason="opentelemetry-exporter-prometheus is not installed (pip install -e '.[examples]')")
    require_examples_extra()
    app_port, prom_port = free_port(), free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "weather-assistant",
                            "static_configs": [{"targets": [f"127.0.0.1:{app_port}"]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    with OtlpSink() as sink:  # the app's spans and events go here; its metrics are scraped
        app = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "openai_v2_agent.py"), "--prometheus-port", str(app_port),
             "--linger", "120"],
            env=clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=sink.url), cwd=REPO,
            stdout=subprocess.DEVNULL, stderr=(tmp_path / "app.log").open("wb"),
        )
        prom = subprocess.Popen(
            [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("wb"),
        )
        try:
            yield _Prometheus(prom_port)
        finally:
            for process in (prom, app):
                process.terminate()
            for process in (prom, app):
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=5)


def _wait_for_all_runs(prometheus: _Prometheus, timeout: float = 90) -> dict[tuple[str, ...], float]:
    """Until a scrape has seen the five runs' evaluations by every scorer."""
    deadline = time.monotonic() + timeout
    scored: dict[tuple[str, ...], float] = {}
    while time.monotonic() < deadline:
        try:
            scored = prometheus.values('sum by (gen_ai_evaluation_name) (toolscore_evaluations_total{outcome="scored"})',
                                       "gen_ai_evaluation_name")
        except OSError:  # Prometheus still starting
            scored = {}
        if scored and all(scored.get((s,)) == 5 for s in SCORERS):
            return scored
        time.sleep(0.5)
    pytest.fail(f"Prometheus never saw the five scored runs: {scored}")


def test_prometheus_scrapes_scores_issues_and_answers_the_dashboard(scraped: _Prometheus) -> None:
    _wait_for_all_runs(scraped)

    # the score histogram, one series set per scorer and agent
    series = scraped.values("count by (gen_ai_evaluation_name, gen_ai_agent_name) (gen_ai_evaluation_score_bucket)",
                            "gen_ai_evaluation_name", "gen_ai_agent_name")
    assert set(series) == {(s, "weather-assistant") for s in SCORERS}
    runs = scraped.values("sum by (gen_ai_evaluation_name) (gen_ai_evaluation_score_count)", "gen_ai_evaluation_name")
    assert runs == {(s,): 5.0 for s in SCORERS}
    failing = scraped.values('sum by (gen_ai_evaluation_name) (gen_ai_evaluation_score_count{gen_ai_evaluation_score_label="fail"})',
                             "gen_ai_evaluation_name")
    assert failing == {("tool_call_accuracy",): 1.0, ("tool_call_validation",): 1.0, ("tool_result_verification",): 2.0}
    # the wrong-tool run scored 0: one observation in the lowest bucket
    lowest = scraped.values('sum(gen_ai_evaluation_score_bucket{gen_ai_evaluation_name="tool_call_accuracy",le="0.1"})')
    assert lowest == {(): 1.0}

    # the issue counter, by type and severity
    issues = scraped.values("sum by (issue_type, issue_severity, gen_ai_tool_name) (toolscore_tool_call_issues_total)",
                            "issue_type", "issue_severity", "gen_ai_tool_name")
    assert issues[("schema_violation", "high", "send_email")] == 1.0
    assert issues[("hallucinated_content", "high", "get_weather")] == 1.0
    assert issues[("error_result", "high", "fetch_data")] == 1.0

    assert scraped.values("sum(toolscore_traces_pending)") == {(): 0.0}

    # every dashboard query is valid PromQL over these series
    for title, expr in dashboard_queries():
        concrete = (expr.replace("$__rate_interval", "1m").replace("$__range", "5m")
                    .replace("$agent", ".*").replace("$scorer", ".*"))
        scraped.query(concrete)  # asserts status == success
        assert title

    # the shipped alert rules are loaded and evaluate without errors
    deadline = time.monotonic() + 30
    while True:
        groups = _get(f"{scraped.url}/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    shipped = {r.get("alert") or r["record"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert {r["name"] for r in rules} == shipped
    assert all(r["health"] == "ok" for r in rules), [(r["name"], r.get("lastError")) for r in rules]
