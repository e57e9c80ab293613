"""``otel-toolscore serve``: an OTLP receiver that scores agent runs and forwards everything upstream.

Agents in any language export OTLP to this sidecar: gRPC (``TraceService/Export``, default
127.0.0.1:4317) or HTTP (``POST /v1/traces``, protobuf or JSON, optionally gzip/deflate,
default 127.0.0.1:4318). Every span is decoded into the SDK's ``ReadableSpan`` and goes
through ONE ``ToolScoreSpanProcessor`` in ``completion="quiet"`` mode (spans arrive ended, with
no ``on_start``: a trace is complete when its root has arrived and no span came for
``decision_wait``). Its downstream is a ``BatchSpanProcessor`` exporting OTLP to the upstream,
so agent spans leave carrying ``toolscore.*`` attributes, followed by evaluation spans; the
``gen_ai.evaluation.result`` events and the metrics go to the same upstream through the
sidecar's own LoggerProvider and MeterProvider.

Logs and metrics sent to the sidecar (``LogsService``/``MetricsService``, ``/v1/logs``,
``/v1/metrics``) are passed to the upstream unchanged and synchronously: the client gets the
upstream's answer, so its own retry logic still works and nothing is buffered here. With
``forward_signals=False`` (or no upstream URL) they are not served: gRPC answers
UNIMPLEMENTED, HTTP 404. OTLP/JSON logs or metrics cannot be forwarded to a gRPC upstream
(there is no lossless OTLP/JSON → protobuf conversion here): HTTP 415.

Responses follow the OTLP specification:

* success: ``Export*ServiceResponse``, with ``partial_success`` (``rejected_spans`` and the
  first decoding problems as ``error_message``) when some spans could not be decoded;
* HTTP 400 / gRPC INVALID_ARGUMENT: nothing in the payload is an OTLP trace request;
* HTTP 413 (gRPC RESOURCE_EXHAUSTED, from gRPC itself): over ``max_request_bytes``, checked on
  Content-Length, while reading a chunked body, and on the decompressed size (gzip bombs);
* HTTP 503 + ``Retry-After`` / gRPC UNAVAILABLE + ``google.rpc.RetryInfo``: the upstream is
  failing (its latest export failed), the spans waiting for the upstream, the pending traces or
  the scoring queue are at their bounds (accepting would mean dropping spans or scores), too
  many concurrent requests, or shutting down;
* HTTP 408: the request (headers and body) did not arrive within ``request_timeout``;
* HTTP 401 / gRPC UNAUTHENTICATED without ``Authorization: Bearer <auth_token>`` when a token
  is set; 415 for other content types or encodings; 404 for other paths; 405 other methods.
Error bodies are a ``google.rpc.Status``, protobuf or JSON like the request.

Limits against clients that are slow or hostile: both receivers listen on loopback unless told
otherwise; ``max_request_bytes`` bounds a request before and after decompression;
``max_concurrent_requests`` bounds the requests being handled at once (gRPC: RPCs, and HTTP/2
streams per connection, so one client's extra RPCs wait in its own connection; HTTP: requests
whose body has arrived). Over HTTP a request must arrive whole, headers and body, within
``request_timeout`` of the connection starting to wait for it, however slowly its bytes trickle
in: a client that dribbles headers or never sends its declared body holds a connection for that
long and no request slot at all, and bodies being received are bounded in total bytes. A
declared Content-Length over the limit is refused before a byte of the body is read.

Shutdown (``stop()``, SIGTERM, SIGINT) stops accepting, lets requests in flight finish, then
force-flushes and shuts down the processor, so every held agent span and pending trace is
scored (or forwarded unscored at the bound) and exported before the process exits.

The receiver never forwards a span twice: a request is either refused as a whole (the client
retries it) or accepted as a whole, and admission reserves its spans against the bound of the
export queue before any of them enters the processor.

What is accepted is kept until delivered: a batch the upstream refuses is retried with backoff
(``delivery.RetryingExporter``), and while it is failing new spans are refused (503/UNAVAILABLE,
``Retry-After``), so the senders hold them. Only a stop whose deadline passes with the upstream
still failing gives up: those spans are counted in ``stats["spans_undelivered"]`` and logged.
The buffer is in memory: a kill -9 loses what was accepted and not yet delivered (README).
"""

from __future__ import annotations

import hmac
import inspect
import io
import json
import logging
import os
import signal
import socket
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
)

from otel_toolscore.config import ConfigError, ToolScoreSettings, load_settings
from otel_toolscore.runtime.delivery import RetryingExporter
from otel_toolscore.extras import require
from otel_toolscore.ingest import (
    OtlpDecodeError,
    count_json_spans,
    decode_export_request,
    parse_export_request,
    spans_from_otlp_dict,
)
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_GRPC_PORT = 4317
DEFAULT_HTTP_PORT = 4318
DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_CONCURRENT_REQUESTS = 64
DEFAULT_MAX_QUEUED_SPANS = 20_000
DEFAULT_REQUEST_TIMEOUT_S = 30.0
#: bodies are read this much at a time (the memory a stalled body holds is what has arrived)
_READ_CHUNK = 64 * 1024
#: added to decision_wait when hold_timeout is not set (the hold must outlast the quiet wait)
HOLD_MARGIN_S = 5.0
RETRY_AFTER_S = 1

HTTP_PROTOBUF = "http/protobuf"
GRPC = "grpc"
PROTOCOLS = (HTTP_PROTOBUF, GRPC)
#: where an unset endpoint goes (the OTLP exporter spec's defaults)
_DEFAULT_ENDPOINTS = {HTTP_PROTOBUF: "http://localhost:4318", GRPC: "http://localhost:4317"}
#: pooled connections to the upstream (forwarded logs and metrics), per scheme
_UPSTREAM_POOL = 16

