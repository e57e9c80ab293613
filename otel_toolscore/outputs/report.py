"""Rendering scored trajectories for people (table), programs (JSON lines) and CI (JUnit XML).

Every renderer takes ``redact``: the default redaction (``otel_toolscore.redaction``) applied to
every text taken from a run (inputs, arguments, results, explanations, issue messages and actual
values), so a report pasted into a CI log or a ticket carries no secret of the runs; ``None``
shows the values raw (``score --show-secrets``, for local debugging).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO
from xml.etree import ElementTree as ET

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from otel_toolscore.conventions.parsing import valid_text
from otel_toolscore.redaction import Redactor, default_redactor, redact_value
from otel_toolscore.scorers import registry
from otel_toolscore.scorers.base import HOW_TO_SUPPLY_SCHEMAS, REASON_NO_TOOL_SCHEMAS, Score
from otel_toolscore.scorers.results import SEVERITY_ORDER
from otel_toolscore.trajectory import Trajectory


@dataclass
class ScoredRun:
    source: str
    trajectory: Trajectory
    scores: list[Score] = field(default_factory=list)


def _plain(text: str) -> str:
    return text


def json_lines(runs: Sequence[ScoredRun], out: TextIO, *, redact: Redactor | None = default_redactor) -> None:
    for run in runs:
        record: dict[str, Any] = run.trajectory.to_report()
        record["scores"] = [s.to_dict() for s in run.scores]
        if redact is not None:
            # the run's ids are what a user pastes into Jaeger: hex, never a secret
            ids = {key: record[key] for key in _ID_FIELDS if key in record}
            record = {**redact_value(record, redact), **ids}
        line = json.dumps(record, ensure_ascii=False, default=str)
        if not line.isascii():
            # valid_text: a lone surrogate (from a scorer of the user's, say) must not make the
            # UTF-8 output fail half-way; escaped separators: str.splitlines() would split there
            line = valid_text(line).translate(_LINE_BREAKS)
        out.write(line)
        out.write("\n")


#: the report's id fields, kept as they are (not redacted)
_ID_FIELDS = ("trace_id", "span_id")

#: characters str.splitlines() breaks at that json.dumps(ensure_ascii=False) leaves unescaped
_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


#: characters XML 1.0 does not allow (control characters other than tab, LF, CR; U+FFFE/F)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml(text: str) -> str:
    """Text ElementTree can write as well-formed XML: it escapes markup, not these."""
    return _NOT_XML.sub("\ufffd", valid_text(text))


def verdict(score: Score, fail_under: float | None = None) -> str:
    """``pass``, ``fail``, ``skipped`` or ``error``: one decision for the table's labels, the
    JUnit report, the summary and the exit status, so they never disagree.

    ``error`` is a score with ``error`` set (the scorer or its judge failed); ``skipped`` one with
    no value and no error (``skipped``, ``not_applicable``, ``no_context``...: nothing to judge),
    which neither passes nor fails. With a gate (``--fail-under``) a value decides alone: a
    scorer's ``pass`` label on 0.6 under a 0.8 gate is a failure, and its ``fail`` label on 0.9 is
    not. Without one, the scorer's label decides (it follows the severity of what was found).
    """
    if score.error:
        return "error"
    if score.value is None:
        return "skipped"
    if fail_under is not None:
        return "fail" if score.value < fail_under else "pass"
    return "fail" if score.label == "fail" else "pass"


def gate_failures(runs: Sequence[ScoredRun], fail_under: float | None) -> list[tuple[ScoredRun, Score]]:
    """The scores under the gate (none without one)."""
    if fail_under is None:
        return []
    return [(run, s) for run in runs for s in run.scores if verdict(s, fail_under) == "fail"]


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _errors_by_type(scores: Sequence[Score], redact: Redactor | None = default_redactor) -> str:
    """``judge_unavailable: <first message>; scorer_error ×2: <first message>``: each error type
    once, with how many scores have it and the first one's explanation."""
    first: dict[str, Score] = {}
    counts: dict[str, int] = {}
    for s in scores:
        if s.error:
            first.setdefault(s.error, s)
            counts[s.error] = counts.get(s.error, 0) + 1
    parts = []
    for kind, score in first.items():
        message = _one_line((redact or _plain)(score.explanation), 160)
        parts.append(f"{kind}{f' ×{counts[kind]}' if counts[kind] > 1 else ''}" + (f": {message}" if message else ""))
    return "; ".join(parts)


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def gate_reasons(runs: Sequence[ScoredRun], fail_under: float | None, *, files: int | None = None,
                 allow_errors: bool = False, redact: Redactor | None = default_redactor) -> list[str]:
    """Why the CI gate fails; empty when it passes or there is none. What makes the exit status 1.

    A gate never passes on nothing: no run read, every score skipped, or scores that are errors
    (the judge unreachable, a scorer that raised) fail it, besides scores under ``fail_under``.
    ``allow_errors`` lets errors through (they are still counted and shown), but not a gate that
    judged nothing at all. ``files``: how many inputs were read (default: those runs came from).
    """
    if fail_under is None:
        return []
    if files is None:
        files = len({r.source for r in runs})
    if not runs:
        return [f"0 runs read from {_count(files, 'file')}"]
    scores = [s for r in runs for s in r.scores]
    counts = _verdicts(scores, fail_under)
    reasons = []
    if counts["fail"]:
        reasons.append(f"{counts['fail']} below {fail_under:g}")
    if counts["error"] and not allow_errors:
        reasons.append(f"{counts['error']} of {_count(len(scores), 'score')} "
                       f"{'is an error' if counts['error'] == 1 else 'are errors'} ({_errors_by_type(scores, redact)})")
    judged = counts["pass"] + counts["fail"]
    if not judged and not (counts["error"] and counts["error"] == len(scores) and not allow_errors):
        what = ", ".join(f"{counts[k]} {k}" + ("s" if k == "error" and counts[k] != 1 else "")
                         for k in ("skipped", "error") if counts[k])
        reasons.append(f"no score judged ({what})" if scores else f"no scores for {_count(len(runs), 'run')}")
    return reasons


