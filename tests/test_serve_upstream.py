"""The sidecar's upstream from the standard OTLP variables (issue 18, item 1): per-signal
endpoints, a private CA and client certificates for spans *and* forwarded logs/metrics, one pooled
connection for forwarded requests, and one header parser for ``--upstream-header`` and the
environment. Real HTTPS on loopback, with certificates made here by openssl."""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from otel_toolscore.config import ConfigError
from otel_toolscore.runtime.serve import ToolScoreServer, parse_header_items
from otel_toolscore.runtime.serve.upstream import _parse_headers
from tests.support import paths
from tests.support.otlp_sink import OtlpSink

# --- certificates: a private CA, a server certificate for 127.0.0.1, a client certificate -------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make the test certificates")
    d = tmp_path_factory.mktemp("pki")
    # The extensions a real private CA sets: Python 3.13 verifies strictly (VERIFY_X509_STRICT)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=toolscore test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)
    leaf = "basicConstraints=critical,CA:FALSE\nauthorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n"
    (d / "server.ext").write_text(leaf + "keyUsage=critical,digitalSignature,keyEncipherment\n"
                                  "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n")
    (d / "client.ext").write_text(leaf + "keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n")
    for name, cn in (("server", "127.0.0.1"), ("client", "toolscore sidecar")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext", cwd=d)
    return {p.stem + p.suffix: p for p in d.iterdir()}


def _logs_request() -> bytes:
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.append(LogRecord(event_name="client.event"))
    return request.SerializeToString()


def _post(url: str, body: bytes, content_type: str) -> int:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": content_type}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:  # loopback only
        return resp.status


def test_private_ca_and_client_certificate_serve_spans_and_forwarded_logs(
    pki: dict[str, Path], clean_otel_env: pytest.MonkeyPatch
) -> None:
    upstream = OtlpSink(keep_alive=True, tls=pki, require_client_cert=True)
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", upstream.url)
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(pki["ca.pem"]))
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", str(pki["client.pem"]))
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", str(pki["client.key"]))
    server = ToolScoreServer(grpc_port=None, http_port=0, decision_wait=0.1, metrics=False, events=False)
    try:
        base = server.start().http_endpoint
        for _ in range(3):
            assert _post(f"{base}/v1/logs", _logs_request(), "application/x-protobuf") == 200
        assert _post(f"{base}/v1/traces", paths.SAMPLE.read_bytes().splitlines()[0], "application/json") == 200
        assert server.stop(30)
    finally:
        server.stop(5)
        upstream.stop()
    received = upstream.paths()
    assert received.count("/v1/logs") == 3 and "/v1/traces" in received
    assert all(r.client_cert for r in upstream.received())  # mutual TLS on both paths


def test_forwarded_requests_share_one_pooled_connection(clean_otel_env: pytest.MonkeyPatch) -> None:
    upstream = OtlpSink(keep_alive=True)
    server = ToolScoreServer(upstream.url, grpc_port=None, http_port=0, span_exporter=_NullExporter(),
                             metrics=False, events=False)
    try:
        base = server.start().http_endpoint
        for _ in range(5):
            assert _post(f"{base}/v1/logs", _logs_request(), "application/x-protobuf") == 200
    finally:
        server.stop(5)
        upstream.stop()
    assert upstream.paths() == ["/v1/logs"] * 5
    assert upstream.connections == 1  # a new connection per request would be 5


def test_per_signal_endpoints(clean_otel_env: pytest.MonkeyPatch) -> None:
    traces, rest = OtlpSink(keep_alive=True), OtlpSink(keep_alive=True)
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rest.url)
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{traces.url}/custom/traces")
    server = ToolScoreServer(grpc_port=None, http_port=0, decision_wait=0.1, metrics=False, events=False)
    try:
        base = server.start().http_endpoint
        assert _post(f"{base}/v1/logs", _logs_request(), "application/x-protobuf") == 200
        assert _post(f"{base}/v1/traces", paths.SAMPLE.read_bytes().splitlines()[0], "application/json") == 200
        assert server.stop(30)
    finally:
        server.stop(5)
        traces.stop()
        rest.stop()
    assert set(traces.paths()) == {"/custom/traces"}  # used as given, as the spec says
    assert rest.paths() == ["/v1/logs"]


def test_only_a_per_signal_endpoint_is_enough(clean_otel_env: pytest.MonkeyPatch) -> None:
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    server = ToolScoreServer(grpc_port=None, http_port=0, metrics=False, events=False)
    assert server.upstream is not None and server.upstream.signal_url("traces") == "http://127.0.0.1:9/v1/traces"
    assert server.upstream.signal_url("logs") == "http://localhost:4318/v1/logs"  # the spec's default


def test_an_unreadable_certificate_is_a_config_error(clean_otel_env: pytest.MonkeyPatch) -> None:
    clean_otel_env.setenv("OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE", "/nonexistent/ca.pem")
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE"):
        ToolScoreServer("http://127.0.0.1:9", grpc_port=None, http_port=0)


def test_upstream_header_and_the_environment_use_one_parser() -> None:
    for items, env in ((["X-Token=a%20b"], "X-Token=a%20b"), (["Authorization=Bearer x"], "Authorization=Bearer x"),
                       (["k=v=w"], "k=v=w")):
        assert parse_header_items(items) == _parse_headers(env)
    assert parse_header_items(["A=1", "b=2"]) == _parse_headers("A=1,b=2") == {"a": "1", "b": "2"}
    for bad in ("no-equals", "=value", "a=1,b=2"):
        with pytest.raises(ConfigError, match="--upstream-header"):
            parse_header_items([bad])
    proc = subprocess.run([sys.executable, "-m", "otel_toolscore.cli", "serve", "--upstream", "http://127.0.0.1:9",
                           "--upstream-header", "broken", "--grpc-port", "0", "--http-port", "0"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--upstream-header" in proc.stderr


class _NullExporter:
    """Spans go nowhere: the test is about forwarded logs."""

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
