"""Memory soak: agent runs at a modest fixed rate for many minutes, resident memory sampled.

Does the resident set of a process that scores runs level off, or grow without end? Every run is
a 10-span GenAI agent run (``workload.genai_run``) with its own content (seed = run number:
tool-call ids, arguments, results and the answer differ from run to run, as in a real app,
so a cache keyed by content sees a new key every run) and its own trace id. Two modes, each
measured in its own process (the *subject*):

* ``app``: the subject is an app with a real SDK pipeline, ``TracerProvider`` →
  ``ToolScoreSpanProcessor(BatchSpanProcessor(counting exporter))`` with the default scorers
  and the SDK's meter and logger providers; one app thread emits runs on schedule (open loop).
* ``serve``: the subject is ``ToolScoreServer`` (what ``otel-toolscore serve`` runs, its
  garbage collector tuned as the command tunes it) with a counting upstream exporter; this
  process is the app: a real SDK pipeline whose ``BatchSpanProcessor`` exports over OTLP/HTTP
  (protobuf) to the server on 127.0.0.1.

The subject's RSS (``/proc/PID/statm``) is sampled every ``--sample`` seconds (10 s). With
``--tracemalloc`` (the default) the subject traces Python allocations (one frame) and takes a
snapshot after the warm-up (a sixth of the run, before the verdict's window) and at the end; the
report lists the allocation sites whose live size grew most between the two, so a leak names its
line, and the memory ``tracemalloc`` itself holds (part of the RSS). The verdict: RSS is *flat* when
over the last two thirds of the run (the last 20 of 30 minutes) its samples stay within 5 % of
the window's first sample.

    .venv/bin/python -m benchmarks.soak --minutes 30 --mode app|serve [--rate 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import CountingExporter, child_env, emit_json, machine, rss_bytes, telemetry_providers

MB = 1024 * 1024
#: the verdict's tolerance: samples within this fraction of the window's first one
FLAT_WITHIN = 0.05


def _rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _by_site(snapshot: tracemalloc.Snapshot) -> dict[str, tuple[int, int]]:
    """Live bytes and blocks per allocation line (the snapshot itself is dropped: kept whole, its
    copy of every trace would sit in the resident set being measured)."""
    keep = (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap>"))
    return {str(s.traceback[0]): (s.size, s.count) for s in snapshot.filter_traces(keep).statistics("lineno")}


def _top_growth(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], n: int = 15) -> list[dict[str, Any]]:
    """The allocation sites whose live memory grew most between two snapshots."""
    diffs = [(site, size - before.get(site, (0, 0))[0], size, count - before.get(site, (0, 0))[1])
             for site, (size, count) in after.items()]
    diffs += [(site, -size, 0, -count) for site, (size, count) in before.items() if site not in after]
    diffs.sort(key=lambda d: -abs(d[1]))
    return [{"site": site, "size_diff_kb": round(diff / 1024, 1), "size_kb": round(size / 1024, 1),
             "count_diff": count} for site, diff, size, count in diffs[:n]]


class _Traced:
    """tracemalloc in the subject: the live memory per site after the warm-up, the growth since
    then at the end."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.first: dict[str, tuple[int, int]] | None = None
        if on:
            tracemalloc.start(1)

    def mark(self) -> None:
        if self.on:
            self.first = _by_site(tracemalloc.take_snapshot())

    def figures(self) -> dict[str, Any]:
        if not self.on:
            return {}
        current, peak = tracemalloc.get_traced_memory()
        out: dict[str, Any] = {"traced_mb": round(current / MB, 2), "traced_peak_mb": round(peak / MB, 2),
                               "tracemalloc_own_mb": round(tracemalloc.get_tracemalloc_memory() / MB, 2)}
        if self.first is not None:
            out["top_growth"] = _top_growth(self.first, _by_site(tracemalloc.take_snapshot()))
        return out


def _traced_mb() -> float | None:
    return round(tracemalloc.get_traced_memory()[0] / MB, 2) if tracemalloc.is_tracing() else None


# --- the app (both modes) ------------------------------------------------------------------------


class _App(threading.Thread):
    """Emits run ``i`` at ``start + i / rate`` (open loop) until ``stop`` is set."""

    def __init__(self, tracer: Any, rate: float, stop: threading.Event) -> None:
        super().__init__(name="soak-app", daemon=True)
        self.tracer, self.interval, self.stop_event = tracer, 1.0 / rate, stop
        self.runs = 0
        self.spans = 0
        self.errors = 0

    def run(self) -> None:
        from benchmarks.workload import emit_run, genai_run

        start = time.monotonic()
        while not self.stop_event.is_set():
            wait = start + self.runs * self.interval - time.monotonic()
            if wait > 0 and self.stop_event.wait(wait):
                break
            try:
                self.spans += emit_run(self.tracer, genai_run(10, seed=self.runs))
            except Exception:  # noqa: BLE001 - counted: the soak goes on
                self.errors += 1
            self.runs += 1


