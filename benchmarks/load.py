"""Sustained load: an open-loop app at a fixed rate of agent runs, for minutes, with a slow judge.

App threads create 10-span agent runs (``workload.genai_run``: an ``invoke_agent`` span, 4
``chat`` spans, 5 ``execute_tool`` spans, GenAI attributes) on a schedule (run ``i`` is due at
``start + i / rate`` whether or not earlier runs were scored: open loop) through a real SDK
``TracerProvider`` with ``ToolScoreSpanProcessor(BatchSpanProcessor(counting exporter))``. The
scorers are the three code scorers plus ``tool_call_appropriateness``, whose judge is
``tests/support/judge_server.py`` in a child process on 127.0.0.1, answering every request after
``--judge-delay`` seconds, reached through the real litellm client. When scoring cannot keep
up, the processor must shed scoring (counted in ``toolscore.evaluations{outcome="dropped"}``),
never spans, and stay within its bounds.

Every second a sampler records the achieved rate, RSS, ``ToolScoreSpanProcessor.backlog()``,
the ready-queue and judge in-flight sizes against their caps, and spans exported so far. At the
end (after ``force_flush``, so every judge in flight has answered): spans created vs exported
(app spans carry sequential span ids; the exporter marks each id in a bitmap, so a lost or
duplicated span is found exactly, in flat memory), ``toolscore.evaluations`` by scorer and
outcome from a real SDK ``InMemoryMetricReader``, whether every run is accounted for once per
scorer (scored + skipped + error + dropped = runs; a queue-full drop also counts in
``toolscore.traces.evicted{reason="queue_full"}``), RSS min/median/max and its slope over the
second half, ``span.end()`` latency and CPU per run in the app thread, CPU by thread, and the
cyclic GC's pauses. 20 warm-up runs (litellm imported, first judge calls made) come first.

Baseline (``--baseline-seconds``, default 30; 0: none), run first in a child process: the same
app on the same schedule with spans going straight to the BatchSpanProcessor, no processor.

    .venv/bin/python -m benchmarks load [--rate 1000] [--duration 180] [--judge-delay 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import array
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

from benchmarks.common import child_env, emit_json, machine, percentile, rss_bytes, telemetry_providers
from benchmarks.workload import SpanSpec, emit_run, genai_run

MB = 1024 * 1024
APP_SCOPE = "toolscore-load-app"
#: app span ids are this tag in the top 16 bits and a sequence number below: the exporter can
#: tell an app span (and which one) from the processor's evaluation spans, without a set of ids
_TAG = 0x5AFE
_SEQ_BITS = 48
_SEQ_MASK = (1 << _SEQ_BITS) - 1

CODE_SCORERS = ("tool_call_accuracy", "tool_call_validation", "tool_result_verification")
LLM_SCORER = "tool_call_appropriateness"
JUDGE_MODEL = "openai/judge-test"
OUTCOMES = ("scored", "skipped", "error", "dropped")


class SequentialSpanIds(IdGenerator):
    """Random trace ids (sampling and trace-id hashing see realistic ids); span ids numbered."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._next = itertools.count()  # next() on a count is atomic under the GIL

    def generate_span_id(self) -> int:
        return (_TAG << _SEQ_BITS) | next(self._next)

    def generate_trace_id(self) -> int:
        return self._random.generate_trace_id()


class LedgerExporter(SpanExporter):
    """Counts exported spans; app spans are marked in a bitmap by sequence number, so each
    missing or repeated one is known exactly and memory stays flat (one byte per span)."""

    def __init__(self, capacity: int) -> None:
        self._seen = bytearray(max(1, capacity))
        self.app = 0
        self.duplicates = 0
        self.other = 0  # evaluation spans (the processor's own)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            seen = self._seen
            for span in spans:
                sid = span.context.span_id
                scope = span.instrumentation_scope
                if sid >> _SEQ_BITS != _TAG or scope is None or scope.name != APP_SCOPE:
                    self.other += 1
                    continue
                i = sid & _SEQ_MASK
                if i >= len(seen):
                    seen.extend(bytes(max(i + 1 - len(seen), len(seen))))
                if seen[i]:
                    self.duplicates += 1
                else:
                    seen[i] = 1
                    self.app += 1
        return SpanExportResult.SUCCESS

    def missing(self, created: int) -> list[int]:
        """Sequence numbers below ``created`` never exported (the first 20)."""
        with self._lock:
            view = self._seen[:created]
        out: list[int] = []
        start = 0
        while len(out) < 20:
            i = view.find(0, start)
            if i < 0:
                break
            out.append(i)
            start = i + 1
        return out

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


