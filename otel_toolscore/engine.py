"""Scoring a completed trace: assemble its runs, pick scorers (rules, sampling), score, emit.

The engine knows nothing of span processors: it turns spans into scores and emitted
telemetry. ``processor.ToolScoreSpanProcessor`` decides when a trace is complete and calls it
on its worker thread; the sidecar and offline paths can call it the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.assemble import build_trajectories
from otel_toolscore.config import ToolScoreSettings, sampled
from otel_toolscore.emit import Emitter
from otel_toolscore.scorers.base import Score, Scorer, build_scorers, run_scorers
from otel_toolscore.trajectory import Trajectory


@dataclass
class RunResult:
    trajectory: Trajectory
    scores: list[Score] = field(default_factory=list)


def resolve_scorers(scorers: Sequence[Scorer | str] | None, settings: ToolScoreSettings) -> list[Scorer]:
    """Scorer objects as given, names built with the settings' options, None → the defaults."""
    if scorers is None:
        return build_scorers(
            settings.scorers, settings.scorer_options, schemas=settings.tool_schemas,
            allow_unknown_tools=settings.allow_unknown_tools,
        )
    out: list[Scorer] = []
    for s in scorers:
        if isinstance(s, str):
            out.extend(build_scorers([s], settings.scorer_options, schemas=settings.tool_schemas,
                                     allow_unknown_tools=settings.allow_unknown_tools))
        else:
            out.append(s)
    return out


class Engine:
    def __init__(self, settings: ToolScoreSettings, scorers: Sequence[Scorer | str] | None, emitter: Emitter) -> None:
        self.settings = settings
        self.emitter = emitter
        all_scorers = resolve_scorers(scorers, settings)
        # LLM-judged scorers run asynchronously after the agent span has left; only code
        # scorers (microseconds) run while it is held.
        self.code_scorers = [s for s in all_scorers if getattr(s, "kind", "code") == "code"]
        self.scorer_names = [str(getattr(s, "name", type(s).__name__)) for s in all_scorers]

    def score(self, spans: Sequence[ReadableSpan]) -> list[RunResult]:
        results = []
        for traj in build_trajectories(spans):
            self._apply_rules(traj)
            trace_id = int(traj.trace_id, 16)
            active = [s for s in self.code_scorers if sampled(trace_id, self._rate(s))]
            results.append(RunResult(traj, run_scorers(traj, active)))
        return results

    def _rate(self, scorer: Scorer) -> float:
        name = str(getattr(scorer, "name", ""))
        return self.settings.sample_rates.get(name, self.settings.default_sample_rate)

    def _apply_rules(self, traj: Trajectory) -> None:
        """Config rules give an expectation to runs whose span carries none (span attributes win)."""
        if not self.settings.rules:
            return
        if sc.TOOLSCORE_EXPECTED_TOOL in traj.expectations or sc.TOOLSCORE_EXPECTED_TOOL_ORDER in traj.expectations:
            return
        for rule in self.settings.rules:
            if rule.matches(traj.agent_name, traj.input):
                exp: dict[str, Any] = {}
                if rule.expected_tool:
                    exp[sc.TOOLSCORE_EXPECTED_TOOL] = rule.expected_tool
                if rule.expected_tool_order:
                    exp[sc.TOOLSCORE_EXPECTED_TOOL_ORDER] = list(rule.expected_tool_order)
                if rule.strict is not None and sc.TOOLSCORE_STRICT not in traj.expectations:
                    exp[sc.TOOLSCORE_STRICT] = rule.strict
                traj.expectations.update(exp)
                return

    def emit(self, result: RunResult, agent_span: ReadableSpan | None) -> ReadableSpan | None:
        """Events and metrics now; the evaluation span is returned for the caller to forward."""
        traj, scores = result.trajectory, result.scores
        self.emitter.emit_events(traj, scores)
        self.emitter.record_metrics(traj, scores)
        if agent_span is None or not scores:
            return None
        return self.emitter.evaluation_span(traj, scores, agent_span)

    def count_dropped(self) -> None:
        for name in self.scorer_names:
            self.emitter.count_evaluation(name, "dropped")
