"""What one run's scores emit, worked out as plain data (``Emission``): the agent span's score
attributes, the ``gen_ai.evaluation.result`` events' bodies, the evaluation spans' names and
attributes, the metric points, every explanation redacted and cut.

No OpenTelemetry SDK object is built here: ``outputs.otel.Emitter.send`` hands an emission to the
SDK. The split lets ``scoring="process"`` prepare in its child process and leave the app only the
SDK calls; on the worker thread both halves run one after the other. Names in
docs/emitted.md.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.util.types import AttributeValue

from otel_toolscore import semconv
from otel_toolscore.config import ToolScoreSettings
from otel_toolscore.conventions.parsing import valid_text
from otel_toolscore.scorers.base import LABEL_ERROR, LABEL_FAIL, LABEL_PASS, LABEL_SKIPPED, Score
from otel_toolscore.scorers.redaction import Redactor, make_redactor
from otel_toolscore.scorers.results import CallResult, Issue, pin_to_calls
from otel_toolscore.trajectory import Trajectory

_log = logging.getLogger(__name__)

# Output names for toolscore.emit.errors{output}
OUTPUT_SPAN_ATTRIBUTES = "span_attributes"
OUTPUT_EVALUATION_SPAN = "evaluation_span"
OUTPUT_EVENTS = "events"
OUTPUT_METRICS = "metrics"

#: explanations remembered as they leave (``Preparer._explanation``): runs repeat their
#: explanations, and redaction is the dearest part of preparing
_REMEMBERED_TEXTS = 256
#: longer texts are worked out again each time rather than kept (memory)
_REMEMBERED_TEXT_CHARS = 4096

Attributes = dict[str, AttributeValue]
#: one event: (the span it is about, hex, None for the run's span; an error score; attributes)
Event = tuple[str | None, bool, Attributes]
#: one issue as counted: (issue type, severity, tool name as the scorer gave it)
IssuePoint = tuple[str, str, str | None]
#: one score's metric points: (scorer, outcome, histogram value or None, label, issues)
ScorePoints = tuple[str, str, float | None, str | None, tuple[IssuePoint, ...]]


@dataclass(slots=True)
class Emission:
    """One run's outputs as plain data, for ``Emitter.send`` (picklable: the scoring process
    sends it back as ``astuple``'s fields). An output switched off is empty here."""

    trace_id: str
    #: the run's span (hex), which the run-level events are about
    span_id: str | None
    agent: str | None
    #: ``toolscore.<scorer>.*`` for the held agent span
    span_attributes: Attributes = field(default_factory=dict)
    #: per score: its run-level event, then its per-call events (one score's failure to send
    #: must not cost the others theirs)
    events: list[list[Event]] = field(default_factory=list)
    #: per score: (evaluation span name, its attributes)
    evaluations: list[tuple[str, Attributes]] = field(default_factory=list)
    metrics: list[ScorePoints] = field(default_factory=list)
    #: outputs whose preparing failed, once per failure (counted in ``toolscore.emit.errors``
    #: where the emission is sent)
    failed: list[str] = field(default_factory=list)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when anything was cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"


def label_of(score: Score) -> str | None:
    """The emitted label: the scorer's own, else what the outcome says (never a made-up pass)."""
    if score.label:
        return score.label
    if score.error is not None:
        return LABEL_ERROR
    if score.value is None:
        return LABEL_SKIPPED
    return None


def number(value: Any) -> float | None:
    """A score as emitted: a finite float, else None."""
    # bool is an int; a True "score" in details would be a scorer bug, not a score of 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _describe_issue(issue: Issue) -> str:
    return f"{issue.type}: {issue.message}" if issue.message else issue.type


def _call_event_wanted(result: CallResult, which: str) -> bool:
    """Whether a per-call event goes out for ``result`` under ``call_events=which``."""
    if result.score is None or which == "none":
        return False
    return which == "all" or bool(result.issues) or result.score < 1


