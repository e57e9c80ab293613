"""Reading alone, before/after in one process: ``conventions.read_trace`` per run on an older
checkout of the package and on this one, interleaved (see ``benchmarks.compare``)::

    git archive main otel_toolscore | tar -x -C /tmp/before
    .venv/bin/python -m benchmarks.read --before /tmp/before [--quick]

Workloads: synthetic GenAI runs of 10, 50 and 400 spans, and of 400 spans without an escape in
any text (``benchmarks.workload.genai_run``, their attributes held as the SDK holds them), and
the shared real conversations (``tests/corpora``, ``paths.REALWORLD``, decoded from OTLP JSON: plain-dict
attributes), one ``read_trace`` per trace in conversation order (a turn's trace may extend the
history the turn before read). Each figure is per run (per
trace), with the thread's CPU time; synthetic runs are fresh span objects every repeat, and what
a version keeps between traces is forgotten before each pass.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from benchmarks.common import emit_json
from benchmarks.compare import load_before
from benchmarks.workload import genai_run, readable_run
from tests.support.paths import REALWORLD

_REALWORLD = REALWORLD / "tau_airline"


def _realworld(read_otlp_json: Any) -> list[list[ReadableSpan]]:
    traces: list[list[ReadableSpan]] = []
    for path in sorted(_REALWORLD.glob("*.json")):
        by_trace: dict[int, list[ReadableSpan]] = {}
        for span in read_otlp_json(path):
            by_trace.setdefault(span.context.trace_id, []).append(span)
        traces.extend(by_trace.values())
    return traces


def _without_escapes(specs: list[Any]) -> list[Any]:
    """The run with its one escaped character (a degree sign in weather results, escaped once
    in a result, twice in the histories that quote it) written as ``deg``."""
    for spec in specs:
        spec.attributes = {k: v.replace("\\\\u00b0", "deg").replace("\\u00b0", "deg") if isinstance(v, str) else v
                           for k, v in spec.attributes.items()}
    return specs


def _per_run(read_trace: Any, runs: Sequence[Sequence[ReadableSpan]]) -> list[float]:
    # lists read by earlier traces (later versions keep some for a conversation's next turn):
    # forgotten, so that each pass reads its traces as the first time
    forget = getattr(sys.modules[read_trace.__module__.replace(".conventions", ".conventions.parsing")],
                     "forget_earlier_traces", None)
    if forget is not None:
        forget()
    gc.collect()
    out = []
    for spans in runs:
        t0 = time.thread_time()
        read_trace(spans)
        out.append(time.thread_time() - t0)
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, type=Path, help="a tree holding the older otel_toolscore/")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)
    n = 100 if args.quick else 300
    import importlib

    before = importlib.import_module(load_before(args.before))
    versions = {
        "before": importlib.import_module(f"{before.__name__}.conventions").read_trace,
        "after": importlib.import_module("otel_toolscore.conventions").read_trace,
    }
    from otel_toolscore import read_otlp_json

    real = _realworld(read_otlp_json) if _REALWORLD.is_dir() else []
    # per metric and version: the per-run times of every repeat
    times: dict[str, dict[str, list[float]]] = {}
    for r in range(repeats):
        workloads = {
            "10 spans": [genai_run(10, seed=(r + 1) * 100_000 + i) for i in range(n)],
            "50 spans": [genai_run(50, seed=(r + 1) * 100_000 + i) for i in range(max(4, n // 5))],
            # a long run: reading is linear in a run's length when its cost per span is that of 10
            "400 spans": [genai_run(400, seed=(r + 1) * 100_000 + i) for i in range(max(2, n // 50))],
            # the same without a "\u" escape in any text (JSON written with ensure_ascii=False, or
            # ASCII results): what a search for one costs is then the whole text's length
            "400 spans, no escapes": [_without_escapes(genai_run(400, seed=(r + 1) * 100_000 + i))
                                      for i in range(max(2, n // 50))],
        }
        order = list(versions.items())
        for version, read_trace in (order if r % 2 == 0 else order[::-1]):  # alternate who goes first
            for name, specs in workloads.items():
                runs = [readable_run(s, trace_id=i + 1) for i, s in enumerate(specs)]
                times.setdefault(f"read_trace µs/run ({name})", {}).setdefault(version, []).extend(
                    _per_run(read_trace, runs))
            if real:
                # the same traces each repeat: read_trace keeps nothing between calls
                times.setdefault(f"read_trace µs/trace (realworld, {len(real)} traces)", {}) \
                    .setdefault(version, []).extend(_per_run(read_trace, real))
    out: dict[str, Any] = {}
    for metric, by_version in times.items():
        row = {v: {"min": round(min(t) * 1e6, 1), "median": round(statistics.median(t) * 1e6, 1)}
               for v, t in by_version.items()}
        b, a = statistics.median(by_version["before"]), statistics.median(by_version["after"])
        row["before/after (median)"] = round(b / a, 2)  # type: ignore[assignment]
        tb, ta = sum(by_version["before"]), sum(by_version["after"])
        row["before/after (total)"] = round(tb / ta, 2)  # type: ignore[assignment]
        out[metric] = row
        spans = int(metric.split("(")[1].split(" spans")[0]) if " spans" in metric else None
        per_span = f" = {row['after']['median'] / spans:.1f} µs/span after" if spans else ""
        print(f"{metric}: before {row['before']} after {row['after']} "
              f"x{row['before/after (median)']} (median), x{row['before/after (total)']} (total){per_span}")
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
