"""Every byte the processor exports for a workload, for a before/after compare: each exported
span, log record and metric point through the real OTLP exporters' protobuf encoders, in both
scoring modes (``process`` here: its handoff encode/decode and the child's prepare run in this
process, as ``benchmarks.throughput`` times them). Times the SDK takes from the clock and the
evaluation spans' random ids are the only things normalised (zeroed / seeded).

    python -m benchmarks.emit_dump OUT.txt    # one line per run and mode: digest of its exports
    python -m benchmarks emit-dump OUT.txt    # the same, through the runner

Run it against two trees and ``cmp`` the files: from inside each tree (``-m`` puts the working
directory first on ``sys.path``), with this checkout on ``PYTHONPATH`` for ``benchmarks``::

    cd /tmp/before && PYTHONPATH=/tmp/before:$REPO python -m benchmarks.emit_dump /tmp/before.txt
"""

from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from benchmarks.throughput import ready_item, synthetic
from benchmarks.workload import fixture_runs
from otel_toolscore import semconv
from otel_toolscore.outputs._prepare import Preparer
from otel_toolscore.runtime import _handoff
from otel_toolscore.runtime.engine import score_spans
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor, _Ready

#: fixed (the default one has a random service.instance.id)
_RESOURCE = Resource({"service.name": "emit-dump", "service.instance.id": "1"})


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def _zero_times(message: Any) -> None:
    """Zero every *time_unix_nano field, recursively (the clock's, not the data's)."""
    for field, value in message.ListFields():
        if field.name.endswith("time_unix_nano"):
            message.ClearField(field.name)
        elif field.type == field.TYPE_MESSAGE:
            if field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED:
                for item in value:
                    _zero_times(item)
            else:
                _zero_times(value)


def _span_bytes(spans: Sequence[ReadableSpan]) -> bytes:
    out = []
    for span in spans:
        msg = encode_spans([span])
        for resource_spans in msg.resource_spans:  # the synthetic runs' Resource.create() draws it
            kept = [a for a in resource_spans.resource.attributes if a.key != "service.instance.id"]
            del resource_spans.resource.attributes[:]
            resource_spans.resource.attributes.extend(kept)
        if (span.attributes or {}).get(semconv.GEN_AI_OPERATION_NAME) == semconv.OP_EVALUATION:
            _zero_times(msg)  # made now (the agent span and the app's keep their times)
        out.append(msg.SerializeToString(deterministic=True))
    return b"".join(out)


def _child_side(proc: ToolScoreSpanProcessor, item: _Ready, prepare: Any) -> None:
    """scoring="process" in one process: the worker's encode, the child's scoring and prepare,
    the receiver's decode and ``_apply`` (what ``ScoringProcess`` does across the pipe)."""
    request = _handoff.encode_runs([(0, item.trace_id, False, item.spans)])
    let_go = getattr(proc, "_let_go", None)  # what the worker keeps of an encoded run (trees that have it)
    if let_go is not None:
        let_go(item)
    run = _handoff.decode_runs(request)[0]
    results, already = score_spans(run.spans, proc._engine.code_scorers, proc.settings)
    answer = _handoff.encode_answers([_handoff.answer_ok(run.seq, results, already, False, prepare)])
    proc._outstanding += 1  # as _submit counts it (_answered counts it done)
    proc._answered(item, _handoff.decode_answers(answer)[0][1])


def dump(runs: list[tuple[str, list[ReadableSpan]]], scoring: str, out: list[str], **settings: Any) -> None:
    logs = InMemoryLogRecordExporter()
    lp = LoggerProvider(resource=_RESOURCE)
    lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader], resource=_RESOURCE)
    down = _Collect()
    proc = ToolScoreSpanProcessor(down, meter_provider=mp, logger_provider=lp, **settings)
    prepare = Preparer(proc.settings).prepare
    for name, spans in runs:
        item = ready_item(spans)
        random.seed(name)
        if scoring == "process":
            _child_side(proc, item, prepare)
        else:
            if scoring == "backlog":  # scoring="thread" with the run packed in the worker's backlog
                proc._pack(item)
            proc._score(item)
        span_bytes = _span_bytes(down.spans)
        log_msg = encode_logs(logs.get_finished_logs())
        _zero_times(log_msg)
        digest = hashlib.sha256(span_bytes + b"|" + log_msg.SerializeToString(deterministic=True)).hexdigest()[:20]
        out.append(f"{scoring} {name} spans={len(down.spans)} logs={len(logs.get_finished_logs())} {digest}")
        down.spans.clear()
        logs.clear()
    proc._emitter.flush_counts()
    data = reader.get_metrics_data()
    msg = encode_metrics(data)
    _zero_times(msg)
    out.append(f"{scoring} metrics {hashlib.sha256(msg.SerializeToString(deterministic=True)).hexdigest()[:20]}")
    proc.shutdown()


def main(argv: list[str]) -> None:
    runs = fixture_runs()
    runs += [(f"synthetic{i}", s) for i, s in enumerate(synthetic(10, 600, seed0=7))]
    try:
        from otel_toolscore import read_otlp_json
        from tests.realworld import corpus

        if corpus.available():
            runs += [(f"realworld/{p.stem}", list(read_otlp_json(p))) for p in sorted(corpus.TRACES.glob("*.json"))]
    except ImportError:
        pass
    out: list[str] = []
    for scoring in ("thread", "backlog", "process"):
        dump(runs, scoring, out, call_events="all")
        dump(runs, scoring, out)
    with open(argv[0], "w") as f:
        f.write("\n".join(out) + "\n")
    print(len(out), "lines")


if __name__ == "__main__":
    main(sys.argv[1:])
