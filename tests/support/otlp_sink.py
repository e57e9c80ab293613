"""An OTLP receiver on 127.0.0.1 that keeps what it is sent: the upstream of ``serve``, the
backend of an app, the Collector in front of them. ``OtlpSink`` speaks OTLP/HTTP (stdlib server,
any path, plain or TLS, optionally mutual), ``GrpcOtlpSink`` OTLP/gRPC (raw handlers, so what is
kept is exactly the bytes the client sent). Both keep every accepted request and read them back
as export requests, spans, log records, metric names or span ids.

A test that needs the receiver to fail or stall passes ``answer``: called with each request once
its body is read, it returns the HTTP status to answer with (and may wait first). Only requests
answered 2xx are kept: what was refused was not received, as for a real backend."""

from __future__ import annotations

import gzip
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore.ingest import load_otlp

#: the OTLP/HTTP protobuf content type
PB = "application/x-protobuf"
#: each signal's OTLP/gRPC method
GRPC_TRACES = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
GRPC_LOGS = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
GRPC_METRICS = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
_GRPC_METHODS = {"traces": GRPC_TRACES, "logs": GRPC_LOGS, "metrics": GRPC_METRICS}
_REQUESTS: dict[str, type[Any]] = {
    "traces": ExportTraceServiceRequest,
    "logs": ExportLogsServiceRequest,
    "metrics": ExportMetricsServiceRequest,
}


@dataclass(frozen=True)
class Received:
    """One request as it arrived (the body with any gzip undone)."""

    #: "traces", "logs" or "metrics": the last segment of an HTTP path, or the gRPC service
    signal: str
    #: the HTTP path as sent (a per-signal endpoint is used as given); gRPC: the method
    path: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    #: the client presented a certificate (mutual TLS)
    client_cert: bool = False

    def message(self) -> Any:
        """The decoded ``Export*ServiceRequest`` (OTLP/JSON or protobuf, by Content-Type)."""
        message = _REQUESTS[self.signal]()
        content_type = next((v for k, v in self.headers.items() if k.lower() == "content-type"), "")
        if "json" in content_type:
            json_format.Parse(self.body, message)
        else:
            message.ParseFromString(self.body)
        return message


class _Kept:
    """What a sink received, and the ways the tests read it back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[Received] = []
        #: requests whose body was read, whatever they were answered
        self.arrived = 0
        #: requests answered with something else than 2xx (not kept)
        self.refused = 0

    def _keep(self, request: Received) -> None:
        with self.lock:
            self.requests.append(request)

    def received(self, signal: str | None = None) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if signal is None or r.signal == signal]

    def paths(self) -> list[str]:
        return [r.path for r in self.received()]

    def bodies(self, signal: str) -> list[bytes]:
        return [r.body for r in self.received(signal)]

    def messages(self, signal: str) -> list[Any]:
        return [r.message() for r in self.received(signal)]

    def spans(self) -> list[ReadableSpan]:
        """Every span received, read by the package's own OTLP reader."""
        return [s for body in self.bodies("traces") if body for s in load_otlp(body).spans]

    def span_ids(self) -> list[tuple[int, int]]:
        """(trace id, span id) of every span received, once per time it arrived; read from the
        protobuf directly, without the package."""
        return [(int.from_bytes(s.trace_id, "big"), int.from_bytes(s.span_id, "big"))
                for m in self.messages("traces") for rs in m.resource_spans for ss in rs.scope_spans
                for s in ss.spans]

    def log_records(self) -> list[Any]:
        return [r for m in self.messages("logs") for rl in m.resource_logs for sl in rl.scope_logs
                for r in sl.log_records]

    def metric_names(self) -> set[str]:
        return {x.name for m in self.messages("metrics") for rm in m.resource_metrics for sm in rm.scope_metrics
                for x in sm.metrics}


class OtlpSink(_Kept):
    """OTLP/HTTP on 127.0.0.1, started at once; ``url`` is its base URL (no ``/v1/...``).

    ``keep_alive`` answers HTTP/1.1 and keeps connections open (``connections`` counts them),
    otherwise HTTP/1.0, one request per connection. ``tls``: the files ``server.pem`` and
    ``server.key`` (and ``ca.pem`` with ``require_client_cert``)."""

    def __init__(self, answer: Callable[[Received], int] | None = None, *, keep_alive: bool = False,
                 tls: dict[str, Path] | None = None, require_client_cert: bool = False) -> None:
        super().__init__()
        self.connections = 0
        self._answer = answer
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class(keep_alive))
        self.server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls["server.pem"], tls["server.key"])
            if require_client_cert:
                context.verify_mode = ssl.CERT_REQUIRED
                context.load_verify_locations(tls["ca.pem"])
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> OtlpSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handle(self, request: Received) -> int:
        with self.lock:
            self.arrived += 1
        status = self._answer(request) if self._answer is not None else 200
        if 200 <= status < 300:
            self._keep(request)
        else:
            with self.lock:
                self.refused += 1
        return status

    def _handler_class(self, keep_alive: bool) -> type[BaseHTTPRequestHandler]:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def setup(self) -> None:
                super().setup()
                with sink.lock:
                    sink.connections += 1

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                path = self.path.split("?")[0]
                peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
                status = sink._handle(Received(path.rsplit("/", 1)[-1], self.path, body, dict(self.headers),
                                               bool(peer)))
                self.send_response(status)
                if 200 <= status < 300:  # an empty Export*ServiceResponse
                    self.send_header("Content-Type", PB)
                self.send_header("Content-Length", "0")
                self.end_headers()

        return Handler


class GrpcOtlpSink(_Kept):
    """OTLP/gRPC on 127.0.0.1 (insecure), started at once; ``url`` is ``http://host:port``."""

    def __init__(self) -> None:
        import grpc  # the grpc extra: only this sink needs it

        super().__init__()

        def handler(signal: str, method: str) -> Any:
            def export(request: bytes, context: Any) -> bytes:
                with self.lock:
                    self.arrived += 1
                self._keep(Received(signal, method, request))
                return b""  # an empty Export*ServiceResponse

            service, name = method.strip("/").split("/")
            return grpc.method_handlers_generic_handler(service, {name: grpc.unary_unary_rpc_method_handler(export)})

        self.server = grpc.server(ThreadPoolExecutor(4), handlers=[handler(*m) for m in _GRPC_METHODS.items()])
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.stop(0)

    def __enter__(self) -> GrpcOtlpSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

