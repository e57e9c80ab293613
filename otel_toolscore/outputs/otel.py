"""Scores out to OpenTelemetry: agent-span attributes, ``gen_ai.evaluation.result`` events, one
evaluation span per score, and metrics (names in docs/emitted.md; all in semconv).

Two halves: ``_prepare.Preparer`` works out what a run emits as plain data (an ``Emission``),
``Emitter.send`` hands it to the SDK. The worker thread does both; with ``scoring="process"``
the scoring process prepares and the app only sends.

Called from the processor's worker thread, so no method raises: a failure is counted in
``toolscore.emit.errors{output}`` and logged once per output. Each output has its own switch
in the settings; a switched-off output costs nothing.
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
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
    Counter,
    Meter,
    MeterProvider,
    Observation,
    get_meter_provider,
)
from opentelemetry.sdk.resources import Resource
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

from otel_toolscore import _fork, semconv
from otel_toolscore._version import __version__
from otel_toolscore.config import ToolScoreSettings
from otel_toolscore.outputs._prepare import (
    OUTPUT_EVALUATION_SPAN,
    OUTPUT_EVENTS,
    OUTPUT_METRICS,
    OUTPUT_SPAN_ATTRIBUTES,
    Emission,
    Preparer,
    label_of,
    log_failure_once,
    number,
    truncate,
)
from otel_toolscore.scorers.base import Score
from otel_toolscore.scorers.redaction import Redactor
from otel_toolscore.trajectory import Trajectory

__all__ = [
    "OUTPUT_EVALUATION_SPAN", "OUTPUT_EVENTS", "OUTPUT_METRICS", "OUTPUT_SPAN_ATTRIBUTES", "Emission", "Emitter",
    "label_of", "truncate",
]

_log = logging.getLogger(__name__)


def _is_unset(provider: object) -> bool:
    """The API's stand-ins for a global provider not set (proxy) or none at all (no-op)."""
    name = type(provider).__name__
    return "Proxy" in name or name.startswith("NoOp")


_UNSENT = {"metrics": ("MeterProvider", "OTEL_METRICS_EXPORTER", "meter_provider",
                       "opentelemetry.metrics.set_meter_provider"),
           "events": ("LoggerProvider", "OTEL_LOGS_EXPORTER", "logger_provider",
                      "opentelemetry._logs.set_logger_provider")}


def unsent_message(settings: ToolScoreSettings, missing: Sequence[str]) -> str:
    """One line: which outputs go nowhere and why, what still carries the scores, the fix."""
    carried = [what for what, on in (("on the agent spans", settings.span_attributes),
                                     ("as evaluation spans", settings.evaluation_spans)) if on]
    reasons = []
    for output in missing:
        provider, variable, _, _ = _UNSENT[output]
        unset = "" if os.environ.get(variable, "").strip() else f" and {variable} unset"
        reasons.append(f"no {provider} set{unset}")
    return (
        f"scores are recorded {' and '.join(carried) or 'nowhere else'}; {' and '.join(missing)} go "
        f"nowhere: {'; '.join(reasons)}. To send them, set "
        f"{' / '.join(_UNSENT[o][1] for o in missing)} (e.g. otlp) before install(), set a global provider "
        f"({', '.join(_UNSENT[o][3] for o in missing)}), or pass "
        f"{', '.join(_UNSENT[o][2] + '=' for o in missing)} to install() or ToolScoreSpanProcessor."
    )

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
#: counter adds wait at most this long (s) for a collection before they go to the SDK anyway
#: (a provider that collects differently, or none yet), or for this many series
_COUNTS_WAIT_S = 1.0
_COUNTS_MAX_SERIES = 256

_id_generator = RandomIdGenerator()
_SPAN_ID_MAX = 2**64 - 1
_new_object = object.__new__
_new_tuple = tuple.__new__


def _slow_evaluation_span(name: str, trace_id: int, span_id: int, flags: Any, state: Any, parent: SpanContext,
                          resource: Any, attributes: Any, links: Sequence[Link], now: int,
                          scope: InstrumentationScope) -> ReadableSpan:
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id=trace_id, span_id=span_id, is_remote=False, trace_flags=flags,
                            trace_state=state),
        parent=parent,
        resource=resource,
        attributes=attributes,
        links=links,
        kind=SpanKind.INTERNAL,
        start_time=now,
        end_time=now,
        instrumentation_scope=scope,
    )