# --- the judge, in a child process ------------------------------------------------------------------

_JUDGE_MAIN = """
import sys
from tests.support.judge_server import JudgeServer, auto_responder
server = JudgeServer(auto_responder(delay=float(sys.argv[1]))).start()
print(server.url, flush=True)
sys.stdin.read()  # until the parent closes it
print(len(server.requests), server.max_in_flight, flush=True)
server.stop()
"""


class JudgeProcess:
    """``tests/support/judge_server.py`` answering after ``delay`` s, in its own process so that its
    threads take neither the app's GIL nor its memory."""

    def __init__(self, delay: float) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _JUDGE_MAIN, str(delay)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(),
        )
        assert self._proc.stdout is not None
        self.url = self._proc.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self._proc.kill()
            raise RuntimeError(f"judge server did not start: {self.url!r}")
        self.requests = 0
        self.max_in_flight = 0

    def stop(self) -> None:
        """Stop it; ``requests`` and ``max_in_flight`` are then what it saw."""
        if self._proc.poll() is not None:
            return
        try:
            out, _ = self._proc.communicate(input="", timeout=30)
            fields = out.split()
            if len(fields) >= 2:
                self.requests, self.max_in_flight = int(fields[0]), int(fields[1])
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> JudgeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- configuration and the pipeline ----------------------------------------------------------------


@dataclass
class LoadConfig:
    rate: float = 1000.0  # runs/s
    duration: float = 180.0  # s of generation
    judge_delay: float = 2.0  # s per judge answer
    judge_concurrency: int = 16  # the judge client's max_concurrency (its default)
    threads: int = 1  # app threads sharing the schedule
    pool: int = 2000  # distinct runs, cycled
    spans_per_run: int = 10
    downstream: str = "batch"  # batch | simple
    bsp_queue: int = 65_536  # BatchSpanProcessor max_queue_size
    sample_interval: float = 1.0
    flush_timeout: float = 180.0  # s for force_flush after the load (judges in flight answer)
    warmup_runs: int = 20  # emitted and flushed before the load (imports litellm, fills caches)
    overrides: dict[str, Any] = field(default_factory=dict)  # processor settings


@dataclass
class Pipeline:
    provider: TracerProvider
    tracer: trace.Tracer
    processor: Any  # ToolScoreSpanProcessor; None for the baseline
    exporter: LedgerExporter
    reader: InMemoryMetricReader
    meter_provider: MeterProvider
    logger_provider: Any


def build_pipeline(cfg: LoadConfig, judge_url: str | None, capacity: int) -> Pipeline:
    """The app's SDK pipeline; ``judge_url`` None: the baseline, without ToolScoreSpanProcessor."""
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    _, logger_provider, _ = telemetry_providers("sdk")
    exporter = LedgerExporter(capacity)
    downstream: SpanProcessor
    if cfg.downstream == "simple":
        downstream = SimpleSpanProcessor(exporter)
    else:
        # The SDK's drop counter goes to the same reader: a span it dropped would show there.
        downstream = BatchSpanProcessor(exporter, max_queue_size=cfg.bsp_queue, max_export_batch_size=2048,
                                        schedule_delay_millis=500, meter_provider=meter_provider)
    provider = TracerProvider(id_generator=SequentialSpanIds())
    if judge_url is None:
        provider.add_span_processor(downstream)
        return Pipeline(provider, provider.get_tracer(APP_SCOPE), None, exporter, reader, meter_provider,
                        logger_provider)
    from otel_toolscore.runtime.processor import ToolScoreSpanProcessor

    judge_options = {"model": JUDGE_MODEL, "api_base": judge_url, "api_key": "sk-load-test",
                     "max_concurrency": cfg.judge_concurrency, "timeout_s": max(30.0, 4 * cfg.judge_delay),
                     # every judged run is a real request, not a cache hit of a pool run seen before
                     "cache_size": 0}
    overrides = dict(cfg.overrides)
    options = dict(overrides.pop("scorer_options", {}))
    options[LLM_SCORER] = {**judge_options, **options.get(LLM_SCORER, {})}
    scorers = overrides.pop("scorers", [*CODE_SCORERS, LLM_SCORER])
    processor = ToolScoreSpanProcessor(downstream, scorers, meter_provider=meter_provider,
                                       logger_provider=logger_provider, scorer_options=options, **overrides)
    provider.add_span_processor(processor)
    return Pipeline(provider, provider.get_tracer(APP_SCOPE), processor, exporter, reader, meter_provider,
                    logger_provider)


