"""Where ``serve`` sends spans, scores, logs and metrics: the upstream OTLP endpoint, from
``--upstream*`` or the standard ``OTEL_EXPORTER_OTLP_*`` variables (per-signal endpoints, headers,
TLS files), and the SDK's OTLP exporters built for it."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.trace.export import SpanExporter

from otel_toolscore.config import ConfigError
from otel_toolscore.runtime.otel_env import GRPC, HTTP_PROTOBUF
from otel_toolscore.runtime.serve._protocol import SIGNALS

__all__ = ["GRPC", "HTTP_PROTOBUF", "PROTOCOLS", "TlsFiles", "Upstream", "parse_header_items"]

PROTOCOLS = (HTTP_PROTOBUF, GRPC)
#: where an unset endpoint goes (the OTLP exporter spec's defaults)
_DEFAULT_ENDPOINTS = {HTTP_PROTOBUF: "http://localhost:4318", GRPC: "http://localhost:4317"}


def _parse_headers(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    from opentelemetry.util.re import parse_env_headers

    return dict(parse_env_headers(text, liberal=True))


def parse_header_items(items: Sequence[str]) -> dict[str, str]:
    """``--upstream-header KEY=VALUE`` items, read by the parser OTEL_EXPORTER_OTLP_HEADERS goes
    through (the SDK's), so both spellings mean the same: names lower-cased, values URL-decoded."""
    headers: dict[str, str] = {}
    for item in items:
        parsed = _parse_headers(item) if "," not in item else {}
        if len(parsed) != 1:
            raise ConfigError(f"--upstream-header must be one KEY=VALUE (URL-encoded as in "
                              f"OTEL_EXPORTER_OTLP_HEADERS), not {item!r}")
        headers.update(parsed)
    return headers


@dataclass(frozen=True)
class TlsFiles:
    """TLS files for one signal's upstream connection, from OTEL_EXPORTER_OTLP[_{SIGNAL}]_*:
    the CA bundle that verifies the upstream, and the client certificate and key (mutual TLS)."""

    certificate: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None

    @classmethod
    def from_env(cls, signal_name: str) -> TlsFiles:
        def read(name: str) -> str | None:
            for variable in (f"OTEL_EXPORTER_OTLP_{signal_name.upper()}_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
                path = os.environ.get(variable)
                if path:
                    # checked now: a missing CA file would otherwise fail every forwarded request
                    if not os.access(path, os.R_OK):
                        raise ConfigError(f"{variable}={path!r}: the file cannot be read")
                    return path
            return None

        return cls(read("CERTIFICATE"), read("CLIENT_CERTIFICATE"), read("CLIENT_KEY"))

    @property
    def client_pair(self) -> tuple[str, str] | None:
        return (self.client_certificate, self.client_key) if self.client_certificate and self.client_key else None


def _ca_session() -> Any:
    """A requests session on which a CA file set on the session wins over REQUESTS_CA_BUNDLE and
    CURL_CA_BUNDLE: requests lets those replace a session's ``verify``, so the OTLP HTTP exporter's
    OTEL_EXPORTER_OTLP_CERTIFICATE would be ignored wherever the machine sets one of them."""
    import requests

    class _CaSession(requests.Session):
        def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> Any:
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if verify is None and isinstance(self.verify, str):
                settings["verify"] = self.verify
            return settings

    return _CaSession()


def _http_url(url: str, what: str) -> str:
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what} must be http(s)://host[:port][/path], not {url!r}")
    return url


@dataclass(frozen=True)
class Upstream:
    """Where spans, scores, logs and metrics go: an OTLP endpoint (a Collector, a backend).

    ``url`` is a base URL like ``OTEL_EXPORTER_OTLP_ENDPOINT``: for http/protobuf
    ``/v1/{traces,logs,metrics}`` is appended (a given ``/v1/<signal>`` suffix is dropped
    first); for gRPC its host and port are the target, ``https`` meaning TLS. A URL without a
    scheme is read as ``http://``.
    """

    url: str
    protocol: str = HTTP_PROTOBUF
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 10.0
    #: OTEL_EXPORTER_OTLP_{SIGNAL}_ENDPOINT: full URLs, used as given (the spec's rule)
    signal_endpoints: Mapping[str, str] = field(default_factory=dict)
    #: per signal; a signal not listed uses no TLS files of its own
    tls: Mapping[str, TlsFiles] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls, url: str | None, protocol: str | None = None, headers: Mapping[str, str] | None = None
    ) -> Upstream | None:
        """From the arguments, else the standard ``OTEL_EXPORTER_OTLP_*`` variables (per-signal
        endpoints and TLS files included); None: no URL."""
        signal_endpoints: dict[str, str] = {}
        if url is None:  # --upstream names one place for everything; the variables may split it
            for signal_name in SIGNALS:
                variable = f"OTEL_EXPORTER_OTLP_{signal_name.upper()}_ENDPOINT"
                if os.environ.get(variable):
                    signal_endpoints[signal_name] = _http_url(os.environ[variable], variable)
        url = url or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
        if url is None and not signal_endpoints:
            return None
        protocol = (protocol or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or HTTP_PROTOBUF).strip().lower()
        if protocol not in PROTOCOLS:
            raise ConfigError(f"upstream protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
        # only per-signal endpoints: the others go where the spec says an unset endpoint goes
        url = _http_url(url or _DEFAULT_ENDPOINTS[protocol], "upstream URL")
        parts = urlsplit(url)
        path = parts.path.rstrip("/")
        for signal_name in SIGNALS:
            path = path.removesuffix(f"/v1/{signal_name}")
        url = f"{parts.scheme}://{parts.netloc}{path}"
        if headers is None:
            headers = _parse_headers(os.environ.get("OTEL_EXPORTER_OTLP_HEADERS"))
        tls = {signal_name: TlsFiles.from_env(signal_name) for signal_name in SIGNALS}
        return cls(url=url, protocol=protocol, headers=dict(headers), signal_endpoints=signal_endpoints, tls=tls)

    @property
    def secure(self) -> bool:
        return self.url.startswith("https://")

    @property
    def netloc(self) -> str:
        return urlsplit(self.url).netloc

    def signal_url(self, signal_name: str) -> str:
        return self.signal_endpoints.get(signal_name) or f"{self.url}/v1/{signal_name}"

    def signal_secure(self, signal_name: str) -> bool:
        return self.signal_url(signal_name).startswith("https://")

    def signal_netloc(self, signal_name: str) -> str:
        return urlsplit(self.signal_url(signal_name)).netloc

    def signal_tls(self, signal_name: str) -> TlsFiles:
        return self.tls.get(signal_name) or TlsFiles()

    def _grpc_kwargs(self, signal_name: str) -> dict[str, Any]:
        # TLS files: the gRPC exporters read the same OTEL_EXPORTER_OTLP_* variables themselves
        secure = self.signal_secure(signal_name)
        return {"endpoint": f"{'https' if secure else 'http'}://{self.signal_netloc(signal_name)}",
                "insecure": not secure, "headers": dict(self.headers) or None}

    def _http_kwargs(self, signal_name: str) -> dict[str, Any]:
        tls = self.signal_tls(signal_name)
        return {"endpoint": self.signal_url(signal_name), "headers": dict(self.headers) or None,
                "certificate_file": tls.certificate, "client_certificate_file": tls.client_certificate,
                "client_key_file": tls.client_key, "session": _ca_session() if tls.certificate else None}

    def span_exporter(self) -> SpanExporter:
        """The SDK's OTLP span exporter for this upstream, sending spans that arrived as protobuf
        as the bytes they came in (``_export``)."""
        from otel_toolscore.runtime.serve._export import WireHttpSpanExporter, wire_grpc_span_exporter

        if self.protocol == GRPC:
            return wire_grpc_span_exporter(**self._grpc_kwargs("traces"))  # type: ignore[no-any-return]
        return WireHttpSpanExporter(**self._http_kwargs("traces"))

    def metric_exporter(self) -> Any:
        if self.protocol == GRPC:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter,
            )

            return OTLPMetricExporter(**self._grpc_kwargs("metrics"))
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpMetricExporter,
        )

        return HttpMetricExporter(**self._http_kwargs("metrics"))

    def log_exporter(self) -> Any:
        if self.protocol == GRPC:
            from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
                OTLPLogExporter,
            )

            return OTLPLogExporter(**self._grpc_kwargs("logs"))
        from opentelemetry.exporter.otlp.proto.http._log_exporter import (
            OTLPLogExporter as HttpLogExporter,
        )

        return HttpLogExporter(**self._http_kwargs("logs"))
