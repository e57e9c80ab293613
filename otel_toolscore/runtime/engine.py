"""Scoring a completed trace: assemble its runs, pick scorers (rules, sampling), score, emit.

The engine knows nothing of span processors: it turns spans into scores and emitted
telemetry. ``processor.ToolScoreSpanProcessor`` decides when a trace is complete and calls it
on its worker thread; the sidecar and offline paths can call it the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.assemble import build_trajectories
from otel_toolscore.config import Rule, ToolScoreSettings, sample_bound, sampled
from otel_toolscore.outputs.otel import Emission, Emitter
from otel_toolscore.scorers import run as scoring
from otel_toolscore.scorers._loop import Inflight
from otel_toolscore.scorers.base import Score, Scorer, build_scorers
from otel_toolscore.trajectory import Trajectory

logger = logging.getLogger(__name__)

Forward = Callable[[ReadableSpan], None]


@dataclass
class RunResult:
    trajectory: Trajectory
    #: empty when the run was scored in the scoring process: its emission says what they emit
    scores: list[Score] = field(default_factory=list)
    #: what the scores emit, as plain data, once prepared (``Engine.prepared``)
    emission: Emission | None = None


def resolve_scorers(scorers: Sequence[Scorer | str] | None, settings: ToolScoreSettings) -> list[Scorer]:
    """Scorer objects as given, names built with the settings' options, None → the defaults."""
    if scorers is None:
        return build_scorers(
            settings.scorers, settings.scorer_options, schemas=settings.tool_schemas,
            allow_unknown_tools=settings.allow_unknown_tools, require_schemas=settings.require_schemas,
        )
    out: list[Scorer] = []
    for s in scorers:
        if isinstance(s, str):
            out.extend(build_scorers([s], settings.scorer_options, schemas=settings.tool_schemas,
                                     allow_unknown_tools=settings.allow_unknown_tools,
                                     require_schemas=settings.require_schemas))
        else:
            out.append(s)
    return out


def apply_rules(traj: Trajectory, rules: Sequence[Rule]) -> None:
    """Config rules give an expectation to runs whose span carries none (span attributes win).

    The processor, the sidecar and ``score`` all call this, so a CI replay of a trace file sees
    the expectations production saw."""
    if not rules:
        return
    if sc.TOOLSCORE_EXPECTED_TOOL in traj.expectations or sc.TOOLSCORE_EXPECTED_TOOL_ORDER in traj.expectations:
        return
    for rule in rules:
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


def rate_of(scorer: Scorer, settings: ToolScoreSettings) -> float:
    """The share of traces the scorer scores."""
    return settings.sample_rate_for(str(getattr(scorer, "name", "")))


def score_spans(spans: Sequence[ReadableSpan], code_scorers: Sequence[Scorer],
                settings: ToolScoreSettings) -> tuple[list[RunResult], int]:
    """The code scores of every run in ``spans`` (sampled already, per trace): the results, and
    how many runs were skipped as scored upstream (for the caller to count). The engine calls
    it on its worker thread; the scoring process (``_scoring_child``) calls it in the child."""
    results = []
    already_scored = 0
    for traj in build_trajectories(spans):
        if traj.expectations.get(sc.TOOLSCORE_SCORED) is True:
            # Scored upstream already (an app with install() that also exports to serve):
            # counted, not scored again.
            already_scored += 1
            continue
        apply_rules(traj, settings.rules)
        trace_id = int(traj.trace_id, 16)
        active = [s for s in code_scorers if sampled(trace_id, rate_of(s, settings))]
        results.append(RunResult(traj, scoring.run_scorers(traj, active)))
    return results, already_scored