def _backlog(processor: Any) -> dict[str, int]:
    """Runs waiting in the processor: traces buffered and completed runs queued for the worker (a
    backlog raises the resident set's high-water mark)."""
    if processor is None:
        return {}
    return {"pending": len(processor._pending), "queued": processor._queue.qsize()}


def _soak_loop(seconds: float, sample_s: float, rss: Any, traced: _Traced | None, progress: Any) -> list[dict[str, Any]]:
    """Sample ``rss()`` every ``sample_s`` for ``seconds``; mark ``traced`` a sixth of the way."""
    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()
    marked = False
    k = 0
    while True:
        t = time.monotonic() - t0
        sample = {"t_s": round(t, 1), "rss_mb": round(rss() / MB, 2)}
        traced_now = _traced_mb()
        if traced_now is not None:
            sample["traced_mb"] = traced_now
        samples.append(sample)
        progress(sample)
        if traced is not None and not marked and t >= seconds / 6:
            traced.mark()
            marked = True
        if t >= seconds:
            return samples
        k += 1
        time.sleep(max(0.0, t0 + k * sample_s - time.monotonic()))


def _progress(sample: dict[str, Any]) -> None:
    print(f"  {sample['t_s']:7.0f} s  RSS {sample['rss_mb']:7.1f} MB"
          + (f"  traced {sample['traced_mb']:6.1f} MB" if sample.get("traced_mb") is not None else "")
          + (f"  backlog {sample['pending']}+{sample['queued']}" if "pending" in sample else ""),
          file=sys.stderr, flush=True)


