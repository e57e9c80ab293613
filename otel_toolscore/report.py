"""Rendering scored trajectories for people (table), programs (JSON lines) and CI (JUnit XML)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO
from xml.etree import ElementTree as ET

from rich.console import Console
from rich.table import Table

from otel_toolscore.scorers.base import Score
from otel_toolscore.trajectory import Trajectory


@dataclass
class ScoredRun:
    source: str
    trajectory: Trajectory
    scores: list[Score] = field(default_factory=list)


def json_lines(runs: Sequence[ScoredRun], out: TextIO) -> None:
    for run in runs:
        record: dict[str, Any] = run.trajectory.to_report()
        record["scores"] = [s.to_dict() for s in run.scores]
        out.write(json.dumps(record, ensure_ascii=False, default=str))
        out.write("\n")


_SHORT = {
    "tool_call_accuracy": "accuracy",
    "tool_call_validation": "arguments",
    "tool_result_verification": "results",
    "tool_call_appropriateness": "approp.",
    "prompt_alignment": "alignment",
    "context_position": "context",
}


def _cell(score: Score | None) -> str:
    if score is None:
        return ""
    if score.value is None:
        return score.label or (score.error or "—")
    label = f" {score.label}" if score.label in ("pass", "fail") else ""
    return f"{score.value:g}{label}"


def table(runs: Sequence[ScoredRun], console: Console, problems: int = 0) -> None:
    scorer_names: list[str] = []
    for run in runs:
        for s in run.scores:
            if s.name not in scorer_names:
                scorer_names.append(s.name)
    t = Table(show_lines=False, expand=False, pad_edge=False)
    t.add_column("agent", overflow="fold", max_width=18)
    t.add_column("tools called", overflow="fold", max_width=28)
    for name in scorer_names:
        t.add_column(_SHORT.get(name, name), justify="right", overflow="fold")
    for run in runs:
        traj = run.trajectory
        agent = traj.agent_name or "(no agent span)"
        if traj.nested:
            agent = "  ↳ " + agent
        by_name = {s.name: s for s in run.scores}
        tools = ", ".join(c.name or "?" for c in traj.tool_calls) or "—"
        t.add_row(agent, tools, *(_cell(by_name.get(n)) for n in scorer_names))
    console.print(t)
    issues = [
        (run, s, i)
        for run in runs
        for s in run.scores
        for i in _issues(s)
    ]
    for run, s, issue in issues[:20]:
        console.print(f"  [yellow]•[/] {run.trajectory.agent_name or '?'} · {s.name}: {issue}", highlight=False)
    if len(issues) > 20:
        console.print(f"  … {len(issues) - 20} more issues (use --format json for all)")
    files = len({r.source for r in runs})
    scored = sum(1 for r in runs for s in r.scores if s.value is not None)
    skipped = sum(1 for r in runs for s in r.scores if s.label == "skipped")
    errors = sum(1 for r in runs for s in r.scores if s.error)
    console.print(
        f"{len(runs)} runs from {files} file(s): {scored} scores, {skipped} skipped, {errors} errors"
        + (f"; {problems} input problems (see --format json)" if problems else ""),
        highlight=False,
    )


def _issues(score: Score) -> list[str]:
    """One line per issue a code scorer found, for the table's footer."""
    out = []
    for call in score.details.get("tool_calls", []) if isinstance(score.details, dict) else []:
        if not isinstance(call, dict):
            continue
        for issue in call.get("issues", []):
            if isinstance(issue, dict):
                where = f" {issue['path']}" if issue.get("path") else ""
                out.append(f"{call.get('name')}{where}: {issue.get('type')} ({issue.get('severity')})")
    if not out and score.label == "fail" and score.explanation:
        out.append(score.explanation)
    return out


def junit(runs: Sequence[ScoredRun], out: TextIO, fail_under: float | None = None) -> None:
    """One testcase per trajectory × scorer; a failing label or a value under the gate fails."""
    suite = ET.Element("testsuite", name="otel-toolscore")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for run in runs:
        traj = run.trajectory
        for s in run.scores:
            counts["tests"] += 1
            case = ET.SubElement(
                suite, "testcase",
                classname=f"{run.source}.{traj.agent_name or 'run'}",
                name=f"{s.name} [trace {traj.trace_id[:16]} span {traj.span_id}]",
            )
            if s.error:
                counts["errors"] += 1
                ET.SubElement(case, "error", type=s.error, message=s.explanation or s.error)
            elif s.value is None:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=s.explanation or (s.label or "skipped"))
            elif s.label == "fail" or (fail_under is not None and s.value < fail_under):
                counts["failures"] += 1
                failure = ET.SubElement(case, "failure", type=s.label or "fail",
                                        message=f"{s.name} = {s.value:g}: {s.explanation}")
                failure.text = json.dumps(s.details, indent=1, default=str)[:20_000]
    for k, v in counts.items():
        suite.set(k, str(v))
    ET.indent(suite)
    out.write(ET.tostring(suite, encoding="unicode", xml_declaration=True))
    out.write("\n")
