"""Hot-path overhead: what ToolScoreSpanProcessor costs the thread that creates the spans.

Two measurements.

``app``: create and end N spans (10-span GenAI agent runs, ``workload.genai_run``: chat spans
with the message history as JSON, tool spans, the agent span) through an SDK TracerProvider as
fast as one thread can, with

* baseline: ``BatchSpanProcessor(no-op exporter)`` alone,
* toolscore: ``ToolScoreSpanProcessor(BatchSpanProcessor(no-op exporter))`` with the default code
  scorers, events and metrics into the providers chosen by ``--telemetry``.

Each configuration runs in a fresh subprocess, alternating baseline/toolscore, ``--repeats``
pairs; the figures are ratios toolscore / baseline of the same pair, median and spread: the app
thread's wall time; its CPU time (``thread_time``); and the CPU time of everything, from the
first span to the end of the flush that waits for the last run's scores: every thread of the
process plus, with ``--scoring process``, the scoring process (its ``/proc/<pid>/stat`` times
over the same window). The app thread never waits for scoring, but on CPython a worker thread
that scores competes with it for the GIL, and that is what the wall ratio shows; in process
mode the scoring is off the app's GIL and the parent only hands runs over and emits.

Where the app thread's extra CPU goes (``app``, every pair; printed as "attribution"): the
collections the garbage collector ran on the app thread, by generation (``gc.callbacks`` see which
thread runs a collection: the one whose allocation crossed the threshold), and how many objects
the oldest generation held when the loop ended (a full collection walks all of them, so what the
processor keeps alive, the app pays for in every full collection it triggers); the app thread's
kernel time and context switches (``/proc/thread-self``: voluntary ones are mostly waits for the
GIL, involuntary ones the scheduler's); the CPU of the process's other threads. What is left,
after the processor's own calls (``calls``), is the app's own code running slower beside a worker
(GIL hand-offs, caches).

``calls``: the processor's own ``on_start`` + ``on_end`` per span, timed call by call with
``perf_counter_ns`` around the processor, its downstream a no-op processor (so the SDK and the
BatchSpanProcessor are not counted). The same harness around a pass-through processor gives the
timer's own cost, subtracted. *Isolated*: the worker cannot compete (the interpreter's switch
interval is raised so the timed thread keeps the GIL; the queue is large enough to take every
run). *Under load*: normal switch interval, the worker scoring the completed runs meanwhile.

    .venv/bin/python -m benchmarks hotpath [--quick] [--spans N] [--repeats R] [--scoring thread|process]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from benchmarks.common import (
    CountingExporter,
    TimedProcessor,
    child_env,
    emit_json,
    machine,
    percentile,
    summary,
    telemetry_providers,
)
from benchmarks.workload import emit_run, genai_run
from otel_toolscore.runtime._wrap import SpanProcessorWrapper

#: distinct runs cycled through (enough distinct texts that the scorers' caches stay cold)
POOL = 2_000


def run_pool(n: int = POOL, span_count: int = 10) -> list[Any]:
    return [genai_run(span_count, seed=i) for i in range(n)]


# --- app-thread wall time ---------------------------------------------------------------------


def child_cpu_s(processor: Any) -> float:
    """CPU seconds (user + system) the processor's scoring process has used so far; 0 without
    one. Linux (/proc); read live, so the window can be the same as the parent's."""
    remote = getattr(processor, "_remote", None)
    pid = remote.pid if remote is not None else None
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_stat() -> dict[str, float]:
    """The calling thread's user and kernel CPU seconds and context switches (Linux; {} elsewhere)."""
    try:
        with open("/proc/thread-self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/thread-self/status") as handle:
            status = dict(line.split(":", 1) for line in handle if "ctxt_switches" in line)
    except OSError:
        return {}
    tick = os.sysconf("SC_CLK_TCK")
    return {"user_s": int(fields[11]) / tick, "system_s": int(fields[12]) / tick,
            "voluntary_switches": int(status["voluntary_ctxt_switches"]),
            "involuntary_switches": int(status["nonvoluntary_ctxt_switches"])}


