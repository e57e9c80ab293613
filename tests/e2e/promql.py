"""What the Prometheus side sees: the exposition the exporter produces for every otel-toolscore
instrument, and the metric and label names a PromQL expression uses."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.support.paths import EXAMPLES

DASHBOARD = EXAMPLES / "grafana" / "toolscore.json"
RULES = EXAMPLES / "prometheus" / "alerts.yml"
RULE_TESTS = EXAMPLES / "prometheus" / "alerts.test.yml"

# PromQL functions, aggregations and keywords (the identifiers in an expression that are not metrics)
_KEYWORDS = frozenset(
    ["sum", "avg", "min", "max", "count", "count_values", "topk", "bottomk", "quantile", "stddev", "stdvar", "group", "limitk", "limit_ratio", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "atan2", "rate", "irate", "increase", "delta", "idelta", "deriv", "predict_linear", "resets", "changes", "histogram_quantile", "histogram_count", "histogram_sum", "histogram_fraction", "histogram_avg", "abs", "ceil", "floor", "round", "exp", "ln", "log2", "log10", "sqrt", "clamp", "clamp_min", "clamp_max", "vector", "scalar", "time", "timestamp", "label_replace", "label_join", "sort", "sort_desc", "absent", "absent_over_time", "avg_over_time", "min_over_time", "max_over_time", "sum_over_time", "count_over_time", "quantile_over_time", "stddev_over_time", "last_over_time", "present_over_time", "day_of_month", "day_of_week", "hour", "minute", "month", "year", "days_in_month", "sgn", "inf", "nan"]
)
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{([^{}]*)\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_GRAFANA_VAR = re.compile(r"\$(?:\{[^}]*\}|__\w+|\w+)")


@dataclass
class Names:
    metrics: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)


def names_in(expr: str) -> Names:
    """Metric (and recording-rule) names and label names an expression refers to."""
    out = Names()
    text = _GRAFANA_VAR.sub("1m", expr)
    text = _STRING.sub('""', text)
    for body in _MATCHERS.findall(text):
        out.labels.update(m.group(0) for m in re.finditer(r"[a-zA-Z_][a-zA-Z0-9_]*(?=\s*(?:=~|!~|!=|=))", body))
    text = _MATCHERS.sub(" ", text)
    for body in _GROUPING.findall(text):
        out.labels.update(name.strip() for name in body.split(",") if name.strip())
    text = _GROUPING.sub(" ", text)
    text = _RANGE.sub(" ", text)
    for match in _IDENT.finditer(text):
        name = match.group(0)
        # a function call or keyword is not a metric; "0.8" and "1e3" never match _IDENT's first char
        if name in _KEYWORDS or text[match.end():].lstrip().startswith("("):
            continue
        out.metrics.add(name)
    return out


@dataclass
class Exposition:
    """Series names (with _bucket/_sum/_count/_total) and label names, per exposed metric family."""

    series: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)
    text: str = ""


def toolscore_exposition() -> Exposition:
    """Record every otel-toolscore instrument once and read back what the Prometheus exporter shows."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import REGISTRY, generate_latest

    from otel_toolscore.config import load_settings
    from otel_toolscore.outputs.otel import Emitter
    from otel_toolscore.scorers.base import Score
    from otel_toolscore.trajectory import Trajectory

    reader = PrometheusMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        emitter = Emitter(load_settings(), meter_provider=provider)
        run = Trajectory(trace_id="0" * 31 + "1", span_id="0" * 15 + "1", agent_name="weather-assistant")
        scores = [
            Score(name="tool_call_validation", value=0.3, label="fail", details={"tool_calls": [
                {"name": "send_email", "score": 0.3, "issues": [{"type": "schema_violation", "severity": "high"}]}]}),
            Score(name="tool_call_accuracy", value=None, label="skipped"),
            Score(name="tool_call_appropriateness", value=None, label="error", error="judge_unavailable"),
        ]
        emitter.record_metrics(run, scores)
        emitter.count_evaluation("tool_call_appropriateness", "dropped")
        emitter.count_evicted("trace_ttl")
        emitter.observe_pending(lambda: 3)
        emitter.record_judge(0.5, 0.01, "gpt-4o-mini")
        quiet = logging.getLogger("otel_toolscore.outputs.otel")
        level, quiet.level = quiet.level, logging.CRITICAL
        try:
            emitter._failed("events")
        finally:
            quiet.setLevel(level)
        text = generate_latest(REGISTRY).decode()
    finally:
        provider.shutdown()
    out = Exposition(text=text)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        name = name.split()[0]
        if name.startswith(("gen_ai_evaluation_", "toolscore_")):
            out.series.add(name)
            out.labels.update(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', rest))
    return out


# --- the shipped dashboard and rules ----------------------------------------------------------


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every query in the dashboard, variables' queries included."""
    board = _dashboard()
    out = [(p["title"], t["expr"]) for p in _panels(board["panels"]) for t in p.get("targets", [])]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            # label_values(metric, label): the metric must exist and carry the label
            metric, label = (s.strip() for s in query[query.index("(") + 1 : query.rindex(")")].split(","))
            out.append((f"variable {var['name']}", f"sum by ({label}) ({metric})"))
    return out


def rule_exprs() -> list[tuple[str, str]]:
    rules = yaml.safe_load(RULES.read_text())
    return [(r.get("alert") or r["record"], r["expr"]) for g in rules["groups"] for r in g["rules"]]


def recorded_names() -> set[str]:
    return {r["record"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "record" in r}
