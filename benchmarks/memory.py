"""Memory under a storm of spans from traces whose root never ends.

Every trace is a 10-span GenAI agent run (``workload.genai_run``) whose agent (root) span is
started and never ended, so no trace ever completes: without bounds the processor would keep
every span. Attribute strings are copied per trace, so every buffered span owns its content as
in a real app. The storm has two parts:

* many small traces (9 ended spans each, root open): bounded by ``max_pending_traces``;
* a few huge traces (``--huge`` traces × ``--huge-spans`` ended spans under one open root):
  bounded by ``max_spans_per_trace``;

then the generator stops and waits past ``trace_ttl``: what is still buffered is evicted by TTL.
Spans go to ``SimpleSpanProcessor(counting no-op exporter)`` (synchronous, so the count is exact).
Resident memory (``/proc/self/statm``) is sampled every 50 ms in the process; the same storm
without ToolScoreSpanProcessor, in another process, is the baseline.

    .venv/bin/python -m benchmarks memory [--quick] [--spans N]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from benchmarks.common import (
    CountingExporter,
    child_env,
    emit_json,
    machine,
    peak_rss_bytes,
    rss_bytes,
    telemetry_providers,
)
from benchmarks.workload import SpanSpec, genai_run

MB = 1024 * 1024


def _own(value: Any) -> Any:
    """A private copy of a long string (shared pool strings would hide per-span memory)."""
    if isinstance(value, str) and len(value) > 32:
        return value[:-1] + value[-1]
    return value


def emit_open_trace(tracer: trace.Tracer, specs: Sequence[SpanSpec], children: int) -> int:
    """Start the root, create and end ``children`` spans under it (cycling the run's spans),
    never end the root. Returns the number of ended spans."""
    root = tracer.start_span(specs[0].name, kind=specs[0].kind, attributes=specs[0].attributes)
    ctx = trace.set_span_in_context(root)
    body = specs[1:]
    for i in range(children):
        spec = body[i % len(body)]
        attrs = {k: _own(v) for k, v in spec.attributes.items()}
        tracer.start_span(spec.name, context=ctx, kind=spec.kind, attributes=attrs).end()
    return children


class _Sampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.samples: list[tuple[float, int]] = []
        self._halt = threading.Event()
        self._t0 = time.monotonic()

    def run(self) -> None:
        while not self._halt.is_set():
            rss = rss_bytes()
            self.peak = max(self.peak, rss)
            self.samples.append((time.monotonic() - self._t0, rss))
            self._halt.wait(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def storm(config: str, n_spans: int, huge: int, huge_spans: int, ttl: float, telemetry: str,
          overrides: dict[str, Any]) -> dict[str, Any]:
    from otel_toolscore.runtime.processor import ToolScoreSpanProcessor

    pool = [genai_run(10, seed=i) for i in range(500)]
    exporter = CountingExporter()
    downstream = SimpleSpanProcessor(exporter)
    processor: SpanProcessor
    settings: dict[str, Any] = {}
    if config == "baseline":
        processor = downstream
    else:
        mp, lp, _ = telemetry_providers(telemetry)
        processor = ToolScoreSpanProcessor(downstream, meter_provider=mp, logger_provider=lp,
                                           trace_ttl=ttl, **overrides)
        s = processor.settings
        settings = {"max_pending_traces": s.max_pending_traces, "max_spans_per_trace": s.max_spans_per_trace,
                    "trace_ttl": s.trace_ttl}
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    gc.collect()
    rss_before = rss_bytes()
    sampler = _Sampler()
    sampler.start()
    t0 = time.perf_counter()
    ended = 0
    small_budget = n_spans - huge * huge_spans
    i = 0
    while ended < small_budget:
        ended += emit_open_trace(tracer, pool[i % len(pool)], 9)
        i += 1
    small_traces = i
    for j in range(huge):
        ended += emit_open_trace(tracer, pool[j % len(pool)], huge_spans)
    storm_s = time.perf_counter() - t0
    rss_end_of_storm = rss_bytes()
    pending_at_end = len(getattr(processor, "_pending", ()))
    # Nothing more arrives: whatever is still buffered waits for trace_ttl (the timer checks
    # at least once a second).
    waited = 0.0
    if config != "baseline":
        t_wait = time.perf_counter()
        while len(processor._pending) and time.perf_counter() - t_wait < ttl + 10:  # type: ignore[attr-defined]
            time.sleep(0.2)
        waited = time.perf_counter() - t_wait
    gc.collect()
    rss_after_ttl = rss_bytes()
    sampler.stop()
    stats = dict(getattr(processor, "stats", {}))
    provider.shutdown()
    return {
        "config": config, "settings": settings, "ended_spans": ended, "small_traces": small_traces,
        "huge_traces": huge, "huge_trace_spans": huge_spans, "storm_s": storm_s,
        "exported": exporter.count, "all_exported": exporter.count == ended,
        "rss_before_mb": rss_before / MB, "rss_peak_mb": sampler.peak / MB, "ru_maxrss_mb": peak_rss_bytes() / MB,
        "rss_end_of_storm_mb": rss_end_of_storm / MB, "rss_after_ttl_mb": rss_after_ttl / MB,
        "pending_at_end_of_storm": pending_at_end, "waited_for_ttl_s": waited, "stats": stats,
        "rss_timeline_mb": [(round(t, 1), round(r / MB, 1)) for t, r in sampler.samples[:: max(1, len(sampler.samples) // 60)]],
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--spans", type=int, default=None)
    ap.add_argument("--huge", type=int, default=None, help="huge traces (default 5)")
    ap.add_argument("--huge-spans", type=int, default=12_000, help="ended spans per huge trace")
    ap.add_argument("--ttl", type=float, default=None, help="trace_ttl for the run (default 20 s, 5 s with --quick)")
    ap.add_argument("--telemetry", choices=("sdk", "noop"), default="sdk")
    ap.add_argument("--overrides", default="{}", help="more processor settings as JSON")
    ap.add_argument("--_one", choices=("baseline", "toolscore"), default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    n_spans = args.spans or (100_000 if args.quick else 1_000_000)
    huge = args.huge if args.huge is not None else (2 if args.quick else 5)
    ttl = args.ttl or (5.0 if args.quick else 20.0)
    overrides = json.loads(args.overrides)
    if args._one:
        out = storm(args._one, n_spans, huge, args.huge_spans, ttl, args.telemetry, overrides)
        emit_json(out)
        return out
    results = {}
    for config in ("baseline", "toolscore"):
        cmd = [sys.executable, "-m", "benchmarks.memory", "--_one", config, "--spans", str(n_spans), "--huge",
               str(huge), "--huge-spans", str(args.huge_spans), "--ttl", str(ttl), "--telemetry", args.telemetry,
               "--overrides", json.dumps(overrides)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"memory benchmark failed:\n{proc.stdout}\n{proc.stderr}")
        results[config] = json.loads(line[7:])
    b, t = results["baseline"], results["toolscore"]
    out = {"benchmark": "memory", "machine": machine(), "telemetry": telemetry_providers(args.telemetry)[2],
           "spans": n_spans, "results": results,
           "processor_peak_over_baseline_mb": t["rss_peak_mb"] - b["rss_peak_mb"]}
    print(f"{n_spans} spans ({t['small_traces']} open 10-span traces + {huge} × {args.huge_spans}-span traces), "
          f"settings {t['settings']}", file=sys.stderr)
    for name, r in results.items():
        print(f"  {name:9s}: RSS before {r['rss_before_mb']:.0f} MB, peak {r['rss_peak_mb']:.0f} MB, end of storm "
              f"{r['rss_end_of_storm_mb']:.0f} MB, after TTL {r['rss_after_ttl_mb']:.0f} MB; exported "
              f"{r['exported']}/{r['ended_spans']} ({'all' if r['all_exported'] else 'MISSING'}); "
              f"storm {r['storm_s']:.0f} s; stats {r['stats']}", file=sys.stderr)
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
