"""``otel-toolscore demo`` as a user runs it: a real process, well under a minute, a readable
summary, and OTLP/JSON files that the rest of the tool chain reads back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_toolscore import semconv
from otel_toolscore.assemble import build_trajectories
from otel_toolscore.demo_agent.phoenix import find_phoenix
from otel_toolscore.ingest import load_otlp
from tests.e2e.e2e_support import clean_env, require_examples_extra, run_python
from tests.support.otlp_sink import OtlpSink

RUNS = ("good", "wrong_tool", "bad_arguments", "hallucinated", "failing_tool")
#: (scenario, scorer short name in the table, cell)
CELLS = {
    "good": ("1 pass", "1 pass", "1 pass"),
    "wrong_tool": ("0 fail", "1 pass", "1 pass"),
    "bad_arguments": ("1 pass", "0.3 fail", "1 pass"),
    "hallucinated": ("1 pass", "1 pass", "0.1 fail"),
    "failing_tool": ("1 pass", "1 pass", "0 fail"),
}
# Blocks the import of openai in the demo process, as on a machine without the examples extra.
WITHOUT_OPENAI = "import sys; sys.modules['openai'] = None; from otel_toolscore.cli import main; main()"


def _demo(args: list[str], *, env_extra: dict[str, str] | None = None, code: str | None = None,
          timeout: float = 120) -> str:
    cmd = ["-c", code, "demo", *args] if code else ["-m", "otel_toolscore.cli", "demo", *args]
    result = run_python(cmd, clean_env(COLUMNS="120", **(env_extra or {})), timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _check_table(out: str) -> None:
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[3:6]]
            for line in out.splitlines() if line.startswith("│")}
    for run, cells in CELLS.items():
        assert tuple(rows[run]) == cells, (run, rows.get(run))
    assert "schema_violation (high)" in out
    assert "hallucinated_content (high)" in out
    assert "error_result (high)" in out
    assert "was not called ([search_web])" in out  # explanations are text, not rich markup


def _check_files(out_dir: Path) -> None:
    spans = load_otlp(str(out_dir / "spans.jsonl")).spans
    runs = build_trajectories(spans)
    assert len(runs) == 5 and all(r.agent_name == "weather-assistant" for r in runs)
    agents = [s for s in spans if (s.attributes or {}).get("toolscore.tool_call_accuracy.score") is not None]
    evaluations = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "evaluation"]
    # code scores ride on the agent span (and the events): no evaluation span repeats them by default
    assert len(agents) == 5 and evaluations == []
    for a in agents:
        assert {k.split(".")[1] for k in a.attributes if k.endswith(".label")} == {
            "tool_call_accuracy", "tool_call_validation", "tool_result_verification"}

    events = []
    for line in (out_dir / "logs.jsonl").read_text().splitlines():
        for rl in json.loads(line)["resourceLogs"]:
            for sl in rl["scopeLogs"]:
                events += [r for r in sl["logRecords"] if r.get("eventName") == semconv.GEN_AI_EVALUATION_RESULT]
    assert len(events) >= 15
    assert all(len(r["traceId"]) == 32 and len(r["spanId"]) == 16 for r in events)  # hex, parented

    metrics: dict[str, dict] = {}
    for line in (out_dir / "metrics.jsonl").read_text().splitlines():
        for rm in json.loads(line)["resourceMetrics"]:
            for sm in rm["scopeMetrics"]:
                metrics.update({m["name"]: m for m in sm["metrics"]})
    histogram = metrics[semconv.METRIC_EVALUATION_SCORE]["histogram"]["dataPoints"]
    scorers = {a["value"]["stringValue"] for p in histogram for a in p["attributes"]
               if a["key"] == semconv.GEN_AI_EVALUATION_NAME}
    assert scorers == {"tool_call_accuracy", "tool_call_validation", "tool_result_verification"}
    assert sum(int(p["count"]) for p in histogram) == 15
    assert semconv.METRIC_TOOL_CALL_ISSUES in metrics and semconv.METRIC_EVALUATIONS in metrics


def test_demo_with_real_instrumentation(tmp_path: Path) -> None:
    require_examples_extra()
    out = _demo(["--out", str(tmp_path / "out")])
    assert "opentelemetry-instrumentation-openai-v2" in out
    _check_table(out)
    _check_files(tmp_path / "out")
    # the files are what `otel-toolscore score` reads
    rescored = run_python(["-m", "otel_toolscore.cli", "score", str(tmp_path / "out" / "spans.jsonl"),
                           "--format", "json"], clean_env())
    assert rescored.returncode == 0, rescored.stderr
    assert len(rescored.stdout.splitlines()) == 5


def test_demo_with_core_dependencies_only(tmp_path: Path) -> None:
    out = _demo(["--out", str(tmp_path / "out")], code=WITHOUT_OPENAI)
    assert "built-in stdlib client" in out
    _check_table(out)
    _check_files(tmp_path / "out")


def test_demo_with_openinference(tmp_path: Path) -> None:
    require_examples_extra("openai", "openinference.instrumentation.openai")
    out = _demo(["--out", str(tmp_path / "out"), "--instrumentation", "openinference"])
    assert "openinference-instrumentation-openai" in out
    _check_table(out)


def test_demo_sends_to_an_otlp_endpoint(tmp_path: Path) -> None:
    with OtlpSink() as sink:
        out = _demo(["--out", str(tmp_path / "out"), "--otlp-endpoint", sink.url, "--instrumentation",
                        "builtin"])
        traces, logs, metrics = sink.messages("traces"), sink.messages("logs"), sink.messages("metrics")
    assert traces and logs and metrics
    assert f"to {sink.url} over OTLP/HTTP" in out
    assert not (tmp_path / "out" / "spans.jsonl").exists()  # the backend instead of the files


def test_demo_reports_a_missing_phoenix(tmp_path: Path) -> None:
    no_phoenix = "import otel_toolscore.demo as d; d.find_phoenix = lambda: None; from otel_toolscore.cli import main; main()"
    result = run_python(["-c", no_phoenix, "demo", "--phoenix", "--out",
                         str(tmp_path / "out")], clean_env(COLUMNS="300"))
    assert result.returncode == 2
    assert "Phoenix is not installed" in result.stderr and ".venv-phoenix" in result.stderr


def test_demo_with_phoenix(tmp_path: Path) -> None:
    if find_phoenix() is None:
        pytest.skip("Arize Phoenix is not installed (.ci/run installs it into .venv-phoenix)")
    out = _demo(["--out", str(tmp_path / "out"), "--phoenix", "--no-keep-running", "--instrumentation",
                    "builtin"], timeout=240)
    assert "traces also in Phoenix: http://127.0.0.1:" in out
    assert (tmp_path / "out" / "phoenix" / "phoenix.db").is_file()