def _verdicts(scores: Sequence[Score], fail_under: float | None) -> dict[str, int]:
    counts = {"pass": 0, "fail": 0, "skipped": 0, "error": 0}
    for s in scores:
        counts[verdict(s, fail_under)] += 1
    return counts


def _cell(score: Score | None, fail_under: float | None) -> str:
    if score is None:
        return ""
    if score.error:
        # the error's type here, its message in the lines under the table
        return f"error: {score.error}"
    if score.value is None:
        return score.label or "skipped"
    return f"{score.value:g} {verdict(score, fail_under)}"


def _run_ref(run: ScoredRun) -> str:
    """``trace <32 hex> <agent>``: the whole trace id, which a backend's trace search takes."""
    traj = run.trajectory
    return f"trace {traj.trace_id or '—'} {traj.agent_name or '(no agent span)'}"


def error_lines(runs: Sequence[ScoredRun], limit: int = 20, *, redact: Redactor | None = default_redactor) -> list[str]:
    """One line per error score: its trace, agent, scorer, error type and message."""
    errors = [(r, s) for r in runs for s in r.scores if s.error]
    clean = redact or _plain
    lines = [f"  error: {_run_ref(r)} · {s.name}: {s.error}: {_one_line(clean(s.explanation), 300)}"
             for r, s in errors[:limit]]
    if len(errors) > limit:
        lines.append(f"  … {len(errors) - limit} more errors (use --format json for all)")
    return lines


def table(runs: Sequence[ScoredRun], console: Console, problems: int = 0, fail_under: float | None = None,
          *, files: int | None = None, allow_errors: bool = False, redact: Redactor | None = default_redactor) -> None:
    clean = redact or _plain
    scorer_names: list[str] = []
    for run in runs:
        for s in run.scores:
            if s.name not in scorer_names:
                scorer_names.append(s.name)
    t = Table(show_lines=True, expand=False, pad_edge=False)
    # the whole trace id, never cut or folded (pasted into Jaeger's or Tempo's trace search, it
    # finds the trace), the service and the agent under it: columns of their own would leave the
    # scores no room in 80 columns
    t.add_column("trace / service / agent", width=32, overflow="fold")
    t.add_column("tools called", overflow="fold", max_width=28)
    for name in scorer_names:
        t.add_column(registry.column(name), justify="right", overflow="fold")
    for run in runs:
        traj = run.trajectory
        agent = traj.agent_name or "(no agent span)"
        if traj.nested:
            agent = "  ↳ " + agent
        by_name = {s.name: s for s in run.scores}
        tools = ", ".join(c.name or "?" for c in traj.tool_calls) or "—"
        t.add_row(f"{traj.trace_id or '—'}\n{escape(traj.service_name or '—')}\n{escape(agent)}", escape(tools),
                  *(escape(_cell(by_name.get(n), fail_under)) for n in scorer_names))
    if runs:
        console.print(t)
    issues = [
        (run, s, i)
        for run in runs
        for s in run.scores
        for i in _issues(s)
    ]
    for run, s, issue in issues[:20]:
        # Trace content may hold square brackets: escape it so rich does not read it as markup.
        console.print(f"  [yellow]•[/] {escape(_run_ref(run))} · {s.name}: {escape(clean(issue))}",
                      highlight=False, soft_wrap=True)
    if len(issues) > 20:
        console.print(f"  … {len(issues) - 20} more issues (use --format json for all)")
    for line in error_lines(runs, redact=redact):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if any(s.value is None and not s.error and s.name in registry.EXPECTATION_SCORERS for r in runs for s in r.scores):
        console.print(f"  skipped: {SKIPPED_HOW}", highlight=False, markup=False, soft_wrap=True)
    if any(s.value is None and not s.error and s.details.get("reason") == REASON_NO_TOOL_SCHEMAS
           for r in runs for s in r.scores):
        console.print(f"  skipped: tool_call_validation found no tool schema in some runs (the instrumentation did "
                      f"not record the tools offered). {HOW_TO_SUPPLY_SCHEMAS}",
                      highlight=False, markup=False, soft_wrap=True)
    # soft_wrap: one line each in a CI log, where a grep for the summary or a score must find it
    console.print(summary_line(runs, problems, fail_under, files=files, allow_errors=allow_errors, redact=redact),
                  highlight=False, soft_wrap=True)
    for line in gate_lines(runs, fail_under, redact=redact):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


