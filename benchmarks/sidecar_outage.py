"""Spans lost end to end through an upstream outage: a stock OTel SDK app, ``otel-toolscore serve``,
and an upstream that answers 503 for ``--outage`` seconds (issue 29's experiment).

The app is this process: a ``TracerProvider`` with the SDK's ``BatchSpanProcessor`` and OTLP
span exporter (``--transport http`` or ``grpc``, the SDK's defaults: 10 s export timeout),
ending ``--rate`` spans per second for ``--duration`` seconds. ``serve`` is a real subprocess
(the CLI, its defaults). The upstream is an OTLP/HTTP receiver in this process that records the
span ids it accepts and answers 503 from ``--fail-at`` s for ``--outage`` s. After the load, the
app flushes, ``serve`` gets SIGTERM, and the span ids the app ended are compared with those the
upstream received: lost, duplicated, and ``serve``'s exit status.

    .venv/bin/python -m benchmarks sidecar-outage [--transport http,grpc] [--outage 30] [--duration 45]
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from typing import Any

from benchmarks.common import child_env, machine
from tests.support.otlp_sink import OtlpSink, Received
from tests.support.paths import REPO


class _Upstream(OtlpSink):
    def __init__(self, fail_at: float, outage: float) -> None:
        self.t0 = time.monotonic()
        self.window = (fail_at, fail_at + outage)
        super().__init__(self._answer)

    def _answer(self, request: Received) -> int:
        elapsed = time.monotonic() - self.t0
        return 503 if self.window[0] <= elapsed < self.window[1] else 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)


def scenario(transport: str, rate: float, duration: float, fail_at: float, outage: float) -> dict[str, Any]:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    upstream = _Upstream(fail_at, outage)
    grpc_port, http_port = _free_port(), _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_toolscore.cli", "serve", "--upstream", upstream.url, "--grpc-port",
         str(grpc_port), "--http-port", str(http_port), "--no-forward-signals"],
        cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_port(http_port)
    _wait_port(grpc_port)
    if transport == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc

        exporter: Any = Grpc(endpoint=f"127.0.0.1:{grpc_port}", insecure=True)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http

        exporter = Http(endpoint=f"http://127.0.0.1:{http_port}/v1/traces")
    provider = TracerProvider(resource=Resource.create({"service.name": "outage-bench"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    ended: list[tuple[int, int]] = []
    upstream.t0 = t0 = time.monotonic()
    i = 0
    while time.monotonic() - t0 < duration:
        if time.monotonic() - t0 >= i / rate:
            with tracer.start_as_current_span("GET /orders") as span:
                context = span.get_span_context()
                ended.append((context.trace_id, context.span_id))
            i += 1
        else:
            time.sleep(0.002)
    provider.force_flush(60_000)
    provider.shutdown()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    received = Counter(upstream.span_ids())
    upstream.stop()
    return {"transport": transport, "outage_s": outage, "fail_at_s": fail_at, "duration_s": duration,
            "spans_sent": len(ended), "spans_received": sum(received[k] > 0 for k in ended),
            "spans_lost": sum(received[k] == 0 for k in ended),
            "spans_duplicated": sum(received[k] > 1 for k in ended), "upstream_refused": upstream.refused,
            "serve_exit_status": proc.returncode}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--transport", default="http,grpc")
    ap.add_argument("--rate", type=float, default=30.0, help="spans per second")
    ap.add_argument("--duration", type=float, default=45.0)
    ap.add_argument("--fail-at", type=float, default=5.0)
    ap.add_argument("--outage", type=float, default=30.0)
    args = ap.parse_args(argv)
    results = [scenario(t, args.rate, args.duration, args.fail_at, args.outage) for t in args.transport.split(",")]
    print(json.dumps({"machine": machine(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