# --- the app -------------------------------------------------------------------------------------------


class _Lat:
    """Preallocated ``span.end()`` durations (ns, capped at 2**32-1): flat memory, exact percentiles."""

    def __init__(self, n: int) -> None:
        self.values = array.array("I", bytes(4 * max(1, n)))
        self.n = 0

    def add(self, ns: int) -> None:
        if self.n < len(self.values):
            self.values[self.n] = min(ns, 0xFFFFFFFF)
            self.n += 1


class AppThread(threading.Thread):
    """Emits runs ``first, first + step, …`` each at its due time (open loop: a late run is
    emitted at once, none is skipped), timing every ``span.end()``."""

    def __init__(self, tracer: trace.Tracer, pool: Sequence[Sequence[SpanSpec]], start_ns: int, rate: float,
                 n_runs: int, first: int, step: int, stop: threading.Event) -> None:
        super().__init__(name=f"app-{first}", daemon=True)
        self.tracer, self.pool, self.start_ns = tracer, pool, start_ns
        self.interval_ns = 1e9 / rate
        self.n_runs, self.first, self.step, self.stop_event = n_runs, first, step, stop
        mine = len(range(first, n_runs, step))
        self.end_lat = _Lat(mine * len(pool[0]))
        self.root_lat = _Lat(mine)
        self.runs = 0
        self.spans = 0
        self.max_lag_ns = 0
        self.errors = 0
        self.cpu_s = 0.0  # this thread's CPU time, set when it is done

    def run(self) -> None:
        for i in range(self.first, self.n_runs, self.step):
            if self.stop_event.is_set():
                break
            due = self.start_ns + int(i * self.interval_ns)
            wait = due - time.perf_counter_ns()
            if wait > 0:
                time.sleep(wait / 1e9)
            else:
                self.max_lag_ns = max(self.max_lag_ns, -wait)
            try:
                self.spans += self._emit(self.pool[i % len(self.pool)], 0, None)
            except Exception:  # noqa: BLE001 - counted: nothing may raise into the app
                self.errors += 1
            self.runs += 1
        self.cpu_s = time.thread_time()

    def _emit(self, specs: Sequence[SpanSpec], i: int, parent: Any) -> int:
        # workload._emit, with span.end() timed
        spec = specs[i]
        ctx = trace.set_span_in_context(parent) if parent is not None else None
        span = self.tracer.start_span(spec.name, context=ctx, kind=spec.kind, attributes=spec.attributes)
        n = 1
        for c in spec.children:
            n += self._emit(specs, c, span)
        t0 = time.perf_counter_ns()
        span.end()
        dt = time.perf_counter_ns() - t0
        self.end_lat.add(dt)
        if i == 0:
            self.root_lat.add(dt)
        return n


# --- reading the metrics -------------------------------------------------------------------------------


def metric_points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, Any], float]]:
    data = reader.get_metrics_data()
    out: list[tuple[dict[str, Any], float]] = []
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        out.append((dict(point.attributes or {}), getattr(point, "value", 0)))
    return out


def evaluations(reader: InMemoryMetricReader) -> dict[str, dict[str, int]]:
    """``toolscore.evaluations`` as {scorer: {outcome: count}}."""
    from otel_toolscore import semconv as sc

    out: dict[str, dict[str, int]] = {}
    for attrs, value in metric_points(reader, sc.METRIC_EVALUATIONS):
        name = str(attrs.get(sc.GEN_AI_EVALUATION_NAME))
        outcome = str(attrs.get(sc.OUTCOME))
        out.setdefault(name, {})[outcome] = out.setdefault(name, {}).get(outcome, 0) + int(value)
    return out