class GcByThread:
    """CPU time of the garbage collector's collections, by generation, on one thread and on all
    the others (a ``gc.callbacks`` entry: it runs on the thread that triggered the collection)."""

    def __init__(self, thread_id: int) -> None:
        self._thread_id = thread_id
        self._started: dict[int, float] = {}
        self.seconds = {"app": [0.0, 0.0, 0.0], "others": [0.0, 0.0, 0.0]}
        self.count = {"app": [0, 0, 0], "others": [0, 0, 0]}

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        me = threading.get_ident()
        if phase == "start":
            self._started[me] = time.thread_time()
            return
        began = self._started.pop(me, None)
        if began is None:
            return
        who = "app" if me == self._thread_id else "others"
        self.seconds[who][info["generation"]] += time.thread_time() - began
        self.count[who][info["generation"]] += 1

    def __enter__(self) -> GcByThread:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def app_once(config: str, n_spans: int, telemetry: str, overrides: dict[str, Any],
             rate: float | None = None) -> dict[str, Any]:
    """One measurement in this process: create and end n_spans spans, time the app thread; as
    fast as it can, or ``rate`` runs per second (an app at a steady load, which scoring keeps up with)."""
    from otel_toolscore.runtime.processor import ToolScoreSpanProcessor

    pool = run_pool()
    exporter = CountingExporter()
    bsp = BatchSpanProcessor(exporter)
    processor: SpanProcessor
    if config == "baseline":
        processor = bsp
    else:
        mp, lp, _ = telemetry_providers(telemetry)
        processor = ToolScoreSpanProcessor(bsp, meter_provider=mp, logger_provider=lp, **overrides)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    for specs in pool[:50]:  # warm-up: imports, first-use caches, thread start
        emit_run(tracer, specs)
    provider.force_flush()
    gc.collect()
    emitted = 0
    gcs = GcByThread(threading.get_ident())
    k0 = child_cpu_s(processor)
    s0 = _thread_stat()
    c0, w0, p0 = time.thread_time(), time.perf_counter(), time.process_time()
    i = 0
    with gcs:
        while emitted < n_spans:
            if rate:
                wait = w0 + i / rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            emitted += emit_run(tracer, pool[i % len(pool)])
            i += 1
    wall = time.perf_counter() - w0
    cpu = time.thread_time() - c0
    proc_cpu = time.process_time() - p0
    s1 = _thread_stat()
    oldest_generation = len(gc.get_objects(2))  # (after the clocks stopped: it walks them all)
    t_flush = time.perf_counter()
    provider.force_flush(120_000)
    flush = time.perf_counter() - t_flush
    total_cpu = time.process_time() - p0 + child_cpu_s(processor) - k0
    stats = dict(getattr(processor, "stats", {}))
    provider.shutdown()
    warm = 50 * 10
    return {
        "config": config, "spans": emitted, "app_wall_s": wall, "app_cpu_s": cpu, "process_cpu_s": proc_cpu,
        "total_cpu_s": total_cpu,
        "flush_s": flush, "exported": exporter.count, "expected_min": emitted + warm, "stats": stats,
        "gc_s": gcs.seconds, "gc_count": gcs.count, "oldest_generation_objects": oldest_generation,
        "app_thread": {k: s1[k] - s0[k] for k in s1},
    }


def _subprocess(args: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "benchmarks.hotpath", *args], capture_output=True, text=True,
                         env=child_env())
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"benchmark subprocess failed:\n{out.stdout}\n{out.stderr}")


def app(n_spans: int, repeats: int, telemetry: str, overrides: dict[str, Any],
        rate: float | None = None) -> dict[str, Any]:
    pairs = []
    for _ in range(repeats):
        pair = {}
        for config in ("baseline", "toolscore"):
            pair[config] = _subprocess(["--_one", config, "--spans", str(n_spans), "--telemetry", telemetry,
                                        "--overrides", json.dumps(overrides), *(["--rate", str(rate)] if rate else [])])
        base, tool = pair["baseline"], pair["toolscore"]
        pair["ratio"] = tool["app_wall_s"] / base["app_wall_s"]
        pair["app_cpu_ratio"] = tool["app_cpu_s"] / base["app_cpu_s"]
        pair["total_cpu_ratio"] = tool["total_cpu_s"] / base["total_cpu_s"]
        pairs.append(pair)
        print(f"  pair: baseline {base['app_wall_s']:.2f} s, toolscore {tool['app_wall_s']:.2f} s, wall ratio "
              f"{pair['ratio']:.2f}, app-thread CPU ratio {pair['app_cpu_ratio']:.2f}, all-CPU ratio "
              f"{pair['total_cpu_ratio']:.2f}", file=sys.stderr)
    ts = [p["toolscore"] for p in pairs]
    attribution = {k: summary([_attribution(p)[k] for p in pairs]) for k in _attribution(pairs[0])}
    return {
        "spans": n_spans,
        "rate_runs_per_s": rate,
        "ratio": summary([p["ratio"] for p in pairs]),
        "app_cpu_ratio": summary([p["app_cpu_ratio"] for p in pairs]),
        "total_cpu_ratio": summary([p["total_cpu_ratio"] for p in pairs]),
        "baseline_us_per_span": summary([p["baseline"]["app_wall_s"] / p["baseline"]["spans"] * 1e6 for p in pairs]),
        "toolscore_us_per_span": summary([t["app_wall_s"] / t["spans"] * 1e6 for t in ts]),
        "toolscore_process_cpu_over_baseline": summary(
            [p["toolscore"]["process_cpu_s"] / p["baseline"]["process_cpu_s"] for p in pairs]),
        "all_exported": all(t["exported"] >= t["expected_min"] for t in ts),
        "stats_last": ts[-1]["stats"],
        "flush_s_last": ts[-1]["flush_s"],
        "attribution": attribution,
        "pairs": pairs,
    }


