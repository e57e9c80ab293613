"""Scores out to OpenTelemetry: agent-span attributes, ``gen_ai.evaluation.result`` events, one
evaluation span per run, and metrics (names in DESIGN.md, "Emitted names"; all in semconv).

Called from the processor's worker thread, so no method raises: a failure is counted in
``toolscore.emit.errors{output}`` and logged once per output. Each output has its own switch
in the settings; a switched-off output costs nothing.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry._logs import (
    Logger,
    LoggerProvider,
    LogRecord,
    SeverityNumber,
    get_logger_provider,
)
from opentelemetry.context import Context
from opentelemetry.metrics import (
    CallbackOptions,
    Meter,
    MeterProvider,
    Observation,
    get_meter_provider,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
)
from opentelemetry.util.types import AttributeValue

from otel_toolscore import semconv
from otel_toolscore._version import __version__
from otel_toolscore.config import ToolScoreSettings
from otel_toolscore.conventions.parsing import valid_text
from otel_toolscore.scorers.base import (
    LABEL_ERROR,
    LABEL_FAIL,
    LABEL_PASS,
    LABEL_SKIPPED,
    Score,
)
from otel_toolscore.scorers.redaction import Redactor, make_redactor
from otel_toolscore.scorers.results import CallResult, Issue, pin_to_calls
from otel_toolscore.trajectory import Trajectory

_log = logging.getLogger(__name__)


def _is_unset(provider: object) -> bool:
    """The API's stand-ins for a global provider not set (proxy) or none at all (no-op)."""
    name = type(provider).__name__
    return "Proxy" in name or name.startswith("NoOp")

#: gen_ai.evaluation.score buckets: scores live in [0, 1], tenths are what alerts look at
SCORE_BUCKETS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
#: toolscore.judge.duration buckets: the GenAI semconv ones for gen_ai.client.operation.duration
JUDGE_DURATION_BUCKETS: tuple[float, ...] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
#: distinct tool names kept as a metric attribute; the model can invent names, so past this
#: many the rest are counted under _OTHER_TOOL instead of growing the series without bound
MAX_TOOL_NAMES = 256
_OTHER_TOOL = "_other"
#: metric attribute sets kept built (per scorer, label, agent, issue): past this many, the rest
#: are built per measurement
_MAX_CACHED_ATTRIBUTES = 1024

# Output names for toolscore.emit.errors{output}
OUTPUT_SPAN_ATTRIBUTES = "span_attributes"
OUTPUT_EVALUATION_SPAN = "evaluation_span"
OUTPUT_EVENTS = "events"
OUTPUT_METRICS = "metrics"

_id_generator = RandomIdGenerator()

#: explanations remembered as they leave (``Emitter._explanation``): a run-level one goes out on
#: the agent span, in the event and on the evaluation span, and runs repeat their explanations
_REMEMBERED_TEXTS = 256
#: longer texts are worked out again each time rather than kept (memory)
_REMEMBERED_TEXT_CHARS = 4096


def _call_event_wanted(result: CallResult, which: str) -> bool:
    """Whether a per-call event goes out for ``result`` under ``call_events=which``."""
    if result.score is None or which == "none":
        return False
    return which == "all" or bool(result.issues) or result.score < 1


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


def _number(value: Any) -> float | None:
    # bool is an int; a True "score" in details would be a scorer bug, not a score of 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _describe_issue(issue: Issue) -> str:
    return f"{issue.type}: {issue.message}" if issue.message else issue.type


def _context(trace_id_hex: str, span_id_hex: str | None) -> Context:
    """A context whose current span is the given (already exported) span, to parent records."""
    span_context = SpanContext(
        trace_id=int(trace_id_hex, 16),
        span_id=int(span_id_hex, 16) if span_id_hex else 0,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(span_context))