#: what ReadableSpan.__init__ sets a span's status and events to when given none
_UNSET_STATUS = inspect.signature(ReadableSpan.__init__).parameters["status"].default
_NO_EVENTS = inspect.signature(ReadableSpan.__init__).parameters["events"].default


def _fast_evaluation_span(name: str, trace_id: int, span_id: int, flags: Any, state: Any, parent: SpanContext,
                          resource: Any, attributes: Any, links: Sequence[Link], now: int,
                          scope: InstrumentationScope) -> ReadableSpan:
    # What _slow_evaluation_span builds, field for field, without the SDK's constructors' calls
    # (one span per score per run); _check_evaluation_span proves the two equal at import. The
    # parent is valid (its trace id is), so the context is valid where its span id is.
    span = _new_object(ReadableSpan)
    span.__dict__ = {
        "_name": name,
        "_context": _new_tuple(SpanContext, (trace_id, span_id, False, flags, state, 0 < span_id <= _SPAN_ID_MAX)),
        "_kind": SpanKind.INTERNAL,
        "_instrumentation_info": None,
        "_instrumentation_scope": scope,
        "_parent": parent,
        "_start_time": now,
        "_end_time": now,
        "_attributes": attributes,
        "_events": _NO_EVENTS,
        "_links": links,
        "_resource": resource,
        "_status": _UNSET_STATUS,
    }
    return span


def _check_evaluation_span() -> bool:
    """Whether ``_fast_evaluation_span`` builds what the SDK's constructors build (this SDK release)."""
    from opentelemetry.trace import TraceFlags, TraceState

    parent = SpanContext(3, 4, True, TraceFlags(1), TraceState([("k", "v")]))
    try:
        for span_id in (5, _SPAN_ID_MAX):
            args = ("n", 3, span_id, parent.trace_flags, parent.trace_state, parent, Resource({"a": "b"}),
                    {"x": 1}, (Link(parent),), 7, InstrumentationScope("s", "1"))
            fast, slow = vars(_fast_evaluation_span(*args)), vars(_slow_evaluation_span(*args))
            if list(fast) != list(slow) or any(type(v) is not type(slow[k]) or v != slow[k] for k, v in fast.items()) \
                    or fast["_status"] is not slow["_status"] or fast["_events"] is not slow["_events"]:
                return False
    except Exception:  # noqa: BLE001 - an SDK release this does not know: the constructors then
        return False
    return True


_evaluation_span = _fast_evaluation_span if _check_evaluation_span() else _slow_evaluation_span


