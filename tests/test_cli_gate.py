"""``otel-toolscore score --fail-under`` as a CI gate that cannot pass on nothing (issue 28): no run
read, every score an error (the judge unreachable) or every score skipped fail it, saying why;
``--allow-errors`` lets errors through; skipped scores neither pass nor fail. Whole trace ids in the
table and in every line naming a run; JUnit typed by the issue, the error and the skip. And the
command line's help: ``-h``, the inputs it reads, readable metavars."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from otel_toolscore import extras
from otel_toolscore.outputs.report import ScoredRun, gate_reasons, junit, summary_line, verdict
from otel_toolscore.scorers.base import Score
from otel_toolscore.scorers.judge import JudgeUnavailable
from otel_toolscore.trajectory import Trajectory
from tests.support.judge_server import closed_port_url
from tests.support.paths import CAPTURES, SAMPLE

WRONG_TOOL = CAPTURES / "openinference_openai" / "wrong_tool.json"
TRACE_IDS = re.compile(r"\b[0-9a-f]{32}\b")


def score(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_toolscore.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, "COLUMNS": "200", **(env or {})})


def sample_trace_ids() -> list[str]:
    proc = score("score", str(SAMPLE), "--format", "json", "-s", "tool_call_validation")
    return [json.loads(line)["trace_id"] for line in proc.stdout.splitlines()]


def gate_part(text: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith("otel-toolscore: ") and " runs from " in line]
    return line.split("; --fail-under ", 1)[1] if "; --fail-under " in line else ""


# --- the verdict and the gate, on made-up scores ------------------------------------------------


def run_of(*scores: Score, trace: str = "ab" * 16, source: str = "t.json") -> ScoredRun:
    return ScoredRun(source=source, trajectory=Trajectory(trace_id=trace, span_id="cd" * 8, agent_name="bot"),
                     scores=list(scores))


PASS = Score(name="tool_call_validation", value=1.0, label="pass")
LOW = Score(name="tool_result_verification", value=0.4, label="fail", explanation="made up")
JUDGE_DOWN = Score.failed("tool_call_appropriateness", JudgeUnavailable("connection refused"))
SKIPPED = [Score(name="tool_call_accuracy", value=None, label="skipped", explanation="no expectation"),
           Score(name="prompt_alignment", value=None, label="not_applicable", explanation="no instructions"),
           Score(name="context_position", value=None, label="no_context", explanation="no documents")]


def test_skipped_labels_are_neither_pass_nor_fail_nor_errors() -> None:
    assert JUDGE_DOWN.error == "judge_unavailable" and verdict(JUDGE_DOWN, 0.8) == "error"
    for s in SKIPPED:
        assert verdict(s, 0.8) == verdict(s) == "skipped"
    runs = [run_of(PASS, *SKIPPED)]
    assert gate_reasons(runs, 0.8) == []  # one judged pass, three skips: passes
    assert "4 scores: 1 passed, 0 failed, 3 skipped, 0 errors; --fail-under 0.8: passed" in summary_line(runs, 0, 0.8)


def test_the_gate_fails_on_nothing_and_says_why() -> None:
    assert gate_reasons([], 0.8, files=2) == ["0 runs read from 2 files"]
    assert gate_reasons([], None, files=2) == []  # no gate, no verdict
    assert gate_reasons([run_of(*SKIPPED)], 0.8) == ["no score judged (3 skipped)"]
    assert gate_reasons([run_of()], 0.8) == ["no scores for 1 run"]
    (errors,) = gate_reasons([run_of(JUDGE_DOWN), run_of(JUDGE_DOWN)], 0.8)
    assert errors.startswith("2 of 2 scores are errors (judge_unavailable ×2: Scorer tool_call_appropriateness "
                             "failed: connection refused")
    # errors allowed: still not a pass when nothing at all was judged
    assert gate_reasons([run_of(JUDGE_DOWN)], 0.8, allow_errors=True) == ["no score judged (1 error)"]
    assert gate_reasons([run_of(JUDGE_DOWN, PASS)], 0.8, allow_errors=True) == []
    assert "--fail-under 0.8: passed (1 error allowed)" in summary_line([run_of(JUDGE_DOWN, PASS)], 0, 0.8,
                                                                         allow_errors=True)
    mixed = gate_reasons([run_of(JUDGE_DOWN, PASS, LOW)], 0.8)
    assert mixed[0] == "1 below 0.8" and mixed[1].startswith("1 of 3 scores is an error (judge_unavailable: ")
    line = summary_line([], 0, 0.8, files=2)
    assert line == ("otel-toolscore: 0 runs from 2 file(s); 0 scores: 0 passed, 0 failed, 0 skipped, 0 errors; "
                    "--fail-under 0.8: failed, exit 1: 0 runs read from 2 files")


def test_junit_types_failures_by_issue_errors_by_error_and_skips_by_label(tmp_path: Path) -> None:
    proc = score("score", str(SAMPLE), "--format", "json")
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    failing = next(s for r in records for s in r["scores"] if s["name"] == "tool_result_verification"
                   and s["label"] == "fail")
    issue = Score(**{k: failing[k] for k in ("name", "value", "label", "explanation", "details")})
    out = tmp_path / "report.xml"
    with out.open("w") as f:
        junit([run_of(issue, JUDGE_DOWN, *SKIPPED, PASS)], f, fail_under=0.8)
    suite = ET.parse(out).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("6", "1", "1", "3")
    by_name = {c.get("name").split(" ")[0]: c for c in suite.findall("testcase")}
    assert by_name["tool_result_verification"].find("failure").get("type") == "error_result"  # the issue, never "pass"
    error = by_name["tool_call_appropriateness"].find("error")
    assert error.get("type") == "judge_unavailable" and "connection refused" in error.get("message")
    assert by_name["prompt_alignment"].find("skipped").get("message") == "not_applicable: no instructions"
    assert by_name["context_position"].find("skipped").get("message") == "no_context: no documents"
    for case in suite.findall("testcase"):
        assert f"[trace {'ab' * 16} span {'cd' * 8}]" in case.get("name")
    # a value under the gate with no issue to name
    with out.open("w") as f:
        junit([run_of(Score(name="x", value=0.5, label="pass"))], f, fail_under=0.8)
    assert ET.parse(out).getroot().find("testcase/failure").get("type") == "below_fail_under"


# --- the command, end to end ----------------------------------------------------------------------


def test_zero_runs_fail_the_gate_in_every_format(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"resourceSpans": []}')
    no_agent = tmp_path / "no-agent.json.gz"  # spans, none of them an agent, LLM or tool span
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "GET /",
                                                        "startTimeUnixNano": "1", "endTimeUnixNano": "2"}]}]}]}
    no_agent.write_bytes(gzip.compress(json.dumps(doc).encode()))
    for fmt in ("table", "json", "junit"):
        proc = score("score", str(empty), str(no_agent), "--fail-under", "0.8", "--format", fmt)
        assert proc.returncode == 1, (fmt, proc.stdout, proc.stderr)
        assert gate_part(proc.stdout + proc.stderr) == "0.8: failed, exit 1: 0 runs read from 2 files", fmt
        assert "no agent run found" in proc.stderr
    suite = ET.fromstring(proc.stdout)
    (case,) = suite.findall("testcase")  # not an empty, green suite
    assert suite.get("failures") == "1" and case.find("failure").get("type") == "no_runs"
    assert "0 runs read from 2 files" in case.find("failure").get("message")
    # without a gate: reported, exit 0
    assert score("score", str(empty)).returncode == 0


def test_every_score_skipped_fails_the_gate() -> None:
    proc = score("score", str(SAMPLE), "-s", "tool_call_accuracy", "--fail-under", "0.5")
    assert proc.returncode == 1
    assert gate_part(proc.stdout) == "0.5: failed, exit 1: no score judged (5 skipped)"
    # with an expectation they are judged, and a skipped score beside judged ones is no failure
    ok = score("score", str(SAMPLE), "-s", "tool_call_accuracy", "-s", "tool_call_validation", "--fail-under", "0")
    assert ok.returncode == 0 and gate_part(ok.stdout) == "0: passed"


@pytest.fixture(scope="module")
def judge_down(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Settings whose LLM judge is a loopback port nothing listens on (one attempt, no retries)."""
    path = tmp_path_factory.mktemp("judge") / "toolscore.yaml"
    path.write_text(
        "scorer_options:\n  tool_call_appropriateness:\n    model: openai/gpt-4o-mini\n"
        f"    api_base: {closed_port_url()}\n    api_key: sk-test\n    max_retries: 0\n"
    )
    return path


