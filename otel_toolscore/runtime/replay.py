"""Feed recorded spans through a span processor as if the app were emitting them live.

OTLP files hold ended spans only; a processor that counts open spans needs ``on_start`` too.
The start/end sequence is rebuilt from the timestamps: at equal times parents start before
their children and children end before their parents (JS SDKs have millisecond clocks, so ties
are common).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from otel_toolscore.ingest import OtlpSource, read_otlp_json


def _depths(spans: Sequence[ReadableSpan]) -> list[int]:
    parent_of = {s.context.span_id: (s.parent.span_id if s.parent else None) for s in spans}
    depths = []
    for s in spans:
        depth, seen, cur = 0, set(), parent_of.get(s.context.span_id)
        while cur is not None and cur in parent_of and cur not in seen:
            seen.add(cur)
            depth += 1
            cur = parent_of[cur]
        depths.append(depth)
    return depths


def replay(spans: Iterable[ReadableSpan], processor: SpanProcessor) -> int:
    """Call ``on_start``/``on_end`` for every span in rebuilt order; returns how many spans."""
    spans = list(spans)
    depths = _depths(spans)
    events = []
    for i, (s, d) in enumerate(zip(spans, depths)):
        start = s.start_time or 0
        end = s.end_time if s.end_time is not None else start
        events.append((start, 0, d, i))  # starts: shallow first
        events.append((end, 1, -d, i))  # ends: deep first
    events.sort()
    for _, is_end, _, i in events:
        if is_end:
            processor.on_end(spans[i])
        else:
            processor.on_start(spans[i], parent_context=None)  # type: ignore[arg-type]
    return len(spans)


def replay_file(source: OtlpSource | os.PathLike[str], processor: SpanProcessor) -> int:
    return replay(read_otlp_json(source), processor)
