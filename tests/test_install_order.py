"""install() and the app's own OpenTelemetry set-up, in either order (issue 28): it attaches to
what the app set up, creates a meter or logger provider only when the OTEL_* variables ask for
one (a tracing-only app gets none, no connection attempts, and one message saying what goes
nowhere), resolves OTEL_METRICS_EXPORTER=prometheus through the SDK's entry point, and a
TracerProvider the app sets after install() becomes the global one, with scoring moved onto it.
Each case runs in a child process: global providers can be set once."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tests.support.paths import REPO
from tests.test_install_existing import PRELUDE

NOISE = ("Connection refused", "Failed to export", "Transient error", "ConnectionError", "Max retries")

AFTER = textwrap.dedent("""
    import threading
    def tracing_only_app():
        # the app's own set-up: a global TracerProvider exporting to an in-memory sink, nothing else
        global app_provider
        sink = InMemorySpanExporter()
        app_provider = TracerProvider()
        app_provider.add_span_processor(SimpleSpanProcessor(sink))
        trace.set_tracer_provider(app_provider)
        return sink

    def emit(result):
        print("RESULT " + json.dumps(result), flush=True)

    def summary(processor, sinks, reader=None, logs=None, before=()):
        assert processor.force_flush(10_000)
        trace.get_tracer_provider().force_flush()
        result = {"tracer_provider_is_app": trace.get_tracer_provider() is app_provider,
                  "meter_provider": type(metrics.get_meter_provider()).__name__,
                  "logger_provider": type(__import__("opentelemetry._logs", fromlist=["x"]).get_logger_provider()).__name__,
                  "threads_started": sorted({t.name for t in threading.enumerate()} - set(before))}
        for name, sink in sinks.items():
            spans = sink.get_finished_spans()
            app = [s for s in spans if s.instrumentation_scope.name != "otel_toolscore"]
            result[name] = {
                "per_span": sorted(set(Counter(s.context.span_id for s in app).values())),
                "n": len(app),
                "accuracy": [s.attributes.get("toolscore.tool_call_accuracy.score") for s in app
                             if s.name.startswith("invoke_agent")],
                "evaluation_spans": len(spans) - len(app),
            }
        if reader is not None:
            result["metrics"] = metric_names(reader)
        if logs is not None:
            result["events"] = sum(1 for r in logs.get_finished_logs()
                                   if r.log_record.attributes.get("gen_ai.evaluation.name") == "tool_call_accuracy")
        return result