#: how a run gets an expectation, for people reading a report full of ``skipped``
SKIPPED_HOW = (
    f"{', '.join(registry.EXPECTATION_SCORERS)} needs an expected tool: --expected-tool/--expected-tool-order, "
    "the toolscore.expected_tool / toolscore.expected_tool_order attribute on the agent span, "
    "or rules in the YAML file of --config / $OTEL_TOOLSCORE_CONFIG (rules: - agent: REGEX, expected_tool: NAME)"
)


def gate_lines(runs: Sequence[ScoredRun], fail_under: float | None, limit: int = 20, *,
               redact: Redactor | None = default_redactor) -> list[str]:
    """One line per score under the gate, naming trace, agent and score: why the exit status is 1."""
    failing = gate_failures(runs, fail_under)
    clean = redact or _plain
    lines = [
        f"  below --fail-under {fail_under:g}: {_run_ref(r)} · {s.name} = {s.value:g}"
        + (f" ({clean(s.explanation)})" if s.explanation else "")
        for r, s in failing[:limit]
    ]
    if len(failing) > limit:
        lines.append(f"  … {len(failing) - limit} more below the gate (use --format json for all)")
    return lines


def _issues(score: Score) -> list[str]:
    """One line per issue a code scorer found, for the table's footer."""
    out = []
    for call in score.calls:
        for issue in call.issues:
            where = f" {issue.path}" if issue.path else ""
            out.append(f"{call.name}{where}: {issue.type} ({issue.severity})")
    if not out and score.label == "fail" and score.explanation:
        out.append(score.explanation)
    return out


def _failure_type(score: Score, fail_under: float | None) -> str:
    """A failing score's JUnit ``failure type``: its most severe issue's type (``hallucinated_content``,
    ``schema_violation``...), else ``below_fail_under`` when the gate decided, else its label."""
    issues = [issue for call in score.calls for issue in call.issues]
    if issues:
        return max(issues, key=lambda i: SEVERITY_ORDER.get(i.severity, -1)).type
    if fail_under is not None and score.value is not None and score.value < fail_under:
        return "below_fail_under"
    return score.label or "fail"


