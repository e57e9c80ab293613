"""The sidecar's hand-off: CPU of the receiver's thread per span, from decoded spans to the export
queue, with the request's spans given to the processor span by span (``on_end``, as ``serve``
did) or in one call (``on_end_many``, as it does now). One process, the two interleaved round by
round on fresh requests (every trace id distinct), so that a busy shared machine moves both alike.

The processor is the one ``serve`` builds (``completion="quiet"``; downstream: the admission
counter in front of a ``BatchSpanProcessor`` whose exporter drops the batches). Its worker scores
the runs meanwhile; only the calling thread's CPU (``time.thread_time``) is counted. Requests:
50 ten-span GenAI runs (500 spans), decoded before the clock starts.

    .venv/bin/python -m benchmarks.serve_handoff [--quick] [--sample-rate 1.0]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from benchmarks.common import emit_json, machine, telemetry_providers
from benchmarks.workload import genai_run, readable_run
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
from otel_toolscore.runtime.serve._protocol import decode_traces
from otel_toolscore.runtime.serve.admission import Backlog, CountingProcessor

RUNS_PER_REQUEST = 50


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _requests(n: int, first: int) -> list[list[ReadableSpan]]:
    pool = [genai_run(10, seed=i) for i in range(RUNS_PER_REQUEST)]
    out = []
    for k in range(first, first + n):
        spans: list[ReadableSpan] = []
        for r in range(RUNS_PER_REQUEST):
            trace_id = (k * RUNS_PER_REQUEST + r + 1) * 0x9E3779B97F4A7C15 & (2**128 - 1) or 1
            spans += readable_run(pool[r], trace_id=trace_id, sdk_attributes=False)
        out.append(decode_traces(encode_spans(spans).SerializeToString(), False).spans)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--requests", type=int, default=10, help="requests per round and way")
    ap.add_argument("--sample-rate", type=float, default=1.0)
    args = ap.parse_args(argv)
    rounds = args.rounds or (5 if args.quick else 15)
    mp, lp, telemetry = telemetry_providers("sdk")
    backlog = Backlog(10**9)
    downstream = CountingProcessor(BatchSpanProcessor(_Drop(), max_queue_size=100_000), backlog)
    proc = ToolScoreSpanProcessor(downstream, completion="quiet", meter_provider=mp, logger_provider=lp,
                                  decision_wait=0.2, default_sample_rate=args.sample_rate,
                                  max_pending_traces=100_000, queue_size=100_000)

    def each(spans: list[ReadableSpan]) -> None:
        for span in spans:
            proc.on_end(span)

    ways = {"on_end": each, "on_end_many": proc.on_end_many}
    us: dict[str, list[float]] = {name: [] for name in ways}
    first = 0
    for rnd in range(rounds + 1):  # the first round warms up
        for name, hand in (ways.items() if rnd % 2 else reversed(ways.items())):
            batch = _requests(args.requests, first)
            first += args.requests
            n = sum(map(len, batch))
            gc.collect()
            t0 = time.thread_time()
            for spans in batch:
                hand(spans)
            cpu = time.thread_time() - t0
            proc.force_flush(60_000)
            if rnd:
                us[name].append(cpu / n * 1e6)
    proc.shutdown()
    out: dict[str, Any] = {"benchmark": "serve_handoff", "machine": machine(), "telemetry": telemetry,
                           "sample_rate": args.sample_rate, "spans_per_request": RUNS_PER_REQUEST * 10,
                           "rounds": rounds}
    for name, values in us.items():
        out[name] = {"min_us_per_span": min(values), "median_us_per_span": statistics.median(values),
                     "max_us_per_span": max(values)}
        print(f"{name}: receiver thread {out[name]['median_us_per_span']:.2f} µs/span median "
              f"(min {out[name]['min_us_per_span']:.2f}, max {out[name]['max_us_per_span']:.2f}), {rounds} rounds")
    ratios = [b / a for a, b in zip(us["on_end"], us["on_end_many"])]
    out["many_over_each"] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    print(f"on_end_many / on_end per round: median {out['many_over_each']['median']:.2f} "
          f"(min {out['many_over_each']['min']:.2f}, max {out['many_over_each']['max']:.2f})")
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
