"""The OpenTelemetry SDK's own environment variables, as ``install()`` honours them.

``OTEL_SDK_DISABLED``, ``OTEL_{TRACES,METRICS,LOGS}_EXPORTER`` (``otlp``, ``console``, ``none``,
comma-separated for several) and ``OTEL_EXPORTER_OTLP[_{SIGNAL}]_PROTOCOL`` mean here what they
mean to the SDK's auto-configuration, so an app keeps the settings it has. A value the SDK would
not accept is a ``ConfigError`` naming the variable, never a silent fallback (a mistyped
protocol used to become http/protobuf and send to the wrong port). Endpoints, headers,
certificates, compression and timeouts are read by the OTLP exporters themselves.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from otel_toolscore.config import ConfigError
from otel_toolscore.extras import require

SIGNALS = ("traces", "metrics", "logs")
GRPC = "grpc"
HTTP_PROTOBUF = "http/protobuf"
PROTOCOLS = (GRPC, HTTP_PROTOBUF)
EXPORTERS = ("otlp", "console", "none")


def sdk_disabled() -> bool:
    """``OTEL_SDK_DISABLED=true``: the SDK is off, and so is everything install() would start."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def exporter_names(signal: str) -> list[str]:
    """``OTEL_{SIGNAL}_EXPORTER`` as a list of known names; unset: ``["otlp"]``; ``none``: []."""
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    raw = os.environ.get(variable, "").strip().lower()
    names = [name.strip() for name in raw.split(",") if name.strip()] or ["otlp"]
    unknown = [name for name in names if name not in EXPORTERS]
    if unknown:
        raise ConfigError(f"{variable}={raw!r}: {', '.join(map(repr, unknown))} is not one of "
                          f"{', '.join(EXPORTERS)} (otel-toolscore's install() exports with these only)")
    if "none" in names:
        if len(names) > 1:
            raise ConfigError(f"{variable}={raw!r}: 'none' cannot be combined with other exporters")
        return []
    return list(dict.fromkeys(names))


def otlp_protocol(signal: str) -> str:
    """The OTLP protocol of ``signal``: the per-signal variable, else the general one, else the
    spec's default http/protobuf. An unknown value is an error naming the variable."""
    for variable in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        raw = os.environ.get(variable)
        if raw is not None and raw.strip():
            protocol = raw.strip().lower()
            if protocol not in PROTOCOLS:
                raise ConfigError(f"{variable}={raw!r} is not one of {', '.join(PROTOCOLS)}")
            return protocol
    return HTTP_PROTOBUF


_MODULES = {"traces": "trace_exporter", "metrics": "metric_exporter", "logs": "_log_exporter"}
_CLASSES = {"traces": "OTLPSpanExporter", "metrics": "OTLPMetricExporter", "logs": "OTLPLogExporter"}


def _otlp_exporter(signal: str) -> Any:
    if otlp_protocol(signal) == GRPC:
        # grpcio is not in the core install: the error says which extra brings it
        module = require(f"opentelemetry.exporter.otlp.proto.grpc.{_MODULES[signal]}", "grpc",
                         f"OTLP over gRPC ({signal}, OTEL_EXPORTER_OTLP_PROTOCOL=grpc)")
    else:
        module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.http.{_MODULES[signal]}")
    return getattr(module, _CLASSES[signal])()


def _console_exporter(signal: str) -> Any:
    if signal == "traces":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if signal == "metrics":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    from opentelemetry.sdk._logs import export as logs_export

    # ConsoleLogRecordExporter is the newer SDKs' name; older ones have ConsoleLogExporter only
    exporter_class = getattr(logs_export, "ConsoleLogRecordExporter", None) or logs_export.ConsoleLogExporter
    return exporter_class()


def exporters(signal: str) -> list[Any]:
    """The exporters ``OTEL_{SIGNAL}_EXPORTER`` asks for (none for ``none``)."""
    made = []
    for name in exporter_names(signal):
        made.append(_otlp_exporter(signal) if name == "otlp" else _console_exporter(signal))
    return made


def check() -> None:
    """Every variable above valid for every signal, before anything is built: a mistake is
    reported at install(), not after the first signals went out."""
    for signal in SIGNALS:
        if "otlp" in exporter_names(signal):
            otlp_protocol(signal)
