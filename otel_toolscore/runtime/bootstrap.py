"""``install()``: one call that puts otel-toolscore into an app's OpenTelemetry set-up."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry._logs import get_logger_provider, set_logger_provider
from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, SynchronousMultiSpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_toolscore.config import load_settings
from otel_toolscore.outputs.otel import _is_unset
from otel_toolscore.runtime import otel_env
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
from otel_toolscore.scorers.base import Scorer

_log = logging.getLogger(__name__)


class InstallError(RuntimeError):
    """install() cannot put scoring into this OpenTelemetry set-up; the message says what to do."""


class _FanOut(SpanProcessor):
    """The processors a provider has besides scoring, behind one ToolScoreSpanProcessor: each
    still gets every span exactly once (the agent span with its scores), in their order. The
    provider's later ``add_span_processor`` calls land here too (``_attach``), so a processor the
    app adds after install() gets the scored spans as well."""

    def __init__(self, processors: Sequence[SpanProcessor]) -> None:
        self._processors = tuple(processors)
        self._lock = threading.Lock()

    def add_span_processor(self, processor: SpanProcessor) -> None:
        with self._lock:  # the tuple is replaced whole: a span sees the old set or the new one
            self._processors = (*self._processors, processor)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for p in self._processors:
            p.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Span) -> None:
        for p in self._processors:
            hook = getattr(p, "_on_ending", None)
            if hook is not None:
                hook(span)

    def on_end(self, span: ReadableSpan) -> None:
        for p in self._processors:
            p.on_end(span)

    def shutdown(self) -> None:
        for p in self._processors:
            p.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        deadline = time.monotonic() + timeout_millis / 1000
        ok = True
        for p in self._processors:
            remaining = max(0, int((deadline - time.monotonic()) * 1000))
            ok = p.force_flush(remaining) is not False and ok  # None: SDK 1.37's base class
        return ok


class _Switch(SpanProcessor):
    """Where the scoring processor of install()'s own TracerProvider forwards to: its exporters
    until the app sets a TracerProvider of its own, then that provider's processors."""

    def __init__(self, target: SpanProcessor) -> None:
        self.target = target

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.target.on_start(span, parent_context=parent_context)

    def _on_ending(self, span: Span) -> None:
        hook = getattr(self.target, "_on_ending", None)
        if hook is not None:
            hook(span)

    def on_end(self, span: ReadableSpan) -> None:
        self.target.on_end(span)

    def shutdown(self) -> None:
        self.target.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.target.force_flush(timeout_millis) is not False


def _existing_tracer_provider() -> TracerProvider | None:
    """The app's global SDK TracerProvider, None when there is none; InstallError for a global
    provider that is not the SDK's (spans cannot be wrapped there)."""
    provider = trace.get_tracer_provider()
    if _is_unset(provider):
        return None
    if isinstance(provider, TracerProvider):
        return provider
    raise InstallError(
        f"the global TracerProvider is a {type(provider).__module__}.{type(provider).__name__}, not the "
        "OpenTelemetry SDK's: install() can only add scoring to an SDK TracerProvider. Wrap the processor "
        "that exports your spans instead: ToolScoreSpanProcessor(BatchSpanProcessor(exporter)), added to "
        "your provider, or pass install(tracer_provider=...) an SDK TracerProvider."
    )


def _active(provider: TracerProvider) -> Any:
    """The provider's multi-processor, with the parts ``_attach`` changes; InstallError otherwise."""
    active = getattr(provider, "_active_span_processor", None)
    if active is None or getattr(active, "_lock", None) is None \
            or not isinstance(getattr(active, "_span_processors", None), tuple):
        raise InstallError(
            "this TracerProvider's processors cannot be reached (an SDK version install() does not "
            "know): wrap your exporting processor in ToolScoreSpanProcessor instead"
        )
    return active


def _splice(active: Any, processor: SpanProcessor, behind: _FanOut) -> None:
    """``processor`` becomes the provider's only processor, ``behind`` (its downstream) holds the
    others, and the provider's later ``add_span_processor`` calls add to ``behind``. Called under
    the multi-processor's lock, so spans starting meanwhile see the old set or the new one."""
    active._span_processors = (processor,)
    # An instance attribute in front of the class's method: TracerProvider.add_span_processor
    # calls self._active_span_processor.add_span_processor(p), which now puts p behind scoring.
    active.add_span_processor = behind.add_span_processor