def test_an_unreachable_judge_fails_the_gate_naming_the_error(judge_down: Path) -> None:
    traces = sample_trace_ids()
    args = ["score", str(SAMPLE), "--config", str(judge_down), "-s", "tool_call_appropriateness", "--fail-under", "0.8"]
    table = score(*args)
    assert table.returncode == 1, table.stdout + table.stderr
    gate = gate_part(table.stdout)
    assert gate.startswith("0.8: failed, exit 1: 5 of 5 scores are errors (judge_unavailable ×5: "
                           "Scorer tool_call_appropriateness failed: "), gate
    assert "5 scores: 0 passed, 0 failed, 0 skipped, 5 errors" in table.stdout
    # the table: the error's type in the cell, its message under the table with the whole trace id
    assert table.stdout.count("error: judge_unavailable") >= 5
    errors = [line for line in table.stdout.splitlines() if line.startswith("  error: trace ")]
    assert len(errors) == 5
    for trace in traces:
        assert any(f"trace {trace} tool-assistant · tool_call_appropriateness: judge_unavailable: " in line
                   for line in errors), trace
        assert any(line.startswith(f"│{trace} ") for line in table.stdout.splitlines()), trace
    # JUnit: five typed errors, and the summary and error lines on stderr
    xml = score(*args, "--format", "junit")
    assert xml.returncode == 1
    suite = ET.fromstring(xml.stdout)
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("5", "5", "0")
    assert {c.find("error").get("type") for c in suite.findall("testcase")} == {"judge_unavailable"}
    assert gate_part(xml.stderr) == gate and xml.stderr.count("  error: trace ") == 5
    # allowing errors does not make a gate that judged nothing pass
    allowed = score(*args, "--allow-errors")
    assert allowed.returncode == 1 and gate_part(allowed.stdout) == "0.8: failed, exit 1: no score judged (5 errors)"


