"""Latency: agent span end → that agent span (with its scores) handed to the downstream processor.

An open-loop generator starts 10-span agent runs (``workload.genai_run``) at a fixed rate
(runs/s), whether or not earlier runs have been scored, through an SDK TracerProvider with
``ToolScoreSpanProcessor(recorder → BatchSpanProcessor(no-op exporter))``. Latency per run =
the time the recorder sees the agent span in ``on_end`` minus the time just before the app
called ``end()`` on it. Reported: p50/p90/p99/max over every run, over the runs whose agent
span came out scored, and the share that came out unscored (queue full, or held longer than
``hold_timeout``), plus the rate actually achieved by the generator.

    .venv/bin/python -m benchmarks latency [--quick] [--rates 100,1000] [--seconds S] [--scoring thread|process]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from benchmarks.common import CountingExporter, emit_json, machine, percentile, telemetry_providers
from benchmarks.workload import SpanSpec, _emit, genai_run
from otel_toolscore.runtime._wrap import SpanProcessorWrapper


class Recorder(SpanProcessorWrapper):
    """Between ToolScoreSpanProcessor and the exporting processor: when each root span arrives."""

    def __init__(self, inner: SpanProcessor) -> None:
        super().__init__(inner)
        self.arrived: dict[int, tuple[int, bool]] = {}  # span id → (perf_counter_ns, scored)

    def on_end(self, span: ReadableSpan) -> None:
        if span.parent is None:
            scored = any(k.startswith("toolscore.") and k.endswith(".label") for k in (span.attributes or {}))
            self.arrived[span.context.span_id] = (time.perf_counter_ns(), scored)
        self._delegate.on_end(span)


def run_and_time_end(tracer: trace.Tracer, specs: Sequence[SpanSpec]) -> tuple[int, int]:
    """Emit a run; returns (agent span id, perf_counter_ns just before the agent span ended)."""
    root = tracer.start_span(specs[0].name, kind=specs[0].kind, attributes=specs[0].attributes)
    for c in specs[0].children:
        _emit(tracer, specs, c, root)
    t = time.perf_counter_ns()
    root.end()
    return root.get_span_context().span_id, t


def measure(rate: float, seconds: float, telemetry: str, overrides: dict[str, Any]) -> dict[str, Any]:
    from otel_toolscore.runtime.processor import ToolScoreSpanProcessor

    n_runs = int(rate * seconds)
    pool = [genai_run(10, seed=i) for i in range(min(n_runs, 2_000))]
    exporter = CountingExporter()
    recorder = Recorder(BatchSpanProcessor(exporter))
    mp, lp, _ = telemetry_providers(telemetry)
    processor = ToolScoreSpanProcessor(recorder, meter_provider=mp, logger_provider=lp, **overrides)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    for specs in pool[:20]:  # warm-up
        run_and_time_end(tracer, specs)
    provider.force_flush()
    recorder.arrived.clear()
    gc.collect()
    ended: dict[int, int] = {}
    interval_ns = int(1e9 / rate)
    start = time.perf_counter_ns()
    late = 0
    for i in range(n_runs):
        due = start + i * interval_ns
        wait = due - time.perf_counter_ns()
        if wait > 0:
            time.sleep(wait / 1e9)
        elif wait < -interval_ns:
            late += 1  # the generator itself is behind schedule (open loop: it does not skip)
        span_id, t = run_and_time_end(tracer, pool[i % len(pool)])
        ended[span_id] = t
    elapsed = (time.perf_counter_ns() - start) / 1e9
    provider.force_flush(120_000)
    stats = dict(processor.stats)
    remote = getattr(processor, "_remote", None)
    if remote is not None:  # scoring="process": how many scoring processes it took
        stats["scoring_processes_started"] = remote.stats["started"]
    provider.shutdown()
    lat_all, lat_scored = [], []
    unscored = 0
    for span_id, t_end in ended.items():
        got = recorder.arrived.get(span_id)
        if got is None:
            continue
        ms = (got[0] - t_end) / 1e6
        lat_all.append(ms)
        if got[1]:
            lat_scored.append(ms)
        else:
            unscored += 1
    lat_all.sort()
    lat_scored.sort()

    def pct(v: list[float]) -> dict[str, float]:
        if not v:
            return {}
        return {"p50": percentile(v, 50), "p90": percentile(v, 90), "p99": percentile(v, 99), "max": v[-1],
                "mean": statistics.fmean(v)}

    return {
        "target_rate": rate, "achieved_rate": n_runs / elapsed, "runs": n_runs, "runs_behind_schedule": late,
        "arrived": len(lat_all), "unscored": unscored, "unscored_share": unscored / max(1, len(lat_all)),
        "latency_ms_all": pct(lat_all), "latency_ms_scored": pct(lat_scored), "stats": stats,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rates", default="100,1000")
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--telemetry", choices=("sdk", "noop"), default="sdk")
    ap.add_argument("--overrides", default="{}", help="processor settings as JSON")
    ap.add_argument("--scoring", choices=("thread", "process"), default=None,
                    help="where the processor scores (the 'scoring' setting)")
    args = ap.parse_args(argv)
    import json

    overrides = json.loads(args.overrides)
    if args.scoring:
        overrides["scoring"] = args.scoring
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    out: dict[str, Any] = {"benchmark": "latency", "machine": machine(),
                           "telemetry": telemetry_providers(args.telemetry)[2], "overrides": overrides,
                           "seconds": seconds, "results": []}
    for rate in (float(r) for r in args.rates.split(",")):
        r = measure(rate, seconds, args.telemetry, overrides)
        out["results"].append(r)
        a, s = r["latency_ms_all"], r["latency_ms_scored"]
        print(f"{rate:7.0f} runs/s (achieved {r['achieved_rate']:.0f}): all p50 {a.get('p50', 0):.2f} ms "
              f"p99 {a.get('p99', 0):.2f} ms max {a.get('max', 0):.1f} ms | scored p50 {s.get('p50', 0):.2f} ms "
              f"p99 {s.get('p99', 0):.2f} ms | unscored {r['unscored']}/{r['arrived']} | {r['stats']}",
              file=sys.stderr)
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