class _PendingGauge:
    """One toolscore.traces.pending gauge per Meter, summing every registered callback.

    The SDK keeps only the first observable instrument of a name per meter (a second one's
    callbacks are silently dropped), so two processors sharing a MeterProvider share this.
    Bound methods are held weakly, so a discarded processor stops being observed.
    """

    def __init__(self, meter: Meter) -> None:
        self._lock = threading.Lock()
        self._sources: list[Callable[[], Callable[[], int] | None]] = []
        meter.create_observable_gauge(
            semconv.METRIC_TRACES_PENDING,
            callbacks=[self._observe],
            unit="{trace}",
            description="Traces buffered and not yet scored",
        )

    def add(self, callback: Callable[[], int]) -> None:
        try:
            ref: Callable[[], Callable[[], int] | None] = weakref.WeakMethod(
                callback  # type: ignore[arg-type]
            )
        except TypeError:  # a plain function or lambda: hold it
            def ref() -> Any:
                return callback

        with self._lock:
            self._sources.append(ref)

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        total = 0
        with self._lock:
            sources = list(self._sources)
        for ref in sources:
            callback = ref()
            if callback is None:
                with self._lock:
                    if ref in self._sources:
                        self._sources.remove(ref)
                continue
            try:
                total += int(callback())
            except Exception:  # noqa: BLE001 - one bad source must not hide the others
                _log.debug("pending-traces callback failed", exc_info=True)
        return [Observation(total)]


_pending_gauges: weakref.WeakKeyDictionary[Meter, _PendingGauge] = weakref.WeakKeyDictionary()
_pending_lock = threading.Lock()


def _pending_gauge(meter: Meter) -> _PendingGauge:
    with _pending_lock:
        gauge = _pending_gauges.get(meter)
        if gauge is None:
            gauge = _pending_gauges[meter] = _PendingGauge(meter)
        return gauge


