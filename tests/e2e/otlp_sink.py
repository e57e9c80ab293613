"""A minimal OTLP/HTTP receiver on 127.0.0.1 (stdlib server, opentelemetry-proto messages).

Stands in for a backend where the tests only need to see what an app exported: it accepts
``POST /v1/traces``, ``/v1/metrics`` and ``/v1/logs`` in protobuf (or JSON) and keeps the
decoded export requests.
"""

from __future__ import annotations

import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

_SIGNALS: dict[str, tuple[Any, Any]] = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
    "/v1/logs": (ExportLogsServiceRequest, ExportLogsServiceResponse),
}


class OtlpSink(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: dict[str, list[Any]] = {path: [] for path in _SIGNALS}
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> OtlpSink:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()

    def get(self, path: str) -> list[Any]:
        with self.lock:
            return list(self.received[path])

    def wait_for(self, predicate, timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            time.sleep(0.1)
        return predicate(self)


class _Handler(BaseHTTPRequestHandler):
    server: OtlpSink

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        kinds = _SIGNALS.get(self.path.split("?")[0])
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if kinds is None:
            self.send_response(404)
            self.end_headers()
            return
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request_cls, response_cls = kinds
        message = request_cls()
        if "json" in (self.headers.get("Content-Type") or ""):
            json_format.Parse(body, message)
        else:
            message.ParseFromString(body)
        with self.server.lock:
            self.server.received[self.path.split("?")[0]].append(message)
        out = response_cls().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
