"""Sidecar ingest and forwarding per span: what ``serve`` spends on an OTLP protobuf request
besides scoring, on one core (``time.thread_time``).

* ``parse``: ``ExportTraceServiceRequest`` parsed from the request body (protobuf's C parser);
* ``decode``: the parsed request into SDK spans (``decode_export_request``), as the sidecar does it
  (keeping each span's bytes for forwarding) and without that (what ``score FILE`` does);
* ``forward``: the upstream request body for the same spans after scoring, as the processor hands
  them on (the agent span of each run carrying its scores, and the evaluation spans scoring made,
  which did not come as protobuf; per span received): the SDK's ``encode_spans(...).SerializePartialToString()``,
  which the exporter used before, and ``ingest._wire.encode_request``, which ``serve`` sends now.

The workload is 10-span GenAI runs (``benchmarks.throughput.synthetic``), ``--runs`` runs per
request, every run distinct. Each figure is per span: the minimum and median of ``--repeats``
interleaved measurements. With ``--before TREE`` (a checkout's ``otel_toolscore``, e.g. from
``git archive main otel_toolscore | tar -x -C /tmp/before``) its decoder is timed too,
interleaved with this one.

    .venv/bin/python -m benchmarks.ingest [--quick] [--before /tmp/before]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from benchmarks.common import emit_json, machine, telemetry_providers
from benchmarks.throughput import ready_item, synthetic
from otel_toolscore.ingest import decode_export_request, parse_export_request
from otel_toolscore.ingest._wire import encode_request
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def _scored(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """What the sidecar exports for ``spans`` (decoded, whole runs): every span, the agent spans
    carrying their scores, then the evaluation spans scoring made (the real processor's output)."""
    down = _Collect()
    mp, lp, _ = telemetry_providers("noop")
    proc = ToolScoreSpanProcessor(down, meter_provider=mp, logger_provider=lp)
    try:
        by_trace: dict[int, list[ReadableSpan]] = {}
        for span in spans:
            by_trace.setdefault(span.context.trace_id, []).append(span)  # type: ignore[union-attr]
        for run in by_trace.values():
            item = ready_item(run)
            held = {id(h.span) for h in item.held}
            for span in run:
                if id(span) not in held:
                    down.on_end(span)  # forwarded at once, as the processor does with the others
            proc._score(item)
    finally:
        proc.shutdown()
    return down.spans


def _time(fn: Callable[[], Any]) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--runs", type=int, default=50, help="10-span runs per request (default 50: 500 spans)")
    ap.add_argument("--before", type=Path, default=None, help="an older tree's otel_toolscore to time beside this one")
    args = ap.parse_args(argv)
    repeats = args.repeats or (7 if args.quick else 25)
    requests = 4 if args.quick else 10

    bodies = [encode_spans([s for run in synthetic(10, args.runs, seed0=(r + 1) * 100_000) for s in run])
              .SerializeToString() for r in range(requests)]
    n_spans = 10 * args.runs * requests
    before_decode = before_encode = None
    if args.before is not None:
        from benchmarks.compare import load_before

        name = load_before(args.before)
        before_decode = importlib.import_module(f"{name}.ingest").decode_export_request
        before_encode = importlib.import_module(f"{name}.ingest._wire").encode_request

    parsed = [parse_export_request(body) for body in bodies]
    scored = [_scored(decode_export_request(msg, keep_wire=True)) for msg in parsed]
    timings: dict[str, list[float]] = {}

    def record(name: str, fn: Callable[[Any], Any], arg: Any) -> None:
        timings.setdefault(name, []).append(_time(lambda: fn(arg)) / n_spans * 1e6)

    def fresh() -> list[Any]:
        # each decode gets requests parsed anew: protobuf caches the Python objects of a message's
        # parts once read, and keep_wire discards unknown fields in place
        return [parse_export_request(body) for body in bodies]

    for _ in range(repeats):
        record("parse", lambda bs: [parse_export_request(b) for b in bs], bodies)
        record("decode (serve: keep_wire)", lambda ms: [decode_export_request(m, keep_wire=True) for m in ms],
               fresh())
        record("decode (no wire)", lambda ms: [decode_export_request(m) for m in ms], fresh())
        if before_decode is not None:
            record("decode before (keep_wire)", lambda ms: [before_decode(m, keep_wire=True) for m in ms], fresh())
            record("decode before (no wire)", lambda ms: [before_decode(m) for m in ms], fresh())
        record("forward: SDK encode_spans", lambda ss: [encode_spans(s).SerializePartialToString() for s in ss],
               scored)
        record("forward: encode_request", lambda ss: [encode_request(s) for s in ss], scored)
        if before_encode is not None:
            record("forward: before encode_request", lambda ss: [before_encode(s) for s in ss], scored)
    # the two forward encodings must be the same message (tests/test_wire.py checks it thoroughly)
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    assert all(ExportTraceServiceRequest.FromString(encode_request(s)) == encode_spans(s) for s in scored)
    results = {name: {"us_per_span_min": round(min(v), 2), "us_per_span_median": round(statistics.median(v), 2)}
               for name, v in timings.items()}
    for name, r in results.items():
        print(f"{name:28s} min {r['us_per_span_min']:7.2f}  median {r['us_per_span_median']:7.2f} us/span")
    out = {"benchmark": "ingest", "machine": machine(), "spans_per_request": 10 * args.runs,
           "requests": requests, "repeats": repeats, "results": results}
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
