"""The hand-over to the downstream processor, and held spans.

Invariant kept here: every span given to the processor reaches ``downstream.on_end`` exactly
once. A span not held is forwarded by the thread that ended it; a held one (``Held``) by whichever
of the worker, the timer, the receiver or shutdown releases it first (``Forwarding.release``,
under its own lock). A failing downstream is logged, never raised into the app or a worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.util.types import AttributeValue

from otel_toolscore.ingest import copy_span
from otel_toolscore.runtime._handoff import PackedSpan, pack_held, unpack_held

logger = logging.getLogger("otel_toolscore.runtime.processor")


@dataclass(eq=False, slots=True)
class Held:
    """An agent-like span waiting for its scores. ``released`` makes forwarding exactly-once.

    Once its run has left the app's queue (handed to the child, or packed in a backlog) the span
    is kept packed (``pack``, ``_handoff.pack_held``), rebuilt when it is released. Once released
    it is let go (``None``), unless its run may still be scored (``release(keep=True)``): the
    timer's list of holds keeps a released hold until its deadline comes round, and the app's
    garbage collector would walk the span (~12 objects) in every full collection until then."""

    span: ReadableSpan | PackedSpan | None
    span_id: int
    deadline: float
    released: bool = False

    def pack(self) -> None:
        span = self.span
        if not self.released and type(span) is not tuple:
            packed = pack_held(span)  # type: ignore[arg-type]
            if packed is not None:
                # one store: a thread releasing it meanwhile reads either form, both whole
                self.span = packed

    def readable(self) -> ReadableSpan | None:
        """The span; None once released and let go (``apply`` then finds it among the run's)."""
        span = self.span  # read once (see pack)
        return unpack_held(span) if type(span) is tuple else span  # type: ignore[arg-type, return-value]


def with_attributes(span: ReadableSpan, extra: dict[str, AttributeValue]) -> ReadableSpan:
    """A copy of an ended span with more attributes (ended SDK spans are immutable)."""
    # Merged from the plain dict inside the SDK's BoundedAttributes when there is one: the
    # mapping the span shows is read key by key through Python-level methods.
    own: Any = None
    if type(span).attributes is ReadableSpan.attributes:  # (not a class showing other ones)
        own = getattr(span, "_attributes", None)
        own = getattr(own, "_dict", own)
    if type(own) is not dict:
        own = span.attributes or {}
    return copy_span(span, attributes={**own, **extra})


class Phase:
    """Where the processor is in its life; read without a lock (each flag only ever turns on)."""

    __slots__ = ("stopping", "shutdown", "closed")

    def __init__(self) -> None:
        self.stopping = False  # shutdown() has begun: a second call returns at once
        self.shutdown = False  # nothing more is held or scored; spans are only forwarded
        self.closed = False  # the downstream is shut down (or being shut down)


class Forwarding:
    """Forwards spans to the downstream processor; releases held spans exactly once."""

    def __init__(self, downstream: SpanProcessor, phase: Phase, own_thread: Callable[[], bool]) -> None:
        self.downstream = downstream
        self.phase = phase
        self._own_thread = own_thread
        # a lock of its own: the worker and the timer releasing spans never make the app's
        # threads wait in on_start/on_end
        self._release_lock = threading.Lock()

    def forward(self, span: ReadableSpan) -> None:
        """Hand a span to the downstream processor. Its failure (an exporter bug) must neither
        reach the app nor stop this processor's own work after the call: it is logged."""
        try:
            self.downstream.on_end(span)
        except Exception:
            logger.warning("otel-toolscore: downstream on_end failed", exc_info=True)
        except BaseException:
            # KeyboardInterrupt/SystemExit belong to the app's thread that raised them; on the
            # worker or the timer they would end the thread that bounds every hold.
            if not self._own_thread():
                raise
            logger.warning("otel-toolscore: downstream on_end failed", exc_info=True)

    def forward_evaluation(self, span: ReadableSpan) -> None:
        # Called from the judge loop's thread; after shutdown the downstream is gone.
        if not self.phase.closed:
            self.forward(span)

    def release(self, held: Held, extra: dict[str, AttributeValue] | None = None,
                span: ReadableSpan | None = None, keep: bool = False) -> bool:
        """Forward a held span exactly once, with the scores' attributes when there are any
        (``span``: the held span already rebuilt, when it was packed). ``keep``: its run is still
        to be scored, and ``apply`` reads the span then; else it is let go. False when it had
        left already."""
        with self._release_lock:
            if held.released:
                return False
            held.released = True
        if span is None:
            span = held.readable()
            assert span is not None  # let go only by its release, which is this one
        if not keep:
            held.span = None
        if extra:
            try:
                span = with_attributes(span, extra)
            except Exception:  # an unscored span beats a lost one
                logger.debug("otel-toolscore could not copy span", exc_info=True)
        self.forward(span)
        return True

    def release_all(self, helds: list[Held]) -> None:
        for h in helds:
            self.release(h)


def guarded(step: Any, *args: Any) -> None:
    """Run one step on the processor's own threads: what it raises is logged, so that the steps
    after it (and the thread) go on."""
    try:
        step(*args)
    except BaseException:
        logger.warning("otel-toolscore: %s failed", getattr(step, "__name__", step), exc_info=True)