@dataclass(slots=True)
class _Facts:
    """What the outputs say of one score, worked out once for all of them."""

    name: str
    value: float | None
    label: str | None
    explanation: str | None  # as it leaves: redacted, cut
    error: str | None
    #: working out the explanation raised: the outputs that show it fail (metrics do not)
    unexplained: bool = False


class Preparer:
    """Builds ``Emission``s from the settings alone (the scoring process builds one of its own)."""

    def __init__(self, settings: ToolScoreSettings, redact: Redactor | None = None) -> None:
        self._settings = settings
        # Explanations can quote what the run's spans hold (arguments, results, a judge's
        # echo of them, an exception message with a key in it); they leave the process through
        # the same redaction a judge request gets, plus the user's hook when there is one.
        self._redact: Redactor | None = (
            make_redactor(redact) if settings.redact_explanations else redact
        )
        self._warned: set[str] = set()
        # explanation as given -> as it leaves, oldest first
        self._explained: OrderedDict[str, str] = OrderedDict()
        self._explained_lock = threading.Lock()

    def reinit_after_fork(self) -> None:
        # a thread of the parent may have held the lock at the fork
        self._explained_lock = threading.Lock()

    def prepare(self, trajectory: Trajectory | None, scores: Sequence[Score], *, span_attributes: bool = True,
                events: bool = True, evaluations: bool = True, metrics: bool = True) -> Emission:
        """What the run's scores emit, as data: every output the settings switch on, of those
        asked for (no trajectory: the span attributes alone)."""
        settings = self._settings
        if trajectory is None:
            emission = Emission("", None, None)
            events = evaluations = metrics = False
        else:
            emission = Emission(trajectory.trace_id, trajectory.span_id, trajectory.agent_name or None)
        if not scores:
            return emission
        span_attributes = span_attributes and settings.span_attributes
        events = events and settings.events is not False
        evaluations = evaluations and settings.evaluation_spans is not False
        facts = self._facts(scores, span_attributes or events or evaluations)
        if span_attributes:
            emission.span_attributes = self._span_attributes(facts, emission)
        if events:
            assert trajectory is not None
            emission.events = self._events(trajectory, scores, facts, emission)
        if evaluations:
            emission.evaluations = self._evaluations(facts, emission)
        if metrics and settings.metrics:
            emission.metrics = self._metrics(scores, facts, emission)
        return emission

    def _facts(self, scores: Sequence[Score], explain: bool) -> list[_Facts]:
        out = []
        for score in scores:
            f = _Facts(score.name, number(score.value), label_of(score), None, score.error)
            if explain:
                try:
                    f.explanation = self._explanation(score.explanation)
                except Exception:  # noqa: BLE001 - counted by each output that shows it
                    f.unexplained = True
                    self._log_failure("explanation")
            out.append(f)
        return out

    # --- one output each, from the scores' facts ----------------------------------------------

    def _span_attributes(self, facts: list[_Facts], emission: Emission) -> Attributes:
        """``toolscore.<scorer>.{score,label,explanation,error}`` for the held agent span."""
        try:
            attributes: Attributes = {}
            attr = semconv.toolscore_attr
            for f in facts:
                if f.unexplained:
                    raise _Unexplained
                if f.value is not None:
                    attributes[attr(f.name, semconv.TOOLSCORE_FIELD_SCORE)] = f.value
                if f.label is not None:
                    attributes[attr(f.name, semconv.TOOLSCORE_FIELD_LABEL)] = f.label
                if f.explanation is not None:
                    attributes[attr(f.name, semconv.TOOLSCORE_FIELD_EXPLANATION)] = f.explanation
                if f.error is not None:
                    attributes[attr(f.name, semconv.TOOLSCORE_FIELD_ERROR)] = f.error
            return attributes
        except Exception:  # noqa: BLE001 - never raise into the worker
            self._failed(emission, OUTPUT_SPAN_ATTRIBUTES)
            return {}

    def _events(self, trajectory: Trajectory, scores: Sequence[Score], facts: list[_Facts],
                emission: Emission) -> list[list[Event]]:
        """One ``gen_ai.evaluation.result`` per score on the run span, plus one per scored tool
        call that ``call_events`` picks, on its tool span (on the run span when the call had no
        span of its own)."""
        which = self._settings.call_events
        agent = emission.agent
        out = []
        for score, f in zip(scores, facts, strict=True):
            # One score's bad details must not cost the other scores their events.
            try:
                if f.unexplained:
                    raise _Unexplained
                attributes = _evaluation_attributes(f)
                if agent:
                    attributes[semconv.GEN_AI_AGENT_NAME] = agent
                group: list[Event] = [(None, f.error is not None, attributes)]
                if which != "none":
                    calls = [result for result in score.calls if _call_event_wanted(result, which)]
                    for result in pin_to_calls(calls, trajectory) if calls else ():
                        group.append(self._call_event(f.name, agent, result))
                out.append(group)
            except Exception:  # noqa: BLE001 - never raise into the worker
                self._failed(emission, OUTPUT_EVENTS)
        return out

    def _call_event(self, name: str, agent: str | None, result: CallResult) -> Event:
        """The per-call event, on the call's own span (the run's when it has none)."""
        assert result.score is not None  # _call_event_wanted
        attributes: Attributes = {
            semconv.GEN_AI_EVALUATION_NAME: name,
            semconv.GEN_AI_EVALUATION_SCORE_VALUE: result.score,
            semconv.GEN_AI_EVALUATION_SCORE_LABEL: LABEL_FAIL if result.blocking else LABEL_PASS,
        }
        if result.issues:
            explanation = self._explanation("; ".join(_describe_issue(issue) for issue in result.issues))
            if explanation:
                attributes[semconv.GEN_AI_EVALUATION_EXPLANATION] = explanation
        if result.name:
            attributes[semconv.GEN_AI_TOOL_NAME] = result.name
        if result.call_id:
            attributes[semconv.GEN_AI_TOOL_CALL_ID] = result.call_id
        if agent:
            attributes[semconv.GEN_AI_AGENT_NAME] = agent
        return (result.span_id or None, False, attributes)

    def _evaluations(self, facts: list[_Facts], emission: Emission) -> list[tuple[str, Attributes]]:
        """Per score, its evaluation span's name and attributes: the GenAI form (as the event
        has it) plus the OpenInference carrier form, which Phoenix reads."""
        try:
            out = []
            prefix = semconv.EVALUATION_SPAN_PREFIX
            for f in facts:
                if f.unexplained:
                    raise _Unexplained
                attributes: Attributes = {
                    semconv.GEN_AI_OPERATION_NAME: semconv.OP_EVALUATION,
                    semconv.OI_SPAN_KIND: semconv.OI_KIND_EVALUATOR,
                }
                attributes.update(_evaluation_attributes(f))
                if emission.agent:
                    attributes[semconv.GEN_AI_AGENT_NAME] = emission.agent
                attributes[_OI_NAME] = f.name
                # the same (redacted, cut) values in both forms
                if f.value is not None:
                    attributes[_OI_SCORE] = f.value
                if f.label is not None:
                    attributes[_OI_LABEL] = f.label
                if f.explanation:
                    attributes[_OI_EXPLANATION] = f.explanation
                out.append((f"{prefix} {f.name}", attributes))
            return out
        except Exception:  # noqa: BLE001 - never raise into the worker
            self._failed(emission, OUTPUT_EVALUATION_SPAN)
            return []

    def _metrics(self, scores: Sequence[Score], facts: list[_Facts], emission: Emission) -> list[ScorePoints]:
        """Per score: the evaluation counter's outcome, the histogram's value (with its label)
        and the issue counter's issues. Names and enums only (never content, ids or
        explanations), so the number of series stays bounded."""
        out: list[ScorePoints] = []
        for score, f in zip(scores, facts, strict=True):
            issues: tuple[IssuePoint, ...] = ()
            try:
                issues = tuple((issue.type, issue.severity, result.name)
                               for result in score.calls for issue in result.issues)
            except Exception:  # noqa: BLE001 - the score is still counted and recorded
                self._failed(emission, OUTPUT_METRICS)
            out.append((f.name, score.outcome, f.value, f.label if f.value is not None else None, issues))
        return out

    # --- explanations -------------------------------------------------------------------------

    def _explanation(self, text: str | None) -> str | None:
        """What may leave the process of an explanation: nothing when explanations are off,
        else redacted, then cut to ``explanation_max_chars``. Worked out once per text."""
        if not text or not self._settings.explanations:
            return None
        if len(text) > _REMEMBERED_TEXT_CHARS:
            return self._leaving(text)
        with self._explained_lock:
            leaving = self._explained.get(text)
        if leaving is not None:
            return leaving
        leaving = self._leaving(text)
        with self._explained_lock:
            self._explained[text] = leaving
            if len(self._explained) > _REMEMBERED_TEXTS:
                self._explained.popitem(last=False)
        return leaving

    def _leaving(self, text: str) -> str:
        limit = self._settings.explanation_max_chars
        if self._redact is not None:
            # Redacting megabytes to keep 256 characters would cost the worker for nothing, so
            # the text is cut first, at a whitespace boundary: a secret straddling a plain cut
            # would leave its head unrecognisable, and in clear, in what is kept.
            bound = max(4 * limit, 1024)
            if len(text) > bound:
                head = text[:bound]
                space = max(head.rfind(" "), head.rfind("\n"), head.rfind("\t"))
                text = head[:space] if space > 0 else ""
                text += " …"
            text = self._redact(text)
        # A custom scorer's text may hold lone surrogates, which the OTLP encoder cannot write.
        return valid_text(truncate(text, limit))

    def _failed(self, emission: Emission, output: str) -> None:
        """Note (and log once per output) an exception caught while preparing ``output``."""
        emission.failed.append(output)
        self._log_failure(output)

    def _log_failure(self, output: str) -> None:
        log_failure_once(_log, self._warned, output)