def _attach(provider: TracerProvider, make: Callable[[SpanProcessor], ToolScoreSpanProcessor],
            own_exporter: SpanExporter | None) -> ToolScoreSpanProcessor:
    """Put one ToolScoreSpanProcessor in front of the processors the provider has, and of those
    it is given later."""
    active = _active(provider)
    with active._lock:
        existing = list(active._span_processors)
        for p in existing:
            if isinstance(p, ToolScoreSpanProcessor):
                _log.warning("otel-toolscore: install() called again; scoring is already installed")
                return p
        if own_exporter is not None or not existing:
            # Nothing exports yet (or the app asked for an exporter of its own): add what
            # OTEL_TRACES_EXPORTER names, or the given exporter.
            existing.append(_span_downstream(own_exporter))
        behind = _FanOut(existing)
        processor: ToolScoreSpanProcessor = make(behind)
        _splice(active, processor, behind)
    return processor


def _global_or_none(getter: Any) -> Any:
    provider = getter()
    return None if _is_unset(provider) else provider


def _span_downstream(span_exporter: SpanExporter | None) -> SpanProcessor:
    """What the scoring processor forwards to: the given exporter, else what
    OTEL_TRACES_EXPORTER names (otlp by default, console, several, or none: spans are scored,
    not exported)."""
    made = [span_exporter] if span_exporter is not None else _configured("traces", default_otlp=True) or []
    processors = [BatchSpanProcessor(exporter) for exporter in made]
    if len(processors) == 1:
        return processors[0]
    multi = SynchronousMultiSpanProcessor()  # none: a processor that drops, with no thread
    for processor in processors:
        multi.add_span_processor(processor)
    return multi


def _configured(signal: str, *, default_otlp: bool) -> list[Any] | None:
    """The exporters (metric readers) ``OTEL_{SIGNAL}_EXPORTER`` asks for: [] for ``none``; when
    it is unset, or none of its names could be used (warned), ``otlp`` if ``default_otlp`` (the
    specification's default), else None: nothing asked for."""
    if otel_env.is_set(signal):
        names = otel_env.exporter_names(signal)
        if not names:
            return []
        made = otel_env.exporters(signal)
        if made:
            return made
    if not default_otlp:
        return None
    return otel_env.exporters_named(signal, [otel_env.OTLP_BY_PROTOCOL[otel_env.otlp_protocol(signal)]])


def _build_provider(output: str, resource: Resource, made: list[Any], set_global: bool) -> Any:
    """A MeterProvider over these readers (metrics) or a LoggerProvider over these exporters
    (events), set global if asked."""
    if output == "metrics":
        meter_provider = MeterProvider(resource=resource, metric_readers=made)
        if set_global:
            metrics.set_meter_provider(meter_provider)
        return meter_provider
    logger_provider = LoggerProvider(resource=resource)
    for exporter in made:
        logger_provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    if set_global:
        set_logger_provider(logger_provider)
    return logger_provider


_SIGNAL = {"metrics": "metrics", "events": "logs"}


class _HandOver:
    """Stands in for the API's set-once guard of the global TracerProvider after install() set
    one of its own: the app's ``trace.set_tracer_provider(...)``, which the API would refuse
    ("Overriding of current TracerProvider is not allowed"), is let through once, and scoring
    moves onto the app's provider (``adopt``). Any later call is refused as the API does.

    The guard is the API module's ``_TRACER_PROVIDER_SET_ONCE`` (an ``opentelemetry.util._once.
    Once``, read at each call, so it holds however the app imported ``set_tracer_provider``);
    install() only replaces it when it finds it as expected, else it warns (``_watch``)."""

    def __init__(self, inner: Any, own: TracerProvider, adopt: Callable[[Any], None]) -> None:
        self._inner = inner
        self._own = own
        self._adopt = adopt
        self._lock = threading.Lock()
        self.handed_over = False

    @property
    def _done(self) -> bool:
        return bool(self._inner._done)

    def do_once(self, func: Callable[[], None]) -> bool:
        if self._inner.do_once(func):
            return True
        with self._lock:
            if self.handed_over or getattr(trace, "_TRACER_PROVIDER", None) is not self._own:
                return False
            func()  # the app's provider is now the global one
            self.handed_over = True
        try:
            self._adopt(trace.get_tracer_provider())
        except Exception:  # noqa: BLE001 - the app's set-up call must not fail for scoring
            _log.warning("otel-toolscore: could not move scoring onto the app's TracerProvider", exc_info=True)
        return True


