"""One settings file for the app, the sidecar and the CLI (issue 18, item 1): the settings
file of docs/configuration.md starts all three, and ``score`` applies the rules production applies."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_toolscore.config import load_settings
from otel_toolscore.runtime.serve import ToolScoreServer
from tests.support.env import without_otel
from tests.support.paths import REPO, SAMPLE


def settings_yaml() -> str:
    """The settings block of docs/configuration.md (the one that shows hold_timeout and rules)."""
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    (block,) = [b for b in blocks if "hold_timeout" in b and "rules:" in b]
    return block


def score(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_toolscore.cli", "score", *args], capture_output=True,
                          text=True, timeout=120, check=False, env=env or without_otel())


def accuracy(proc: subprocess.CompletedProcess) -> list[float | None]:
    assert proc.returncode in (0, 1), proc.stderr
    return [next(s["value"] for s in json.loads(line)["scores"] if s["name"] == "tool_call_accuracy")
            for line in proc.stdout.splitlines()]


def test_the_documented_settings_file_serves_the_app_the_sidecar_and_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "toolscore.yaml"
    path.write_text(settings_yaml(), encoding="utf-8")
    app = load_settings(path)
    assert app.hold_timeout == 2.0 and app.decision_wait == 2.0 and app.rules
    # the sidecar: the app's hold bound counts from the end of its quiet wait
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    sidecar = ToolScoreServer(span_exporter=InMemorySpanExporter(), config_file=path, metrics=False, events=False)
    assert sidecar.settings.hold_timeout == pytest.approx(4.0)
    # the real command starts on it, and stops on SIGTERM
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_toolscore.cli", "serve", "--config", str(path), "--upstream",
         "http://127.0.0.1:9", "--grpc-port", "0", "--http-port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=without_otel())
    try:
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline and "OTLP/HTTP on" not in line:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        assert "OTLP/HTTP on" in line, proc.stderr.read() if proc.poll() is not None else line
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    # and the CLI
    assert score(str(SAMPLE), "--config", str(path)).returncode == 0


RULES = """
rules:
  - agent: "tool-.*"
    expected_tool: get_weather
"""


def test_score_applies_rules_from_the_file_the_config_variable_and_the_rules_variable(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES, encoding="utf-8")
    without = accuracy(score(str(SAMPLE), "--format", "json"))
    assert without == [None] * 5  # no expectation: skipped
    by_flag = accuracy(score(str(SAMPLE), "--format", "json", "--config", str(path)))
    by_variable = accuracy(score(str(SAMPLE), "--format", "json", env=without_otel(OTEL_TOOLSCORE_CONFIG=str(path))))
    rules_env = json.dumps([{"agent": "tool-.*", "expected_tool": "get_weather"}])
    by_rules = accuracy(score(str(SAMPLE), "--format", "json", env=without_otel(OTEL_TOOLSCORE_RULES=rules_env)))
    assert by_flag == by_variable == by_rules
    assert sorted(by_flag) == [0.0, 0.0, 0.0, 1.0, 1.0]  # two runs called get_weather
    # an option given on the command line wins over the file's rule
    flagged = accuracy(score(str(SAMPLE), "--format", "json", "--config", str(path), "--expected-tool", "send_email"))
    assert sorted(flagged) == [0.0, 0.0, 0.0, 1.0, 1.0] and flagged != by_flag


def test_score_reads_scorers_and_their_options_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "scorers.yaml"
    path.write_text("scorers: [tool_call_accuracy]\n"
                    "scorer_options: {tool_call_accuracy: {expected_tool: search_knowledge_base}}\n",
                    encoding="utf-8")
    proc = score(str(SAMPLE), "--format", "json", "--config", str(path))
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert all([s["name"] for s in r["scores"]] == ["tool_call_accuracy"] for r in records)
    assert sorted(accuracy(proc)) == [0.0, 0.0, 0.0, 0.0, 1.0]


def test_a_bad_file_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("rules: [{agent: '('}]\n", encoding="utf-8")
    proc = score(str(SAMPLE), "--config", str(path))
    assert proc.returncode == 2 and str(path) in proc.stderr
