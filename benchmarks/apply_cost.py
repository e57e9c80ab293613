"""The outputs' share of a run, before/after in one process (interleaved, so the ratio holds on a
busy machine): per synthetic 10-span run, thread CPU µs of

* ``apply``: ``processor._apply`` of a scored run (the emission prepared already): the scored
  copy of the agent span, events, metric points, evaluation spans, forwarding;
* ``app_side``: ``scoring="process"``'s app side: the worker's ``encode_runs``, the receiver's
  ``decode_answers`` and ``_apply`` (the child's work done beforehand, not timed).

    python -m benchmarks.apply_cost --before /tmp/before [--runs 400] [--repeats 7]

SDK MeterProvider (manual reader) and LoggerProvider (batch processor, no-op exporter), as in
``benchmarks.throughput``.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import telemetry_providers
from benchmarks.compare import load_before
from benchmarks.workload import genai_run, readable_run


class _Null:
    def on_start(self, *a: Any, **k: Any) -> None:
        pass

    def on_end(self, span: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _Side:
    """One version of the package, its processor and its runs made ready to time."""

    def __init__(self, package: str, runs: list[list[Any]]) -> None:
        mod = lambda name: importlib.import_module(f"{package}.{name}")  # noqa: E731
        processor, self.handoff = mod("runtime.processor"), mod("runtime._handoff")
        preparer, engine = mod("outputs._prepare").Preparer, mod("runtime.engine")
        mp, lp, _ = telemetry_providers("sdk")
        self.proc = processor.ToolScoreSpanProcessor(_Null(), meter_provider=mp, logger_provider=lp)
        classify = mod("conventions").classify
        ready, self._held = processor._Ready, processor._Held
        self._agents = [[x for x in s if classify(x) == "agent"] for s in runs]
        self.items = [ready(s[0].context.trace_id, list(s), []) for s in runs]
        self._hold()
        prepare = preparer(self.proc.settings).prepare
        self.answers = []
        self.results = []
        for seq, item in enumerate(self.items):
            request = self.handoff.decode_runs(self.handoff.encode_runs([(seq, item.trace_id, False, item.spans)]))[0]
            results, already = engine.score_spans(request.spans, self.proc._engine.code_scorers, self.proc.settings)
            self.answers.append(self.handoff.encode_answers(
                [self.handoff.answer_ok(seq, results, already, False, prepare)]))
            self.results.append(results)

    def _hold(self) -> None:
        """Each run's agent span held afresh: a hold is released once, and a repeat must time the
        release (the scored copy, forwarding) again, not a run whose spans have left."""
        held = self._held
        for item, agents in zip(self.items, self._agents, strict=True):
            item.held = [held(x, x.context.span_id, float("inf")) for x in agents]

    def apply(self) -> float:
        eng = self.proc._engine
        self._hold()
        results = [[type(r)(r.trajectory, r.scores) for r in rs] for rs in self.results]
        for rs in results:
            for r in rs:
                eng.prepared(r)
        gc.collect()
        t0 = time.thread_time()
        for item, rs in zip(self.items, results, strict=True):
            self.proc._apply(item, rs)
        return (time.thread_time() - t0) / len(self.items) * 1e6

    def app_side(self) -> float:
        handoff, proc = self.handoff, self.proc
        self._hold()
        gc.collect()
        t0 = time.thread_time()
        for seq, (item, answer) in enumerate(zip(self.items, self.answers, strict=True)):
            handoff.encode_runs([(seq, item.trace_id, False, item.spans)])
            proc._apply(item, handoff.decode_answers(answer)[0][1].results)
        return (time.thread_time() - t0) / len(self.items) * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, type=Path)
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    runs = [readable_run(genai_run(10, seed=i), trace_id=i + 1) for i in range(args.runs)]
    sides = {"before": _Side(load_before(args.before), runs), "after": _Side("otel_toolscore", runs)}
    times: dict[str, dict[str, list[float]]] = {k: {"apply": [], "app_side": []} for k in sides}
    for r in range(args.repeats):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for what in ("apply", "app_side"):
            for name in order:
                times[name][what].append(getattr(sides[name], what)())
    for what in ("apply", "app_side"):
        b, a = times["before"][what], times["after"][what]
        ratios = [y / x for x, y in zip(b, a, strict=True)]
        print(f"{what:9s} before {statistics.median(b):7.1f} µs/run (min {min(b):.1f})  after {statistics.median(a):7.1f}"
              f" (min {min(a):.1f})  after/before median {statistics.median(ratios):.2f} "
              f"[{min(ratios):.2f}-{max(ratios):.2f}]")


if __name__ == "__main__":
    main()