def _watch(own: TracerProvider, adopt: Callable[[Any], None]) -> _HandOver | None:
    """Let the app's own ``set_tracer_provider`` after install() win (``_HandOver``)."""
    inner = getattr(trace, "_TRACER_PROVIDER_SET_ONCE", None)
    if getattr(trace, "_TRACER_PROVIDER", None) is not own or not callable(getattr(inner, "do_once", None)) \
            or not hasattr(inner, "_done"):
        _log.warning("otel-toolscore: install() set the global TracerProvider and cannot watch for the app's "
                     "own (an API version it does not know): set up your TracerProvider before install()")
        return None
    handover = _HandOver(inner, own, adopt)
    trace._TRACER_PROVIDER_SET_ONCE = handover  # type: ignore[attr-defined,assignment]
    return handover


def _adopter(processor: ToolScoreSpanProcessor, switch: _Switch,
             own_exporter: SpanExporter | None) -> Callable[[Any], None]:
    def adopt(app: Any) -> None:
        """The app set its own TracerProvider after install(): its processors, those it has and
        those it adds later, go behind the scoring processor, which is put in front of them;
        tracers taken from install()'s provider meanwhile still score and reach them."""
        if not isinstance(app, TracerProvider):
            _log.warning(
                "otel-toolscore: the app set a %s.%s as the global TracerProvider after install(): not the "
                "OpenTelemetry SDK's, so its spans are not scored. Wrap the processor that exports your spans "
                "instead: ToolScoreSpanProcessor(BatchSpanProcessor(exporter)).",
                type(app).__module__, type(app).__name__)
            return
        active = _active(app)
        with active._lock:
            existing = list(active._span_processors)
            if any(isinstance(p, ToolScoreSpanProcessor) for p in existing):
                # the app scores on its own provider: install()'s leftovers only forward there
                switch.target = active
                return
            # an exporter given to install() keeps getting the spans; the one built from
            # OTEL_TRACES_EXPORTER for want of the app's is let go
            kept = [switch.target] if own_exporter is not None else []
            behind = _FanOut([*existing, *kept])
            _splice(active, processor, behind)
            old, switch.target = switch.target, behind
        if own_exporter is None:
            # its queue is exported (to where OTEL_TRACES_EXPORTER said) off the app's thread
            threading.Thread(target=old.shutdown, name="otel-toolscore-handover", daemon=True).start()
        _log.info("otel-toolscore: the app set its own TracerProvider after install(); scoring moved onto it")

    return adopt


