"""The processor (in an app), ``serve`` (the sidecar) and ``score`` (offline) find the same runs and
give them the same scores, on every fixture, every conformance capture and every real
conversation: one detection and one scoring driver, so they cannot drift apart (issue 15)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_toolscore import read_otlp_json
from otel_toolscore import semconv as sc
from otel_toolscore.runtime.replay import replay
from otel_toolscore.runtime.serve import ToolScoreServer
from tests.support import paths
from tests.support.pipeline import Pipeline

FILES = (paths.traces(paths.FIXTURES) + paths.traces(paths.CAPTURES)
         + paths.traces(paths.REALWORLD, "tau_airline/*.json"))
FILES = [f for f in FILES if f.name not in ("labels.json", "stacks.json")]
SCORERS = ("tool_call_accuracy", "tool_call_validation", "tool_result_verification")

Runs = dict[tuple[str, str], dict[str, tuple[str, Any]]]


def _from_spans(spans: list[ReadableSpan]) -> Runs:
    """Run span -> {scorer: (label, value)}, as the run span's toolscore.* attributes say."""
    runs: Runs = {}
    for span in spans:
        attrs = span.attributes or {}
        scores = {
            name: (attrs[sc.toolscore_attr(name, sc.TOOLSCORE_FIELD_LABEL)],
                   attrs.get(sc.toolscore_attr(name, sc.TOOLSCORE_FIELD_SCORE)))
            for name in SCORERS if sc.toolscore_attr(name, sc.TOOLSCORE_FIELD_LABEL) in attrs
        }
        if scores:
            runs[(f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}")] = scores
    return runs


def _processor(files: list[Path]) -> Runs:
    runs: Runs = {}
    for path in files:
        pipeline = Pipeline()
        replay(read_otlp_json(path), pipeline.processor)
        assert pipeline.processor.force_flush(30_000)
        runs.update(_from_spans(pipeline.exported()))
        pipeline.processor.shutdown()
    return runs


def _serve(files: list[Path]) -> Runs:
    exported = InMemorySpanExporter()
    server = ToolScoreServer(span_exporter=exported, grpc_port=None, http_port=0, decision_wait=0.2,
                             events=False, metrics=False)
    addresses = server.start()
    try:
        for path in files:
            for line in path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
                request = urllib.request.Request(f"{addresses.http_endpoint}/v1/traces", data=line.encode(),
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=30) as answer:
                    assert answer.status == 200
    finally:
        server.stop(60)
    return _from_spans(list(exported.get_finished_spans()))


def _score(files: list[Path]) -> Runs:
    out = subprocess.run([sys.executable, "-m", "otel_toolscore.cli", "score", "--format", "json",
                          *map(str, files)], capture_output=True, text=True, cwd=paths.REPO)
    assert out.returncode in (0, 1), out.stderr
    runs: Runs = {}
    for line in out.stdout.splitlines():
        run = json.loads(line)
        runs[(run["trace_id"], run["span_id"])] = {
            s["name"]: (s["label"], s["value"]) for s in run["scores"] if s["name"] in SCORERS
        }
    return runs


def test_processor_serve_and_score_agree_on_every_run() -> None:
    offline = _score(FILES)
    in_app = _processor(FILES)
    sidecar = _serve(FILES)
    assert len(offline) > 700  # every corpus was read (14 stacks' fixtures, the captures, 592 real runs)
    assert in_app == offline
    assert sidecar == offline
