"""The shipped Grafana dashboard and Prometheus rules query only what the exporter produces.

Metric and label names are checked against the real exposition of opentelemetry-exporter-prometheus
for every otel-toolscore instrument; the rules are checked and unit-tested by promtool itself.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from tests.e2e.promql import (
    RULE_TESTS,
    RULES,
    Exposition,
    _dashboard,
    _panels,
    dashboard_queries,
    names_in,
    recorded_names,
    rule_exprs,
    toolscore_exposition,
)

#: labels Prometheus adds to every scraped series
SCRAPE_LABELS = {"job", "instance"}


@pytest.fixture(scope="module")
def exposition() -> Exposition:
    pytest.importorskip(
        "opentelemetry.exporter.prometheus",
        reason="opentelemetry-exporter-prometheus is not installed (pip install -e '.[prometheus]')",
    )
    return toolscore_exposition()


def test_dashboard_is_a_grafana_dashboard() -> None:
    board = _dashboard()
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    panels = list(_panels(board["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in board["templating"]["list"]}
    assert {"datasource", "agent", "scorer"} <= variables
    for panel in panels:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used = {v.strip("${}") for v in re.findall(r"\$\{?\w+\}?", target["expr"])}
            assert used - {"__rate_interval", "__range", "__interval"} <= variables, (panel["title"], used)
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("score", "issues", "outcome", "pending", "evicted"):
        assert topic in titles, topic


def test_dashboard_covers_every_toolscore_metric(exposition: Exposition) -> None:
    used = set().union(*(names_in(expr).metrics for _, expr in dashboard_queries()))
    families = {n.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") for n in exposition.series}
    covered = {n.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count") for n in used}
    assert families <= covered, f"metrics without a panel: {sorted(families - covered)}"


@pytest.mark.parametrize("source", ["dashboard", "rules"])
def test_queries_use_only_exposed_names(source: str, exposition: Exposition) -> None:
    queries = dashboard_queries() if source == "dashboard" else rule_exprs()
    known = exposition.series | recorded_names()
    for where, expr in queries:
        names = names_in(expr)
        assert names.metrics, (where, expr)
        assert names.metrics <= known, f"{where}: unknown metrics {sorted(names.metrics - known)}"
        labels = exposition.labels | SCRAPE_LABELS
        assert names.labels <= labels, f"{where}: unknown labels {sorted(names.labels - labels)}"


def _promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    return promtool


def test_promtool_check_rules() -> None:
    result = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_rule_unit_tests() -> None:
    """The alerts fire on the series they are about, and only there (examples/prometheus/alerts.test.yml)."""
    result = subprocess.run([_promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True, text=True,
                            timeout=60, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    tested = {t["alertname"] for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for t in case["alert_rule_test"]}
    assert alerts <= tested, f"alerts without a unit test: {sorted(alerts - tested)}"