_SIGNALS = ("traces", "logs", "metrics")
_HTTP_PATHS = {f"/v1/{s}": s for s in _SIGNALS}
_GRPC_SERVICES = {
    "traces": "opentelemetry.proto.collector.trace.v1.TraceService",
    "logs": "opentelemetry.proto.collector.logs.v1.LogsService",
    "metrics": "opentelemetry.proto.collector.metrics.v1.MetricsService",
}
_REQUEST_TYPES: dict[str, Any] = {"logs": ExportLogsServiceRequest, "metrics": ExportMetricsServiceRequest}
_PROTOBUF_TYPES = frozenset({"application/x-protobuf", "application/protobuf"})
_JSON_TYPE = "application/json"
_CT_PROTOBUF = "application/x-protobuf"
_MAX_ERROR_MESSAGE = 1000
_MAX_UPSTREAM_REPLY = 1 << 20

# gRPC status codes by name; HTTP statuses map onto them for error bodies and the reverse way
# for forwarded signals (google.rpc.Code numbering).
_CODE = {
    "OK": 0, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5, "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14,
    "UNAUTHENTICATED": 16, "UNKNOWN": 2,
}
_HTTP_FOR_GRPC = {
    "INVALID_ARGUMENT": 400, "UNAUTHENTICATED": 502, "PERMISSION_DENIED": 502, "NOT_FOUND": 502,
    "RESOURCE_EXHAUSTED": 429, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504, "UNIMPLEMENTED": 502,
}
_GRPC_FOR_HTTP = {400: "INVALID_ARGUMENT", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
                  502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


class _Rejection(Exception):
    """A request refused as a whole: an HTTP status, a gRPC code, and why."""

    def __init__(self, status: int, code: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


@dataclass
class _Reply:
    body: bytes
    content_type: str = _CT_PROTOBUF
    status: int = 200


# --- upstream -----------------------------------------------------------------------------------


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
            for signal_name in _SIGNALS:
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
        for signal_name in _SIGNALS:
            path = path.removesuffix(f"/v1/{signal_name}")
        url = f"{parts.scheme}://{parts.netloc}{path}"
        if headers is None:
            headers = _parse_headers(os.environ.get("OTEL_EXPORTER_OTLP_HEADERS"))
        tls = {signal_name: TlsFiles.from_env(signal_name) for signal_name in _SIGNALS}
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
        if self.protocol == GRPC:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter,
            )

            return OTLPSpanExporter(**self._grpc_kwargs("traces"))
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )

        return HttpSpanExporter(**self._http_kwargs("traces"))

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


class _Forwarder:
    """Passes logs and metrics requests to the upstream as they came, and its answer back."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self._channels: list[Any] = []
        self._calls: dict[str, Any] = {}
        self._session: Any = None
        if upstream.protocol == GRPC:
            grpc = require("grpc", "grpc", "a gRPC upstream")
            for signal_name in ("logs", "metrics"):
                netloc, tls = upstream.signal_netloc(signal_name), upstream.signal_tls(signal_name)
                if upstream.signal_secure(signal_name):
                    # the TLS files the span exporter uses, so forwarded signals trust the same CA
                    credentials = grpc.ssl_channel_credentials(
                        root_certificates=_read_file(tls.certificate), private_key=_read_file(tls.client_key),
                        certificate_chain=_read_file(tls.client_certificate))
                    channel = grpc.secure_channel(netloc, credentials)
                else:
                    channel = grpc.insecure_channel(netloc)
                self._channels.append(channel)
                # No serializers: the request's bytes go out as they came in.
                self._calls[signal_name] = channel.unary_unary(f"/{_GRPC_SERVICES[signal_name]}/Export")
        else:
            import requests
            from requests.adapters import HTTPAdapter

            # One pooled session: connections (and TLS handshakes) are reused across requests.
            self._session = requests.Session()
            self._session.mount("http://", HTTPAdapter(pool_maxsize=_UPSTREAM_POOL))
            self._session.mount("https://", HTTPAdapter(pool_maxsize=_UPSTREAM_POOL))

    def forward(self, signal_name: str, body: bytes, is_json: bool) -> _Reply:
        if self.upstream.protocol == GRPC:
            if is_json:
                raise _Rejection(415, "INVALID_ARGUMENT",
                                 f"OTLP/JSON {signal_name} cannot be forwarded to a gRPC upstream; send protobuf")
            return self._forward_grpc(signal_name, body)
        return self._forward_http(signal_name, body, is_json)

    def _forward_grpc(self, signal_name: str, body: bytes) -> _Reply:
        import grpc

        metadata = [(k.lower(), v) for k, v in self.upstream.headers.items()]
        try:
            answer = self._calls[signal_name](body, timeout=self.upstream.timeout, metadata=metadata or None)
        except grpc.RpcError as exc:
            code = exc.code().name if exc.code() is not None else "UNKNOWN"
            if code in ("UNAUTHENTICATED", "PERMISSION_DENIED", "UNIMPLEMENTED", "NOT_FOUND"):
                code_out = "UNAVAILABLE"  # the sidecar's own upstream configuration, not the client's fault
            else:
                code_out = code
            raise _Rejection(_HTTP_FOR_GRPC.get(code, 502), code_out,
                             f"upstream {self.upstream.signal_netloc(signal_name)} answered {code}: {exc.details()}",
                             RETRY_AFTER_S if code_out == "UNAVAILABLE" else None) from None
        return _Reply(answer or b"")

    def _forward_http(self, signal_name: str, body: bytes, is_json: bool) -> _Reply:
        import requests

        url = self.upstream.signal_url(signal_name)
        netloc = urlsplit(url).netloc
        tls = self.upstream.signal_tls(signal_name)
        content_type = _JSON_TYPE if is_json else _CT_PROTOBUF
        try:
            resp = self._session.post(
                url, data=body, headers={"Content-Type": content_type, **self.upstream.headers},
                timeout=self.upstream.timeout, stream=True,
                # the TLS files of OTEL_EXPORTER_OTLP_*, as the span exporter has them
                verify=tls.certificate or True, cert=tls.client_pair)
            try:
                data = resp.raw.read(_MAX_UPSTREAM_REPLY, decode_content=True)
            finally:
                resp.close()
            status = resp.status_code
            reply_type = (resp.headers.get("Content-Type") or content_type).split(";")[0].strip()
        except (OSError, requests.RequestException) as exc:
            raise _Rejection(502, "UNAVAILABLE", f"upstream {netloc} unreachable: {exc}", RETRY_AFTER_S) from None
        if 200 <= status < 300:
            return _Reply(data, reply_type)
        retry = RETRY_AFTER_S if status in (429, 502, 503, 504) else None
        # The client's request was fine as far as we know; the upstream's status is what it
        # gets, except statuses about the sidecar's own credentials or paths.
        out = status if status in (400, 413, 429, 502, 503, 504) else 502
        raise _Rejection(out, _GRPC_FOR_HTTP.get(out, "UNAVAILABLE"),
                         f"upstream {netloc} answered HTTP {status}", retry)

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        if self._session is not None:
            self._session.close()


def _read_file(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as handle:
        return handle.read()


# --- admission: never accept what the export queue would drop --------------------------------------


class _Backlog:
    """Spans handed to the export queue and not yet exported, plus reservations of admitted requests."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._entered = 0
        self._left = 0
        self._reserved = 0

    def queued(self) -> int:
        with self._lock:
            return self._entered - self._left

    def try_reserve(self, n: int) -> int | None:
        """Reserve room for ``n`` spans; None when they fit, else how many are waiting."""
        with self._lock:
            waiting = self._entered - self._left + self._reserved
            if waiting + n > self.limit:
                return waiting
            self._reserved += n
            return None

    def release(self, n: int) -> None:
        with self._lock:
            self._reserved -= n

    def entered(self, n: int = 1) -> None:
        with self._lock:
            self._entered += n

    def left(self, n: int) -> None:
        with self._lock:
            self._left += n


