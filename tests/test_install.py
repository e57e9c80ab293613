"""install(): one call, standard OTLP variables, a real OTLP/HTTP receiver on loopback
(``tests/support/otlp_sink.py``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import paths
from tests.support.otlp_sink import OtlpSink

APP = paths.DATA / "install_app.py"


def test_install_exports_scored_spans_events_and_metrics_over_otlp_http() -> None:
    rx = OtlpSink()
    try:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": rx.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_SERVICE_NAME": "install-test", "OTEL_TOOLSCORE_COMPLETION_GRACE": "0.05",
               "PATH": "/usr/bin:/bin"}
        proc = subprocess.run([sys.executable, str(APP)], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout.strip().splitlines()[-1])["litellm_imported"] is False
    finally:
        rx.stop()
    spans = rx.spans()
    agent = [s for s in spans if s.name == "invoke_agent weather-bot"]
    assert len(agent) == 1
    assert agent[0].attributes["toolscore.tool_call_accuracy.score"] == 1.0
    assert agent[0].resource.attributes["service.name"] == "install-test"
    assert not any(s.name.startswith("evaluation") for s in spans)  # the agent span carries the code scores
    records = rx.log_records()
    assert all(rec.span_id and rec.trace_id for rec in records)
    assert "gen_ai.evaluation.result" in {rec.event_name for rec in records}
    assert {"gen_ai.evaluation.score", "toolscore.evaluations"} <= rx.metric_names()


# --- the SDK's own variables (issue 18, item 1) -------------------------------------------------

ENV_APP = paths.DATA / "install_env_app.py"


def run_env_app(**env: str) -> tuple[dict, str]:
    base = {"PATH": "/usr/bin:/bin", "OTEL_TOOLSCORE_COMPLETION_GRACE": "0.05",
            # nothing listens there: an OTLP exporter that is built anyway only fails to send
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    proc = subprocess.run([sys.executable, str(ENV_APP)], env={**base, **env}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout


def test_otel_sdk_disabled_installs_nothing_and_starts_no_thread() -> None:
    state, _ = run_env_app(OTEL_SDK_DISABLED="true")
    assert state == {"returned": "NoneType", "threads_started": [], "tracer_provider": "ProxyTracerProvider",
                     "meter_provider": "_ProxyMeterProvider", "logger_provider": "ProxyLoggerProvider"}


def test_console_and_none_exporters_per_signal() -> None:
    state, out = run_env_app(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
    assert state["returned"] == "ToolScoreSpanProcessor"
    # spans on stdout, scored; no meter or logger provider, so no reader or log-export thread
    assert '"toolscore.tool_call_accuracy.score": 1.0' in out and '"name": "invoke_agent weather-bot"' in out
    assert state["meter_provider"] == "_ProxyMeterProvider" and state["logger_provider"] == "ProxyLoggerProvider"
    assert not [t for t in state["threads_started"] if "Metric" in t or "Log" in t], state["threads_started"]

    state, out = run_env_app(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="console", OTEL_LOGS_EXPORTER="none")
    assert state["meter_provider"] == "MeterProvider"
    assert "invoke_agent weather-bot" not in out  # spans scored, exported nowhere
    assert "gen_ai.evaluation.score" in out  # the metrics went to the console


def run_env_app_logged(**env: str) -> tuple[dict, str, str]:
    base = {"PATH": "/usr/bin:/bin", "OTEL_TOOLSCORE_COMPLETION_GRACE": "0.05",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    proc = subprocess.run([sys.executable, str(ENV_APP)], env={**base, **env}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout, proc.stderr


# --- issue 28: OTEL_*_EXPORTER through the SDK's entry points; what cannot be used is warned
# about once and ignored, as the specification asks (it used to be a ConfigError in the app) -----

@pytest.mark.parametrize(("variable", "value", "extra"), [
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuff", {"OTEL_TRACES_EXPORTER": "console,otlp"}),
    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grcp", {"OTEL_TRACES_EXPORTER": "console,otlp"}),
    ("OTEL_TRACES_EXPORTER", "console,jaeger", {}),
    ("OTEL_METRICS_EXPORTER", "bogus", {"OTEL_TRACES_EXPORTER": "console"}),
    ("OTEL_LOGS_EXPORTER", "none,console", {"OTEL_TRACES_EXPORTER": "console"}),
])
def test_an_unusable_setting_is_warned_about_once_and_ignored(variable: str, value: str, extra: dict) -> None:
    state, out, err = run_env_app_logged(**{"OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none", **extra,
                                            variable: value})
    assert state["returned"] == "ToolScoreSpanProcessor", err  # installed, the app unaffected
    warnings = [line for line in err.splitlines() if variable in line]
    assert len(warnings) == 1, err
    assert repr(value) in warnings[0] or "'jaeger'" in warnings[0], err
    assert "ignored" in warnings[0]
    # the rest of the settings still hold: spans scored on the console
    assert '"toolscore.tool_call_accuracy.score": 1.0' in out, out
    if variable == "OTEL_LOGS_EXPORTER":
        assert "gen_ai.evaluation.result" in out  # 'none' dropped, console kept


def test_otel_sdk_variables_unit(caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader

    from otel_toolscore.runtime import otel_env

    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/protobuf",
           "OTEL_METRICS_EXPORTER": "console, otlp", "OTEL_TRACES_EXPORTER": "otlp_proto_http,console,nosuch"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("OTEL_LOGS_EXPORTER", raising=False)
        assert otel_env.otlp_protocol("traces") == "grpc"
        assert otel_env.otlp_protocol("logs") == "http/protobuf"  # per signal wins
        # otlp is resolved by protocol, to the entry point names the SDK's configurator uses
        assert otel_env.exporter_names("metrics") == ["console", "otlp_proto_grpc"]
        assert otel_env.exporter_names("logs") == ["otlp_proto_http"]  # unset: the spec's default otlp
        assert not otel_env.is_set("logs") and otel_env.is_set("traces")
        made = otel_env.exporters("traces")  # nosuch: warned, left out
        assert [type(e).__name__ for e in made] == ["OTLPSpanExporter", "ConsoleSpanExporter"]
        assert type(made[0]).__module__.startswith("opentelemetry.exporter.otlp.proto.http")
        for exporter in made:
            exporter.shutdown()
        with caplog.at_level("WARNING"):
            otel_env.exporters("traces")
        assert len([r for r in caplog.records if "nosuch" in r.getMessage()]) == 1  # warned once, both calls
        readers = otel_env.exporters("metrics")
        assert [type(r) for r in readers] == [PeriodicExportingMetricReader, PeriodicExportingMetricReader]
        assert isinstance(readers[0]._exporter, ConsoleMetricExporter)
        mp.setenv("OTEL_TRACES_EXPORTER", "otlp")
        (exporter,) = otel_env.exporters("traces")
        assert isinstance(exporter, OTLPSpanExporter)
        exporter.shutdown()
        mp.setenv("OTEL_METRICS_EXPORTER", "none")
        assert otel_env.exporters("metrics") == []


def test_prometheus_is_the_sdk_entry_points_metric_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    prometheus = pytest.importorskip("opentelemetry.exporter.prometheus", reason="the prometheus extra")
    from otel_toolscore.runtime import otel_env

    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "prometheus")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_HOST", "127.0.0.1")
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "0")  # its HTTP server on any loopback port
    (reader,) = otel_env.exporters("metrics")
    assert isinstance(reader, prometheus.PrometheusMetricReader)  # a reader itself, not behind a periodic one
    reader.shutdown()
