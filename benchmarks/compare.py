"""Before/after, in one process: the same measurements on an older checkout of the package and on
this one, interleaved, so that the ratio is immune to how busy the (shared) machine is.

The older tree is copied to a temporary directory as package ``otel_toolscore_before`` (imports
rewritten) and imported beside ``otel_toolscore``. For example, against the commit before the
performance work::

    git archive 56d7128 otel_toolscore | tar -x -C /tmp/before
    .venv/bin/python -m benchmarks compare --before /tmp/before [--quick]

Measured (median of ``--repeats``, each on fresh runs so the text caches are cold):

* ``on_start+on_end``: per span, the processor alone (no-op downstream, worker idle), spans made
  by a real TracerProvider; 10-span GenAI runs, and the same with 10 plain HTTP spans per run;
* ``classify``: per span, HTTP and chat spans;
* ``build_trajectories``: per run (10 and 100 spans; attributes held as the SDK holds them);
* each code scorer, per 10-span run;
* ``_score``: the worker's whole job per 10-span run (read, assemble, score, emit), and the
  same for runs that no scorer samples.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import inspect
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from benchmarks.common import TimedProcessor, emit_json, machine, telemetry_providers
from benchmarks.hotpath import _Null, _PassThrough
from benchmarks.workload import emit_run, genai_run, readable_run


def load_before(tree: Path) -> str:
    """Copy ``tree/otel_toolscore`` as ``otel_toolscore_before`` and make it importable."""
    tmp = Path(tempfile.mkdtemp(prefix="toolscore-before-"))
    dst = tmp / "otel_toolscore_before"
    shutil.copytree(tree / "otel_toolscore", dst, ignore=shutil.ignore_patterns("__pycache__"))
    for path in dst.rglob("*.py"):
        text = path.read_text()
        path.write_text(re.sub(r"\botel_toolscore\b(?=[.\s]|$)", "otel_toolscore_before", text, flags=re.M))
    sys.path.insert(0, str(tmp))
    return "otel_toolscore_before"


# logical name -> where it lives now, then where it lived before the layout by stage (a9dcab1)
_MODULES: dict[str, tuple[str, ...]] = {
    "processor": ("runtime.processor", "processor"),
    "assemble": ("assemble",),
    "conventions": ("conventions",),
    "scorers.base": ("scorers.base",),
    "scorers._facts": ("scorers._facts",),
    "scorers.tool_results": ("scorers.tool_results",),
}


def _mods(name: str) -> dict[str, ModuleType]:
    import importlib

    def first(paths: tuple[str, ...]) -> ModuleType:
        for path in paths[:-1]:
            try:
                return importlib.import_module(f"{name}.{path}")
            except ModuleNotFoundError:
                continue
        return importlib.import_module(f"{name}.{paths[-1]}")

    return {logical: first(paths) for logical, paths in _MODULES.items()}


def per_span_hot(mods: dict[str, ModuleType], with_http: bool, n_runs: int) -> float:
    """Median ns of on_start+on_end per span (timer overhead subtracted)."""
    mp, lp, _ = telemetry_providers("noop")
    pool = [genai_run(10, seed=i) for i in range(n_runs)]

    def run(inner: SpanProcessor) -> float:
        timed = TimedProcessor(inner)
        provider = TracerProvider()
        provider.add_span_processor(timed)
        tracer = provider.get_tracer("x")
        old = sys.getswitchinterval()
        sys.setswitchinterval(100.0)
        try:
            for specs in pool:
                emit_run(tracer, specs)
                if with_http:
                    for _ in range(10):
                        tracer.start_span("GET /api", attributes={"http.request.method": "GET", "url.full": "http://x/a",
                                                                  "http.response.status_code": 200}).end()
        finally:
            sys.setswitchinterval(old)
        return statistics.median(timed.pairs + timed.agent_pairs)

    proc = mods["processor"].ToolScoreSpanProcessor(_Null(), meter_provider=mp, logger_provider=lp, queue_size=10**9)
    proc._submit = lambda ready: None  # only the hot path runs: the worker stays idle
    return run(proc) - run(_PassThrough(_Null()))


def classify_ns(mods: dict[str, ModuleType], kind: str) -> float:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("x")
    attrs = ({"http.request.method": "GET", "url.full": "http://x/a", "http.response.status_code": 200}
             if kind == "http" else {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"})
    for _ in range(5000):
        tracer.start_span("s", attributes=attrs).end()
    spans = exporter.get_finished_spans()
    classify = mods["conventions"].classify
    t0 = time.perf_counter_ns()
    for s in spans:
        classify(s)
    return (time.perf_counter_ns() - t0) / len(spans)


def _clear_text_caches(mods: dict[str, Any]) -> None:
    """Cold text caches for both versions (which functions cache differs between versions)."""
    for module, name in (("scorers._facts", "extract_facts"), ("scorers.tool_results", "norm_phrase")):
        clear = getattr(getattr(mods[module], name, None), "cache_clear", None)
        if clear is not None:
            clear()


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, type=Path, help="a tree holding the older otel_toolscore/")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    n = 100 if args.quick else 300
    versions = {"before": _mods(load_before(args.before)), "after": _mods("otel_toolscore")}
    from benchmarks.throughput import NullProcessor

    results: dict[str, dict[str, list[float]]] = {}

    def record(metric: str, version: str, value: float) -> None:
        results.setdefault(metric, {}).setdefault(version, []).append(value)

    for r in range(repeats):
        specs10 = [genai_run(10, seed=(r + 1) * 100_000 + i) for i in range(n)]
        specs100 = [genai_run(100, seed=(r + 1) * 100_000 + i) for i in range(max(4, n // 10))]
        order = list(versions.items())
        for version, mods in (order if r % 2 == 0 else order[::-1]):  # alternate who goes first
            gc.collect()
            record("on_start+on_end ns/span (GenAI runs)", version, per_span_hot(mods, False, n))
            record("on_start+on_end ns/span (GenAI runs + HTTP spans)", version, per_span_hot(mods, True, n))
            record("classify ns/span (HTTP span)", version, classify_ns(mods, "http"))
            record("classify ns/span (chat span)", version, classify_ns(mods, "chat"))
            for size, specs in ((10, specs10), (100, specs100)):
                runs = [readable_run(s, trace_id=i + 1) for i, s in enumerate(specs)]
                t0 = time.thread_time()
                trajs = [mods["assemble"].build_trajectories(x) for x in runs]
                record(f"build_trajectories µs/run ({size} spans)", version, (time.thread_time() - t0) / len(runs) * 1e6)
                if size != 10:
                    continue
                _clear_text_caches(mods)
                for scorer in mods["scorers.base"].build_scorers(None):
                    t0 = time.thread_time()
                    for ts in trajs:
                        scorer.score(ts[0])
                    record(f"{scorer.name} µs/run (10 spans)", version, (time.thread_time() - t0) / len(trajs) * 1e6)
            # the whole worker job, on runs neither version has seen (cold text caches)
            runs = [readable_run(genai_run(10, seed=(r + 1) * 100_000 + 50_000 + i), trace_id=i + 1) for i in range(n)]
            mp, lp, _ = telemetry_providers("sdk")
            proc_mod = mods["processor"]
            proc = proc_mod.ToolScoreSpanProcessor(NullProcessor(), meter_provider=mp, logger_provider=lp)
            classify = mods["conventions"].classify
            # the span id a _Held carries: an int where _score formats it, else the hex text
            # (in ``_apply`` since scoring="process" split it out of ``_score``)
            cls = proc_mod.ToolScoreSpanProcessor
            # (in ``runtime._processor.scoring.Scoring.apply`` since the processor's split)
            apply = getattr(cls, "_apply", cls._score)
            try:
                apply = importlib.import_module(
                    f"{proc_mod.__name__.split('.')[0]}.runtime._processor.scoring").Scoring.apply
            except ModuleNotFoundError:
                pass
            int_ids = "format(h.span_id" in inspect.getsource(apply)
            items = []
            for spans in runs:
                held = []
                for s in spans:
                    if classify(s) == "agent":
                        sid: Any = s.context.span_id if int_ids else format(s.context.span_id, "016x")
                        held.append(proc_mod._Held(s, sid, float("inf")))
                items.append(proc_mod._Ready(spans[0].context.trace_id, spans, held))
            _clear_text_caches(mods)
            t0 = time.thread_time()
            for item in items:
                proc._score(item)
            record("_score µs/run (10 spans, SDK telemetry)", version, (time.thread_time() - t0) / len(items) * 1e6)
            proc.shutdown()
            # the same runs when no scorer samples them (default_sample_rate=0)
            proc = proc_mod.ToolScoreSpanProcessor(NullProcessor(), meter_provider=mp, logger_provider=lp,
                                                   default_sample_rate=0.0)
            t0 = time.thread_time()
            for item in items:
                proc._score(item)
            record("_score µs/run (10 spans, not sampled)", version, (time.thread_time() - t0) / len(items) * 1e6)
            proc.shutdown()
    table = []
    for metric, by in results.items():
        b, a = statistics.median(by["before"]), statistics.median(by["after"])
        ratios = [x / y for x, y in zip(by["after"], by["before"])]
        table.append({"metric": metric, "before": b, "after": a, "after_over_before": statistics.median(ratios),
                      "ratio_min": min(ratios), "ratio_max": max(ratios), "repeats": len(ratios)})
        print(f"{metric:52s} before {b:10.1f}  after {a:10.1f}  after/before {statistics.median(ratios):5.2f} "
              f"({min(ratios):.2f}–{max(ratios):.2f})", file=sys.stderr)
    out = {"benchmark": "compare", "machine": machine(), "before": str(args.before), "results": table}
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