class _ByteBudget:
    """Bytes of HTTP request bodies being received at once, across connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._used = 0

    def take(self, n: int) -> bool:
        with self._lock:
            if self._used + n > self.limit:
                return False
            self._used += n
            return True

    def give_back(self, n: int) -> None:
        with self._lock:
            self._used -= n


class _CountingProcessor(SpanProcessor):
    """Counts the spans entering the export queue (the scoring processor's downstream)."""

    def __init__(self, inner: SpanProcessor, backlog: _Backlog) -> None:
        self._inner = inner
        self._backlog = backlog

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self._inner.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        self._backlog.entered()
        self._inner.on_end(span)

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


# --- decoding -----------------------------------------------------------------------------------


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def inflate(data: bytes, encoding: str, limit: int) -> bytes:
    """Decompress a request body (gzip, deflate, or none), never producing more than ``limit`` bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return data
    if encoding in ("gzip", "x-gzip"):
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        # HTTP "deflate" is the zlib format; some clients send raw deflate: 32+ would not accept it.
        wbits = zlib.MAX_WBITS if data[:1] and (data[0] & 0x0F) == 8 else -zlib.MAX_WBITS
    else:
        raise _Rejection(415, "INVALID_ARGUMENT", f"unsupported Content-Encoding {encoding!r} (gzip, deflate or none)")
    out = bytearray()
    decomp = zlib.decompressobj(wbits)
    rest = data
    try:
        while True:
            # At most one byte more than the limit: enough to know the limit is crossed, and a
            # gzip bomb never inflates further than that.
            out += decomp.decompress(rest, limit + 1 - len(out))
            if len(out) > limit:
                raise _Rejection(413, "RESOURCE_EXHAUSTED",
                                 f"decompressed request body is over the {limit}-byte limit")
            if decomp.eof:
                rest = decomp.unused_data
                if wbits > 0 and rest.strip(b"\x00"):  # another gzip member follows
                    decomp = zlib.decompressobj(wbits)
                    continue
                return bytes(out)
            if decomp.unconsumed_tail:
                rest = decomp.unconsumed_tail
                continue
            raise _Rejection(400, "INVALID_ARGUMENT", f"{encoding} body is truncated")
    except zlib.error as exc:
        raise _Rejection(400, "INVALID_ARGUMENT", f"{encoding} body cannot be decompressed: {exc}") from None


@dataclass
class DecodedTraces:
    spans: list[ReadableSpan]
    #: spans in the request, decodable or not
    total: int
    problems: list[str]

    @property
    def rejected(self) -> int:
        return max(0, self.total - len(self.spans))


def decode_traces(body: bytes, is_json: bool) -> DecodedTraces:
    """An OTLP trace request body (already decompressed) → spans; ``_Rejection`` (400) if it is not one."""
    problems: list[str] = []
    if is_json:
        try:
            doc = json.loads(body)
        except RecursionError:
            raise _Rejection(400, "INVALID_ARGUMENT", "not JSON (nested too deeply)") from None
        except ValueError as exc:
            raise _Rejection(400, "INVALID_ARGUMENT", f"not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise _Rejection(400, "INVALID_ARGUMENT",
                             f"JSON but not an OTLP trace request: {type(doc).__name__}, not an object")
        resource_spans = doc.get("resourceSpans", doc.get("resource_spans"))
        if resource_spans is None:
            if not doc:  # {} is the JSON form of an empty request
                return DecodedTraces([], 0, [])
            raise _Rejection(400, "INVALID_ARGUMENT", "JSON but not an OTLP trace request: no resourceSpans")
        total = count_json_spans(resource_spans)
        try:
            batch = spans_from_otlp_dict({"resourceSpans": resource_spans})
        except OtlpDecodeError as exc:
            raise _Rejection(400, "INVALID_ARGUMENT", str(exc)) from None
        spans, problems = batch.spans, batch.problems
    else:
        try:
            message = parse_export_request(body, problems)
        except Exception as exc:  # noqa: BLE001 - the C parser's error types vary across protobuf versions
            raise _Rejection(400, "INVALID_ARGUMENT",
                             f"not an OTLP protobuf trace request: {exc or type(exc).__name__}") from None
        if body and not message.resource_spans:
            # Only unknown fields: random bytes often parse that way.
            raise _Rejection(400, "INVALID_ARGUMENT", "not an OTLP protobuf trace request: no resourceSpans")
        total = sum(len(group.spans) for entry in message.resource_spans for group in entry.scope_spans)
        spans = decode_export_request(message, problems)
    if not spans and (total or problems):
        first = problems[0] if problems else "no span"
        raise _Rejection(400, "INVALID_ARGUMENT", f"no span in the request could be decoded: {first}")
    return DecodedTraces(spans, total, problems)


def _trace_response(decoded: DecodedTraces) -> ExportTraceServiceResponse:
    response = ExportTraceServiceResponse()
    if decoded.rejected:
        response.partial_success.rejected_spans = decoded.rejected
        message = f"{decoded.rejected} of {decoded.total} spans could not be decoded: " + "; ".join(decoded.problems)
        response.partial_success.error_message = message[:_MAX_ERROR_MESSAGE]
    return response


def _status_body(code: str, message: str, is_json: bool) -> tuple[bytes, str]:
    from google.rpc import status_pb2

    status = status_pb2.Status(code=_CODE.get(code, 2), message=message[:_MAX_ERROR_MESSAGE])
    if is_json:
        return json_format.MessageToJson(status, indent=None).encode(), _JSON_TYPE
    return status.SerializeToString(), _CT_PROTOBUF


# --- the server ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerAddresses:
    """Where the server listens; a port is None when that receiver is off."""

    host: str
    grpc_port: int | None
    http_port: int | None

    def _host(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def grpc_endpoint(self) -> str | None:
        """``host:port`` for an OTLP gRPC exporter (with ``insecure=True``)."""
        return None if self.grpc_port is None else f"{self._host()}:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str | None:
        """The base URL for an OTLP/HTTP exporter (``/v1/traces`` is appended by the exporter)."""
        return None if self.http_port is None else f"http://{self._host()}:{self.http_port}"


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


class ToolScoreServer:
    """The OTLP receiver of ``otel-toolscore serve``, usable in process (tests, embedding).

    ``start()`` binds and returns the addresses (port 0 picks a free one); ``stop(timeout)``
    shuts down gracefully; ``serve_forever()`` starts and blocks until SIGTERM/SIGINT or
    ``request_stop()``. Scoring settings are the processor's (``decision_wait``,
    ``hold_timeout``, …: keyword arguments > ``OTEL_TOOLSCORE_*`` > ``config_file``); unless
    ``hold_timeout`` is set anywhere it is ``decision_wait + 5`` s, and it must exceed
    ``decision_wait`` (an agent span must be held until its trace has gone quiet).

    ``span_exporter``/``meter_provider``/``logger_provider`` replace the OTLP exporters to the
    upstream (tests); the upstream URL is needed only for what is not replaced and for
    forwarding logs and metrics.
    """

    def __init__(
        self,
        upstream: str | None = None,
        *,
        upstream_protocol: str | None = None,
        upstream_headers: Mapping[str, str] | None = None,
        host: str = DEFAULT_HOST,
        grpc_port: int | None = DEFAULT_GRPC_PORT,
        http_port: int | None = DEFAULT_HTTP_PORT,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_concurrent_requests: int = DEFAULT_MAX_CONCURRENT_REQUESTS,
        max_queued_spans: int = DEFAULT_MAX_QUEUED_SPANS,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S,
        auth_token: str | None = None,
        forward_signals: bool = True,
        scorers: Sequence[Any] | None = None,
        config_file: str | os.PathLike[str] | None = None,
        span_exporter: SpanExporter | None = None,
        meter_provider: Any = None,
        logger_provider: Any = None,
        resource: Resource | None = None,
        **settings: Any,
    ) -> None:
        if grpc_port is None and http_port is None:
            raise ConfigError("serve needs at least one receiver (gRPC or HTTP)")
        for name, value in (("max_request_bytes", max_request_bytes),
                            ("max_concurrent_requests", max_concurrent_requests),
                            ("max_queued_spans", max_queued_spans)):
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, not {value}")
        if not request_timeout > 0:
            raise ConfigError(f"request_timeout must be more than 0 s, not {request_timeout}")
        self.settings = self._settings(config_file, settings)
        self.upstream = Upstream.resolve(upstream, upstream_protocol, upstream_headers)
        needs_upstream = span_exporter is None or (meter_provider is None and self.settings.metrics) or (
            logger_provider is None and self.settings.events)
        if needs_upstream and self.upstream is None:
            raise ConfigError("no upstream: give --upstream URL or set OTEL_EXPORTER_OTLP_ENDPOINT")
        self.host = host
        self.grpc_port = grpc_port
        self.http_port = http_port
        self.max_request_bytes = max_request_bytes
        self.max_concurrent_requests = max_concurrent_requests
        self.max_queued_spans = max_queued_spans
        self.request_timeout = float(request_timeout)
        self._token = auth_token.encode() if auth_token else None
        self.forward_signals = forward_signals and self.upstream is not None
        self._scorers = scorers
        self._span_exporter = span_exporter
        self._meter_provider = meter_provider
        self._logger_provider = logger_provider
        self._resource = resource
        self._own_providers: list[Any] = []
        self.processor: ToolScoreSpanProcessor | None = None
        self.addresses: ServerAddresses | None = None
        self.stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()
        self._backlog = _Backlog(max_queued_spans)
        self._delivery: RetryingExporter | None = None
        self._forwarder: _Forwarder | None = None
        self._grpc_server: Any = None
        self._httpd: _HttpServer | None = None
        self._http_thread: threading.Thread | None = None
        self._http_slots = threading.BoundedSemaphore(max_concurrent_requests)
        # What the request slots bounded when bodies were read inside them.
        self._body_bytes = _ByteBudget(max_concurrent_requests * max_request_bytes)
        self._state = threading.Condition()
        self._inflight = 0
        self._stopping = False
        self._started = False
        self._stopped = threading.Event()
        self._stop_requested = threading.Event()
        if not _is_loopback(host) and self._token is None:
            logger.warning("otel-toolscore serve listens on %s without --auth-token: anyone who can reach it "
                           "can send spans", host)

    @staticmethod
    def _settings(config_file: Any, overrides: dict[str, Any]) -> ToolScoreSettings:
        resolved = load_settings(config_file, **overrides)
        if "hold_timeout" not in resolved.model_fields_set:
            resolved = resolved.model_copy(update={"hold_timeout": resolved.decision_wait + HOLD_MARGIN_S})
        elif overrides.get("hold_timeout") is None and resolved.hold_timeout <= resolved.decision_wait:
            # From the file or the environment the app shares (README: hold_timeout 2.0): there it
            # bounds the hold after the run ended; here the run ends when its trace has been quiet
            # for decision_wait, so the same bound counts from then. One file serves both.
            resolved = resolved.model_copy(update={"hold_timeout": resolved.decision_wait + resolved.hold_timeout})
        elif resolved.hold_timeout <= resolved.decision_wait:
            raise ConfigError(
                f"hold_timeout ({resolved.hold_timeout:g}s) must exceed decision_wait "
                f"({resolved.decision_wait:g}s) in the sidecar: agent spans are held until their trace "
                "has been quiet for decision_wait")
        if resolved.trace_ttl <= resolved.decision_wait:
            raise ConfigError(f"trace_ttl ({resolved.trace_ttl:g}s) must exceed decision_wait "
                              f"({resolved.decision_wait:g}s)")
        return resolved

    # --- life cycle ------------------------------------------------------------------------------

    def start(self) -> ServerAddresses:
        """Build the pipeline, bind the receivers and serve in background threads."""
        if self._started:
            raise RuntimeError("ToolScoreServer.start() called twice")
        self._started = True
        try:
            self._build_pipeline()
            grpc_port = self._start_grpc() if self.grpc_port is not None else None
            http_port = self._start_http() if self.http_port is not None else None
        except BaseException:
            self._teardown(deadline=time.monotonic() + 5.0)
            self._stopped.set()
            raise
        self.addresses = ServerAddresses(self.host, grpc_port, http_port)
        return self.addresses

    def _build_pipeline(self) -> None:
        resource = self._resource
        if resource is None:
            named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
                "OTEL_RESOURCE_ATTRIBUTES", "")
            resource = Resource.create({} if named else {"service.name": "otel-toolscore"})
        meter_provider, logger_provider = self._meter_provider, self._logger_provider
        if meter_provider is None and self.settings.metrics:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            assert self.upstream is not None
            meter_provider = MeterProvider(
                resource=resource, metric_readers=[PeriodicExportingMetricReader(self.upstream.metric_exporter())])
            self._own_providers.append(meter_provider)
        if logger_provider is None and self.settings.events:
            from opentelemetry.sdk._logs import LoggerProvider
            from opentelemetry.sdk._logs.export import BatchLogRecordProcessor

            assert self.upstream is not None
            logger_provider = LoggerProvider(resource=resource)
            logger_provider.add_log_record_processor(BatchLogRecordProcessor(self.upstream.log_exporter()))
            self._own_providers.append(logger_provider)
        exporter = self._span_exporter
        if exporter is None:
            assert self.upstream is not None
            exporter = self.upstream.span_exporter()
        # A failed batch is retried until delivered (not dropped, as the SDK would): what was
        # answered 200 is kept; admission refuses new spans while the upstream is failing.
        self._delivery = RetryingExporter(exporter, on_done=self._backlog.left,
                                          on_undelivered=lambda n: self._count("spans_undelivered", n))
        # The export queue holds twice what admission lets in: evaluation spans and held agent
        # spans enter it without admission, and must not make it drop app spans.
        batch = BatchSpanProcessor(self._delivery, max_queue_size=2 * self.max_queued_spans + 1024)
        self.processor = ToolScoreSpanProcessor(
            _CountingProcessor(batch, self._backlog), self._scorers, settings=self.settings,
            completion="quiet", meter_provider=meter_provider, logger_provider=logger_provider,
        )
        if self.forward_signals:
            assert self.upstream is not None
            self._forwarder = _Forwarder(self.upstream)

    def _start_grpc(self) -> int:
        grpc = require("grpc", "serve", "the sidecar's OTLP/gRPC receiver (or serve --no-grpc)")

        handlers = [grpc.method_handlers_generic_handler(
            _GRPC_SERVICES["traces"], {"Export": grpc.unary_unary_rpc_method_handler(self._grpc_traces)})]
        if self.forward_signals:
            for signal_name in ("logs", "metrics"):
                handlers.append(grpc.method_handlers_generic_handler(
                    _GRPC_SERVICES[signal_name],
                    {"Export": grpc.unary_unary_rpc_method_handler(self._grpc_forwarder(signal_name))}))
        server = grpc.server(
            ThreadPoolExecutor(max_workers=self.max_concurrent_requests, thread_name_prefix="otel-toolscore-grpc"),
            handlers=handlers,
            maximum_concurrent_rpcs=self.max_concurrent_requests,
            options=[
                # gRPC checks this on the decompressed message too: no gzip bomb gets through.
                ("grpc.max_receive_message_length", self.max_request_bytes),
                # HTTP/2 streams per connection: a client's RPCs beyond it wait in its own
                # connection (the others keep their share) instead of being refused.
                ("grpc.max_concurrent_streams", self.max_concurrent_requests),
                # Without this a second server could bind the same port and steal half the traffic.
                ("grpc.so_reuseport", 0),
            ],
        )
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:
            port = server.add_insecure_port(f"{host}:{self.grpc_port}")
        except RuntimeError:
            port = 0
        if not port:
            raise OSError(f"cannot listen for OTLP/gRPC on {host}:{self.grpc_port} (address in use?)")
        server.start()
        self._grpc_server = server
        return port

    def _start_http(self) -> int:
        server_cls = _HttpServer6 if ":" in self.host else _HttpServer
        assert self.http_port is not None
        try:
            httpd = server_cls((self.host, self.http_port), _HttpHandler, self)
        except OSError as exc:
            raise OSError(f"cannot listen for OTLP/HTTP on {self.host}:{self.http_port}: {exc.strerror or exc}") from exc
        self._httpd = httpd
        self._http_thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                             name="otel-toolscore-http", daemon=True)
        self._http_thread.start()
        return int(httpd.server_address[1])

    def request_stop(self) -> None:
        """Ask ``serve_forever`` to return (thread- and signal-safe)."""
        self._stop_requested.set()

    def serve_forever(self, *, install_signal_handlers: bool = True,
                      on_started: Callable[[ServerAddresses], None] | None = None, stop_timeout: float = 30.0) -> None:
        """Start (if not yet), block until SIGTERM/SIGINT or ``request_stop()``, then stop gracefully."""
        previous: dict[int, Any] = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            def on_signal(signum: int, frame: Any) -> None:
                self._stop_requested.set()
                # A second signal acts as it normally would (stop now).
                signal.signal(signum, previous.get(signum) or signal.SIG_DFL)

            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, on_signal)
        try:
            addresses = self.addresses or self.start()
            if on_started is not None:
                on_started(addresses)
            while not self._stop_requested.wait(0.5):
                pass
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            self.stop(stop_timeout)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop accepting, let requests in flight finish, then flush and shut down the pipeline.

        Everything accepted is exported (held agent spans and pending traces are scored first).
        Returns False when something did not finish within ``timeout`` seconds. Idempotent.
        """
        if self._stopped.is_set() or not self._started:
            return True
        deadline = time.monotonic() + timeout
        ok = self._teardown(deadline)
        self._stopped.set()
        self._stop_requested.set()
        logger.info("otel-toolscore serve stopped: %s", dict(self.stats))
        return ok

    def _teardown(self, deadline: float) -> bool:
        with self._state:
            self._stopping = True
        ok = True
        grpc_done = None
        if self._grpc_server is not None:
            # New RPCs are refused now; those in flight get until the deadline.
            grpc_done = self._grpc_server.stop(grace=max(0.0, (deadline - time.monotonic()) / 2))
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        with self._state:
            while self._inflight:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    ok = False
                    break
                self._state.wait(min(remaining, 0.1))
        if grpc_done is not None:
            ok = grpc_done.wait(max(0.0, deadline - time.monotonic())) and ok
        if self.processor is not None:
            remaining_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
            give_up = self._bound_delivery(deadline)
            ok = self.processor.force_flush(remaining_ms) and ok
            self.processor.shutdown()
            if give_up is not None:
                give_up.cancel()
            if self.stats["spans_undelivered"]:
                ok = False
                logger.warning("otel-toolscore serve: %d accepted spans could not be delivered to the upstream "
                               "before the stop deadline", self.stats["spans_undelivered"])
        for provider in self._own_providers:
            try:
                remaining_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
                if "timeout_millis" in inspect.signature(provider.shutdown).parameters:
                    provider.shutdown(timeout_millis=max(remaining_ms, 1))
                else:
                    provider.shutdown()
            except Exception:  # a failing exporter must not keep the others from flushing
                logger.warning("otel-toolscore: shutting down %s failed", type(provider).__name__, exc_info=True)
                ok = False
        if self._forwarder is not None:
            self._forwarder.close()
        return ok

    def _bound_delivery(self, deadline: float) -> threading.Timer | None:
        """Retrying delivery must not outlast the stop deadline: at the deadline what is left is
        counted as undelivered instead of retried. A timer, because the SDK's batch processor
        exports inside force_flush and shutdown whatever timeout they are given."""
        delivery = self._delivery
        if delivery is None:
            return None
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), delivery.give_up)
        timer.daemon = True
        timer.start()
        return timer

    def __enter__(self) -> ToolScoreServer:
        if not self._started:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- request handling shared by both transports ------------------------------------------------

    def _count(self, key: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] += n

    @contextmanager
    def _request(self) -> Iterator[None]:
        """Count a request in flight; refuse it once stopping has begun."""
        with self._state:
            if self._stopping:
                raise _Rejection(503, "UNAVAILABLE", "the server is shutting down", RETRY_AFTER_S)
            self._inflight += 1
        try:
            yield
        finally:
            with self._state:
                self._inflight -= 1
                if not self._inflight:
                    self._state.notify_all()

    def authorized(self, header: str | None) -> bool:
        if self._token is None:
            return True
        if not header:
            return False
        scheme, _, credentials = header.strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), self._token)

    def _scoring_full(self) -> str | None:
        """Why scoring cannot take another trace now, or None. Reads the processor's bounds."""
        proc = self.processor
        if proc is None:
            return "not started"
        backlog = proc.backlog()
        pending, age = backlog.pending_traces, backlog.oldest_pending_age_s
        if pending >= proc.settings.max_pending_traces and age is not None:
            # Full of young traces: load is too high, the client should back off. Full of old
            # ones (a root that never arrives keeps a trace until trace_ttl): refusing would stop
            # all traffic for minutes, so the processor evicts the oldest instead (its spans are
            # forwarded unscored, counted in toolscore.traces.evicted).
            stale_after = proc.settings.hold_timeout + proc.settings.decision_wait
            if age < stale_after:
                return f"{pending} traces are waiting to complete (max_pending_traces)"
        if backlog.queue_full:
            return "the scoring queue is full (queue_size)"
        return None

    def ingest_traces(self, body: bytes, is_json: bool) -> _Reply:
        """Decode, admit and hand spans to the processor; ``_Rejection`` when refused as a whole."""
        decoded = decode_traces(body, is_json)
        n = len(decoded.spans)
        self._count("requests", 1)
        if n > self.max_queued_spans:
            raise _Rejection(413, "INVALID_ARGUMENT",
                             f"the request holds {n} spans, more than max_queued_spans ({self.max_queued_spans})")
        if n:
            delivery = self._delivery
            if delivery is not None and delivery.failing:
                # What is accepted now would wait behind batches the upstream refuses: the
                # sender keeps it and retries instead (its queue, not this process's memory).
                self._count("throttled", 1)
                raise _Rejection(503, "UNAVAILABLE", "the upstream is failing; retry later",
                                 delivery.retry_after_s())
            why = self._scoring_full()
            waiting = self._backlog.try_reserve(n) if why is None else None
            if why is None and waiting is not None:
                why = f"{waiting} spans are waiting for the upstream (max_queued_spans {self.max_queued_spans})"
            if why is not None:
                self._count("throttled", 1)
                raise _Rejection(503, "UNAVAILABLE", f"busy, retry later: {why}", RETRY_AFTER_S)
            assert self.processor is not None
            try:
                for span in decoded.spans:
                    self.processor.on_end(span)
            finally:
                self._backlog.release(n)
        self._count("spans", n)
        self._count("spans_rejected", decoded.rejected)
        response = _trace_response(decoded)
        if is_json:
            return _Reply(json_format.MessageToJson(response, indent=None).encode(), _JSON_TYPE)
        return _Reply(response.SerializeToString())

    def forward(self, signal_name: str, body: bytes, is_json: bool) -> _Reply:
        """Check that a logs/metrics request is what it claims, then pass it upstream."""
        assert self._forwarder is not None
        if not is_json:
            try:
                _REQUEST_TYPES[signal_name]().ParseFromString(body)
            except Exception as exc:  # noqa: BLE001 - any parse failure is the client's payload
                raise _Rejection(400, "INVALID_ARGUMENT",
                                 f"not an OTLP protobuf {signal_name} request: {exc or type(exc).__name__}") from None
        else:
            try:
                doc = json.loads(body)
            except (ValueError, RecursionError) as exc:
                raise _Rejection(400, "INVALID_ARGUMENT", f"not JSON: {exc}") from None
            key = "resourceLogs" if signal_name == "logs" else "resourceMetrics"
            if not isinstance(doc, dict) or (doc and key not in doc):
                raise _Rejection(400, "INVALID_ARGUMENT", f"JSON but not an OTLP {signal_name} request: no {key}")
        self._count(f"{signal_name}_forwarded", 1)
        return self._forwarder.forward(signal_name, body, is_json)

    # --- gRPC ------------------------------------------------------------------------------------

    def _grpc_call(self, context: Any, work: Callable[[], _Reply]) -> bytes:
        import grpc

        try:
            metadata = dict(context.invocation_metadata() or ())
            if not self.authorized(metadata.get("authorization")):
                self._count("unauthenticated", 1)
                raise _Rejection(401, "UNAUTHENTICATED", "missing or wrong bearer token (authorization metadata)")
            with self._request():
                return work().body
        except _Rejection as rej:
            if rej.retry_after is not None:
                from google.protobuf.duration_pb2 import Duration
                from google.rpc.error_details_pb2 import RetryInfo

                info = RetryInfo(retry_delay=Duration(seconds=rej.retry_after))
                context.set_trailing_metadata((("google.rpc.retryinfo-bin", info.SerializeToString()),))
            context.abort(getattr(grpc.StatusCode, rej.code), rej.message)
            raise  # abort raises; this line is for type checkers

    def _grpc_traces(self, request: bytes, context: Any) -> bytes:
        return self._grpc_call(context, lambda: self.ingest_traces(request, is_json=False))

    def _grpc_forwarder(self, signal_name: str) -> Callable[[bytes, Any], bytes]:
        def handle(request: bytes, context: Any) -> bytes:
            return self._grpc_call(context, lambda: self.forward(signal_name, request, is_json=False))

        return handle


