"""The OpenTelemetry SDK's own environment variables, as ``install()`` honours them.

``OTEL_SDK_DISABLED``, ``OTEL_{TRACES,METRICS,LOGS}_EXPORTER`` and
``OTEL_EXPORTER_OTLP[_{SIGNAL}]_PROTOCOL`` mean here what they mean to the SDK's
auto-configuration (``opentelemetry.sdk._configuration``): an exporter name is looked up in the
entry point group the SDK reads (``opentelemetry_{signal}_exporter``), so any exporter an
installed package registers works (``console``, ``otlp_proto_http``, ``otlp_proto_grpc``, the
metric reader ``prometheus``, a vendor's), and ``otlp`` picks ``otlp_proto_http`` or
``otlp_proto_grpc`` by the protocol. As the specification asks, a value that cannot be used is
warned about, once, and ignored: nothing here raises into the app. Endpoints, headers,
certificates, compression and timeouts are read by the exporters themselves.

Where this differs from the SDK, and why: ``otlp`` with no protocol set is ``http/protobuf``
(the specification's default, and the exporter in the core install; the Python SDK's
configurator still picks gRPC), and an unknown protocol is warned about and treated as unset
(the SDK raises).
"""

from __future__ import annotations

import logging
import os
import threading
from importlib.metadata import EntryPoint, entry_points
from typing import Any

SIGNALS = ("traces", "metrics", "logs")
GRPC = "grpc"
HTTP_PROTOBUF = "http/protobuf"
PROTOCOLS = (GRPC, HTTP_PROTOBUF)
#: what ``otlp`` becomes, by protocol (the SDK's ``_EXPORTER_BY_OTLP_PROTOCOL``)
OTLP_BY_PROTOCOL = {GRPC: "otlp_proto_grpc", HTTP_PROTOBUF: "otlp_proto_http"}
#: the entry point group of each signal's exporters, as the SDK's configurator reads them
GROUPS = {signal: f"opentelemetry_{signal}_exporter" for signal in SIGNALS}

_log = logging.getLogger(__name__)
_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(message: str) -> None:
    """One warning per distinct message in this process (a setting is read more than once)."""
    with _warned_lock:
        if message in _warned:
            return
        _warned.add(message)
    _log.warning("otel-toolscore: %s", message)


def sdk_disabled() -> bool:
    """``OTEL_SDK_DISABLED=true``: the SDK is off, and so is everything install() would start."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def variable(signal: str) -> str:
    return f"OTEL_{signal.upper()}_EXPORTER"


def is_set(signal: str) -> bool:
    """Whether ``OTEL_{SIGNAL}_EXPORTER`` says anything (``none`` included)."""
    return bool(os.environ.get(variable(signal), "").strip())


def otlp_protocol(signal: str) -> str:
    """The OTLP protocol of ``signal``: the per-signal variable, else the general one, else the
    specification's default http/protobuf. An unknown value is warned about and skipped."""
    for name in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        raw = os.environ.get(name)
        if raw is not None and raw.strip():
            protocol = raw.strip().lower()
            if protocol in PROTOCOLS:
                return protocol
            warn_once(f"{name}={raw!r} is not one of {', '.join(PROTOCOLS)}; ignored")
    return HTTP_PROTOBUF


def exporter_names(signal: str) -> list[str]:
    """``OTEL_{SIGNAL}_EXPORTER`` as entry point names, ``otlp`` resolved by protocol; unset:
    the specification's default ``otlp``; ``none``: []. ``none`` beside other names is ignored
    with a warning (the SDK would fail on it)."""
    name_of_variable = variable(signal)
    raw = os.environ.get(name_of_variable, "")
    names = [name.strip().lower() for name in raw.split(",") if name.strip()] or ["otlp"]
    if names == ["none"]:
        return []
    if "none" in names:
        warn_once(f"{name_of_variable}={raw!r}: 'none' beside other exporters is ignored")
        names = [name for name in names if name != "none"]
    resolved = [OTLP_BY_PROTOCOL[otlp_protocol(signal)] if name == "otlp" else name for name in names]
    return list(dict.fromkeys(resolved))


def _entry_point(signal: str, name: str) -> EntryPoint | None:
    found = entry_points(group=GROUPS[signal], name=name)
    return next(iter(found), None)


def _expected_types(signal: str) -> tuple[type, ...]:
    if signal == "traces":
        from opentelemetry.sdk.trace.export import SpanExporter

        return (SpanExporter,)
    if signal == "metrics":
        # a push exporter, or a pull reader (prometheus) that subclasses MetricReader itself
        from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader

        return (MetricExporter, MetricReader)
    from opentelemetry.sdk._logs import export as logs_export

    # LogRecordExporter is the newer SDKs' name; SDK 1.37 has LogExporter
    return (getattr(logs_export, "LogRecordExporter", None) or logs_export.LogExporter,)


def _hint(signal: str, name: str) -> str:
    if name == "otlp_proto_grpc":
        return " (OTLP over gRPC needs the grpc extra: pip install 'otel-toolscore[grpc]')"
    if name == "prometheus":
        return " (pip install 'otel-toolscore[prometheus]')"
    installed = sorted({ep.name for ep in entry_points(group=GROUPS[signal])})
    return f" (installed for {signal}: {', '.join(installed) or 'none'})"


def exporters(signal: str) -> list[Any]:
    """The exporters ``OTEL_{SIGNAL}_EXPORTER`` asks for, built (``exporters_named``)."""
    return exporters_named(signal, exporter_names(signal))


def exporters_named(signal: str, names: list[str]) -> list[Any]:
    """The exporters of these entry point names, built; for metrics, metric readers (a push
    exporter inside a ``PeriodicExportingMetricReader``). One that cannot be found, loaded or
    built is warned about and left out; never raises."""
    made: list[Any] = []
    raw = os.environ.get(variable(signal), "").strip()
    name_of_variable = f"{variable(signal)}={raw!r}" if raw else f"{variable(signal)} unset (otlp by default)"
    for name in names:
        try:
            entry_point = _entry_point(signal, name)
            if entry_point is None:
                warn_once(f"{name_of_variable}: no installed package provides the {signal} exporter "
                          f"{name!r}; ignored{_hint(signal, name)}")
                continue
            cls = entry_point.load()
            if not (isinstance(cls, type) and issubclass(cls, _expected_types(signal))):
                warn_once(f"{name_of_variable}: {name!r} ({entry_point.value}) is not a {signal} exporter; ignored")
                continue
            made.append(_reader(cls()) if signal == "metrics" else cls())
        except Exception as exc:  # noqa: BLE001 - a broken exporter package must not stop the app
            warn_once(f"{name_of_variable}: the {signal} exporter {name!r} could not be built "
                      f"({type(exc).__name__}: {exc}); ignored")
    return made


def _reader(exporter_or_reader: Any) -> Any:
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader

    if isinstance(exporter_or_reader, MetricReader):
        return exporter_or_reader
    return PeriodicExportingMetricReader(exporter_or_reader)