def evicted(reader: InMemoryMetricReader) -> dict[str, int]:
    from otel_toolscore import semconv as sc

    out: dict[str, int] = {}
    for attrs, value in metric_points(reader, sc.METRIC_TRACES_EVICTED):
        reason = str(attrs.get(sc.EVICTION_REASON))
        out[reason] = out.get(reason, 0) + int(value)
    return out


def sdk_span_drops(reader: InMemoryMetricReader) -> int:
    """Spans the SDK's BatchSpanProcessor itself dropped (queue full or after shutdown)."""
    total = 0
    for attrs, value in metric_points(reader, "otel.sdk.processor.span.processed"):
        if attrs.get("error.type"):
            total += int(value)
    return total


def bounds_of(processor: Any) -> dict[str, Any]:
    """The processor's bounds right now, next to their caps (queue and judge sizes are read from
    private fields, with a fallback: the benchmark must not break when they are renamed)."""
    s = processor.settings
    backlog = processor.backlog()
    queue = getattr(processor, "_queue", None)
    judges = getattr(getattr(processor, "_engine", None), "_judges", None)
    return {
        "pending_traces": backlog.pending_traces, "max_pending_traces": s.max_pending_traces,
        "oldest_pending_age_s": backlog.oldest_pending_age_s, "queue_full": backlog.queue_full,
        "ready_queue": queue.qsize() if queue is not None else None, "queue_size": s.queue_size,
        "judge_inflight": getattr(judges, "_inflight", None), "llm_max_inflight": s.llm_max_inflight,
        "holds": len(getattr(processor, "_holds", ())),
    }


class Sampler(threading.Thread):
    def __init__(self, pipe: Pipeline, apps: Sequence[AppThread], interval: float) -> None:
        super().__init__(name="load-sampler", daemon=True)
        self.pipe, self.apps, self.interval = pipe, apps, interval
        self.samples: list[dict[str, Any]] = []
        self.max_bounds: dict[str, Any] = {}
        self._halt = threading.Event()
        self._t0 = time.monotonic()
        self._cpu0 = time.process_time()

    def sample(self) -> dict[str, Any]:
        now = time.monotonic() - self._t0
        runs = sum(a.runs for a in self.apps)
        dropped = {name: by.get("dropped", 0) for name, by in evaluations(self.pipe.reader).items()}
        b = bounds_of(self.pipe.processor) if self.pipe.processor is not None else {}
        for key in ("pending_traces", "ready_queue", "judge_inflight", "holds"):
            if b.get(key) is not None:
                self.max_bounds[key] = max(self.max_bounds.get(key, 0), b[key])
        cpu = time.process_time()
        prev = self.samples[-1] if self.samples else {"t": 0.0, "runs": 0, "cpu_s": self._cpu0}
        dt = max(1e-9, now - prev["t"])
        s = {"t": round(now, 2), "runs": runs, "rate": (runs - prev["runs"]) / dt,
             # this process's CPU use (2.0 = both cores) and the machine's load (other processes too)
             "cpu_s": cpu, "process_cpu": (cpu - prev["cpu_s"]) / dt, "loadavg_1m": os.getloadavg()[0],
             "rss_mb": rss_bytes() / MB,
             # Python objects' memory blocks alive: grows with a leak in Python code, not with
             # allocator fragmentation (which RSS shows too)
             "py_blocks": sys.getallocatedblocks(), "exported_app": self.pipe.exporter.app,
             "exported_other": self.pipe.exporter.other, "dropped": dropped, **b}
        self.samples.append(s)
        return s

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._halt.set()
        self.join()


