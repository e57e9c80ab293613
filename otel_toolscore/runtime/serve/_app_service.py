"""Which app a run came from, on the sidecar's evaluation events and score metrics: several apps behind one
``serve`` are told apart by ``toolscore.app.service.name`` (and ``toolscore.app.service.namespace``),
from the resource of the spans each trace arrived with.

Bounded both ways: the trace → app map keeps the latest ``max_traces`` traces, and at most
``max_names`` distinct names are passed on; later ones become ``OVERFLOW`` (``"_other"``), so a
sender that invents a service name per request cannot blow up the series of a backend.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from opentelemetry.util.types import AttributeValue

from otel_toolscore import semconv
from otel_toolscore.runtime._wrap import LogRecordHook

__all__ = ["APP_SERVICE_NAME", "APP_SERVICE_NAMESPACE", "OVERFLOW", "AppServices", "AppServiceLogProcessor"]

APP_SERVICE_NAME = semconv.TOOLSCORE_APP_SERVICE_NAME
APP_SERVICE_NAMESPACE = semconv.TOOLSCORE_APP_SERVICE_NAMESPACE
OVERFLOW = "_other"


class AppServices:
    """trace id → (service.name, service.namespace) of the app that sent it, bounded."""

    def __init__(self, max_names: int, max_traces: int) -> None:
        self.max_names = max_names
        self._max_traces = max_traces
        self._lock = threading.Lock()
        self._traces: OrderedDict[int, tuple[str | None, str | None]] = OrderedDict()
        self._names: set[tuple[str | None, str | None]] = set()
        #: distinct apps folded into OVERFLOW
        self.overflowed = 0

    def note(self, spans: Sequence[Any]) -> None:
        """Remember the app of each trace in a request (its spans' resource)."""
        last_resource: Any = None
        app: tuple[str | None, str | None] = (None, None)
        with self._lock:
            for span in spans:
                resource = span.resource
                if resource is not last_resource:
                    last_resource = resource
                    app = self._bounded(resource)
                trace_id = span.context.trace_id
                if trace_id not in self._traces:
                    self._traces[trace_id] = app
                    if len(self._traces) > self._max_traces:
                        self._traces.popitem(last=False)

    def _bounded(self, resource: Any) -> tuple[str | None, str | None]:
        attributes = getattr(resource, "attributes", None) or {}
        name, namespace = attributes.get("service.name"), attributes.get("service.namespace")
        app = (str(name) if name is not None else None, str(namespace) if namespace is not None else None)
        if app in self._names or app == (None, None):
            return app
        if len(self._names) < self.max_names:
            self._names.add(app)
            return app
        self.overflowed += 1
        return (OVERFLOW, None)

    def of(self, trace_id: int) -> tuple[str | None, str | None]:
        with self._lock:
            return self._traces.get(trace_id, (None, None))

    def metric_attributes(self, trace_id_hex: str) -> dict[str, AttributeValue]:
        """The app's attributes for a run's score metrics (the emitter asks by the run's trace id)."""
        try:
            return self.attributes(int(trace_id_hex, 16))
        except ValueError:
            return {}

    def attributes(self, trace_id: int) -> dict[str, AttributeValue]:
        name, namespace = self.of(trace_id)
        attributes: dict[str, AttributeValue] = {}
        if name is not None:
            attributes[APP_SERVICE_NAME] = name
        if namespace is not None:
            attributes[APP_SERVICE_NAMESPACE] = namespace
        return attributes


class AppServiceLogProcessor(LogRecordHook):
    """Adds the app's service attributes to each log record the sidecar emits (placed before the
    batch processor, so the exported record carries them)."""

    def __init__(self, apps: AppServices) -> None:
        self._apps = apps

    def on_emit(self, log_record: Any) -> None:
        record = getattr(log_record, "log_record", log_record)  # SDK >= 1.39 wraps the record
        trace_id = getattr(record, "trace_id", None)
        if not trace_id:
            return
        app = self._apps.attributes(trace_id)
        if app:
            record.attributes = {**(record.attributes or {}), **app}