def junit(runs: Sequence[ScoredRun], out: TextIO, fail_under: float | None = None, *, files: int | None = None,
          allow_errors: bool = False, redact: Redactor | None = default_redactor) -> None:
    """One testcase per trajectory × scorer: a failing label or a value under the gate is a
    ``<failure>`` typed by the issue found, a scorer's error an ``<error>`` typed by the error,
    a score with nothing to judge ``<skipped>`` with why. A gate that fails on nothing (no run
    read, no score judged) adds a testcase saying so, so that a CI server reading only the
    report does not see an empty, green suite."""
    suite = ET.Element("testsuite", name="otel-toolscore")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    clean = redact or _plain

    def details(score: Score) -> str:
        value = redact_value(score.details, redact) if redact is not None else score.details
        return _xml(json.dumps(value, indent=1, default=str)[:20_000])

    for run in runs:
        traj = run.trajectory
        for s in run.scores:
            counts["tests"] += 1
            case = ET.SubElement(
                suite, "testcase",
                classname=_xml(f"{run.source}.{traj.agent_name or 'run'}"),
                name=_xml(f"{s.name} [trace {traj.trace_id} span {traj.span_id}]"),
            )
            if s.error:
                counts["errors"] += 1
                error = ET.SubElement(case, "error", type=_xml(s.error), message=_xml(clean(s.explanation or s.error)))
                error.text = details(s)
            elif s.value is None:
                counts["skipped"] += 1
                label = s.label or "skipped"
                ET.SubElement(case, "skipped", message=_xml(f"{label}: {clean(s.explanation)}" if s.explanation else label))
            elif verdict(s, fail_under) == "fail":
                counts["failures"] += 1
                failure = ET.SubElement(case, "failure", type=_xml(_failure_type(s, fail_under)),
                                        message=_xml(f"{s.name} = {s.value:g}: {clean(s.explanation)}"))
                failure.text = details(s)
    reasons = gate_reasons(runs, fail_under, files=files, allow_errors=allow_errors, redact=redact)
    if reasons and not counts["failures"] and not counts["errors"]:
        # the gate fails on nothing (no run, every score skipped): without this testcase the suite
        # would be empty or all skipped, which CI servers show green
        counts["tests"] += 1
        counts["failures"] += 1
        case = ET.SubElement(suite, "testcase", classname="otel-toolscore", name=f"--fail-under {fail_under:g}")
        ET.SubElement(case, "failure", type="no_runs" if not runs else "nothing_judged",
                      message=_xml("; ".join(reasons)))
    for k, v in counts.items():
        suite.set(k, str(v))
    ET.indent(suite)
    out.write(ET.tostring(suite, encoding="unicode", xml_declaration=True))
    out.write("\n")


def summary_line(runs: Sequence[ScoredRun], problems: int = 0, fail_under: float | None = None, *,
                 files: int | None = None, allow_errors: bool = False, redact: Redactor | None = default_redactor) -> str:
    """The one summary every format prints (under the table, on stderr beside JSON lines or
    JUnit XML): runs, and scores by ``verdict``, which the JUnit report and the exit status use
    too; the gate part says whether it passed and, if not, why (``gate_reasons``: exit 1).
    ``files``: how many inputs were read (default: those the runs came from)."""
    scores = [s for r in runs for s in r.scores]
    counts = _verdicts(scores, fail_under)
    if files is None:
        files = len({r.source for r in runs})
    parts = [
        f"{len(runs)} runs from {files} file(s)",
        f"{len(scores)} scores: {counts['pass']} passed, {counts['fail']} failed, "
        f"{counts['skipped']} skipped, {counts['error']} errors",
    ]
    if fail_under is not None:
        reasons = gate_reasons(runs, fail_under, files=files, allow_errors=allow_errors, redact=redact)
        if reasons:
            parts.append(f"--fail-under {fail_under:g}: failed, exit 1: " + "; ".join(reasons))
        else:
            allowed = f" ({_count(counts['error'], 'error')} allowed)" if counts["error"] else ""
            parts.append(f"--fail-under {fail_under:g}: passed{allowed}")
    if problems:
        parts.append(f"{problems} input problems")
    return "otel-toolscore: " + "; ".join(parts)


class ScoreProgress:
    """A transient progress bar on stderr for long inputs.

    On only when the stream is a terminal (never in CI logs or pipes, whatever FORCE_COLOR
    says), and shown only once the work has taken ``delay`` seconds, so short runs print
    nothing. ``stage(description, total)`` starts a stage; ``advance(n)`` counts work done.
    Thread-safe (LLM judges finish on an event loop thread).
    """

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None, delay: float = 0.5) -> None:
        import os
        import sys
        import threading

        stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(stream, "isatty", None)
            enabled = bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
        self.enabled = enabled
        self._lock = threading.Lock()
        self._progress: Any = None
        self._task: Any = None
        self._timer: threading.Timer | None = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=Console(file=stream, force_terminal=True), transient=True,
            )
            self._task = self._progress.add_task("", total=None)
            self._timer = threading.Timer(delay, self._show)
            self._timer.daemon = True

    def _show(self) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.start()

    def __enter__(self) -> ScoreProgress:
        if self._timer is not None:
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._progress is not None:
                self._progress.stop()
                self._progress = None

    def stage(self, description: str, total: int | None) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.update(self._task, description=description, total=total, completed=0)

    def advance(self, n: int = 1) -> None:
        with self._lock:
            if self._progress is not None:
                self._progress.advance(self._task, n)
