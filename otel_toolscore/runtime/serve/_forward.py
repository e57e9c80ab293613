"""Logs and metrics sent to ``serve``, passed to the upstream as they came and its answer passed
back (what that means for clients: ``server``'s docstring). An upstream's refusal about the
sidecar's own credentials or paths becomes UNAVAILABLE/502 for the client, which did nothing wrong.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from otel_toolscore.extras import require
from otel_toolscore.runtime.otel_env import GRPC
from otel_toolscore.runtime.serve._protocol import (
    CT_PROTOBUF,
    GRPC_SERVICES,
    JSON_TYPE,
    RETRY_AFTER_S,
    Rejection,
    Reply,
)
from otel_toolscore.runtime.serve.upstream import Upstream

#: pooled connections to the upstream (forwarded logs and metrics), per scheme
_UPSTREAM_POOL = 16
_MAX_UPSTREAM_REPLY = 1 << 20
_REQUEST_TYPES: dict[str, Any] = {"logs": ExportLogsServiceRequest, "metrics": ExportMetricsServiceRequest}

# HTTP statuses for the upstream's gRPC codes, and the reverse, for forwarded signals.
_HTTP_FOR_GRPC = {
    "INVALID_ARGUMENT": 400, "UNAUTHENTICATED": 502, "PERMISSION_DENIED": 502, "NOT_FOUND": 502,
    "RESOURCE_EXHAUSTED": 429, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504, "UNIMPLEMENTED": 502,
}
_GRPC_FOR_HTTP = {400: "INVALID_ARGUMENT", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
                  502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def check_request(signal_name: str, body: bytes, is_json: bool) -> None:
    """``Rejection`` (400) unless a logs/metrics request body is what it claims to be."""
    if not is_json:
        try:
            _REQUEST_TYPES[signal_name]().ParseFromString(body)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the client's payload
            raise Rejection(400, "INVALID_ARGUMENT",
                            f"not an OTLP protobuf {signal_name} request: {exc or type(exc).__name__}") from None
    else:
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise Rejection(400, "INVALID_ARGUMENT", f"not JSON: {exc}") from None
        key = "resourceLogs" if signal_name == "logs" else "resourceMetrics"
        if not isinstance(doc, dict) or (doc and key not in doc):
            raise Rejection(400, "INVALID_ARGUMENT", f"JSON but not an OTLP {signal_name} request: no {key}")


class Forwarder:
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
                self._calls[signal_name] = channel.unary_unary(f"/{GRPC_SERVICES[signal_name]}/Export")
        else:
            import requests
            from requests.adapters import HTTPAdapter

            # One pooled session: connections (and TLS handshakes) are reused across requests.
            self._session = requests.Session()
            self._session.mount("http://", HTTPAdapter(pool_maxsize=_UPSTREAM_POOL))
            self._session.mount("https://", HTTPAdapter(pool_maxsize=_UPSTREAM_POOL))

    def forward(self, signal_name: str, body: bytes, is_json: bool) -> Reply:
        if self.upstream.protocol == GRPC:
            if is_json:
                raise Rejection(415, "INVALID_ARGUMENT",
                                f"OTLP/JSON {signal_name} cannot be forwarded to a gRPC upstream; send protobuf")
            return self._forward_grpc(signal_name, body)
        return self._forward_http(signal_name, body, is_json)

    def _forward_grpc(self, signal_name: str, body: bytes) -> Reply:
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
            raise Rejection(_HTTP_FOR_GRPC.get(code, 502), code_out,
                            f"upstream {self.upstream.signal_netloc(signal_name)} answered {code}: {exc.details()}",
                            RETRY_AFTER_S if code_out == "UNAVAILABLE" else None) from None
        return Reply(answer or b"")

    def _forward_http(self, signal_name: str, body: bytes, is_json: bool) -> Reply:
        import requests

        url = self.upstream.signal_url(signal_name)
        netloc = urlsplit(url).netloc
        tls = self.upstream.signal_tls(signal_name)
        content_type = JSON_TYPE if is_json else CT_PROTOBUF
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
            raise Rejection(502, "UNAVAILABLE", f"upstream {netloc} unreachable: {exc}", RETRY_AFTER_S) from None
        if 200 <= status < 300:
            return Reply(data, reply_type)
        retry = RETRY_AFTER_S if status in (429, 502, 503, 504) else None
        # The client's request was fine as far as we know; the upstream's status is what it
        # gets, except statuses about the sidecar's own credentials or paths.
        out = status if status in (400, 413, 429, 502, 503, 504) else 502
        raise Rejection(out, _GRPC_FOR_HTTP.get(out, "UNAVAILABLE"),
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
