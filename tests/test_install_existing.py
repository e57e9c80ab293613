"""install() in an app that already has OpenTelemetry (global providers set first, as an app's
own set-up or ``opentelemetry-instrument`` does): it uses them, scores what the app's tracer
emits, and every span reaches each of the app's exporters exactly once. A provider it cannot
attach to is a loud InstallError; a processor wrapped by hand with nowhere to send events or
metrics says so, once. Each case runs in a child process: global providers can be set once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

from tests.support.paths import REPO

PRELUDE = textwrap.dedent("""
    import json, logging, sys
    from collections import Counter
    from opentelemetry import metrics, trace
    from opentelemetry._logs import set_logger_provider
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    try:
        from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter as LogSink
    except ImportError:  # SDK 1.37
        from opentelemetry.sdk._logs.export import InMemoryLogExporter as LogSink
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import otel_toolscore

    def agent_run(tracer):
        with tracer.start_as_current_span("invoke_agent weather-bot", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather-bot",
                "toolscore.expected_tool": "get_weather"}):
            with tracer.start_as_current_span("chat m", attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                        {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}]}])}):
                pass
            with tracer.start_as_current_span("execute_tool get_weather", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                    "gen_ai.tool.call.id": "c1", "gen_ai.tool.call.result": '{"temp": 5}'}):
                pass

    def metric_names(reader):
        data = reader.get_metrics_data()
        return sorted({m.name for rm in (data.resource_metrics if data else []) for sm in rm.scope_metrics
                       for m in sm.metrics})
""")


def _run(body: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    return proc, json.loads(lines[-1]) if lines else None


def test_install_attaches_to_the_apps_sdk_providers() -> None:
    proc, out = _run("""
        # the app's own set-up, as opentelemetry-instrument leaves it: two exporting processors
        batch_sink, simple_sink = InMemorySpanExporter(), InMemorySpanExporter()
        app_provider = TracerProvider()
        app_provider.add_span_processor(BatchSpanProcessor(batch_sink))
        app_provider.add_span_processor(SimpleSpanProcessor(simple_sink))
        trace.set_tracer_provider(app_provider)
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        logs = LogSink()
        log_provider = LoggerProvider()
        log_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
        set_logger_provider(log_provider)

        processor = otel_toolscore.install(scorers=["tool_call_accuracy"])
        agent_run(trace.get_tracer("app"))
        assert processor.force_flush(10_000)
        app_provider.force_flush()
        result = {"same_provider": trace.get_tracer_provider() is app_provider}
        for name, sink in (("batch", batch_sink), ("simple", simple_sink)):
            spans = sink.get_finished_spans()
            app = [s for s in spans if s.instrumentation_scope.name != "otel_toolscore"]
            result[name] = {
                "per_span": sorted(Counter(s.context.span_id for s in app).values()),
                "names": sorted(s.name for s in app),
                "accuracy": [s.attributes.get("toolscore.tool_call_accuracy.score") for s in app
                             if s.name.startswith("invoke_agent")],
                "evaluation_spans": len(spans) - len(app),
            }
        result["metrics"] = metric_names(reader)
        result["events"] = sum(1 for r in logs.get_finished_logs()
                               if r.log_record.attributes.get("gen_ai.evaluation.name") == "tool_call_accuracy")
        print(json.dumps(result))
    """)
    assert proc.returncode == 0, proc.stderr
    assert out["same_provider"]
    for name in ("batch", "simple"):
        got = out[name]
        assert got["per_span"] == [1, 1, 1], (name, got)  # every span exactly once, at each exporter
        assert got["accuracy"] == [1.0], (name, got)
        assert got["evaluation_spans"] == 0, (name, got)  # the agent span carries the score
    assert "gen_ai.evaluation.score" in out["metrics"]  # the app's MeterProvider
    assert out["events"] == 1  # the app's LoggerProvider


def test_install_into_a_provider_without_processors_adds_the_exporter() -> None:
    proc, out = _run("""
        app_provider = TracerProvider()
        trace.set_tracer_provider(app_provider)
        sink = InMemorySpanExporter()
        processor = otel_toolscore.install(span_exporter=sink, scorers=["tool_call_accuracy"], metrics=False,
                                           events=False)
        processor2 = otel_toolscore.install(span_exporter=sink, scorers=["tool_call_accuracy"], metrics=False,
                                            events=False)
        agent_run(trace.get_tracer("app"))
        assert processor.force_flush(10_000)
        spans = [s for s in sink.get_finished_spans() if s.instrumentation_scope.name != "otel_toolscore"]
        print(json.dumps({"same": processor2 is processor, "n": len(spans),
                          "scored": [s.attributes.get("toolscore.scored") for s in spans if s.name.startswith("invoke")]}))
    """)
    assert proc.returncode == 0, proc.stderr
    assert out == {"same": True, "n": 3, "scored": [True]}
    assert "already installed" in proc.stderr  # a second install() says so and adds nothing


def test_install_with_a_non_sdk_global_provider_fails_loudly_with_the_fix() -> None:
    proc, out = _run("""
        class VendorProvider(trace.TracerProvider):
            def get_tracer(self, *args, **kwargs):
                return trace.NoOpTracer()
        trace.set_tracer_provider(VendorProvider())
        try:
            otel_toolscore.install()
        except otel_toolscore.InstallError as exc:
            print(json.dumps({"error": str(exc)}))
    """)
    assert proc.returncode == 0, proc.stderr
    assert out is not None, "install() did not fail"
    assert "VendorProvider" in out["error"] and "ToolScoreSpanProcessor(BatchSpanProcessor(exporter))" in out["error"]


def test_a_wrapped_processor_with_nowhere_to_send_events_and_metrics_says_so_once() -> None:
    proc, out = _run("""
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        sink = InMemorySpanExporter()
        provider = TracerProvider()
        processor = otel_toolscore.ToolScoreSpanProcessor(SimpleSpanProcessor(sink), ["tool_call_accuracy"])
        provider.add_span_processor(processor)
        for _ in range(3):
            agent_run(provider.get_tracer("app"))
        assert processor.force_flush(10_000)
        # given a meter provider, the same wrapping sends metrics there and warns only for events
        reader = InMemoryMetricReader()
        given = otel_toolscore.ToolScoreSpanProcessor(SimpleSpanProcessor(InMemorySpanExporter()),
                                                      ["tool_call_accuracy"],
                                                      meter_provider=MeterProvider(metric_readers=[reader]))
        provider2 = TracerProvider()
        provider2.add_span_processor(given)
        agent_run(provider2.get_tracer("app"))
        assert given.force_flush(10_000)
        print(json.dumps({"metrics": metric_names(reader)}))
    """)
    assert proc.returncode == 0, proc.stderr
    # one line per processor saying all that goes nowhere: metrics and events, then events only
    assert proc.stderr.count("go nowhere") == 2, proc.stderr
    assert "metrics and events go nowhere" in proc.stderr and "; events go nowhere" in proc.stderr
    assert proc.stderr.count("no MeterProvider set") == 1, proc.stderr
    assert proc.stderr.count("no LoggerProvider set") == 2, proc.stderr
    assert "meter_provider=" in proc.stderr and "logger_provider=" in proc.stderr
    assert "gen_ai.evaluation.score" in out["metrics"]