# --- HTTP ---------------------------------------------------------------------------------------


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True  # idle keep-alive connections must not keep the process alive
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], app: ToolScoreServer) -> None:
        self.app = app
        # Connections, not requests: each has a thread; idle keep-alive ones count too.
        self._connections = threading.BoundedSemaphore(4 * app.max_concurrent_requests)
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN (a DNS query); not needed here.
        import socketserver

        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._connections.acquire(blocking=False):
            # Over the connection bound: close at once, the client reconnects later.
            self.app._count("connections_refused", 1)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._connections.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()


class _HttpServer6(_HttpServer):
    address_family = socket.AF_INET6


class _DeadlineReader(io.RawIOBase):
    """A connection's reads, bounded by the handler's deadline for the whole request.

    A socket timeout alone bounds the wait for the next byte: a client sending one byte every
    few seconds would hold its thread forever (slow loris). Each read here may wait only for
    what is left until the deadline.
    """

    def __init__(self, sock: socket.socket, handler: _HttpHandler) -> None:
        super().__init__()
        self._sock = sock
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._handler.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request did not arrive within request_timeout")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


class _HttpHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "otel-toolscore"
    sys_version = ""
    server: _HttpServer
    #: when the request being read must have arrived whole (monotonic seconds)
    deadline = 0.0

    def setup(self) -> None:
        super().setup()
        self.deadline = time.monotonic() + self.server.app.request_timeout
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self))

    def handle_one_request(self) -> None:
        # The wait for a keep-alive connection's next request counts: an idle one is closed.
        self.deadline = time.monotonic() + self.server.app.request_timeout
        super().handle_one_request()

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.client_address[0], *args)

    def _not_allowed(self) -> None:
        path = urlsplit(self.path).path
        if path in _HTTP_PATHS:
            self._error(_Rejection(405, "UNIMPLEMENTED", f"{self.command} is not allowed on {path}; use POST"),
                        is_json=True, extra={"Allow": "POST"})
        else:
            self._error(_Rejection(404, "NOT_FOUND", f"no such path {path}"), is_json=True)

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = _not_allowed

    def do_POST(self) -> None:
        app = self.server.app
        self._body_read = False
        self._reserved = 0
        path = urlsplit(self.path).path
        signal_name = _HTTP_PATHS.get(path)
        media = _media_type(self.headers.get("Content-Type"))
        is_json = media == _JSON_TYPE
        try:
            if signal_name is None or (signal_name != "traces" and not app.forward_signals):
                raise _Rejection(404, "NOT_FOUND", f"no such path {path}")
            if not app.authorized(self.headers.get("Authorization")):
                app._count("unauthenticated", 1)
                raise _Rejection(401, "UNAUTHENTICATED", "missing or wrong bearer token (Authorization header)")
            if media not in _PROTOBUF_TYPES and not is_json:
                raise _Rejection(415, "INVALID_ARGUMENT",
                                 f"unsupported Content-Type {media or '(none)'!r}: use application/x-protobuf "
                                 "or application/json")
            # The body is received before a request slot is taken: a client that is slow to send
            # it (or never does) holds its connection until the deadline, never a slot.
            raw = self._read_body(app.max_request_bytes)
            if not app._http_slots.acquire(blocking=False):
                raise _Rejection(503, "UNAVAILABLE", "too many concurrent requests", RETRY_AFTER_S)
            try:
                with app._request():
                    body = inflate(raw, self.headers.get("Content-Encoding", ""), app.max_request_bytes)
                    del raw
                    if signal_name == "traces":
                        reply = app.ingest_traces(body, is_json)
                    else:
                        reply = app.forward(signal_name, body, is_json)
            finally:
                app._http_slots.release()
        except _Rejection as rej:
            app._count(f"http_{rej.status}", 1)
            self._give_back()
            self._error(rej, is_json)
            return
        except Exception:  # one bad request must not take the server down
            logger.exception("otel-toolscore serve: request failed")
            self._give_back()
            self._error(_Rejection(500, "INTERNAL", "internal error"), is_json)
            return
        self._give_back()
        self._send(reply.status, reply.content_type, reply.body)

    def _give_back(self) -> None:
        if self._reserved:
            self.server.app._body_bytes.give_back(self._reserved)
            self._reserved = 0

    def _read_body(self, limit: int) -> bytes:
        try:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                body = self._read_chunked(limit)
            else:
                raw = self.headers.get("Content-Length")
                if raw is None:
                    raise _Rejection(411, "INVALID_ARGUMENT", "Content-Length is required")
                try:
                    length = int(raw)
                except ValueError:
                    raise _Rejection(400, "INVALID_ARGUMENT", f"bad Content-Length {raw[:40]!r}") from None
                if length < 0:
                    raise _Rejection(400, "INVALID_ARGUMENT", f"bad Content-Length {length}")
                if length > limit:
                    raise _Rejection(413, "RESOURCE_EXHAUSTED",
                                     f"request body is {length} bytes, over the {limit}-byte limit")
                body = bytearray()
                self._read_into(body, length)
                if len(body) < length:
                    raise _Rejection(400, "INVALID_ARGUMENT", "request body is shorter than its Content-Length")
        except TimeoutError:
            raise _Rejection(408, "DEADLINE_EXCEEDED", "the request body did not arrive within "
                             f"{self.server.app.request_timeout:g} s") from None
        self._body_read = True
        return bytes(body)

    def _read_into(self, body: bytearray, n: int) -> None:
        """Append up to ``n`` more bytes (fewer at EOF), a chunk at a time: what a stalled body
        holds in memory is what has arrived, not what it declared."""
        budget = self.server.app._body_bytes
        end = len(body) + n
        while len(body) < end:
            size = min(_READ_CHUNK, end - len(body))
            if not budget.take(size):
                raise _Rejection(503, "UNAVAILABLE", "too many request bytes being received", RETRY_AFTER_S)
            self._reserved += size
            chunk = self.rfile.read(size)
            body += chunk
            if len(chunk) < size:
                return

    def _read_chunked(self, limit: int) -> bytearray:
        body = bytearray()
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _Rejection(400, "INVALID_ARGUMENT", "bad chunked encoding") from None
            if size == 0:
                while self.rfile.readline(1024).strip():  # trailers
                    pass
                return body
            if len(body) + size > limit:
                raise _Rejection(413, "RESOURCE_EXHAUSTED", f"request body is over the {limit}-byte limit")
            expected = len(body) + size
            self._read_into(body, size)
            if len(body) < expected:
                raise _Rejection(400, "INVALID_ARGUMENT", "chunked body is truncated")
            self.rfile.readline(1024)  # the CRLF after the chunk

    def _error(self, rej: _Rejection, is_json: bool, extra: Mapping[str, str] | None = None) -> None:
        body, content_type = _status_body(rej.code, rej.message, is_json)
        headers = dict(extra or {})
        if rej.retry_after is not None:
            headers["Retry-After"] = str(rej.retry_after)
        if rej.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="otel-toolscore"'
        # A body left unread would be parsed as the next request: close the connection instead.
        close = not getattr(self, "_body_read", False) and self._has_body()
        if close:
            headers["Connection"] = "close"
            self.close_connection = True
        self._send(rej.status, content_type, body, headers)
        if close:
            self._linger()

    def _has_body(self) -> bool:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return True
        try:
            return int(self.headers.get("Content-Length") or 0) != 0
        except ValueError:
            return True

    def _send(self, status: int, content_type: str, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        # Writes get request_timeout each; reads may have left the socket's timeout at what
        # remained of the deadline.
        self.connection.settimeout(self.server.app.request_timeout)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _linger(self) -> None:
        """Half-close and drain what the client is still sending, so it reads our answer.

        Closing a socket with unread data sends a TCP reset, which can destroy the response
        before the client has read it (413 and 401 on large bodies). Bounded in bytes and time.
        """
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(0.5)
            budget = 2 * self.server.app.max_request_bytes + 65536
            deadline = time.monotonic() + 2.0
            while budget > 0 and time.monotonic() < deadline:
                chunk = self.connection.recv(min(65536, budget))
                if not chunk:
                    break
                budget -= len(chunk)
        except OSError:
            pass