""")


def _run(body: str, **env: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    # the user's case: no OTEL_EXPORTER_OTLP_ENDPOINT, so an OTLP exporter would try localhost:4318
    base = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "OTEL_TOOLSCORE_COMPLETION_GRACE": "0.05"}
    proc = subprocess.run([sys.executable, "-c", PRELUDE + AFTER + textwrap.dedent(body)], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env={**base, **env})
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    return proc, json.loads(lines[-1][len("RESULT "):]) if lines else None


def _nowhere_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "go nowhere" in line]


def test_a_tracing_only_app_gets_no_meter_or_logger_provider_and_one_message() -> None:
    proc, out = _run("""
        sink = tracing_only_app()
        before = [t.name for t in threading.enumerate()]
        processor = otel_toolscore.install(scorers=["tool_call_accuracy"])
        for _ in range(3):
            agent_run(trace.get_tracer("app"))
        emit(summary(processor, {"sink": sink}, before=before))
    """)
    assert proc.returncode == 0, proc.stderr
    # nothing created besides scoring: no global meter or logger provider, no export thread
    assert out["meter_provider"] == "_ProxyMeterProvider" and out["logger_provider"] == "ProxyLoggerProvider"
    assert not [t for t in out["threads_started"] if "Metric" in t or "Log" in t or "Export" in t], out
    assert out["sink"] == {"per_span": [1], "n": 9, "accuracy": [1.0] * 3, "evaluation_spans": 0}
    # one message for both outputs, saying why; no connection attempt anywhere
    (line,) = _nowhere_lines(proc.stderr)
    assert "scores are recorded on the agent spans and as evaluation spans; metrics and events go nowhere" in line
    assert "no MeterProvider set and OTEL_METRICS_EXPORTER unset" in line
    assert "no LoggerProvider set and OTEL_LOGS_EXPORTER unset" in line
    assert not [n for n in NOISE if n in proc.stderr], proc.stderr


def test_a_tracing_only_app_gets_what_otel_logs_exporter_asks_for() -> None:
    proc, out = _run("""
        sink = tracing_only_app()
        processor = otel_toolscore.install(scorers=["tool_call_accuracy"])
        agent_run(trace.get_tracer("app"))
        emit(summary(processor, {"sink": sink}))
        from opentelemetry._logs import get_logger_provider
        get_logger_provider().shutdown()
    """, OTEL_LOGS_EXPORTER="console")
    assert proc.returncode == 0, proc.stderr
    assert out["logger_provider"] == "LoggerProvider" and out["meter_provider"] == "_ProxyMeterProvider"
    assert "gen_ai.evaluation.result" in proc.stdout  # the console log exporter
    (line,) = _nowhere_lines(proc.stderr)  # metrics only
    assert "; metrics go nowhere: no MeterProvider set and OTEL_METRICS_EXPORTER unset" in line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_otel_metrics_exporter_prometheus_serves_the_scores() -> None:
    pytest.importorskip("opentelemetry.exporter.prometheus", reason="the prometheus extra")
    port = _free_port()
    proc, out = _run(f"""
        import urllib.request
        sink = tracing_only_app()
        processor = otel_toolscore.install(scorers=["tool_call_accuracy"])
        agent_run(trace.get_tracer("app"))
        result = summary(processor, {{"sink": sink}})
        body = urllib.request.urlopen("http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        result["scraped"] = sorted({{line.split("{{")[0] for line in body.splitlines()
                                   if line.startswith(("gen_ai_", "toolscore_"))}})
        emit(result)
    """, OTEL_METRICS_EXPORTER="prometheus", OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
        OTEL_EXPORTER_PROMETHEUS_PORT=str(port), OTEL_LOGS_EXPORTER="none")
    assert proc.returncode == 0, proc.stderr
    assert out["meter_provider"] == "MeterProvider"
    assert {"gen_ai_evaluation_score_bucket", "gen_ai_evaluation_score_count",
            "toolscore_evaluations_total"} <= set(out["scraped"]), out["scraped"]
    assert not _nowhere_lines(proc.stderr), proc.stderr  # logs off on purpose: no message


def test_install_before_the_apps_set_up() -> None:
    proc, out = _run("""
        processor = otel_toolscore.install(scorers=["tool_call_accuracy"])
        early = trace.get_tracer("early")  # a tracer taken between install() and the app's set-up
        # the app's own set-up, after install(): one processor added before it is set global,
        # one after (the order many set-ups use); both must get every span, scored
        batch_sink, simple_sink = InMemorySpanExporter(), InMemorySpanExporter()
        app_provider = TracerProvider()
        app_provider.add_span_processor(BatchSpanProcessor(batch_sink))
        trace.set_tracer_provider(app_provider)
        app_provider.add_span_processor(SimpleSpanProcessor(simple_sink))
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        logs = LogSink()
        log_provider = LoggerProvider()
        log_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
        set_logger_provider(log_provider)
        agent_run(trace.get_tracer("app"))
        agent_run(early)
        result = summary(processor, {"batch": batch_sink, "simple": simple_sink}, reader, logs)
        result["installed_again"] = otel_toolscore.install() is processor
        emit(result)
    """, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    assert proc.returncode == 0, proc.stderr
    assert out["tracer_provider_is_app"], out  # the app's provider is the global one
    assert "Overriding" not in proc.stderr, proc.stderr  # nothing the app set was refused
    for name in ("batch", "simple"):
        assert out[name] == {"per_span": [1], "n": 6, "accuracy": [1.0, 1.0], "evaluation_spans": 0}, (name, out)
    assert "gen_ai.evaluation.score" in out["metrics"]  # the app's MeterProvider, set after install()
    assert out["events"] == 2  # the app's LoggerProvider
    assert out["installed_again"]
    assert not _nowhere_lines(proc.stderr) and not [n for n in NOISE if n in proc.stderr], proc.stderr


def test_install_before_a_tracing_only_set_up_creates_no_meter_or_logger_provider() -> None:
    proc, out = _run("""
        processor = otel_toolscore.install(scorers=["tool_call_accuracy"])
        sink = InMemorySpanExporter()
        app_provider = TracerProvider()
        trace.set_tracer_provider(app_provider)
        app_provider.add_span_processor(SimpleSpanProcessor(sink))
        agent_run(trace.get_tracer("app"))
        emit(summary(processor, {"sink": sink}))
    """)
    assert proc.returncode == 0, proc.stderr
    assert out["tracer_provider_is_app"]
    assert out["meter_provider"] == "_ProxyMeterProvider" and out["logger_provider"] == "ProxyLoggerProvider"
    assert out["sink"] == {"per_span": [1], "n": 3, "accuracy": [1.0], "evaluation_spans": 0}
    assert len(_nowhere_lines(proc.stderr)) == 1, proc.stderr
    assert not [n for n in NOISE if n in proc.stderr], proc.stderr


def test_install_alone_is_the_whole_set_up_with_the_specs_defaults() -> None:
    proc, out = _run("""
        processor = otel_toolscore.install(scorers=["tool_call_accuracy"])
        app_provider = trace.get_tracer_provider()
        agent_run(trace.get_tracer("app"))
        emit(summary(processor, {}))
    """, OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="console", OTEL_LOGS_EXPORTER="console")
    assert proc.returncode == 0, proc.stderr
    assert out["meter_provider"] == "MeterProvider" and out["logger_provider"] == "LoggerProvider"
    assert '"toolscore.tool_call_accuracy.score": 1.0' in proc.stdout
    assert not _nowhere_lines(proc.stderr), proc.stderr


def test_only_the_first_provider_set_after_install_is_let_through() -> None:
    proc, out = _run("""
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        processor = otel_toolscore.install(scorers=["tool_call_accuracy"], metrics=False, events=False)
        sink = tracing_only_app()
        trace.set_tracer_provider(TracerProvider())  # refused, as the API refuses any second one
        agent_run(trace.get_tracer("app"))
        emit(summary(processor, {"sink": sink}))
    """)
    assert proc.returncode == 0, proc.stderr
    assert out["tracer_provider_is_app"]
    assert out["sink"] == {"per_span": [1], "n": 3, "accuracy": [1.0], "evaluation_spans": 0}
    assert proc.stderr.count("Overriding of current TracerProvider is not allowed") == 1, proc.stderr


def test_a_non_sdk_provider_set_after_install_wins_and_says_it_is_not_scored() -> None:
    proc, out = _run("""
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        processor = otel_toolscore.install(scorers=["tool_call_accuracy"], metrics=False, events=False)
        class VendorProvider(trace.TracerProvider):
            def get_tracer(self, *args, **kwargs):
                return trace.NoOpTracer()
        vendor = VendorProvider()
        trace.set_tracer_provider(vendor)
        emit({"vendor_is_global": trace.get_tracer_provider() is vendor})
    """)
    assert proc.returncode == 0, proc.stderr
    assert out == {"vendor_is_global": True}
    assert "VendorProvider" in proc.stderr and "ToolScoreSpanProcessor(BatchSpanProcessor(exporter))" in proc.stderr


def test_runs_pending_at_exit_are_scored_before_the_providers_shut_down() -> None:
    proc, out = _run("""
        processor = otel_toolscore.install(scorers=["tool_call_accuracy"])
        tracer = trace.get_tracer("app")
        agent_run(tracer)
        assert processor.force_flush(10_000)  # the first scores: the meter and logger providers are built now
        agent_run(tracer)  # still being scored when the app ends, with no flush of its own
    """, OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="console", OTEL_LOGS_EXPORTER="console",
        OTEL_TOOLSCORE_COMPLETION_GRACE="0.5")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count('"toolscore.tool_call_accuracy.score": 1.0') == 2, proc.stdout
    # both runs' events and score points reached the console, the second's scored at exit
    assert proc.stdout.count('"event_name": "gen_ai.evaluation.result"') == 2, proc.stdout
    assert '"count": 2' in proc.stdout.split('"name": "gen_ai.evaluation.score"', 1)[1], proc.stdout
