"""Traces saved from Jaeger (UI JSON, api/v3) and Tempo (``batches``, ``trace``) read as OTLP
(issue 18, item 4): the same runs and the same scores as the OTLP the app exported.

The Jaeger documents are written here from real exported spans (the bundled sample, five runs of
five instrumentation stacks) by the rules of the OpenTelemetry→Jaeger translation: span kind,
status and scope as tags, events as logs with an "event" field, parents as CHILD_OF references,
microsecond times, one process per resource. Tempo's answers are OTLP with base64 ids under
``batches`` or ``trace``."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from otel_toolscore import build_trajectories
from otel_toolscore.ingest import OtlpDecodeError, load_otlp
from otel_toolscore.scorers.base import build_scorers
from otel_toolscore.scorers.run import run_scorers
from tests.support.paths import SAMPLE

_JAEGER_KINDS = {SpanKind.SERVER: "server", SpanKind.CLIENT: "client", SpanKind.PRODUCER: "producer",
                 SpanKind.CONSUMER: "consumer", SpanKind.INTERNAL: "internal"}


def _tag(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": value}
    if isinstance(value, int):
        return {"key": key, "type": "int64", "value": value}
    if isinstance(value, float):
        return {"key": key, "type": "float64", "value": value}
    if isinstance(value, (list, tuple)):  # Jaeger has no arrays: the translation writes JSON
        return {"key": key, "type": "string", "value": json.dumps(list(value))}
    return {"key": key, "type": "string", "value": value}


def jaeger_ui_json(spans: list[ReadableSpan]) -> dict[str, Any]:
    """What Jaeger's UI downloads ("Download JSON") for these spans, one entry per trace."""
    by_trace: dict[int, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        by_trace[span.context.trace_id].append(span)
    data = []
    for trace_id, members in by_trace.items():
        processes: dict[str, Any] = {}
        jaeger_spans = []
        for span in members:
            resource = dict(span.resource.attributes)
            key = json.dumps(resource, sort_keys=True, default=str)
            process_id = next((pid for pid, p in processes.items() if p["_key"] == key), f"p{len(processes) + 1}")
            processes.setdefault(process_id, {"_key": key, "serviceName": resource.pop("service.name", ""),
                                              "tags": [_tag(k, v) for k, v in resource.items()]})
            tags = [_tag(k, v) for k, v in (span.attributes or {}).items()]
            tags.append(_tag("span.kind", _JAEGER_KINDS[span.kind]))
            if span.instrumentation_scope is not None:
                tags.append(_tag("otel.scope.name", span.instrumentation_scope.name))
            if span.status.status_code is StatusCode.OK:
                tags.append(_tag("otel.status_code", "OK"))
            if span.status.status_code is StatusCode.ERROR:
                tags += [_tag("otel.status_code", "ERROR"), _tag("error", True)]
                if span.status.description:
                    tags.append(_tag("otel.status_description", span.status.description))
            jaeger_spans.append({
                "traceID": f"{trace_id:032x}".lstrip("0"),  # Jaeger drops leading zeros
                "spanID": f"{span.context.span_id:016x}",
                "operationName": span.name,
                "references": [{"refType": "CHILD_OF", "traceID": f"{trace_id:032x}",
                                "spanID": f"{span.parent.span_id:016x}"}] if span.parent else [],
                "startTime": span.start_time // 1000,
                "duration": (span.end_time - span.start_time) // 1000,
                "tags": tags,
                "logs": [{"timestamp": e.timestamp // 1000,
                          "fields": [_tag("event", e.name), *(_tag(k, v) for k, v in (e.attributes or {}).items())]}
                         for e in span.events],
                "processID": process_id,
                "warnings": None,
            })
        for p in processes.values():
            p.pop("_key")
        data.append({"traceID": f"{trace_id:032x}", "spans": jaeger_spans, "processes": processes, "warnings": None})
    return {"data": data, "total": 0, "limit": 0, "offset": 0, "errors": None}


def _b64_ids(node: Any) -> Any:
    """Tempo and Jaeger v3 answer with protojson: ids as base64."""
    if isinstance(node, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in ("traceId", "spanId", "parentSpanId") and v
                    else _b64_ids(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [_b64_ids(v) for v in node]
    return node


def sample_requests() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]


def _summary(spans: list[ReadableSpan]) -> list[tuple[Any, ...]]:
    scorers = build_scorers(None, {"tool_call_accuracy": {"expected_tool": "get_weather"}})
    out = []
    for run in build_trajectories(spans):
        scores = run_scorers(run, scorers)
        out.append((run.trace_id, run.agent_name, run.service_name, run.input, run.output,
                    [(c.name, json.dumps(c.arguments, sort_keys=True), c.error is None) for c in run.tool_calls],
                    [(s.name, s.value, s.label) for s in scores]))
    return sorted(out, key=lambda item: item[0])


@pytest.fixture(scope="module")
def baseline() -> list[tuple[Any, ...]]:
    return _summary(load_otlp(SAMPLE).spans)


def test_jaeger_ui_json_gives_the_same_runs_and_scores(baseline: list[tuple[Any, ...]]) -> None:
    doc = jaeger_ui_json(load_otlp(SAMPLE).spans)
    batch = load_otlp(json.dumps(doc).encode())
    assert len(baseline) == 5 and _summary(batch.spans) == baseline
    # a single trace of Jaeger's, without the {"data": [...]} envelope (what /api/traces/{id} items are)
    one = load_otlp(json.dumps(doc["data"][0]).encode())
    assert {s.context.trace_id for s in one.spans} == {int(doc["data"][0]["traceID"], 16)}


def test_jaeger_keeps_kind_status_scope_events_and_resource() -> None:
    original = {(s.context.trace_id, s.context.span_id): s for s in load_otlp(SAMPLE).spans}
    converted = load_otlp(json.dumps(jaeger_ui_json(list(original.values()))).encode()).spans
    assert len(converted) == len(original)
    for span in converted:
        before = original[(span.context.trace_id, span.context.span_id)]
        assert span.name == before.name and span.kind == before.kind
        assert (span.parent.span_id if span.parent else None) == (before.parent.span_id if before.parent else None)
        assert span.status.status_code == before.status.status_code
        assert span.instrumentation_scope.name == before.instrumentation_scope.name
        assert span.resource.attributes["service.name"] == before.resource.attributes["service.name"]
        assert [e.name for e in span.events] == [e.name for e in before.events]
        assert span.start_time // 1000 == before.start_time // 1000  # Jaeger keeps microseconds


@pytest.mark.parametrize("shape", ["tempo_batches", "tempo_v2_trace", "jaeger_api_v3"])
def test_tempo_and_jaeger_v3_answers(shape: str, baseline: list[tuple[Any, ...]]) -> None:
    lines = []
    for request in sample_requests():
        if "resourceSpans" not in request:
            continue
        request = _b64_ids(request)
        if shape == "tempo_batches":
            lines.append({"batches": request["resourceSpans"]})
        elif shape == "tempo_v2_trace":
            lines.append({"trace": request, "status": "complete"})
        else:
            lines.append({"result": request})
    # one document per trace, as the APIs answer, saved one per line
    batch = load_otlp("\n".join(json.dumps(line) for line in lines).encode())
    assert _summary(batch.spans) == baseline
    # and one of them alone, as saved from one request
    assert load_otlp(json.dumps(lines[0]).encode()).spans


def test_score_reads_a_saved_jaeger_trace(tmp_path: Path) -> None:
    path = tmp_path / "jaeger.json"
    path.write_text(json.dumps(jaeger_ui_json(load_otlp(SAMPLE).spans)))

    def records(source: Path) -> list[dict[str, Any]]:
        proc = subprocess.run([sys.executable, "-m", "otel_toolscore.cli", "score", str(source), "--format", "json"],
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr
        return sorted((json.loads(line) for line in proc.stdout.splitlines()), key=lambda r: r["trace_id"])

    jaeger, otlp = records(path), records(SAMPLE)
    assert [r["scores"] for r in jaeger] == [r["scores"] for r in otlp]


def test_other_json_is_still_refused() -> None:
    for doc in ({"data": [{"no": "spans"}]}, {"result": {"something": 1}}, {"batches": "x"}, {"foo": 1}):
        with pytest.raises(OtlpDecodeError, match="JSON but not OTLP"):
            load_otlp(json.dumps(doc).encode())


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=20)
_KEYS = st.sampled_from(["traceID", "spanID", "operationName", "references", "startTime", "duration", "tags",
                         "logs", "processID", "refType", "key", "type", "value", "fields", "timestamp"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(_KEYS, _JSON, max_size=8), max_size=4), st.dictionaries(st.text(max_size=4), _JSON))
def test_damaged_jaeger_documents_never_raise_anything_but_a_decode_error(spans: list[Any], processes: Any) -> None:
    doc = {"data": [{"traceID": "ab", "spans": spans, "processes": processes}]}
    try:
        load_otlp(json.dumps(doc).encode())
    except OtlpDecodeError:
        pass