def thread_cpu() -> dict[str, float]:
    """CPU seconds used so far by each live Python thread, by name (Linux /proc; empty elsewhere):
    shows how the process's CPU is shared between the app, the worker, the judge loop…"""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for t in threading.enumerate():
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # utime and stime are fields 14 and 15 of stat; [0] here is field 3
        out[t.name] = out.get(t.name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _slope_mb_per_min(points: Sequence[tuple[float, float]]) -> float | None:
    if len(points) < 3:
        return None
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else None


def _lat_summary(lats: Sequence[_Lat]) -> dict[str, float]:
    values = sorted(v for lat in lats for v in lat.values[: lat.n])
    if not values:
        return {}
    us = [v / 1000 for v in (percentile(values, 50), percentile(values, 99), percentile(values, 99.9), values[-1])]
    return {"n": len(values), "p50_us": us[0], "p99_us": us[1], "p999_us": us[2], "max_us": us[3]}


# --- the run -----------------------------------------------------------------------------------------


class GcWatch:
    """Time the cyclic garbage collector holds the GIL, by generation (a pause for every thread)."""

    def __init__(self) -> None:
        self.pause_s = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            gen = info.get("generation", 0)
            self.pause_s[gen] += time.perf_counter() - self._t0
            self.count[gen] += 1

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)

    def summary(self) -> dict[str, Any]:
        return {"collections": list(self.count), "pause_s": [round(p, 3) for p in self.pause_s]}


@dataclass
class Generated:
    apps: list[AppThread]
    sampler: Sampler
    generation_s: float
    runs: int
    created: int
    process_cpu_s: float
    thread_cpu_s: dict[str, float]
    gc: dict[str, Any]
    rss_start_mb: float


def generate(pipe: Pipeline, pool: Sequence[Sequence[SpanSpec]], cfg: LoadConfig, n_runs: int,
             progress: Any = None) -> Generated:
    """Run the app threads on their schedule until every run is emitted, sampling meanwhile.
    The sampler is left running (the caller stops it once the pipeline has drained)."""
    gc.collect()
    rss_start = rss_bytes()
    stop = threading.Event()
    start_ns = time.perf_counter_ns() + 50_000_000
    apps = [AppThread(pipe.tracer, pool, start_ns, cfg.rate, n_runs, k, cfg.threads, stop)
            for k in range(cfg.threads)]
    sampler = Sampler(pipe, apps, cfg.sample_interval)
    cpu_before = thread_cpu()
    cpu_t0 = time.process_time()
    with GcWatch() as gcw:
        sampler.start()
        for a in apps:
            a.start()
        try:
            while any(a.is_alive() for a in apps):
                for a in apps:
                    a.join(timeout=cfg.sample_interval)
                if progress is not None and sampler.samples:
                    progress(sampler.samples[-1])
        except KeyboardInterrupt:
            stop.set()
            for a in apps:
                a.join()
        generation_s = (time.perf_counter_ns() - start_ns) / 1e9
        cpu_after = thread_cpu()
        process_cpu_s = time.process_time() - cpu_t0
    by_thread = {a.name: round(a.cpu_s, 2) for a in apps}
    by_thread.update({name: round(cpu - cpu_before.get(name, 0.0), 2) for name, cpu in cpu_after.items()
                      if cpu - cpu_before.get(name, 0.0) > 0.005 and not name.startswith("app-")})
    return Generated(apps, sampler, generation_s, sum(a.runs for a in apps), sum(a.spans for a in apps),
                     process_cpu_s, by_thread, gcw.summary(), rss_start / MB)


def _app_figures(g: Generated, n_runs: int) -> dict[str, Any]:
    """What the app saw, the same for the load and the baseline."""
    samples = g.sampler.samples
    app_cpu = sum(a.cpu_s for a in g.apps)
    return {
        "runs": g.runs, "target_runs": n_runs, "generation_s": g.generation_s,
        "achieved_rate": g.runs / g.generation_s, "max_lag_s": max(a.max_lag_ns for a in g.apps) / 1e9,
        "app_errors": sum(a.errors for a in g.apps), "spans_created": g.created,
        "app_cpu_us_per_run": 1e6 * app_cpu / max(1, g.runs),
        "process_cpu_s": g.process_cpu_s, "thread_cpu_s": g.thread_cpu_s, "gc": g.gc,
        "loadavg_1m_median": statistics.median(s["loadavg_1m"] for s in samples) if samples else None,
        "span_end_latency": _lat_summary([a.end_lat for a in g.apps]),
        "agent_span_end_latency": _lat_summary([a.root_lat for a in g.apps]),
        "rss_start_mb": g.rss_start_mb,
    }