def run_app(minutes: float, rate: float, sample_s: float, trace_memory: bool) -> dict[str, Any]:
    """The ``app`` subject: this process."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_toolscore.runtime.processor import ToolScoreSpanProcessor

    traced = _Traced(trace_memory)
    exporter = CountingExporter()
    mp, lp, _ = telemetry_providers("sdk")
    processor = ToolScoreSpanProcessor(BatchSpanProcessor(exporter), meter_provider=mp, logger_provider=lp)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    stop = threading.Event()
    app = _App(provider.get_tracer("soak-app"), rate, stop)
    cpu0 = time.process_time()
    app.start()
    def progress(sample: dict[str, Any]) -> None:
        sample.update(_backlog(processor))
        _progress(sample)

    samples = _soak_loop(minutes * 60, sample_s, rss_bytes, traced, progress)
    stop.set()
    app.join()
    cpu = time.process_time() - cpu0
    figures = traced.figures()
    provider.force_flush()
    out = {"runs": app.runs, "spans": app.spans, "app_errors": app.errors, "exported": exporter.count,
           "processor_stats": dict(processor.stats), "cpu_s": round(cpu, 1), "samples": samples, **figures}
    provider.shutdown()
    return out


# --- serve ---------------------------------------------------------------------------------------


def serve_subject(trace_memory: bool) -> None:
    """The ``serve`` subject: start the server, print its port, answer lines on stdin
    (``mark``: the warm-up snapshot; ``stats``; ``stop``: the figures, then exit)."""
    from otel_toolscore.runtime._own_process import tune_gc
    from otel_toolscore.runtime.serve import ToolScoreServer

    traced = _Traced(trace_memory)
    exporter = CountingExporter()
    mp, lp, _ = telemetry_providers("sdk")
    server = ToolScoreServer(span_exporter=exporter, meter_provider=mp, logger_provider=lp, grpc_port=0, http_port=0)
    tune_gc()  # as the `serve` command does
    addresses = server.start()
    print(json.dumps({"http": addresses.http_port}), flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "mark":
            traced.mark()
            print(json.dumps({"marked": True}), flush=True)
        elif command == "sample":
            print(json.dumps({"traced_mb": _traced_mb(), **_backlog(server.processor)}), flush=True)
        elif command == "stop":
            figures = traced.figures()
            proc = server.processor
            print(json.dumps({"exported": exporter.count, "server_stats": dict(server.stats),
                              "processor_stats": dict(proc.stats) if proc else {}, "cpu_s": time.process_time(),
                              **figures}), flush=True)
            break
    server.stop(30.0)


def run_serve(minutes: float, rate: float, sample_s: float, trace_memory: bool) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    cmd = [sys.executable, "-m", "benchmarks.soak", "--_serve"] + ([] if trace_memory else ["--no-tracemalloc"])
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env())
    assert child.stdin is not None and child.stdout is not None
    stdin, stdout = child.stdin, child.stdout

    def ask(command: str) -> dict[str, Any]:
        stdin.write(command + "\n")
        stdin.flush()
        return json.loads(stdout.readline())

    try:
        port = json.loads(stdout.readline())["http"]
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces"), schedule_delay_millis=500))
        stop = threading.Event()
        app = _App(provider.get_tracer("soak-app"), rate, stop)
        app.start()
        marked = False

        def rss() -> int:
            return _rss_of(child.pid)

        def progress(sample: dict[str, Any]) -> None:
            nonlocal marked
            answer = ask("sample")
            if answer.get("traced_mb") is None:
                answer.pop("traced_mb", None)
            sample.update(answer)
            if trace_memory:
                if not marked and sample["t_s"] >= minutes * 60 / 6:
                    ask("mark")
                    marked = True
            _progress(sample)

        samples = _soak_loop(minutes * 60, sample_s, rss, None, progress)
        stop.set()
        app.join()
        provider.force_flush()
        provider.shutdown()
        time.sleep(5)  # the server's decision wait: the last runs are scored and forwarded
        figures = ask("stop")
    finally:
        child.stdin.close()
        child.wait(60)
    return {"runs": app.runs, "spans": app.spans, "app_errors": app.errors, "samples": samples, **figures}


# --- the verdict ---------------------------------------------------------------------------------


def verdict(samples: Sequence[dict[str, Any]], key: str = "rss_mb") -> dict[str, Any]:
    """Flat: every sample of the last two thirds within ``FLAT_WITHIN`` of that window's first."""
    end = samples[-1]["t_s"]
    window = [s for s in samples if s["t_s"] >= end / 3 and key in s]
    if len(window) < 2:
        return {"flat": None, "reason": "too few samples"}
    first = window[0][key]
    lo, hi = min(s[key] for s in window), max(s[key] for s in window)
    ts = [s["t_s"] / 60 for s in window]
    vs = [s[key] for s in window]
    mt, mv = sum(ts) / len(ts), sum(vs) / len(vs)
    slope = sum((t - mt) * (v - mv) for t, v in zip(ts, vs)) / max(1e-9, sum((t - mt) ** 2 for t in ts))
    return {"window_from_s": window[0]["t_s"], "first_mb": first, "min_mb": lo, "max_mb": hi,
            "last_mb": window[-1][key], "spread_pct": round(100 * max(hi - first, first - lo) / first, 2),
            "slope_mb_per_min": round(slope, 3), "flat": max(hi - first, first - lo) <= FLAT_WITHIN * first}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--mode", choices=("app", "serve"), default="app")
    ap.add_argument("--rate", type=float, default=30.0, help="agent runs per second")
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between RSS samples")
    ap.add_argument("--no-tracemalloc", dest="tracemalloc", action="store_false")
    ap.add_argument("--json", type=Path, default=None, help="write the result here too")
    ap.add_argument("--_serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._serve:
        serve_subject(args.tracemalloc)
        return {}
    print(f"soak: {args.mode}, {args.rate:g} runs/s for {args.minutes:g} min, RSS every {args.sample:g} s",
          file=sys.stderr)
    run = run_app if args.mode == "app" else run_serve
    result = run(args.minutes, args.rate, args.sample, args.tracemalloc)
    out = {"benchmark": "soak", "mode": args.mode, "minutes": args.minutes, "rate": args.rate,
           "tracemalloc": args.tracemalloc, "machine": machine(), **result, "rss": verdict(result["samples"])}
    if args.tracemalloc:
        out["traced"] = verdict(result["samples"], "traced_mb")
    r = out["rss"]
    print(f"{args.mode}: {out['runs']} runs ({out['runs'] / (args.minutes * 60):.1f}/s), RSS over the last two thirds "
          f"{r.get('first_mb')} → {r.get('last_mb')} MB (min {r.get('min_mb')}, max {r.get('max_mb')}, "
          f"spread {r.get('spread_pct')} %, slope {r.get('slope_mb_per_min')} MB/min): "
          f"{'flat' if r.get('flat') else 'NOT flat'}", file=sys.stderr)
    for g in out.get("top_growth", [])[:10]:
        print(f"  {g['size_diff_kb']:+9.1f} KB  {g['count_diff']:+7d} blocks  {g['site']}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