def install(
    tracer_provider: TracerProvider | None = None,
    *,
    scorers: Sequence[Scorer | str] | None = None,
    span_exporter: SpanExporter | None = None,
    meter_provider: MeterProvider | None = None,
    logger_provider: LoggerProvider | None = None,
    config_file: str | os.PathLike[str] | None = None,
    set_global: bool = True,
    **settings: Any,
) -> ToolScoreSpanProcessor | None:
    """Add scoring to the app's OpenTelemetry set-up, building only what the OTEL_* variables ask for.

    Tracer provider: ``tracer_provider``, else the global one. An SDK TracerProvider gets one
    ``ToolScoreSpanProcessor`` in front of its processors (those it has, and those added to it
    later), so every span still reaches each of them exactly once; one without processors also
    gets ``BatchSpanProcessor(span_exporter)`` (else what ``OTEL_TRACES_EXPORTER`` names). With
    no global provider, one is built and set global (unless ``set_global=False``); if the app
    then sets its own (install() called before the app's set-up), that one becomes the global
    provider and scoring moves onto it. A global provider that is not the SDK's is an
    ``InstallError`` that says what to do instead.

    Meter and logger providers (metrics, ``gen_ai.evaluation.result`` events): the ones given,
    else the global ones, looked up when the first scores go out (so one the app sets after
    install() is used). When there is none then, install() builds one only if asked:
    ``OTEL_METRICS_EXPORTER`` / ``OTEL_LOGS_EXPORTER`` set, or, when install() built the
    TracerProvider itself and the app never set its own (install() is the app's whole
    OpenTelemetry set-up), the specification's default ``otlp``. Otherwise that output goes
    nowhere, and one warning says so.

    Settings come from keyword arguments, ``OTEL_TOOLSCORE_*`` variables, and the YAML file
    named by ``config_file`` or ``OTEL_TOOLSCORE_CONFIG``, in that order of precedence.

    The SDK's variables mean what they mean to the SDK (``otel_env``): with
    ``OTEL_SDK_DISABLED=true`` nothing is installed and None is returned;
    ``OTEL_{TRACES,METRICS,LOGS}_EXPORTER`` name exporters by the SDK's entry points (``otlp``,
    ``console``, ``prometheus``, ``none``, ...); a value that cannot be used is warned about
    once and ignored.
    """
    resolved = load_settings(config_file, **settings)
    if otel_env.sdk_disabled():
        # The SDK's own switch: no providers, no processor, no thread; the app runs untouched.
        return None
    if tracer_provider is None:
        tracer_provider = _existing_tracer_provider()
    if tracer_provider is not None:
        already = next((p for p in getattr(getattr(tracer_provider, "_active_span_processor", None),
                                           "_span_processors", ()) if isinstance(p, ToolScoreSpanProcessor)), None)
        if already is not None:  # before anything is built for a second one
            _log.warning("otel-toolscore: install() called again; scoring is already installed")
            return already
    app_tracing = tracer_provider is not None
    if meter_provider is None:
        meter_provider = _global_or_none(metrics.get_meter_provider)
    if logger_provider is None:
        logger_provider = _global_or_none(get_logger_provider)
    resource = tracer_provider.resource if tracer_provider is not None else Resource.create()
    providers: dict[str, Any] = {"metrics": meter_provider, "events": logger_provider}
    deferred = []
    off = {}
    for output, provider in providers.items():
        if not getattr(resolved, output) or provider is not None:
            continue
        signal = _SIGNAL[output]
        if otel_env.is_set(signal) and not otel_env.exporter_names(signal):
            # OTEL_{METRICS,LOGS}_EXPORTER=none with no provider of the app's: that output is off
            # on purpose (no provider, no reader thread, no "go nowhere" warning).
            off[output] = False
        elif not set_global or app_tracing:
            # Decided now: install()'s providers are not global (they must be passed), or the app's
            # set-up is there: build only what the variable asks for.
            made = _configured(signal, default_otlp=not app_tracing)
            if made:
                providers[output] = _build_provider(output, resource, made, set_global)
        else:
            # install() comes first or alone: the app may set its own providers after it
            deferred.append(output)
    if off:
        resolved = resolved.model_copy(update=off)
    meter_provider, logger_provider = providers["metrics"], providers["events"]

    def make(downstream: SpanProcessor) -> ToolScoreSpanProcessor:
        return ToolScoreSpanProcessor(downstream, scorers, settings=resolved,
                                      meter_provider=meter_provider, logger_provider=logger_provider)

    handover: _HandOver | None = None
    if tracer_provider is not None:
        processor = _attach(tracer_provider, make, span_exporter)
    else:
        own = TracerProvider(resource=resource)
        switch = _Switch(_span_downstream(span_exporter))
        processor = make(switch)
        own.add_span_processor(processor)
        if set_global:
            trace.set_tracer_provider(own)
            if trace.get_tracer_provider() is own:
                handover = _watch(own, _adopter(processor, switch, span_exporter))
    _flush_at_exit(processor)
    if deferred:
        processor._emitter.on_unset(_builder(resource, handover, tuple(deferred), weakref.ref(processor)))
    return processor


_flushed_at_exit: set[int] = set()


def _flush_at_exit(processor: ToolScoreSpanProcessor, *, again: bool = False) -> None:
    """Score what is pending when the interpreter exits, before the providers shut down.

    The SDK's providers shut down at exit in the reverse order of their creation, and the app's
    (or opentelemetry-instrument's) were created before install(): without this, runs still
    pending at exit would be scored while the tracer provider shuts down, after the meter and
    logger providers had, and their metrics and events would be lost. Bounded by
    ``shutdown_timeout``."""
    if id(processor) in _flushed_at_exit and not again:  # install() again returns the same processor
        return
    _flushed_at_exit.add(id(processor))
    ref = weakref.ref(processor)
    timeout_ms = int(processor.settings.shutdown_timeout * 1000)

    def flush() -> None:
        live = ref()
        if live is not None:
            live.force_flush(timeout_ms)

    atexit.register(flush)


def _builder(resource: Resource, handover: _HandOver | None, deferred: tuple[str, ...],
             processor: weakref.ref[ToolScoreSpanProcessor]) -> Callable[[tuple[str, ...]], None]:
    """At the first scores, for the outputs that still have no global provider: build what
    OTEL_{METRICS,LOGS}_EXPORTER asks for; unset, the default otlp only if the app never set a
    TracerProvider of its own (install() is its whole set-up)."""
    def build(missing: tuple[str, ...]) -> None:
        app_set_up = handover is not None and handover.handed_over
        built = False
        for output in missing:
            if output not in deferred:
                continue
            signal = _SIGNAL[output]
            made = _configured(signal, default_otlp=not app_set_up)
            if made:
                _build_provider(output, resource, made, set_global=True)
                built = True
        live = processor()
        if built and live is not None:
            # built after install(), so shut down at exit before the flush registered then:
            # flush again first, or the runs pending at exit would lose their metrics and events
            _flush_at_exit(live, again=True)

    return build

