"""What the app's own OpenTelemetry SDK spends on each output a score leaves in the app (issue 32).

    .venv/bin/python -m benchmarks outputs-floor [--n 500]

Instructions (valgrind's callgrind) the SDK executes for one ``gen_ai.evaluation.result`` event and
for one point of the ``gen_ai.evaluation.score`` histogram, emitted as ``outputs/otel.py``'s ``Emitter``
emits them (the same ``_EventRecord``, context, severity and attribute set; a histogram record
with a score's attributes) into the app's set-up of ``benchmarks/realapp.py``: the SDK's
LoggerProvider with a BatchLogRecordProcessor and OTLP/HTTP exporter, a MeterProvider with a
PeriodicExportingMetricReader, to a local sink that answers 200. For an event that is the SDK's
record, its batch processor, the OTLP encoding and the export; for a point, the histogram's
aggregation (its export is once per series and collection, not per point).

Per output: a process that emits ``--n`` of them less one that emits none, otherwise the same
(``PYTHONHASHSEED=0``, the same warm-up of 20 and a flush at the end), divided by ``--n``.

Why it matters: none of this is the processor's code, and an app pays it in both scoring modes,
because the outputs go out through the providers the app gives. Against a traced run of the
real-app benchmark (``realapp --instructions``), the events and points a run emits by default are
a floor under the app side's ratio that no change to the processor moves (BENCHMARKS.md, "Real-app
cost (issue 32)").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from typing import Any

_CALLGRIND = ("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--trace-children=no")
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
_WARMUP = 20
KINDS = ("event", "point")


def _emit(kind: str, n: int) -> None:
    """In this process: the app's set-up, ``_WARMUP`` then ``n`` outputs of ``kind``, flushed."""
    from http.server import ThreadingHTTPServer

    from opentelemetry._logs import SeverityNumber
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

    from benchmarks.realapp import _Sink, _telemetry
    from otel_toolscore import semconv
    from otel_toolscore.outputs.otel import SCORE_BUCKETS, _EventRecord

    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    _, mp, lp, _ = _telemetry(f"http://127.0.0.1:{sink.server_address[1]}")
    logger = lp.get_logger(semconv.INSTRUMENTATION_SCOPE)
    # as Emitter creates it (its buckets decide the aggregation's work)
    histogram = mp.get_meter(semconv.INSTRUMENTATION_SCOPE).create_histogram(
        semconv.METRIC_EVALUATION_SCORE, unit="1", explicit_bucket_boundaries_advisory=SCORE_BUCKETS)
    context = set_span_in_context(NonRecordingSpan(SpanContext(0x5B8EFFF798038103D269B633813FC60C,
                                                               0xEEE19B7EC3C1B174, False, TraceFlags(1))))
    event, point = _attributes()

    def emit(k: int) -> None:
        for _ in range(k):
            if kind == "event":
                logger.emit(_EventRecord(timestamp=time.time_ns(), context=context,
                                         severity_number=SeverityNumber.INFO,
                                         event_name=semconv.GEN_AI_EVALUATION_RESULT, attributes=dict(event)))
            else:
                histogram.record(1.0, point)
        lp.force_flush()
        mp.force_flush()

    emit(_WARMUP)
    emit(n)
    print("EMITTED", kind, n, flush=True)


def _attributes() -> tuple[dict[str, Any], dict[str, Any]]:
    """A code scorer's pass as the processor emits it: its run event's attributes, built by the
    emitter's own Preparer, and its histogram point's."""
    from otel_toolscore.config import load_settings
    from otel_toolscore.outputs._prepare import Preparer
    from otel_toolscore.outputs.otel import _score_attributes
    from otel_toolscore.scorers.base import Score
    from otel_toolscore.trajectory import Trajectory

    score = Score(name="tool_call_accuracy", value=1.0, label="pass", explanation="Called get_weather as expected")
    run = Trajectory(trace_id="5b8efff798038103d269b633813fc60c", span_id="eee19b7ec3c1b174",
                     agent_name="weather-assistant")
    emission = Preparer(load_settings()).prepare(run, [score], span_attributes=False, evaluations=False, metrics=False)
    ((_, _, event),) = emission.events[0]  # the run event alone: the score has no tool calls
    return dict(event), _score_attributes(score.name, score.label, run.agent_name)


def _count(kind: str, n: int) -> int:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run([*_CALLGRIND, sys.executable, "-m", "benchmarks.outputs_floor", "--emit", kind, str(n)],
                          env=env, capture_output=True, text=True, timeout=1800)
    found = _COLLECTED.findall(proc.stderr)
    if proc.returncode != 0 or f"EMITTED {kind} {n}" not in proc.stdout or not found:
        raise RuntimeError(f"{kind} x{n}: exit status {proc.returncode}\n{proc.stderr[-3000:]}")
    return int(found[-1])


def measure(n: int) -> dict[str, Any]:
    """Instructions per output of each kind (the four processes two at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    if shutil.which("valgrind") is None:
        raise SystemExit("outputs-floor needs valgrind (Debian: apt-get install valgrind)")
    jobs = [(kind, k) for kind in KINDS for k in (n, 0)]
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: _count(*job), jobs), strict=True))
    return {f"{kind}_instructions": (counts[kind, n] - counts[kind, 0]) / n for kind in KINDS} | {"n": n}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--n", type=int, default=500, help="outputs of each kind in the measured process")
    ap.add_argument("--emit", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.emit:
        kind, k = args.emit
        if kind not in KINDS:
            raise SystemExit(f"unknown output {kind!r}: {', '.join(KINDS)}")
        _emit(kind, int(k))
        return
    if args.n <= 0:
        raise SystemExit("--n must be positive")
    result = measure(args.n)
    for kind in KINDS:
        print(f"{kind}: {result[f'{kind}_instructions'] / 1e3:.1f} k instructions each")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