def _context(trace_id_hex: str, span_id_hex: str | None) -> Context:
    """A context whose current span is the given (already exported) span, to parent records."""
    span_context = SpanContext(
        trace_id=int(trace_id_hex, 16),
        span_id=int(span_id_hex, 16) if span_id_hex else 0,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def _span_context(context: Context) -> SpanContext:
    """The span context an API ``LogRecord`` takes from ``context`` (its current span's)."""
    return trace.get_current_span(context).get_span_context()


class _EventRecord(LogRecord):
    """A ``gen_ai.evaluation.result`` record, which copies itself as ``copy.copy`` copies any
    plain object (a new instance, its ``__dict__`` copied), only without the detour through
    ``__reduce_ex__`` that costs ~3 µs: the SDK's batch processor copies every record it takes."""

    def __copy__(self) -> _EventRecord:
        copied = object.__new__(type(self))
        copied.__dict__.update(self.__dict__)
        return copied


# --- counts: summed here, added to the SDK's counters per collection ------------------------------


class _Counts:
    """Counter adds summed per series until a reader collects (``_MeterHooks``), or until they
    have waited ``_COUNTS_WAIT_S`` or fill ``_COUNTS_MAX_SERIES`` series, then added to the SDK's
    counters, one add per series: a counter add costs ~10 µs of the SDK's Python (the attributes
    are cleaned, copied and hashed each time) and a run makes several, always to the same few
    series. What a collection exports is unchanged: the sums are added before it reads them."""

    def __init__(self, on_error: Callable[[str], None]) -> None:
        self._on_error = on_error
        self.reinit()

    def reinit(self) -> None:
        self._lock = threading.Lock()
        # series key -> [counter, attributes, sum]
        self._pending: dict[tuple[Any, ...], list[Any]] = {}
        self._since = 0.0  # when the oldest pending add was taken (monotonic)

    def add(self, key: tuple[Any, ...], counter: Counter, attributes: dict[str, AttributeValue], n: int) -> None:
        with self._lock:
            entry = self._pending.get(key)
            if entry is None:
                if not self._pending:
                    self._since = time.monotonic()
                self._pending[key] = [counter, attributes, n]
            else:
                entry[2] += n

    def flush_if_due(self) -> None:
        pending = self._pending
        if pending and (len(pending) >= _COUNTS_MAX_SERIES or time.monotonic() - self._since >= _COUNTS_WAIT_S):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for counter, attributes, n in pending.values():
            try:
                counter.add(n, attributes)
            except Exception:  # noqa: BLE001 - one broken counter must not cost the others theirs
                self._on_error(OUTPUT_METRICS)


class _MeterHooks:
    """The one observable instrument per Meter, toolscore.traces.pending. At each collection it
    first adds every emitter's summed counts (``_Counts``) to their counters, then reports the
    sum of every registered pending-traces callback (none ever registered: no point).

    The SDK keeps only the first observable instrument of a name per meter (a second one's
    callbacks are silently dropped), so emitters sharing a MeterProvider share this. Pending
    callbacks (bound methods) are held weakly, so a discarded processor stops being observed;
    counts are held until added, and forgotten with their emitter after that.
    """

    def __init__(self, meter: Meter) -> None:
        self._lock = threading.Lock()
        self._sources: list[Callable[[], Callable[[], int] | None]] = []
        self._observed = False
        self._counts: list[tuple[weakref.ref[Any], _Counts]] = []
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
            self._observed = True

    def add_counts(self, owner: object, counts: _Counts) -> None:
        with self._lock:
            self._counts.append((weakref.ref(owner), counts))

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            counts = list(self._counts)
            self._counts = [(owner, c) for owner, c in counts if owner() is not None]
        for _, c in counts:  # before the SDK reads the counters (it runs every callback first)
            c.flush()
        if not self._observed:
            return []
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


_meter_hooks: weakref.WeakKeyDictionary[Meter, _MeterHooks] = weakref.WeakKeyDictionary()
_hooks_lock = threading.Lock()


def _hooks(meter: Meter) -> _MeterHooks:
    with _hooks_lock:
        hooks = _meter_hooks.get(meter)
        if hooks is None:
            hooks = _meter_hooks[meter] = _MeterHooks(meter)
        return hooks


# --- the emitter ----------------------------------------------------------------------------------


class Emitter:
    """Turns scores into attributes, events, evaluation spans and metrics: ``prepare`` (plain
    data, see ``_prepare``) then ``send`` (the SDK calls)."""

    def __init__(
        self,
        settings: ToolScoreSettings,
        *,
        meter_provider: MeterProvider | None = None,
        logger_provider: LoggerProvider | None = None,
        redact: Redactor | None = None,
        run_metric_attributes: Callable[[str], Mapping[str, AttributeValue]] | None = None,
    ) -> None:
        self._settings = settings
        # More attributes for a run's score metrics, by its trace id (the sidecar's: which app
        # the run came from). Whoever gives them keeps their values bounded.
        self._run_metric_attributes = run_metric_attributes
        self._preparer = Preparer(settings, redact)
        self._scope = InstrumentationScope(semconv.INSTRUMENTATION_SCOPE, __version__)
        self._warned: set[str] = set()
        self._tool_names: set[str] = set()
        self._lock = threading.Lock()
        # Metric attribute dicts by what they are built from: a few per scorer, and several
        # measurements per run. The SDK copies them (never mutates them), so one can be shared.
        self._metric_attributes: dict[tuple[str | None, ...], dict[str, AttributeValue]] = {}
        self._counts = _Counts(self._failed)
        # A provider that fails here turns its output off rather than failing the app's
        # install(); the warning says why the output is missing.
        self._meter: Meter | None = None
        self._hooks: _MeterHooks | None = None
        if settings.metrics:
            try:
                meter = (meter_provider or get_meter_provider()).get_meter(
                    semconv.INSTRUMENTATION_SCOPE, __version__
                )
                self._create_instruments(meter)
                self._hooks = _hooks(meter)
                self._hooks.add_counts(self, self._counts)
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
        self._unsent_pending = any(self._unsent_check.values())
        # install() may build what is missing then (see on_unset)
        self._resolve_unset: Callable[[tuple[str, ...]], None] | None = None
        self._logger: Logger | None = None
        if settings.events:
            try:
                self._logger = (logger_provider or get_logger_provider()).get_logger(
                    semconv.INSTRUMENTATION_SCOPE, __version__
                )
            except Exception:  # noqa: BLE001
                _log.warning("otel-toolscore: events disabled, no logger", exc_info=True)
        _fork.reinit_in_child(self._at_fork_reinit)

    def _at_fork_reinit(self) -> None:
        # The parent adds the counts it summed; a thread of the parent may have held a lock.
        self._counts.reinit()
        self._lock = threading.Lock()
        self._preparer.reinit_after_fork()

    def _create_instruments(self, meter: Meter) -> None:
        self._score_histogram = meter.create_histogram(
            semconv.METRIC_EVALUATION_SCORE,
            unit="1",
            description="Evaluation scores of agent runs",
            explicit_bucket_boundaries_advisory=SCORE_BUCKETS,
        )
        self._record_score: Callable[[float, dict[str, AttributeValue]], None] = self._score_histogram.record
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
        log_failure_once(_log, self._warned, output)
        self._count_failure(output)

    def _count_failure(self, output: str) -> None:
        """``toolscore.emit.errors{output}`` += 1 (logged where it happened)."""
        try:
            if self._meter is not None:
                self._errors_counter.add(1, {semconv.EMIT_OUTPUT: output})
        except Exception:  # noqa: BLE001 - the error path itself must not raise either
            pass

    # --- a run's outputs --------------------------------------------------------------------

    def prepare(self, trajectory: Trajectory, scores: Sequence[Score]) -> Emission:
        """What the run's scores emit, as plain data (``send`` emits it)."""
        return self._preparer.prepare(trajectory, scores)

    def send(self, emission: Emission, agent_span: ReadableSpan | None, attached: bool = False) -> list[ReadableSpan]:
        """Events and metrics now; the evaluation spans (one per score, children of the agent
        span) are returned for the caller to forward. The span attributes are the caller's to
        put on the agent span; ``attached``: they are on it, and with ``evaluation_spans:
        unattached`` (the default) no evaluation span repeats them (nor, with ``events:
        unattached``, a run event)."""
        for output in emission.failed:
            self._count_failure(output)
        if emission.events:
            # with ``events: unattached``, a score the agent span carries has no run event of its
            # own (the first of its group); its tool calls' events are still sent
            self._send_events(emission, 1 if attached and self._settings.events == "unattached" else 0)
        if emission.metrics:
            self._send_metrics(emission)
        if agent_span is None or not emission.evaluations or (
                attached and self._settings.evaluation_spans == "unattached"):
            return []
        return self._evaluation_spans(emission, agent_span)

    # One output at a time (tests, tools): prepare and send that output alone.

    def span_attributes(self, scores: Sequence[Score]) -> dict[str, AttributeValue]:
        """``toolscore.<scorer>.{score,label,explanation,error}`` for the held agent span."""
        emission = self._preparer.prepare(None, scores)
        for output in emission.failed:
            self._count_failure(output)
        return emission.span_attributes

    def evaluation_spans(
        self, trajectory: Trajectory, scores: Sequence[Score], agent_span: ReadableSpan
    ) -> list[ReadableSpan]:
        """One finished span per score, child of and linked to the agent span."""
        return self.send(self._only(trajectory, scores, evaluations=True), agent_span)

    def emit_events(self, trajectory: Trajectory, scores: Sequence[Score]) -> None:
        """One ``gen_ai.evaluation.result`` per score on the run span, plus one per scored tool
        call that ``call_events`` picks, on its tool span."""
        self.send(self._only(trajectory, scores, events=True), None)

    def record_metrics(self, trajectory: Trajectory, scores: Sequence[Score]) -> None:
        """Score histogram, issue counter and evaluation counter for one run."""
        self.send(self._only(trajectory, scores, metrics=True), None)

    def _only(self, trajectory: Trajectory, scores: Sequence[Score], *, events: bool = False,
              evaluations: bool = False, metrics: bool = False) -> Emission:
        return self._preparer.prepare(trajectory, scores, span_attributes=False, events=events,
                                      evaluations=evaluations, metrics=metrics)

    # --- evaluation spans -------------------------------------------------------------------

    def _evaluation_spans(self, emission: Emission, agent_span: ReadableSpan) -> list[ReadableSpan]:
        """docs/emitted.md, "Evaluation spans": the GenAI semconv proposal's ``evaluation`` operation.

        One per score because the ``gen_ai.evaluation.*`` attributes describe one evaluation:
        a backend search on ``gen_ai.evaluation.name``/``score.label`` then finds each score.
        Built as ReadableSpans, not through a tracer, so they go only where the caller sends
        them (the downstream processor) and never back through our own processor.
        """
        try:
            parent = agent_span.context
            if parent is None or not parent.is_valid:
                return []
            now = time.time_ns()
            links = (Link(parent),)  # immutable: the run's spans share it
            trace_id, flags, state = parent.trace_id, parent.trace_flags, parent.trace_state
            resource, scope = agent_span.resource, self._scope
            new_id = _id_generator.generate_span_id
            if resource is None:  # (as ReadableSpan has it)
                resource = Resource.create({})
            return [
                _evaluation_span(name, trace_id, new_id(), flags, state, parent, resource, attributes, links, now,
                                 scope)
                for name, attributes in emission.evaluations
            ]
        except Exception:  # noqa: BLE001 - never raise into the worker
            self._failed(OUTPUT_EVALUATION_SPAN)
            return []

    # --- events -----------------------------------------------------------------------------

    def on_unset(self, resolve: Callable[[tuple[str, ...]], None]) -> None:
        """``resolve(outputs)`` is called once, when there is first something to send and some
        of ``("metrics", "events")`` would still go to the API's stand-in provider: install()
        builds there what the OTEL_* variables ask for (the app may set its own providers after
        install(), so this is not decided when the processor is built)."""
        self._resolve_unset = resolve

    def _check_unsent(self) -> None:
        """Once, at the first send: the outputs whose provider is still the API's stand-in go
        nowhere; one warning names them all, what still carries the scores, and the fix."""
        self._unsent_pending = False
        outputs = tuple(name for name, check in self._unsent_check.items() if check)
        self._unsent_check = dict.fromkeys(self._unsent_check, False)
        getters = {"metrics": get_meter_provider, "events": get_logger_provider}
        missing = tuple(name for name in outputs if _is_unset(getters[name]()))
        if missing and self._resolve_unset is not None:
            try:
                self._resolve_unset(missing)
            except Exception:  # noqa: BLE001 - never raise into the worker
                _log.warning("otel-toolscore: could not build the providers for %s", " and ".join(missing),
                             exc_info=True)
            missing = tuple(name for name in missing if _is_unset(getters[name]()))
        if missing:
            _log.warning("otel-toolscore: %s", unsent_message(self._settings, missing))

    def _send_events(self, emission: Emission, skip: int = 0) -> None:
        """Each score's group of events, less its first ``skip`` (its run event)."""
        logger = self._logger
        if logger is None:
            return
        if self._unsent_pending:
            self._check_unsent()
        try:
            run_context = _context(emission.trace_id, emission.span_id)
        except Exception:  # noqa: BLE001 - never raise into the worker
            self._failed(OUTPUT_EVENTS)
            return
        contexts: dict[str | None, tuple[Context, SpanContext]] = {None: (run_context, _span_context(run_context))}
        name = semconv.GEN_AI_EVALUATION_RESULT
        for group in emission.events:
            # One score's failure must not cost the other scores their events.
            try:
                for span_id, error, attributes in group[skip:] if skip else group:
                    pair = contexts.get(span_id)
                    if pair is None:
                        context = _context(emission.trace_id, span_id)
                        pair = contexts[span_id] = (context, _span_context(context))
                    # INFO for judgements; WARN when the scorer could not score, so it stands out.
                    severity = SeverityNumber.WARN if error else SeverityNumber.INFO
                    logger.emit(_EventRecord(timestamp=time.time_ns(), context=pair[0], severity_number=severity,
                                             event_name=name, attributes=attributes))
            except Exception:  # noqa: BLE001 - never raise into the worker
                self._failed(OUTPUT_EVENTS)

    # --- metrics ----------------------------------------------------------------------------

    def _send_metrics(self, emission: Emission) -> None:
        """Attributes are names and enums only (never content, ids or explanations), so the
        number of series stays bounded."""
        if self._meter is None:
            return
        if self._unsent_pending:
            self._check_unsent()
        agent = emission.agent
        cached = self._metric_attributes
        run: Mapping[str, AttributeValue] = {}
        if self._run_metric_attributes is not None:
            try:
                run = self._run_metric_attributes(emission.trace_id)
            except Exception:  # noqa: BLE001 - the scores are still recorded, without them
                self._failed(OUTPUT_METRICS)
        run_key: tuple[str | None, ...] = tuple(f"{k}={v!r}" for k, v in sorted(run.items())) if run else ()
        for name, outcome, value, label, issues in emission.metrics:
            try:
                self._count_evaluation(name, outcome, 1, run, run_key)
                if value is not None:
                    key: tuple[str | None, ...] = ("score", name, label, agent, *run_key)
                    attributes = cached.get(key)
                    if attributes is None:
                        attributes = self._keep_attributes(key, {**_score_attributes(name, label, agent), **run})
                    self._record_score(value, attributes)
                for issue_type, severity, tool_name in issues:
                    tool = self._bounded_tool_name(tool_name)
                    key = ("issue", name, issue_type, severity, tool, *run_key)
                    attributes = cached.get(key)
                    if attributes is None:
                        attributes = self._keep_attributes(
                            key, {**_issue_attributes(name, issue_type, severity, tool), **run})
                    self._counts.add(key, self._issues_counter, attributes, 1)
            except Exception:  # noqa: BLE001 - never raise into the worker
                self._failed(OUTPUT_METRICS)
        self._counts.flush_if_due()

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
        self._count_evaluation(name, outcome, n, None, ())

    def _count_evaluation(self, name: str, outcome: str, n: int, run: Mapping[str, AttributeValue] | None,
                          run_key: tuple[str | None, ...]) -> None:
        """The same, with a run's own attributes (``run_metric_attributes``) when it is one run's."""
        if self._meter is None or n <= 0:
            return
        try:
            key = ("evaluation", name, outcome, *run_key)
            attributes = self._metric_attributes.get(key)
            if attributes is None:
                attributes = self._keep_attributes(
                    key, {semconv.GEN_AI_EVALUATION_NAME: name, semconv.OUTCOME: outcome, **(run or {})}
                )
            self._counts.add(key, self._evaluations_counter, attributes, n)
        except Exception:  # noqa: BLE001 - never raise into the worker
            self._failed(OUTPUT_METRICS)

    def flush_counts(self) -> None:
        """Hand the summed counts to the SDK's counters now (a collection does it anyway)."""
        self._counts.flush()

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
        if self._hooks is None:
            return
        try:
            self._hooks.add(callback)
        except Exception:  # noqa: BLE001 - never raise into the caller
            self._failed(OUTPUT_METRICS)

    def record_judge(self, duration_s: float, cost_usd: float | None, model: str) -> None:
        """One judge call: its duration, and its cost when known."""
        if self._meter is None:
            return
        try:
            attributes: dict[str, AttributeValue] = {semconv.GEN_AI_REQUEST_MODEL: model}
            duration = number(duration_s)
            if duration is not None and duration >= 0:
                self._judge_duration.record(duration, attributes)
            cost = number(cost_usd)
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