def log_failure_once(log: logging.Logger, warned: set[str], output: str) -> None:
    """Log the exception being handled: a warning the first time ``output`` fails, then at debug
    level (a broken output fails on every run; one warning says so)."""
    try:
        if output not in warned:
            warned.add(output)
            log.warning("otel-toolscore: emitting %s failed", output, exc_info=True)
        else:
            log.debug("otel-toolscore: emitting %s failed", output, exc_info=True)
    except Exception:  # noqa: BLE001 - the error path itself must not raise either
        pass

class _Unexplained(Exception):
    """The score's explanation could not be worked out (logged where it was)."""


_OI_NAME = semconv.oi_evaluation_attr(0, semconv.OI_EVALUATION_NAME)
_OI_SCORE = semconv.oi_evaluation_attr(0, semconv.OI_EVALUATION_SCORE)
_OI_LABEL = semconv.oi_evaluation_attr(0, semconv.OI_EVALUATION_LABEL)
_OI_EXPLANATION = semconv.oi_evaluation_attr(0, semconv.OI_EVALUATION_EXPLANATION)


def _evaluation_attributes(f: _Facts) -> Attributes:
    """The ``gen_ai.evaluation.*`` (and ``error.type``) attributes of one run-level score."""
    attributes: Attributes = {semconv.GEN_AI_EVALUATION_NAME: f.name}
    if f.value is not None:
        attributes[semconv.GEN_AI_EVALUATION_SCORE_VALUE] = f.value
    if f.label is not None:
        attributes[semconv.GEN_AI_EVALUATION_SCORE_LABEL] = f.label
    if f.explanation:
        attributes[semconv.GEN_AI_EVALUATION_EXPLANATION] = f.explanation
    if f.error is not None:
        attributes[semconv.ERROR_TYPE] = f.error
    return attributes
