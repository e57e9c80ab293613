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
    assert any(s.name.startswith("evaluation") for s in spans)
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


@pytest.mark.parametrize(("variable", "value"), [
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuff"),
    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grcp"),
    ("OTEL_TRACES_EXPORTER", "jaeger"),
    ("OTEL_LOGS_EXPORTER", "none,console"),
])
def test_a_mistyped_setting_is_a_clear_error_naming_the_variable(variable: str, value: str) -> None:
    state, _ = run_env_app(**{variable: value})
    assert variable in state["config_error"] and repr(value) in state["config_error"], state


def test_otel_sdk_variables_unit() -> None:
    from otel_toolscore.runtime import otel_env

    env = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/protobuf",
           "OTEL_METRICS_EXPORTER": "console, otlp"}
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        assert otel_env.otlp_protocol("traces") == "grpc"
        assert otel_env.otlp_protocol("logs") == "http/protobuf"  # per signal wins
        assert otel_env.exporter_names("metrics") == ["console", "otlp"]
        assert otel_env.exporter_names("traces") == ["otlp"]  # unset: the spec's default
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        (exporter,) = otel_env.exporters("traces")
        assert isinstance(exporter, OTLPSpanExporter)
        exporter.shutdown()
