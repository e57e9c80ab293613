"""``otel-toolscore serve``: real SDK exporters in another process → the sidecar → a real upstream.

The upstream is a plain OTLP receiver (``tests/support/otlp_sink.py``: HTTP, or gRPC with raw
handlers), so what arrives is exactly what the sidecar exported.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from otel_toolscore.ingest import read_otlp_json
from otel_toolscore.runtime.serve import ToolScoreServer
from tests.support import paths
from tests.support.env import without_otel
from tests.support.otlp_sink import GrpcOtlpSink, OtlpSink
from tests.support.spans import TOOLSCORE_SCOPE, scope_of

FIXTURES = paths.traces(paths.FIXTURES)
CLIENT = paths.DATA / "otlp_client.py"
pytestmark = pytest.mark.usefixtures("clean_otel_env")


def run_client(protocol: str, endpoint: str, files: list[Path]) -> list[tuple[int, int]]:
    proc = subprocess.run([sys.executable, str(CLIENT), protocol, endpoint, *map(str, files)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    sent = json.loads(proc.stdout.strip().splitlines()[-1])["sent"]
    return [(int(t, 16), int(s, 16)) for t, s in sent]


def check_upstream(upstream: OtlpSink | GrpcOtlpSink, sent: list[tuple[int, int]]) -> None:
    spans = upstream.spans()
    app = [s for s in spans if scope_of(s) != TOOLSCORE_SCOPE]
    evaluations = [s for s in spans if scope_of(s) == TOOLSCORE_SCOPE]
    # every span exactly once
    assert Counter((s.context.trace_id, s.context.span_id) for s in app) == Counter(sent)
    # every fixture trace has its run scored on a span, and no evaluation span repeats its scores
    scored = {s.context.trace_id for s in app if any(k.startswith("toolscore.") and k.endswith(".label")
                                                       for k in s.attributes)}
    for path in FIXTURES:
        trace_id = read_otlp_json(path)[0].context.trace_id
        assert trace_id in scored, f"{path.parent.name}/{path.name}: no span carries toolscore.* attributes"
    assert evaluations == []
    # the live run from the SDK: expectation carried by the span, scored 1.0
    live = [s for s in app if s.name == "invoke_agent weather-bot"]
    assert len(live) == 1
    assert live[0].attributes["toolscore.tool_call_accuracy.score"] == 1.0
    assert live[0].resource.attributes["service.name"] == "otlp-client"
    # events from the sidecar, parented to spans; the client's own log record forwarded unchanged
    records = upstream.log_records()
    events = [r for r in records if r.event_name == "gen_ai.evaluation.result"]
    assert events and all(r.trace_id and r.span_id for r in events)
    assert any(r.event_name == "client.event" and r.body.string_value == "client-log" for r in records)
    # score metrics from the sidecar; the client's metric forwarded unchanged
    assert {"gen_ai.evaluation.score", "toolscore.evaluations", "client.requests"} <= upstream.metric_names()


def test_grpc_client_through_serve_to_http_upstream() -> None:
    upstream = OtlpSink()
    server = ToolScoreServer(upstream.url, upstream_protocol="http/protobuf", grpc_port=0, http_port=0,
                             decision_wait=0.2)
    try:
        addresses = server.start()
        sent = run_client("grpc", addresses.grpc_endpoint, FIXTURES)
        assert server.stop(30)
        assert server.stats["spans"] == len(sent)
        check_upstream(upstream, sent)
    finally:
        server.stop(5)
        upstream.stop()


def test_http_client_through_serve_to_grpc_upstream() -> None:
    upstream = GrpcOtlpSink()
    server = ToolScoreServer(upstream.url, upstream_protocol="grpc", grpc_port=0, http_port=0, decision_wait=0.2)
    try:
        addresses = server.start()
        sent = run_client("http", addresses.http_endpoint, FIXTURES)
        # scored while running (decision_wait), not only at shutdown: wait for the quiet period
        deadline = time.monotonic() + 10
        while server.processor.stats["holds_expired"] == 0 and time.monotonic() < deadline:
            if len(server.processor._pending) == 0:
                break
            time.sleep(0.05)
        assert len(server.processor._pending) == 0
        assert server.stop(30)
        assert server.processor.stats["holds_expired"] == 0
        check_upstream(upstream, sent)
    finally:
        server.stop(5)
        upstream.stop()


def test_serve_command_forwards_and_flushes_on_sigterm() -> None:
    upstream = OtlpSink()
    env = {**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "60000"}  # nothing leaves before the flush at exit
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_toolscore.cli", "serve", "--grpc-port", "0", "--http-port", "0",
         "--upstream", upstream.url, "--decision-wait", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
        assert "OTLP/gRPC on 127.0.0.1:" in lines[0]
        assert "forwarding to " + upstream.url in lines[2]
        http_url = lines[1].strip().rsplit(" ", 1)[-1]
        assert http_url.startswith("http://127.0.0.1:")
        path = FIXTURES[0]
        import http.client
        from urllib.parse import urlsplit

        conn = http.client.HTTPConnection(urlsplit(http_url).netloc, timeout=10)
        conn.request("POST", "/v1/traces", body=path.read_bytes(), headers={"Content-Type": "application/json"})
        assert conn.getresponse().status == 200
        conn.close()
        time.sleep(0.3)
        assert upstream.bodies("traces") == []  # still held: decision_wait is 30 s
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "stopped" in out
    finally:
        if proc.poll() is None:
            proc.kill()
        upstream.stop()
    sent = read_otlp_json(path)
    app = [s for s in upstream.spans() if scope_of(s) != TOOLSCORE_SCOPE]
    assert Counter((s.context.trace_id, s.context.span_id) for s in app) == Counter(
        (s.context.trace_id, s.context.span_id) for s in sent)
    assert any("toolscore.tool_call_validation.label" in s.attributes for s in app)
    assert any(r.event_name == "gen_ai.evaluation.result" for r in upstream.log_records())


def test_serve_command_rejects_bad_settings() -> None:
    def serve(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "otel_toolscore.cli", "serve", "--grpc-port", "0",
                               "--http-port", "0", *args], capture_output=True, text=True, timeout=60, check=False,
                              env=without_otel())

    proc = serve("--upstream", "http://127.0.0.1:9", "--decision-wait", "2", "--hold-timeout", "1")
    assert proc.returncode == 2 and "hold_timeout" in proc.stderr and "decision_wait" in proc.stderr
    proc = serve()
    assert proc.returncode == 2 and "upstream" in proc.stderr
    proc = serve("--upstream", "http://127.0.0.1:9", "--upstream-protocol", "carrier-pigeon")
    assert proc.returncode == 2 and "protocol" in proc.stderr


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        for kwargs in ({"http_port": port, "grpc_port": 0}, {"grpc_port": port, "http_port": 0}):
            server = ToolScoreServer(span_exporter=InMemorySpanExporter(), metrics=False, events=False, **kwargs)
            with pytest.raises(OSError, match=str(port)):
                server.start()
            assert server.stop(1)
