"""A run is scored once, whichever scorer paths it passes through: the path that scores it puts
``toolscore.scored`` on its agent span, and the processor, ``serve`` and ``score --skip-scored``
leave such a run alone (outcome ``already_scored``). ``score`` rescores by default: replaying
saved traces is its job."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
from otel_toolscore.runtime.serve import ToolScoreServer
from tests.support.otlp_sink import OtlpSink
from tests.support.paths import REPO
from tests.support.pipeline import Pipeline
from tests.support.spans import TOOLSCORE_SCOPE, scope_of, weather_run

pytestmark = pytest.mark.usefixtures("clean_otel_env")


def _evaluations_of(spans: list[Any], agent_span_id: int) -> int:
    """How many times the run was scored: evaluation spans are one per score, so the most
    spans any one evaluation name has."""
    names = Counter(s.name for s in spans if scope_of(s) == TOOLSCORE_SCOPE and s.parent.span_id == agent_span_id)
    return max(names.values(), default=0)


def test_the_processor_marks_the_run_it_scored_and_skips_a_marked_one() -> None:
    first = Pipeline()
    provider = TracerProvider()
    provider.add_span_processor(first.processor)
    weather_run(provider.get_tracer("app"), expected="get_weather")
    assert first.processor.force_flush(5_000)
    provider.shutdown()
    agent = next(s for s in first.exported() if s.name == "invoke_agent weather-bot")
    assert agent.attributes["toolscore.scored"] is True
    # the same spans through a second processor (a second app-side hop, a replay): not rescored
    second = Pipeline()
    for span in first.exported():
        if scope_of(span) != TOOLSCORE_SCOPE:
            second.processor.on_start(span)  # type: ignore[arg-type]
    for span in first.exported():
        if scope_of(span) != TOOLSCORE_SCOPE:
            second.processor.on_end(span)
    assert second.processor.force_flush(5_000)
    assert not [s for s in second.exported() if scope_of(s) == TOOLSCORE_SCOPE]
    again = next(s for s in second.exported() if s.name == "invoke_agent weather-bot")
    assert dict(again.attributes) == dict(agent.attributes)  # forwarded as it came
    outcomes = Counter(pt.attributes["outcome"] for pt in second.metric_points("toolscore.evaluations")
                       for _ in range(int(pt.value)))
    assert outcomes["already_scored"] >= 1 and outcomes["scored"] == 0
    second.processor.shutdown()


def test_an_app_with_install_that_exports_to_serve_is_scored_once() -> None:
    upstream = OtlpSink()
    # evaluation spans on both sides: one per score says who scored the run, and how often
    server = ToolScoreServer(upstream.url, upstream_protocol="http/protobuf", grpc_port=0, http_port=0,
                             decision_wait=0.2, evaluation_spans=True)
    try:
        addresses = server.start()
        app_side = ToolScoreSpanProcessor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{addresses.http_endpoint}/v1/traces")), metrics=False,
            events=False, evaluation_spans=True)
        provider = TracerProvider()
        provider.add_span_processor(app_side)
        weather_run(provider.get_tracer("app"), expected="get_weather")
        assert app_side.force_flush(5_000)
        provider.shutdown()
        assert server.stop(30)
        spans = upstream.spans()
        agent = next(s for s in spans if s.name == "invoke_agent weather-bot")
        assert agent.attributes["toolscore.scored"] is True
        assert agent.attributes["toolscore.tool_call_accuracy.score"] == 1.0
        assert _evaluations_of(spans, agent.context.span_id) == 1  # the app's, not a second from serve
        events = [r for r in upstream.log_records() if r.event_name == "gen_ai.evaluation.result"]
        assert not events  # serve emitted no evaluation of its own (the app's events were off)
    finally:
        server.stop(5)
        upstream.stop()


@pytest.fixture()
def scored_file(tmp_path: Path) -> Path:
    p = Pipeline()
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    weather_run(provider.get_tracer("app"), expected="get_weather")
    assert p.processor.force_flush(5_000)
    provider.shutdown()
    path = tmp_path / "scored.pb"  # OTLP protobuf, as the SDK's exporters encode it
    path.write_bytes(encode_spans([s for s in p.exported() if scope_of(s) != TOOLSCORE_SCOPE]).SerializeToString())
    return path


def _score_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_toolscore.cli", "score", "--format", "json", *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


def test_score_cli_rescores_by_default_and_honours_the_mark_with_skip_scored(scored_file: Path) -> None:
    rescored = _score_cli(str(scored_file))
    assert rescored.returncode == 0, rescored.stderr
    assert len([json.loads(x) for x in rescored.stdout.splitlines() if x.strip()]) == 1
    skipped = _score_cli(str(scored_file), "--skip-scored")
    assert skipped.returncode == 0, skipped.stderr
    assert [x for x in skipped.stdout.splitlines() if x.strip()] == []
    assert "1 run(s) already scored" in " ".join(skipped.stderr.split())
