"""Scoring throughput: completed runs per second on one core.

What is timed is the worker's whole job for one completed trace, on the calling thread:
conventions → assemble → the three code scorers → score attributes on a copy of the agent span
→ ``gen_ai.evaluation.result`` events, metrics and the evaluation span. It is the processor's own
``_score`` (the method its worker thread runs), fed the run's ended spans; the downstream is a
no-op span processor. Rates are per CPU second of the scoring thread (so per core) and per wall
second.

``--scoring process`` times the same job split the way ``scoring="process"`` splits it, each
side on the calling thread (no pipe, no second process, so the figures are per-run CPU, not
contention): the app's side (the worker encoding the run, the receiver decoding the answer and
emitting: what stays on the app's GIL) and the child's side (decoding the run, reading,
assembling, scoring, encoding the answer). ``runs_per_cpu_s`` is then the child's rate and
``app_side_us_per_run`` the app's share.

Synthetic runs are all distinct (each has its own seed: ids, values and answers differ), so the
scorers' text caches are as cold as with real traffic. The fixture set (every recorded trace in
``paths.FIXTURES`` and ``tests/conformance/captures``) is cycled, so its text caches
are warm after the first pass.

    .venv/bin/python -m benchmarks job [--quick] [--scoring thread|process]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from benchmarks.common import emit_json, machine, summary, telemetry_providers
from benchmarks.workload import fixture_runs, genai_run, readable_run
from otel_toolscore.conventions import classify
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor, _Held, _Ready

SIZES = (10, 50, 100, 500, 1000)


class NullProcessor(SpanProcessor):
    def __init__(self) -> None:
        self.ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1


# Older versions of the processor kept a held span's id as hex text (benchmarks.compare and
# before/after runs import them too).
# (``_apply``: the part of ``_score`` that releases the held spans, once scoring="process" came)
# (since the processor's split, ``_processor.scoring.Scoring.apply``)
try:
    from otel_toolscore.runtime._processor.scoring import Scoring as _Scoring

    _APPLY: Any = _Scoring.apply
except ImportError:  # an older tree
    _APPLY = getattr(ToolScoreSpanProcessor, "_apply", ToolScoreSpanProcessor._score)
_INT_SPAN_IDS = "format(h.span_id" in inspect.getsource(_APPLY)


def ready_item(spans: Sequence[ReadableSpan]) -> _Ready:
    """What the processor hands its worker for a completed trace: the spans, agent spans held."""
    held = [_Held(s, s.context.span_id if _INT_SPAN_IDS else format(s.context.span_id, "016x"), float("inf"))
            for s in spans if classify(s) == "agent"]
    return _Ready(spans[0].context.trace_id, list(spans), held)


def make_processor(telemetry: str) -> tuple[ToolScoreSpanProcessor, NullProcessor]:
    mp, lp, _ = telemetry_providers(telemetry)
    down = NullProcessor()
    return ToolScoreSpanProcessor(down, meter_provider=mp, logger_provider=lp), down


def time_scoring(proc: ToolScoreSpanProcessor, items: Sequence[_Ready]) -> tuple[float, float]:
    """(thread CPU seconds, wall seconds) to score every item once, in order."""
    gc.collect()
    c0, w0 = time.thread_time(), time.perf_counter()
    for item in items:
        proc._score(item)
    return time.thread_time() - c0, time.perf_counter() - w0


def time_split(proc: ToolScoreSpanProcessor, items: Sequence[_Ready]) -> tuple[float, float]:
    """scoring="process", both sides here: (child CPU seconds, app-side CPU seconds) for every item."""
    from otel_toolscore.runtime import _handoff
    from otel_toolscore.runtime.engine import score_spans

    try:
        from otel_toolscore.outputs._prepare import Preparer
    except ImportError:  # older versions
        Preparer = None  # type: ignore[assignment,misc]  # noqa: N806 - a class, when there is one

    code, settings = proc._engine.code_scorers, proc.settings
    # the child's own preparer (older versions prepared nothing there)
    prepare = ([Preparer(settings).prepare] if "prepare" in inspect.signature(_handoff.answer_ok).parameters
               else [])
    gc.collect()
    app = child = 0.0
    for seq, item in enumerate(items):
        t0 = time.thread_time()
        request = _handoff.encode_runs([(seq, item.trace_id, False, item.spans)])
        t1 = time.thread_time()
        run = _handoff.decode_runs(request)[0]
        results, already = score_spans(run.spans, code, settings)
        answer = _handoff.encode_answers([_handoff.answer_ok(run.seq, results, already, False, *prepare)])
        t2 = time.thread_time()
        proc._apply(item, _handoff.decode_answers(answer)[0][1].results)
        t3 = time.thread_time()
        app += (t1 - t0) + (t3 - t2)
        child += t2 - t1
    return child, app


def baseline_seconds(runs: Sequence[Sequence[ReadableSpan]]) -> float:
    """Machine-speed reference measured beside each figure: json.loads of every JSON attribute
    of the runs (CPU seconds). Scoring cost / this = a machine-independent ratio."""
    values = [v for spans in runs for s in spans for v in (s.attributes or {}).values() if _is_json(v)]
    c0 = time.thread_time()
    for v in values:
        json.loads(v)
    return time.thread_time() - c0


def _is_json(value: Any) -> bool:
    if not isinstance(value, str) or value[:1] not in "[{":
        return False
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def measure(name: str, make_runs: Callable[[int], list[list[ReadableSpan]]], repeats: int,
            telemetry: str, scoring: str = "thread") -> dict[str, Any]:
    """``make_runs(r)``: the runs of repeat r (fresh ones each time, so that no repeat finds
    the text caches warm from an earlier one, unless the workload itself repeats)."""
    proc, down = make_processor(telemetry)
    warm = make_runs(-1)
    time_scoring(proc, [ready_item(s) for s in warm[: max(1, len(warm) // 10)]])  # imports, schema cache
    cpu_rates, wall_rates, ratios, app_side = [], [], [], []
    n_runs, spans_per_run = 0, 0.0
    for r in range(repeats):
        runs = make_runs(r)
        items = [ready_item(spans) for spans in runs]
        n_runs, spans_per_run = len(items), sum(len(s) for s in runs) / len(runs)
        base = baseline_seconds(runs)
        if scoring == "process":
            cpu, app_cpu = time_split(proc, items)
            wall = cpu + app_cpu  # (no wall figure of its own: both sides ran here, one after the other)
            app_side.append(app_cpu / len(items) * 1e6)
        else:
            cpu, wall = time_scoring(proc, items)
        cpu_rates.append(len(items) / cpu)
        wall_rates.append(len(items) / wall)
        ratios.append(cpu / base if base > 0 else float("nan"))
        del runs, items
    proc.shutdown()
    cpu_s = summary(cpu_rates)
    return {
        "workload": name,
        "runs": n_runs,
        "spans_per_run": spans_per_run,
        "runs_per_cpu_s": cpu_s,
        "runs_per_wall_s": summary(wall_rates),
        "us_per_run": 1e6 / cpu_s["median"],
        "us_per_span": 1e6 / cpu_s["median"] / spans_per_run,
        "cost_over_json_loads": summary(ratios),
        **({"app_side_us_per_run": summary(app_side)} if app_side else {}),
    }


def synthetic(n_spans: int, count: int, seed0: int = 0) -> list[list[ReadableSpan]]:
    return [readable_run(genai_run(n_spans, seed=seed0 + i), trace_id=seed0 + i + 1) for i in range(count)]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--telemetry", choices=("sdk", "noop"), default="sdk")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--scoring", choices=("thread", "process"), default="thread",
                    help="process: the per-run CPU of each side of scoring='process' (runs/s/core: the child's)")
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    budget_spans = 4_000 if args.quick else 20_000  # spans per repeat, per size
    results = []
    fixtures = [spans for _, spans in fixture_runs()]
    cycles = 1 if args.quick else 4
    results.append(measure(f"fixtures ({len(fixtures)} recorded traces, cycled)",
                           lambda r: fixtures * cycles, repeats, args.telemetry, scoring=args.scoring))
    for n in (int(x) for x in args.sizes.split(",")):
        count = max(4, budget_spans // n)
        results.append(measure(f"synthetic {n}-span runs", lambda r, n=n, count=count: synthetic(n, count, seed0=(r + 1) * 1_000_000),
                               repeats, args.telemetry, scoring=args.scoring))
    out = {"benchmark": "throughput", "scoring": args.scoring, "machine": machine(), "telemetry": telemetry_providers(args.telemetry)[2],
           "repeats": repeats, "results": results}
    for r in results:
        c = r["runs_per_cpu_s"]
        print(f"{r['workload']:44s} {c['median']:9.1f} runs/s/core (min {c['min']:.1f}, max {c['max']:.1f})"
              f"  {r['us_per_run']:9.1f} µs/run  {r['us_per_span']:6.1f} µs/span"
              f"  cost/json.loads {r['cost_over_json_loads']['median']:.1f}"
              + (f"  app side {r['app_side_us_per_run']['median']:.0f} µs/run" if "app_side_us_per_run" in r else ""))
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