def _attribution(pair: dict[str, Any]) -> dict[str, float]:
    """Where one pair's extra app-thread CPU went, µs per span (toolscore minus baseline)."""
    base, tool = pair["baseline"], pair["toolscore"]

    def per_span(run: dict[str, Any], value: float) -> float:
        return value / run["spans"] * 1e6

    def extra(f: Any) -> float:
        return per_span(tool, f(tool)) - per_span(base, f(base))

    out = {
        "app_cpu_extra_us": extra(lambda r: r["app_cpu_s"]),
        "gc_app_extra_us": extra(lambda r: sum(r["gc_s"]["app"])),
        "gc_app_full_extra_us": extra(lambda r: r["gc_s"]["app"][2]),
        "kernel_extra_us": extra(lambda r: r["app_thread"].get("system_s", 0.0)),
        "other_threads_cpu_extra_us": extra(lambda r: r["process_cpu_s"] - r["app_cpu_s"]),
        "baseline_full_collections": float(base["gc_count"]["app"][2] + base["gc_count"]["others"][2]),
        "toolscore_full_collections": float(tool["gc_count"]["app"][2] + tool["gc_count"]["others"][2]),
        "toolscore_collections_off_app_thread": float(sum(tool["gc_count"]["others"])),
        "baseline_oldest_generation_objects": float(base["oldest_generation_objects"]),
        "toolscore_oldest_generation_objects": float(tool["oldest_generation_objects"]),
    }
    for kind in ("voluntary", "involuntary"):
        key = f"{kind}_switches"
        out[f"{kind}_switches_extra_per_1k_spans"] = extra(lambda r, key=key: r["app_thread"].get(key, 0) / 1000)
    # what is left: the processor's own calls (see ``calls``) and the app's code running slower
    out["rest_us"] = out["app_cpu_extra_us"] - out["gc_app_extra_us"] - out["kernel_extra_us"]
    return out


# --- per-call cost ------------------------------------------------------------------------------


class _Null(SpanProcessor):
    pass


class _PassThrough(SpanProcessorWrapper):
    """Forwards every call: what any processor in the chain costs, to subtract."""