def test_mixed_errors_and_scores_and_allow_errors(judge_down: Path) -> None:
    args = ["score", str(SAMPLE), "--config", str(judge_down), "-s", "tool_call_appropriateness",
            "-s", "tool_call_validation", "--format", "junit"]
    gated = score(*args, "--fail-under", "0.5")
    assert gated.returncode == 1
    assert re.fullmatch(r"0\.5: failed, exit 1: 1 below 0\.5; 5 of 10 scores are errors \(judge_unavailable ×5: .*\)",
                        gate_part(gated.stderr)), gated.stderr
    suite = ET.fromstring(gated.stdout)
    assert (suite.get("tests"), suite.get("errors"), suite.get("failures")) == ("10", "5", "1")
    (failure,) = [c.find("failure") for c in suite.findall("testcase") if c.find("failure") is not None]
    assert failure.get("type") in {"schema_violation", "missing_required_param"}  # the issue found, not a label
    # errors allowed, nothing under the gate: passes, saying how many errors it let through
    allowed = score(*args, "--fail-under", "0", "--allow-errors")
    assert allowed.returncode == 0, allowed.stderr
    assert gate_part(allowed.stderr) == "0: passed (5 errors allowed)"
    assert ET.fromstring(allowed.stdout).get("errors") == "5"  # still reported as errors


def test_issue_and_gate_lines_name_the_whole_trace() -> None:
    proc = score("score", str(SAMPLE), "--fail-under", "0.5")
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("  • ", "  below --fail-under"))]
    assert lines
    for line in lines:
        assert re.search(r" trace [0-9a-f]{32} tool-assistant · ", line), line


def test_a_directory_is_read_file_by_file(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    shutil.copy(SAMPLE, tmp_path / "a" / "sample.jsonl")
    (tmp_path / "b.json.gz").write_bytes(gzip.compress(WRONG_TOOL.read_bytes()))
    (tmp_path / ".hidden").write_text("not a trace")  # left out, as a .git folder would be
    proc = score("score", str(tmp_path), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert "otel-toolscore: 6 runs from 2 file(s)" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    none = score("score", str(empty), "--fail-under", "0.5")
    assert none.returncode == 1 and "a directory with no files" in none.stderr
    assert gate_part(none.stdout) == "0.5: failed, exit 1: 0 runs read from 0 files"


# --- help -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], ["score"], ["serve"], ["demo"]])
def test_h_is_help_everywhere_with_readable_metavars(command: list[str]) -> None:
    short = score(*command, "-h", env={"COLUMNS": "100"})
    assert short.returncode == 0, short.stderr
    assert short.stdout == score(*command, "--help", env={"COLUMNS": "100"}).stdout
    assert "-h, --help" in short.stdout
    assert not re.search(r"<(str|int|float|path|list\[[a-z]+\])>", short.stdout), short.stdout


def test_score_help_names_the_inputs_it_reads() -> None:
    text = " ".join(score("score", "-h", env={"COLUMNS": "200"}).stdout.split())
    for word in ("OTLP/JSON", "JSON lines", "protobuf", "Jaeger", "Tempo", ".gz", "directories", "'-' for stdin",
                 "INPUT", "--fail-under X", "--allow-errors", "not_applicable"):
        assert word in text, word


def test_install_commands_for_a_checkout_and_for_a_wheel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    checkout = tmp_path / "src"
    (checkout / "otel_toolscore").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("")
    monkeypatch.setattr(extras, "__file__", str(checkout / "otel_toolscore" / "extras.py"))
    assert extras.install_command("examples") == f"pip install -e '{checkout.resolve()}[examples]'"
    wheel = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    (wheel / "otel_toolscore").mkdir(parents=True)
    monkeypatch.setattr(extras, "__file__", str(wheel / "otel_toolscore" / "extras.py"))
    assert extras.install_command("examples") == "pip install 'otel-toolscore[examples]'"