class Emitter:
    """Turns scores into attributes, events, an evaluation span and metrics."""

    def __init__(
        self,
        settings: ToolScoreSettings,
        *,
        meter_provider: MeterProvider | None = None,
        logger_provider: LoggerProvider | None = None,
        redact: Redactor | None = None,
    ) -> None:
        self._settings = settings
        # Explanations can quote what the run's spans hold (arguments, results, a judge's
        # echo of them, an exception message with a key in it); they leave the process through
        # the same redaction a judge request gets, plus the user's hook when there is one.
        self._redact: Redactor | None = (
            make_redactor(redact) if settings.redact_explanations else redact
        )
        self._scope = InstrumentationScope(semconv.INSTRUMENTATION_SCOPE, __version__)
        self._warned: set[str] = set()
        self._tool_names: set[str] = set()
        self._lock = threading.Lock()
        # Metric attribute dicts by what they are built from: a few per scorer, and several
        # measurements per run. The SDK copies them (never mutates them), so one can be shared.
        self._metric_attributes: dict[tuple[str | None, ...], dict[str, AttributeValue]] = {}
        # explanation as given -> as it leaves, oldest first
        self._explained: OrderedDict[str, str] = OrderedDict()
        self._explained_lock = threading.Lock()
        # A provider that fails here turns its output off rather than failing the app's
        # install(); the warning says why the output is missing.
        self._meter: Meter | None = None
        if settings.metrics:
            try:
                meter = (meter_provider or get_meter_provider()).get_meter(
                    semconv.INSTRUMENTATION_SCOPE, __version__
                )
                self._create_instruments(meter)
                self._meter = meter
            except Exception:  # noqa: BLE001
                _log.warning("otel-toolscore: metrics disabled, no meter", exc_info=True)
        # Taken from the API's global stand-in (no provider given, none set yet): what it gets
        # goes nowhere until the app sets a global provider, which is checked, once, when there
        # is first something to send (the app may well set it after building this).
        self._unsent_check = {
            "metrics": settings.metrics and meter_provider is None and _is_unset(get_meter_provider()),
            "events": settings.events and logger_provider is None and _is_unset(get_logger_provider()),
        }
        self._logger: Logger | None = None
        if settings.events:
            try:
                self._logger = (logger_provider or get_logger_provider()).get_logger(
                    semconv.INSTRUMENTATION_SCOPE, __version__
                )
            except Exception:  # noqa: BLE001
                _log.warning("otel-toolscore: events disabled, no logger", exc_info=True)

    def _create_instruments(self, meter: Meter) -> None:
        self._score_histogram = meter.create_histogram(
            semconv.METRIC_EVALUATION_SCORE,
            unit="1",
            description="Evaluation scores of agent runs",
            explicit_bucket_boundaries_advisory=SCORE_BUCKETS,
        )
        self._issues_counter = meter.create_counter(
            semconv.METRIC_TOOL_CALL_ISSUES,
            unit="{issue}",
            description="Issues found in tool calls",
        )
        self._evaluations_counter = meter.create_counter(
            semconv.METRIC_EVALUATIONS,
            unit="{evaluation}",
            description="Evaluations by outcome (scored, skipped, error, dropped, already_scored)",
        )
        self._evicted_counter = meter.create_counter(
            semconv.METRIC_TRACES_EVICTED,
            unit="{trace}",
            description="Traces dropped from the buffer before scoring, by reason",
        )
        self._judge_duration = meter.create_histogram(
            semconv.METRIC_JUDGE_DURATION,
            unit="s",
            description="Duration of LLM judge calls",
            explicit_bucket_boundaries_advisory=JUDGE_DURATION_BUCKETS,
        )
        self._judge_cost = meter.create_counter(
            semconv.METRIC_JUDGE_COST, unit="USD", description="Cost of LLM judge calls"
        )
        self._errors_counter = meter.create_counter(
            semconv.METRIC_EMIT_ERRORS,
            unit="{error}",
            description="Failures while emitting scores, by output",
        )

    # --- failure handling -------------------------------------------------------------------

    def _failed(self, output: str) -> None:
        """Count (and log once per output) an exception caught while emitting."""
        try:
            if output not in self._warned:
                self._warned.add(output)
                _log.warning("otel-toolscore: emitting %s failed", output, exc_info=True)
            else:
                _log.debug("otel-toolscore: emitting %s failed", output, exc_info=True)
            if self._meter is not None:
                self._errors_counter.add(1, {semconv.EMIT_OUTPUT: output})
        except Exception:  # noqa: BLE001 - the error path itself must not raise either
            pass

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

    # --- agent-span attributes --------------------------------------------------------------

    def span_attributes(self, scores: Sequence[Score]) -> dict[str, AttributeValue]:
        """``toolscore.<scorer>.{score,label,explanation,error}`` for the held agent span."""
        if not self._settings.span_attributes:
            return {}
        try:
            attributes: dict[str, AttributeValue] = {}
            for score in scores:
                fields: dict[str, AttributeValue | None] = {
                    semconv.TOOLSCORE_FIELD_SCORE: _number(score.value),
                    semconv.TOOLSCORE_FIELD_LABEL: label_of(score),
                    semconv.TOOLSCORE_FIELD_EXPLANATION: self._explanation(score.explanation),
                    semconv.TOOLSCORE_FIELD_ERROR: score.error,
                }
                for field, value in fields.items():
                    if value is not None:
                        attributes[semconv.toolscore_attr(score.name, field)] = value
            return attributes
        except Exception:  # noqa: BLE001 - never raise into the worker
            self._failed(OUTPUT_SPAN_ATTRIBUTES)
            return {}

    # --- evaluation span --------------------------------------------------------------------

    def evaluation_spans(
        self, trajectory: Trajectory, scores: Sequence[Score], agent_span: ReadableSpan
    ) -> list[ReadableSpan]:
        """One finished span per score, child of and linked to the agent span (DESIGN.md,
        "Emitted names": the GenAI semconv proposal's ``evaluation`` operation).

        One per score because the ``gen_ai.evaluation.*`` attributes describe one evaluation:
        a backend search on ``gen_ai.evaluation.name``/``score.label`` then finds each score.
        Built as ReadableSpans, not through a tracer, so they go only where the caller sends
        them (the downstream processor) and never back through our own processor.
        """
        if not self._settings.evaluation_spans or not scores:
            return []
        try:
            parent = agent_span.context
            if parent is None or not parent.is_valid:
                return []
            now = time.time_ns()
            spans = []
            for score in scores:
                context = SpanContext(
                    trace_id=parent.trace_id,
                    span_id=_id_generator.generate_span_id(),
                    is_remote=False,
                    trace_flags=parent.trace_flags,
                    trace_state=parent.trace_state,
                )
                spans.append(ReadableSpan(
                    name=f"{semconv.EVALUATION_SPAN_PREFIX} {score.name}",
                    context=context,
                    parent=parent,
                    resource=agent_span.resource,
                    attributes=self._evaluation_span_attributes(trajectory, score),
                    links=(Link(parent),),
                    kind=SpanKind.INTERNAL,
                    start_time=now,
                    end_time=now,
                    instrumentation_scope=self._scope,
                ))
            return spans
        except Exception:  # noqa: BLE001 - never raise into the worker
            self._failed(OUTPUT_EVALUATION_SPAN)
            return []

    def _evaluation_span_attributes(
        self, trajectory: Trajectory, score: Score
    ) -> dict[str, AttributeValue]:
        """The GenAI form (as the event has it) plus the OpenInference carrier form, which
        Phoenix reads, for the one score the span holds."""
        attributes: dict[str, AttributeValue] = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_EVALUATION,
            semconv.OI_SPAN_KIND: semconv.OI_KIND_EVALUATOR,
        }
        attributes.update(self._evaluation_attributes(score))
        if trajectory.agent_name:
            attributes[semconv.GEN_AI_AGENT_NAME] = trajectory.agent_name
        attributes[semconv.oi_evaluation_attr(0, semconv.OI_EVALUATION_NAME)] = score.name
        for oi_field, gen_ai in (
            (semconv.OI_EVALUATION_SCORE, semconv.GEN_AI_EVALUATION_SCORE_VALUE),
            (semconv.OI_EVALUATION_LABEL, semconv.GEN_AI_EVALUATION_SCORE_LABEL),
            (semconv.OI_EVALUATION_EXPLANATION, semconv.GEN_AI_EVALUATION_EXPLANATION),
        ):
            if gen_ai in attributes:  # the same (redacted, cut) value in both forms
                attributes[semconv.oi_evaluation_attr(0, oi_field)] = attributes[gen_ai]
        return attributes

    def _evaluation_attributes(self, score: Score) -> dict[str, AttributeValue]:
        """The ``gen_ai.evaluation.*`` (and ``error.type``) attributes of one run-level score."""
        attributes: dict[str, AttributeValue] = {semconv.GEN_AI_EVALUATION_NAME: score.name}
        value = _number(score.value)
        if value is not None:
            attributes[semconv.GEN_AI_EVALUATION_SCORE_VALUE] = value
        label = label_of(score)
        if label is not None:
            attributes[semconv.GEN_AI_EVALUATION_SCORE_LABEL] = label
        explanation = self._explanation(score.explanation)
        if explanation:
            attributes[semconv.GEN_AI_EVALUATION_EXPLANATION] = explanation
        if score.error is not None:
            attributes[semconv.ERROR_TYPE] = score.error
        return attributes

    # --- events -----------------------------------------------------------------------------

    def _warn_if_unsent(self, output: str, getter: Any, argument: str, setter: str) -> None:
        """Warn once when scores are about to go to the API's stand-in provider: nowhere."""
        self._unsent_check[output] = False
        if _is_unset(getter()):
            _log.warning(
                "otel-toolscore: no %s provider: score %s go nowhere. Pass %s= to "
                "ToolScoreSpanProcessor (or install()), or set a global one (%s).",
                "logger" if output == "events" else "meter", output, argument, setter,
            )

    def emit_events(self, trajectory: Trajectory, scores: Sequence[Score]) -> None:
        """One ``gen_ai.evaluation.result`` per score on the run span, plus one per scored tool
        call that ``call_events`` picks, on its tool span (on the run span when the call had no
        span of its own)."""
        if self._logger is None or not scores:
            return
        if self._unsent_check["events"]:
            self._warn_if_unsent("events", get_logger_provider, "logger_provider", "opentelemetry._logs.set_logger_provider")
        try:
            run_context = _context(trajectory.trace_id, trajectory.span_id)
        except Exception:  # noqa: BLE001 - never raise into the worker
            self._failed(OUTPUT_EVENTS)
            return
        which = self._settings.call_events
        for score in scores:
            # One score's bad details must not cost the other scores their events.
            try:
                attributes = self._evaluation_attributes(score)
                if trajectory.agent_name:
                    attributes[semconv.GEN_AI_AGENT_NAME] = trajectory.agent_name
                self._emit(run_context, attributes, error=score.error is not None)
                if which == "none":
                    continue
                calls = [result for result in score.calls if _call_event_wanted(result, which)]
                for result in pin_to_calls(calls, trajectory) if calls else ():
                    self._emit_call(trajectory, score, result, run_context)
            except Exception:  # noqa: BLE001 - never raise into the worker
                self._failed(OUTPUT_EVENTS)

    def _emit_call(self, trajectory: Trajectory, score: Score, result: CallResult, run_context: Context) -> None:
        """The per-call event, on the call's own span (the run's when it has none)."""
        assert result.score is not None  # _call_event_wanted
        attributes: dict[str, AttributeValue] = {
            semconv.GEN_AI_EVALUATION_NAME: score.name,
            semconv.GEN_AI_EVALUATION_SCORE_VALUE: result.score,
            semconv.GEN_AI_EVALUATION_SCORE_LABEL: LABEL_FAIL if result.blocking else LABEL_PASS,
        }
        if result.issues:
            text = "; ".join(_describe_issue(issue) for issue in result.issues)
            explanation = self._explanation(text)
            if explanation:
                attributes[semconv.GEN_AI_EVALUATION_EXPLANATION] = explanation
        if result.name:
            attributes[semconv.GEN_AI_TOOL_NAME] = result.name
        if result.call_id:
            attributes[semconv.GEN_AI_TOOL_CALL_ID] = result.call_id
        if trajectory.agent_name:
            attributes[semconv.GEN_AI_AGENT_NAME] = trajectory.agent_name
        context = run_context
        if result.span_id:
            context = _context(trajectory.trace_id, result.span_id)
        self._emit(context, attributes, error=False)

    def _emit(
        self, context: Context, attributes: dict[str, AttributeValue], *, error: bool
    ) -> None:
        assert self._logger is not None
        self._logger.emit(
            LogRecord(
                timestamp=time.time_ns(),
                context=context,
                # INFO for judgements; WARN when the scorer could not score, so it stands out.
                severity_number=SeverityNumber.WARN if error else SeverityNumber.INFO,
                event_name=semconv.GEN_AI_EVALUATION_RESULT,
                attributes=attributes,
            )
        )

    # --- metrics ----------------------------------------------------------------------------

    def record_metrics(self, trajectory: Trajectory, scores: Sequence[Score]) -> None:
        """Score histogram, issue counter and evaluation counter for one run.

        Attributes are names and enums only (never content, ids or explanations), so the
        number of series stays bounded.
        """
        if self._meter is None:
            return
        if self._unsent_check["metrics"] and scores:
            self._warn_if_unsent("metrics", get_meter_provider, "meter_provider", "opentelemetry.metrics.set_meter_provider")
        agent = trajectory.agent_name or None
        for score in scores:
            try:
                self.count_evaluation(score.name, score.outcome)
                value = _number(score.value)
                if value is not None:
                    label = label_of(score)
                    key = ("score", score.name, label, agent)
                    attributes = self._metric_attributes.get(key)
                    if attributes is None:
                        attributes = self._keep_attributes(key, _score_attributes(score.name, label, agent))
                    self._score_histogram.record(value, attributes)
                self._count_issues(score)
            except Exception:  # noqa: BLE001 - never raise into the worker
                self._failed(OUTPUT_METRICS)

    def _count_issues(self, score: Score) -> None:
        for result in score.calls:
            if not result.issues:
                continue
            tool = self._bounded_tool_name(result.name)
            for issue in result.issues:
                key = ("issue", score.name, issue.type, issue.severity, tool)
                attributes = self._metric_attributes.get(key)
                if attributes is None:
                    attributes = self._keep_attributes(
                        key, _issue_attributes(score.name, issue.type, issue.severity, tool)
                    )
                self._issues_counter.add(1, attributes)

    def _keep_attributes(
        self, key: tuple[str | None, ...], attributes: dict[str, AttributeValue]
    ) -> dict[str, AttributeValue]:
        if len(self._metric_attributes) < _MAX_CACHED_ATTRIBUTES:
            self._metric_attributes[key] = attributes
        return attributes

    def _bounded_tool_name(self, name: str | None) -> str | None:
        if not name:
            return None
        with self._lock:
            if name in self._tool_names:
                return name
            if len(self._tool_names) < MAX_TOOL_NAMES:
                self._tool_names.add(name)
                return name
        return _OTHER_TOOL

    def count_evaluation(self, name: str, outcome: str, n: int = 1) -> None:
        """``toolscore.evaluations{gen_ai.evaluation.name, outcome}`` += n (e.g. "dropped")."""
        if self._meter is None or n <= 0:
            return
        try:
            key = ("evaluation", name, outcome)
            attributes = self._metric_attributes.get(key)
            if attributes is None:
                attributes = self._keep_attributes(
                    key, {semconv.GEN_AI_EVALUATION_NAME: name, semconv.OUTCOME: outcome}
                )
            self._evaluations_counter.add(n, attributes)
        except Exception:  # noqa: BLE001 - never raise into the worker
            self._failed(OUTPUT_METRICS)

    def count_evicted(self, reason: str, n: int = 1) -> None:
        """``toolscore.traces.evicted{reason}`` += n."""
        if self._meter is None or n <= 0:
            return
        try:
            self._evicted_counter.add(n, {semconv.EVICTION_REASON: reason})
        except Exception:  # noqa: BLE001 - never raise into the worker
            self._failed(OUTPUT_METRICS)

    def observe_pending(self, callback: Callable[[], int]) -> None:
        """``toolscore.traces.pending``: the sum of every registered callback at collection."""
        if self._meter is None:
            return
        try:
            _pending_gauge(self._meter).add(callback)
        except Exception:  # noqa: BLE001 - never raise into the caller
            self._failed(OUTPUT_METRICS)

    def record_judge(self, duration_s: float, cost_usd: float | None, model: str) -> None:
        """One judge call: its duration, and its cost when known."""
        if self._meter is None:
            return
        try:
            attributes: dict[str, AttributeValue] = {semconv.GEN_AI_REQUEST_MODEL: model}
            duration = _number(duration_s)
            if duration is not None and duration >= 0:
                self._judge_duration.record(duration, attributes)
            cost = _number(cost_usd)
            if cost is not None and cost >= 0:  # counters only go up
                self._judge_cost.add(cost, attributes)
        except Exception:  # noqa: BLE001 - never raise into the worker
            self._failed(OUTPUT_METRICS)


def _score_attributes(name: str, label: str | None, agent: str | None) -> dict[str, AttributeValue]:
    """``gen_ai.evaluation.score``'s attributes."""
    attributes: dict[str, AttributeValue] = {semconv.GEN_AI_EVALUATION_NAME: name}
    if label is not None:
        attributes[semconv.GEN_AI_EVALUATION_SCORE_LABEL] = label
    if agent:
        attributes[semconv.GEN_AI_AGENT_NAME] = agent
    return attributes


def _issue_attributes(
    name: str, issue_type: str, severity: str, tool: str | None
) -> dict[str, AttributeValue]:
    """``toolscore.issues``' attributes."""
    attributes: dict[str, AttributeValue] = {
        # the scorer's name too: two scorers can report the same issue type
        semconv.GEN_AI_EVALUATION_NAME: name,
        semconv.ISSUE_TYPE: issue_type,
        semconv.ISSUE_SEVERITY: severity,
    }
    if tool is not None:
        attributes[semconv.GEN_AI_TOOL_NAME] = tool
    return attributes