def calls(n_spans: int, telemetry: str, isolated: bool, overrides: dict[str, Any]) -> dict[str, Any]:
    from otel_toolscore.runtime.processor import ToolScoreSpanProcessor

    pool = run_pool()
    mp, lp, _ = telemetry_providers(telemetry)
    opts = dict(overrides)
    if isolated:
        opts["queue_size"] = n_spans // 10 + 1_000
    results = {}
    for name in ("passthrough", "toolscore"):
        inner: SpanProcessor
        if name == "passthrough":
            inner = _PassThrough(_Null())
        else:
            inner = ToolScoreSpanProcessor(_Null(), meter_provider=mp, logger_provider=lp, **opts)
        timed = TimedProcessor(inner)
        provider = TracerProvider()
        provider.add_span_processor(timed)
        tracer = provider.get_tracer("bench")
        for specs in pool[:50]:
            emit_run(tracer, specs)
        timed.pairs.clear()
        timed.agent_pairs.clear()
        gc.collect()
        old = sys.getswitchinterval()
        if isolated:
            sys.setswitchinterval(100.0)
        try:
            emitted, i = 0, 0
            while emitted < n_spans:
                emitted += emit_run(tracer, pool[i % len(pool)])
                i += 1
        finally:
            sys.setswitchinterval(old)
        provider.shutdown()
        every = sorted(timed.pairs + timed.agent_pairs)
        results[name] = {
            "median_ns": statistics.median(every),
            "p99_ns": percentile(every, 99),
            "non_agent_median_ns": statistics.median(timed.pairs),
            "agent_median_ns": statistics.median(timed.agent_pairs) if timed.agent_pairs else None,
            "spans": len(every),
        }
    overhead = results["passthrough"]["median_ns"]
    ts = results["toolscore"]
    return {
        "isolated": isolated,
        "timer_and_call_overhead_ns": overhead,
        "toolscore_raw": ts,
        "own_median_us": (ts["median_ns"] - overhead) / 1000,
        "own_p99_us": (ts["p99_ns"] - results["passthrough"]["p99_ns"]) / 1000,
        "own_non_agent_median_us": (ts["non_agent_median_ns"] - results["passthrough"]["non_agent_median_ns"]) / 1000,
        "own_agent_median_us": ((ts["agent_median_ns"] or 0) - (results["passthrough"]["agent_median_ns"] or 0)) / 1000,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--spans", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--telemetry", choices=("sdk", "noop"), default="sdk")
    ap.add_argument("--overrides", default="{}", help="processor settings as JSON, e.g. '{\"queue_size\": 512}'")
    ap.add_argument("--only", choices=("app", "calls"), default=None)
    ap.add_argument("--scoring", choices=("thread", "process"), default=None,
                    help="where the processor scores (the 'scoring' setting); default: the setting's default")
    ap.add_argument("--rate", type=float, default=None,
                    help="app: runs per second instead of as fast as the thread can (the wall ratio then says little)")
    ap.add_argument("--_one", choices=("baseline", "toolscore"), default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    overrides = json.loads(args.overrides)
    if args.scoring:
        overrides["scoring"] = args.scoring
    n_spans = args.spans or (50_000 if args.quick else 200_000)
    if args._one:
        out = app_once(args._one, n_spans, args.telemetry, overrides, args.rate)
        emit_json(out)
        return out
    repeats = args.repeats or (3 if args.quick else 5)
    out: dict[str, Any] = {"benchmark": "hotpath", "machine": machine(), "telemetry": telemetry_providers(args.telemetry)[2],
                           "overrides": overrides, "python_switch_interval_s": sys.getswitchinterval()}
    if args.only in (None, "calls"):
        n_calls = 20_000 if args.quick else 100_000
        out["calls_isolated"] = calls(n_calls, args.telemetry, True, overrides)
        out["calls_under_load"] = calls(n_calls, args.telemetry, False, overrides)
        for k in ("calls_isolated", "calls_under_load"):
            c = out[k]
            print(f"{k}: processor's own on_start+on_end median {c['own_median_us']:.2f} µs/span "
                  f"(p99 {c['own_p99_us']:.2f} µs; agent span {c['own_agent_median_us']:.2f} µs; "
                  f"timer overhead {c['timer_and_call_overhead_ns']:.0f} ns subtracted)")
    if args.only in (None, "app"):
        out["app"] = app(n_spans, repeats, args.telemetry, overrides, args.rate)
        a = out["app"]
        print(f"app thread: {n_spans} spans, toolscore/baseline wall ratio median {a['ratio']['median']:.2f} "
              f"(min {a['ratio']['min']:.2f}, max {a['ratio']['max']:.2f}); app-thread CPU ratio median "
              f"{a['app_cpu_ratio']['median']:.2f} (min {a['app_cpu_ratio']['min']:.2f}); all-CPU ratio median "
              f"{a['total_cpu_ratio']['median']:.2f} (min {a['total_cpu_ratio']['min']:.2f}); baseline "
              f"{a['baseline_us_per_span']['median']:.1f} µs/span, toolscore {a['toolscore_us_per_span']['median']:.1f} "
              f"µs/span; all spans exported: {a['all_exported']}; stats {a['stats_last']}")
        m = {k: v["median"] for k, v in a["attribution"].items()}
        print(f"attribution (medians, µs per span, toolscore minus baseline): app-thread CPU +{m['app_cpu_extra_us']:.2f}"
              f" = GC on the app thread +{m['gc_app_extra_us']:.2f} (full collections +{m['gc_app_full_extra_us']:.2f}: "
              f"{m['toolscore_full_collections']:.0f} vs {m['baseline_full_collections']:.0f}, over "
              f"{m['toolscore_oldest_generation_objects']:,.0f} vs {m['baseline_oldest_generation_objects']:,.0f} objects in "
              f"the oldest generation; {m['toolscore_collections_off_app_thread']:.0f} collections ran on other threads) "
              f"+ kernel {m['kernel_extra_us']:+.2f} + the rest {m['rest_us']:+.2f} (the processor's own calls, and the "
              f"app's code beside a worker); app-thread context switches per 1,000 spans "
              f"{m['voluntary_switches_extra_per_1k_spans']:+.1f} voluntary (GIL waits), "
              f"{m['involuntary_switches_extra_per_1k_spans']:+.1f} involuntary; other threads' CPU "
              f"+{m['other_threads_cpu_extra_us']:.2f}")
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
