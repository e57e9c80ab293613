"""What the worker is handed: a completed run (``Ready``), the bounded queue of them
(``ReadyQueue``), and what a run's evaluation spans need of its spans once those have left
(``Anchors``).

Invariant kept here, with ``scoring``: the queue is bounded (``queue_size``, counting the runs
packed or encoded and not yet handed on); a run that finds it full is dropped and counted, its
held spans forwarded.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from otel_toolscore.runtime._handoff import Packed, reads_fields
from otel_toolscore.runtime._processor.forward import Held


class Anchors(tuple):  # type: ignore[type-arg]
    """What a run's evaluation spans need of its spans once the spans themselves have gone to
    the scoring process (``scoring="process"``) or are packed (a thread-mode backlog): a span's
    context and resource, for a run whose span is not held (``apply``).

    ONE tuple, so that a waiting run costs the app's garbage collector one object here (an ended
    SDK span is ~11 it walks in every full collection): ``(index, *entries)``, ``index`` a dict
    of ints (span id -> entry; untracked), the entries flattened, ``ENTRY`` values each:
    (trace id, is remote, flags, state, resource), which the spans of a run mostly share."""

    __slots__ = ()

    def __new__(cls, spans: Sequence[ReadableSpan]) -> Anchors:
        index: dict[int, int] = {}  # span id -> position of its entry in the tuple
        flat: list[Any] = [index]
        seen: dict[tuple[int, bool, int, int, int], int] = {}
        last: tuple[Any, ...] = ()
        at = -1
        for span in spans:
            # the SDK's own fields when its class reads them as ReadableSpan does (see _handoff)
            fields = getattr(span, "__dict__", None) if reads_fields(type(span)) else None
            ctx, resource = (fields["_context"], fields["_resource"]) if fields is not None else (
                span.context, span.resource)
            if ctx is None:
                continue
            if not last or ctx[0] != last[0] or ctx[2] is not last[1] or ctx[3] != last[2] \
                    or ctx[4] is not last[3] or resource is not last[4]:
                key = (ctx[0], ctx[2], ctx[3], id(ctx[4]), id(resource))
                found = seen.get(key)
                # the flags as an int: the SDK's TraceFlags (one per span) is an object it walks
                entry = (ctx[0], ctx[2], int(ctx[3]), ctx[4], resource)
                if found is None:
                    found = seen[key] = len(flat)
                    flat += entry
                at, last = found, entry
            index[ctx[1]] = at  # the last span of an id, as the spans' lookup by id has it
        return super().__new__(cls, flat)

    def span(self, span_id: int | None) -> ReadableSpan | None:
        """A stand-in for the span of this id: its context and resource, nothing else."""
        if span_id is None:
            return None
        at = self[0].get(span_id)
        if at is None:
            return None
        trace_id, is_remote, flags, state, resource = self[at:at + ENTRY]
        return ReadableSpan(name="", context=SpanContext(trace_id, span_id, is_remote, TraceFlags(flags), state),
                            resource=resource)


ENTRY = 5  # values per Anchors entry


@dataclass(slots=True)
class Ready:
    trace_id: int
    #: emptied (the shared ``()``: not one more object the collector walks) once the spans are
    #: encoded or packed
    spans: Sequence[ReadableSpan]
    held: list[Held]
    #: set (and ``spans`` emptied) once the spans are encoded for the child (scoring="process")
    #: or packed in a backlog (scoring="thread", ``packed``)
    anchors: Anchors | None = None
    packed: Packed | None = None


class ReadyQueue(queue.SimpleQueue):  # type: ignore[type-arg]
    """Completed traces for the worker. A SimpleQueue (put, get and the worker's wake-up happen
    in C, not through the Python-level Conditions of queue.Queue) with queue.Queue's bound.

    With ``scoring="process"`` the bound also counts the runs the worker has encoded and the
    sender not yet handed to the child (``park``): they wait as the queue's runs did.

    ``qsize()`` is exact for one producer; threads ending traces at the same moment may
    overshoot the bound by one item each.
    """

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize
        self.parked = 0
        self._parked_lock = threading.Lock()

    def park(self, n: int) -> None:
        with self._parked_lock:
            self.parked += n

    def full(self) -> bool:
        return self.qsize() + self.parked >= self.maxsize


def span_id_of(hex_id: str) -> int | None:
    """The span id a run's hex id names; None for text that is no span id as formatted here."""
    try:
        span_id = int(hex_id, 16)
    except ValueError:
        return None
    return span_id if format(span_id, "016x") == hex_id else None
