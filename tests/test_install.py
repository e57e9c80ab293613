"""install(): one call, standard OTLP variables, a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from otel_toolscore.otlp import load_otlp

APP = Path(__file__).resolve().parent / "data" / "install_app.py"


class Receiver:
    """A minimal OTLP/HTTP protobuf receiver that keeps what it is sent."""

    def __init__(self) -> None:
        self.bodies: dict[str, list[bytes]] = {"/v1/traces": [], "/v1/metrics": [], "/v1/logs": []}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                outer.bodies.setdefault(self.path, []).append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


def test_install_exports_scored_spans_events_and_metrics_over_otlp_http() -> None:
    rx = Receiver()
    try:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_SERVICE_NAME": "install-test", "OTEL_TOOLSCORE_COMPLETION_GRACE": "0.05",
               "PATH": "/usr/bin:/bin"}
        proc = subprocess.run([sys.executable, str(APP)], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1])["litellm_imported"] is False
    finally:
        rx.stop()
    spans = [s for body in rx.bodies["/v1/traces"] for s in load_otlp(body).spans]
    agent = [s for s in spans if s.name == "invoke_agent weather-bot"]
    assert len(agent) == 1
    assert agent[0].attributes["toolscore.tool_call_accuracy.score"] == 1.0
    assert agent[0].resource.attributes["service.name"] == "install-test"
    assert any(s.name.startswith("evaluation") for s in spans)
    logs = ExportLogsServiceRequest()
    names = set()
    for body in rx.bodies["/v1/logs"]:
        logs.ParseFromString(body)
        for rl in logs.resource_logs:
            for sl in rl.scope_logs:
                for rec in sl.log_records:
                    names.add(rec.event_name)
                    assert rec.span_id and rec.trace_id
    assert "gen_ai.evaluation.result" in names
    metric_names = set()
    for body in rx.bodies["/v1/metrics"]:
        req = ExportMetricsServiceRequest()
        req.ParseFromString(body)
        metric_names |= {m.name for rm in req.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"gen_ai.evaluation.score", "toolscore.evaluations"} <= metric_names