class Engine:
    def __init__(self, settings: ToolScoreSettings, scorers: Sequence[Scorer | str] | None, emitter: Emitter) -> None:
        self.settings = settings
        self.emitter = emitter
        all_scorers = resolve_scorers(scorers, settings)
        # LLM-judged scorers run asynchronously after the agent span has left; only code
        # scorers (microseconds) run while it is held.
        self.code_scorers, self.llm_scorers = scoring.split(all_scorers)
        self.scorer_names = [scoring.name_of(s) for s in all_scorers]
        for s in self.llm_scorers:
            # Judge latency and cost feed the pipeline-health metrics.
            if hasattr(s, "on_judge") and s.on_judge is None:
                s.on_judge = emitter.record_judge
        self._judges: Inflight | None = Inflight(settings.llm_max_inflight) if self.llm_scorers else None

    def score(self, spans: Sequence[ReadableSpan]) -> list[RunResult]:
        # Sampling is decided per trace id before anything is read: a trace that no scorer
        # (code or LLM) samples is not assembled at all. Its runs would get no scores, and a
        # run without scores emits nothing and leaves its held span as it was.
        wanted: dict[int, bool] = {}
        kept = []
        for span in spans:
            ctx = span.context
            if ctx is None:
                continue
            keep = wanted.get(ctx.trace_id)
            if keep is None:
                keep = wanted[ctx.trace_id] = self.any_sampled(ctx.trace_id)
            if keep:
                kept.append(span)
        results, already_scored = score_spans(kept, self.code_scorers, self.settings)
        for _ in range(already_scored):
            self.count_already_scored()
        return results

    def any_sampled(self, trace_id: int) -> bool:
        """Does any scorer (code or LLM) sample this trace?"""
        return any(sampled(trace_id, rate_of(s, self.settings)) for s in (*self.code_scorers, *self.llm_scorers))

    def judged(self, trace_id: int) -> bool:
        """Does any LLM scorer sample this trace?"""
        return any(sampled(trace_id, rate_of(s, self.settings)) for s in self.llm_scorers)

    def trace_bound(self) -> int | None:
        """The bound below which a trace id (its low 64 bits) is sampled by some scorer, or None
        when every trace is: a trace kept at a lower rate is kept at every higher one, so some
        scorer samples a trace exactly when the highest rate does."""
        rates = [rate_of(s, self.settings) for s in (*self.code_scorers, *self.llm_scorers)]
        top = max(rates, default=0.0)
        return None if top >= 1.0 else sample_bound(top)

    def prepared(self, result: RunResult) -> Emission:
        """What the run's scores emit (prepared now unless the scoring process did it)."""
        if result.emission is None:
            result.emission = self.emitter.prepare(result.trajectory, result.scores)
        return result.emission

    def emit(self, result: RunResult, agent_span: ReadableSpan | None, attached: bool = False) -> list[ReadableSpan]:
        """Events and metrics now; the evaluation spans (one per score) are returned for the
        caller to forward (``attached``: the scores rode on the agent span: ``Emitter.send``)."""
        return self.emitter.send(self.prepared(result), agent_span, attached)

    def count_already_scored(self) -> None:
        for name in self.scorer_names:
            self.emitter.count_evaluation(name, "already_scored")

    def count_dropped(self, names: Sequence[str] | None = None, n: int = 1, outcome: str = "dropped") -> None:
        """Runs not scored, counted once per scorer: ``dropped`` (queue full, inflight bound,
        shutdown) or ``too_large`` (evicted at max_spans_per_trace)."""
        for name in names if names is not None else self.scorer_names:
            self.emitter.count_evaluation(name, outcome, n)

    # --- LLM scorers: asynchronous, after the agent span has left ----------------------------------

    def judge(self, result: RunResult, run_span: ReadableSpan | None, forward: Forward) -> None:
        """Start the run's LLM scorers; their scores go out as events, metrics and an evaluation
        span (handed to ``forward``) when they arrive. Never blocks the caller."""
        if self._judges is None:
            return
        traj = result.trajectory
        trace_id = int(traj.trace_id, 16)
        active = [s for s in self.llm_scorers if sampled(trace_id, rate_of(s, self.settings))]
        if not active:
            return
        names = [str(s.name) for s in active]
        if not self._judges.submit(self._judge_run(traj, active, run_span, forward),
                                   on_cancel=lambda: self.count_dropped(names)):
            self.count_dropped(names)

    async def _judge_run(self, traj: Trajectory, scorers: list[Scorer], run_span: ReadableSpan | None,
                         forward: Forward) -> None:
        scores = await scoring.ascore_all(traj, scorers)
        for evaluation in self.emit(RunResult(traj, scores), run_span):
            forward(evaluation)

    def wait_judges(self, timeout_s: float) -> bool:
        return self._judges.wait(timeout_s) if self._judges is not None else True

    def close(self, timeout_s: float) -> None:
        if self._judges is not None:
            self._judges.close(timeout_s)

    def reinit_after_fork(self, start: bool = True) -> None:
        # The child has none of the parent's threads, and the parent's runs in flight are not
        # its own: a new judge loop (none for a processor already shut down).
        self._judges = Inflight(self.settings.llm_max_inflight) if self.llm_scorers and start else None