def _rss_figures(all_samples: Sequence[dict[str, Any]], load_s: float) -> dict[str, Any]:
    """RSS while the load ran (halves and slope over the load only: the drain after it is not
    load), and at the last sample (after the drain)."""
    samples = [s for s in all_samples if s["t"] <= load_s] or list(all_samples)
    rss = [s["rss_mb"] for s in samples]
    if not rss:
        return {}
    half = [(s["t"], s["rss_mb"]) for s in samples[len(samples) // 2:]]
    first_half = rss[: len(rss) // 2] or rss
    second_half = rss[len(rss) // 2:] or rss
    blocks = [(s["t"], s["py_blocks"] / 1000) for s in samples[len(samples) // 2:]]
    return {"min": min(rss), "median": statistics.median(rss), "max": max(rss),
            "first_half_max": max(first_half), "second_half_max": max(second_half),
            "second_half_slope_mb_per_min": _slope_mb_per_min(half),
            "py_blocks_k_min_max": [min(s["py_blocks"] for s in samples) / 1000, max(s["py_blocks"] for s in samples) / 1000],
            "second_half_py_blocks_slope_k_per_min": _slope_mb_per_min(blocks),
            "last_mb": all_samples[-1]["rss_mb"]}


def _pool(cfg: LoadConfig, n_runs: int) -> list[list[SpanSpec]]:
    return [genai_run(cfg.spans_per_run, seed=i) for i in range(min(cfg.pool, max(1, n_runs)))]


def run_baseline(cfg: LoadConfig) -> dict[str, Any]:
    """The same app and schedule without ToolScoreSpanProcessor (spans straight to the
    BatchSpanProcessor): what the app achieves and pays on this machine with nothing scoring."""
    n_runs = int(cfg.rate * cfg.duration)
    pool = _pool(cfg, n_runs)
    pipe = build_pipeline(cfg, None, n_runs * len(pool[0]))
    g = generate(pipe, pool, cfg, n_runs)
    pipe.provider.shutdown()
    g.sampler.stop()
    return {**_app_figures(g, n_runs), "spans_exported": pipe.exporter.app, "duplicates": pipe.exporter.duplicates,
            "rss_mb": _rss_figures(g.sampler.samples, g.generation_s)}


def run_load(cfg: LoadConfig, progress: Any = None) -> dict[str, Any]:
    """Run the load; returns every figure as a dict (see the module docstring)."""
    n_runs = int(cfg.rate * cfg.duration)
    pool = _pool(cfg, n_runs)
    with JudgeProcess(cfg.judge_delay) as judge:
        pipe = build_pipeline(cfg, judge.url, (n_runs + cfg.warmup_runs) * len(pool[0]))
        processor = pipe.processor
        warm_spans = sum(emit_run(pipe.tracer, pool[i % len(pool)]) for i in range(cfg.warmup_runs))
        processor.force_flush(int(cfg.flush_timeout * 1000))
        g = generate(pipe, pool, cfg, n_runs, progress)
        # Everything the app started is scored or dropped; every judge in flight answers.
        t_flush = time.monotonic()
        flushed = processor.force_flush(int(cfg.flush_timeout * 1000))
        flush_s = time.monotonic() - t_flush
        g.sampler.stop()
        final_bounds = bounds_of(processor)
        evals = evaluations(pipe.reader)
        evicts = evicted(pipe.reader)
        stats = dict(processor.stats)
        pipe.provider.shutdown()  # the BatchSpanProcessor exports what it still has
        pipe.logger_provider.shutdown()
        sdk_drops = sdk_span_drops(pipe.reader)
        judge.stop()
    exp = pipe.exporter
    # A queue-full drop is counted both ways (dropped for every scorer, and evicted{queue_full});
    # other evictions only as evicted{reason}, so they show as unaccounted runs.
    evicted_other = sum(n for reason, n in evicts.items() if reason != "queue_full")
    accounting = {}
    runs = cfg.warmup_runs + g.runs  # the metrics count the warm-up too
    created = warm_spans + g.created
    for name in cfg.overrides.get("scorers", (*CODE_SCORERS, LLM_SCORER)):
        by = evals.get(name, {})
        total = sum(by.get(o, 0) for o in OUTCOMES)
        accounting[name] = {**{o: by.get(o, 0) for o in OUTCOMES}, "total": total, "unaccounted": runs - total}
    s = processor.settings
    return {
        "benchmark": "load", "machine": machine(), "config": asdict(cfg),
        "settings": {"queue_size": s.queue_size, "llm_max_inflight": s.llm_max_inflight,
                     "max_pending_traces": s.max_pending_traces, "hold_timeout": s.hold_timeout,
                     "completion_grace": s.completion_grace, "trace_ttl": s.trace_ttl},
        **_app_figures(g, n_runs),
        # from here on the warm-up is included: every run and span the app made
        "runs_with_warmup": runs, "spans_created_with_warmup": created,
        "spans_exported": exp.app, "duplicates": exp.duplicates, "missing": created - exp.app,
        "missing_first": exp.missing(created), "evaluation_spans_exported": exp.other,
        "sdk_span_drops": sdk_drops, "force_flush_ok": flushed, "flush_s": flush_s,
        "evaluations": evals, "evicted": evicts, "evicted_other_than_queue_full": evicted_other,
        "accounting": accounting, "stats": stats,
        "judge_requests": judge.requests, "judge_max_in_flight": judge.max_in_flight,
        "rss_mb": _rss_figures(g.sampler.samples, g.generation_s),
        "max_bounds": g.sampler.max_bounds, "final_bounds": final_bounds,
        "samples": g.sampler.samples,
    }


def _app_lines(r: dict[str, Any], label: str) -> list[str]:
    lines = [
        (f"{label}: runs {r['runs']}/{r['target_runs']} in {r['generation_s']:.1f} s, achieved {r['achieved_rate']:.1f} "
         f"runs/s, max lag behind schedule {r['max_lag_s'] * 1000:.0f} ms, app errors {r['app_errors']}; app thread CPU "
         f"{r['app_cpu_us_per_run']:.0f} µs/run; process CPU {r['process_cpu_s']:.0f} s; GC {r['gc']}; machine load "
         f"average (1 min, median) {r['loadavg_1m_median']:.1f}"),
    ]
    for key, what in (("span_end_latency", "every span"), ("agent_span_end_latency", "agent spans")):
        lat = r[key]
        if lat:
            lines.append(f"  span.end() in the app thread, {what}: p50 {lat['p50_us']:.1f} µs, p99 {lat['p99_us']:.1f} µs, "
                         f"p99.9 {lat['p999_us']:.0f} µs, max {lat['max_us'] / 1000:.1f} ms (n={lat['n']})")
    m = r["rss_mb"]
    if m:
        lines.append(f"  RSS during the load: start {r['rss_start_mb']:.0f} MB; min {m['min']:.0f}, median {m['median']:.0f}, max "
                     f"{m['max']:.0f} MB; first-half max {m['first_half_max']:.0f}, second-half max "
                     f"{m['second_half_max']:.0f} MB; second-half slope {m['second_half_slope_mb_per_min'] or 0:+.2f} MB/min; "
                     f"Python blocks {m['py_blocks_k_min_max'][0]:.0f}k–{m['py_blocks_k_min_max'][1]:.0f}k, second-half slope "
                     f"{m['second_half_py_blocks_slope_k_per_min'] or 0:+.1f}k/min; RSS at the end {m['last_mb']:.0f} MB")
    return lines


def render(r: dict[str, Any]) -> str:
    c = r["config"]
    lines = [
        (f"target {c['rate']:.0f} runs/s × {c['duration']:.0f} s ({c['threads']} app thread(s)), judge {c['judge_delay']} s "
         f"per answer, judge concurrency {c['judge_concurrency']}; settings {r['settings']}"),
        *_app_lines(r, "with ToolScore"),
    ]
    if r.get("baseline"):
        lines += _app_lines(r["baseline"], f"baseline (no processor, {r['baseline']['generation_s']:.0f} s)")
    lines += [
        f"CPU seconds by thread during the load: {r['thread_cpu_s']}",
        (f"with the {c['warmup_runs']} warm-up runs: runs {r['runs_with_warmup']}, spans created "
         f"{r['spans_created_with_warmup']}, exported {r['spans_exported']} (missing {r['missing']}, duplicates "
         f"{r['duplicates']}, SDK drops {r['sdk_span_drops']}); evaluation spans {r['evaluation_spans_exported']}"),
        (f"force_flush {'ok' if r['force_flush_ok'] else 'TIMED OUT'} in {r['flush_s']:.1f} s; judge requests "
         f"{r['judge_requests']}, max in flight {r['judge_max_in_flight']}; evicted {r['evicted'] or 0}; stats {r['stats']}"),
        f"bounds (max seen): {r['max_bounds']}",
        "",
        "| scorer | scored | skipped | error | dropped | total | unaccounted |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, a in r["accounting"].items():
        lines.append(f"| {name} | {a['scored']} | {a['skipped']} | {a['error']} | {a['dropped']} | {a['total']} | "
                     f"{a['unaccounted']} |")
    samples = r["samples"]
    step = max(1, len(samples) // 12)
    lines += ["", ("| t (s) | runs/s | process CPU | load avg | RSS (MB) | pending | ready queue | judge in flight | "
                   "exported spans | dropped (all scorers) |"), "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in samples[::step]:
        lines.append(f"| {s['t']:.0f} | {s['rate']:.0f} | {s['process_cpu']:.2f} | {s['loadavg_1m']:.1f} | {s['rss_mb']:.0f} | "
                     f"{s['pending_traces']} | {s['ready_queue']} | {s['judge_inflight']} | {s['exported_app']} | "
                     f"{sum(s['dropped'].values())} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=1000.0, help="runs/s (default 1000)")
    ap.add_argument("--duration", type=float, default=180.0, help="s of load (default 180)")
    ap.add_argument("--judge-delay", type=float, default=2.0, help="s per judge answer (default 2)")
    ap.add_argument("--judge-concurrency", type=int, default=16, help="judge client max_concurrency (default 16)")
    ap.add_argument("--threads", type=int, default=1, help="app threads (default 1)")
    ap.add_argument("--pool", type=int, default=2000, help="distinct runs, cycled (default 2000)")
    ap.add_argument("--downstream", choices=("batch", "simple"), default="batch")
    ap.add_argument("--overrides", default="{}", help="processor settings as JSON")
    ap.add_argument("--baseline-seconds", type=float, default=30.0,
                    help="first run the same app without the processor for this long, in a child process (0: no)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--quiet", action="store_true", help="no per-second progress on stderr")
    ap.add_argument("--_baseline", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    cfg = LoadConfig(rate=args.rate, duration=args.duration, judge_delay=args.judge_delay,
                     judge_concurrency=args.judge_concurrency, threads=args.threads, pool=args.pool,
                     downstream=args.downstream, overrides=json.loads(args.overrides))
    if args._baseline:
        out = run_baseline(cfg)
        emit_json(out)
        return out
    baseline = None
    if args.baseline_seconds > 0:
        cmd = [sys.executable, "-m", "benchmarks.load", "--_baseline", "--rate", str(args.rate), "--duration",
               str(args.baseline_seconds), "--threads", str(args.threads), "--pool", str(args.pool),
               "--downstream", args.downstream]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"baseline failed:\n{proc.stdout}\n{proc.stderr}")
        baseline = json.loads(line[7:])

    def progress(s: dict[str, Any]) -> None:
        if not args.quiet:
            print(f"t={s['t']:6.1f}s rate={s['rate']:6.0f}/s rss={s['rss_mb']:6.0f}MB pending={s['pending_traces']} "
                  f"queue={s['ready_queue']} judges={s['judge_inflight']} exported={s['exported_app']} "
                  f"dropped={sum(s['dropped'].values())}", file=sys.stderr, flush=True)

    result = run_load(cfg, progress)
    result["baseline"] = baseline
    print(render(result), file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    emit_json({k: v for k, v in result.items() if k != "samples"})
    return result


if __name__ == "__main__":
    main()
