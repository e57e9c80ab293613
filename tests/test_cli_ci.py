"""``otel-toolscore score`` as a CI gate: JUnit XML that CI servers can read, a one-line summary
on stderr beside machine formats, and a progress bar only on a terminal."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from xml.etree import ElementTree as ET

import pytest

from otel_toolscore.outputs.report import ScoreProgress
from tests.support.paths import CAPTURES, SAMPLE

WRONG_TOOL = CAPTURES / "openinference_openai" / "wrong_tool.json"
SUMMARY = re.compile(
    r"^otel-toolscore: (?P<runs>\d+) runs from (?P<files>\d+) file\(s\); (?P<scores>\d+) scores: "
    r"(?P<passed>\d+) passed, (?P<failed>\d+) failed, (?P<skipped>\d+) skipped, (?P<errors>\d+) errors"
    r"(?P<rest>.*)$"
)


def score(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_toolscore.cli", "score", *args],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, **env} if env else None)


def summary(proc: subprocess.CompletedProcess) -> re.Match:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("otel-toolscore: ")]
    assert len(lines) == 1, proc.stderr
    match = SUMMARY.match(lines[0])
    assert match, lines[0]
    return match


def test_junit_is_structurally_valid_and_failures_carry_the_explanation() -> None:
    args = [str(SAMPLE), str(WRONG_TOOL), "--expected-tool", "get_weather", "--fail-under", "0.8"]
    xml = score(*args, "--format", "junit")
    assert xml.returncode == 1  # a score under the gate
    suite = ET.fromstring(xml.stdout)
    assert suite.tag == "testsuite" and suite.get("name") == "otel-toolscore"
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) > 0
    for kind, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        assert int(suite.get(attr)) == sum(1 for c in cases if c.find(kind) is not None), attr
    assert int(suite.get("failures")) >= 1
    for case in cases:
        assert case.get("classname") and case.get("name")
        assert len([child for child in case if child.tag in ("failure", "error", "skipped")]) <= 1
    # every failure names the score and carries the scorer's own explanation
    records = [json.loads(line) for line in score(*args, "--format", "json").stdout.splitlines()]
    explanations = {s["explanation"] for r in records for s in r["scores"]}
    failures = [c.find("failure") for c in cases if c.find("failure") is not None]
    for failure in failures:
        message = failure.get("message")
        name, _, rest = message.partition(" = ")
        assert name in {s["name"] for r in records for s in r["scores"]}
        assert any(e and e in rest for e in explanations), message
        json.loads(failure.text)  # the details, readable
    wrong = [f.get("message") for f in failures if f.get("message").startswith("tool_call_accuracy")]
    assert any("get_weather" in m and "was not called" in m for m in wrong), wrong
    # the summary on stderr agrees with the XML
    line = summary(xml)
    assert int(line["scores"]) == len(cases)
    assert int(line["failed"]) == int(suite.get("failures"))
    assert int(line["errors"]) == int(suite.get("errors"))
    assert int(line["skipped"]) == int(suite.get("skipped"))
    assert int(line["files"]) == 2
    assert "--fail-under 0.8: " in line["rest"] and "exit 1" in line["rest"]


def test_json_format_prints_a_summary_line_and_no_progress_bar_when_not_a_tty() -> None:
    proc = score(str(SAMPLE), "--format", "json")
    assert proc.returncode == 0
    line = summary(proc)
    assert int(line["runs"]) == len(proc.stdout.splitlines()) == 5
    assert line["rest"] == ""  # no gate, no input problems
    # stderr is a pipe: no bar, no cursor control, nothing but the summary
    assert proc.stderr.count("\n") == 1
    assert "\x1b" not in proc.stderr and "\r" not in proc.stderr and "━" not in proc.stderr
    assert "\x1b" not in proc.stdout


def test_passing_gate_and_table_has_no_stderr_summary() -> None:
    proc = score(str(SAMPLE), "--format", "junit", "-s", "tool_call_validation", "--fail-under", "0")
    assert proc.returncode == 0
    assert summary(proc)["rest"] == "; --fail-under 0: passed"
    table = score(str(SAMPLE))
    assert table.returncode == 0 and table.stderr == ""
    assert "5 runs from 1 file(s)" in table.stdout


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TERM", raising=False)
    pipe = io.StringIO()
    with ScoreProgress(pipe, delay=0) as progress:
        progress.stage("reading", 2)
        progress.advance()
        time.sleep(0.2)
    assert not progress.enabled and pipe.getvalue() == ""

    tty = FakeTTY()
    with ScoreProgress(tty, delay=0) as progress:
        progress.stage("scoring", 4)
        progress.advance(3)
        time.sleep(0.3)
    assert progress.enabled
    assert "scoring" in tty.getvalue() and "3/4" in tty.getvalue()

    monkeypatch.setenv("TERM", "dumb")
    assert not ScoreProgress(FakeTTY()).enabled


def test_progress_bar_waits_before_showing() -> None:
    tty = FakeTTY()
    with ScoreProgress(tty, delay=5) as progress:  # quick work: nothing is drawn
        progress.stage("reading", 1)
        progress.advance()
    assert progress.enabled and tty.getvalue() == ""


# --- the gate explains itself (issue 18, item 5) -----------------------------------------------


def test_the_table_gate_names_every_failing_score_and_exits_1() -> None:
    proc = score(str(SAMPLE), "--fail-under", "0.5")
    assert proc.returncode == 1
    below = [line for line in proc.stdout.splitlines() if line.strip().startswith("below --fail-under 0.5:")]
    records = [json.loads(line) for line in score(str(SAMPLE), "--format", "json").stdout.splitlines()]
    expected = {(r["trace_id"], s["name"], s["value"]) for r in records for s in r["scores"]
                if s["value"] is not None and s["value"] < 0.5}
    assert len(expected) == 3 and len(below) == len(expected)
    for trace, name, value in expected:
        assert any(f"trace {trace} " in line and f"{name} = {value:g}" in line for line in below), (trace, name, below)


def test_labels_the_summary_junit_and_exit_status_agree_under_a_gate() -> None:
    # with --require-schemas tool_call_validation scores 0.6 with a "pass" label (unknown tools are
    # medium issues): under a 0.8 gate it fails, and every output says so
    args = [str(SAMPLE), "-s", "tool_call_validation", "--require-schemas", "--fail-under", "0.8"]
    table = score(*args)
    assert table.returncode == 1
    assert "0.6 fail" in table.stdout and "0.6 pass" not in table.stdout
    xml = score(*args, "--format", "junit")
    suite = ET.fromstring(xml.stdout)
    failed = [c.get("name") for c in suite.findall("testcase") if c.find("failure") is not None]
    line = summary(xml)
    assert int(line["failed"]) == len(failed) == int(suite.get("failures")) == 3  # 0.6, 0, 0.6
    assert xml.returncode == 1
    # a value at or above the gate passes whatever the scorer's label: 0.4 < 0.5 only
    results = score(str(SAMPLE), "-s", "tool_result_verification", "--fail-under", "0.3", "--format", "junit")
    assert results.returncode == 0 and summary(results)["failed"] == "0"
    assert ET.fromstring(results.stdout).get("failures") == "0"


def test_the_table_and_json_print_one_and_the_same_summary() -> None:
    table = score(str(SAMPLE))
    json_run = score(str(SAMPLE), "--format", "json")
    (json_summary,) = [line for line in json_run.stderr.splitlines() if line.startswith("otel-toolscore: ")]
    assert json_summary in table.stdout.splitlines()
    assert "15 scores: 5 passed, 3 failed, 7 skipped, 0 errors" in json_summary


@pytest.mark.parametrize("columns", ["80", "200"])
def test_the_table_shows_the_whole_trace_id_then_service_and_agent_of_each_run(columns: str) -> None:
    proc = score(str(SAMPLE), env={"COLUMNS": columns})
    records = [json.loads(line) for line in score(str(SAMPLE), "--format", "json").stdout.splitlines()]
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if "trace" in line)
    assert "service" in header and "agent" in header
    for record in records:
        assert record["service_name"] and len(record["trace_id"]) == 32
        # the whole id on one line, in the first cell: pasted into a backend's search, it finds the trace
        (i,) = [i for i, line in enumerate(lines) if line.startswith(f"│{record['trace_id']} ")]
        assert lines[i + 1].startswith(f"│{record['service_name'][:32]}")  # a longer name folds on
        assert record["agent_name"] in "".join(lines[i + 2 : i + 4])


def test_runs_without_tool_schemas_are_skipped_and_pass_the_gate() -> None:
    """docs/scorers.md, "No schema is no penalty": the openai-v2 (B) and Mastra (M1) runs record no offered tools and no
    schema: tool_call_validation is skipped (None, never 0.6), the gate does not count them, and
    the report says how to supply schemas."""
    args = [str(SAMPLE), "-s", "tool_call_validation", "--fail-under", "0.8"]
    records = [json.loads(line) for line in score(*args, "--format", "json").stdout.splitlines()]
    skipped = [s for r in records for s in r["scores"] if s["label"] == "skipped"]
    assert len(skipped) == 2 and all(s["value"] is None for s in skipped)
    assert all(s["details"]["reason"] == "no_tool_schemas" and s["details"]["checked_calls"] == 0 for s in skipped)
    assert all("--tool-schemas" in s["explanation"] for s in skipped)
    xml = score(*args, "--format", "junit")
    line = summary(xml)
    assert (line["failed"], line["skipped"]) == ("1", "2")  # the one 0 (bad arguments) only
    table = score(*args)
    hints = [line for line in table.stdout.splitlines() if line.strip().startswith("skipped:")]
    assert any("--tool-schemas FILE" in h and "tool_schemas" in h for h in hints), hints


def test_skipped_says_how_to_set_an_expectation() -> None:
    proc = score(str(SAMPLE))
    (hint,) = [line for line in proc.stdout.splitlines()
               if line.strip().startswith("skipped:") and "expected tool" in line]
    for way in ("--expected-tool", "toolscore.expected_tool", "rules"):
        assert way in hint
    records = [json.loads(line) for line in score(str(SAMPLE), "--format", "json").stdout.splitlines()]
    explanation = next(s["explanation"] for s in records[0]["scores"] if s["name"] == "tool_call_accuracy")
    for way in ("--expected-tool", "toolscore.expected_tool", "rules"):
        assert way in explanation


def test_error_messages_are_one_line_in_ci_logs() -> None:
    missing = "/nonexistent/" + "a-very-long-directory-name/" * 6 + "traces.json"
    proc = score(missing)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and missing in lines[0], proc.stderr
