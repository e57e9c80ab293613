"""Per-trace buffers and completion per run (docs/design.md, "Completion").

Invariants kept here:

- *Bounded memory.* At most ``max_pending_traces`` traces are buffered (a new one evicts the
  oldest), each with at most ``max_spans_per_trace`` spans not yet scored (and four times that
  many parent links); a trace that outgrows it is evicted once and marked, its later spans only
  forwarded, and at most ``max(1024, max_pending_traces)`` marks are kept (docs/reliability.md,
  "Runs larger than the span bound"). The timer evicts what outlives ``trace_ttl``.
- *Never score a run twice.* A run's spans leave its buffer once (``complete_run``); its run id
  stays in ``scored``, and a span of it ending later only passes (``stats["late_spans"]``).

Every method runs under the processor's lock (the caller takes it), and none calls the
downstream: what it decides (hold, evict, submit) the caller does after the lock.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry.sdk.trace import ReadableSpan, Span

from otel_toolscore.config import ToolScoreSettings
from otel_toolscore.conventions import classify
from otel_toolscore.runtime._processor.forward import Held
from otel_toolscore.runtime._processor.ready import Ready

if TYPE_CHECKING:
    from otel_toolscore.runtime._processor.timer import Timer

#: at least this many traces evicted at max_spans_per_trace are remembered (docs/reliability.md,
#: "Runs larger than the span bound"), so that their later spans are only forwarded
TOO_LARGE_KEPT = 1024
_UNKNOWN = object()


@dataclass(eq=False, slots=True)
class PendingRun:
    """An outermost agent run whose agent span has ended while descendants are still open."""

    open: int  # descendants of the agent span still open
    grace_deadline: float


class TraceBuffer:
    """One trace's spans not scored yet, and what completion per run needs to know of it.

    Completion is per outermost agent run (docs/design.md, "Completion"): a trace can hold several
    runs, each scored on its own subtree when its agent span and its descendants have ended.
    ``parents`` (ended spans) and the live ``open_ids`` spans let a span find the run it belongs to.
    """

    # A plain slotted class, not a dataclass: one is made per sampled trace on the app's
    # thread, and literals are cheaper than a dataclass's default factories (~0.25 µs a trace).
    __slots__ = ("created", "spans", "held", "open_ids", "parents", "agents", "runs", "scored", "had_run",
                 "genai", "root_ended", "last_seen", "quiet_scheduled")

    def __init__(self, created: float) -> None:
        self.created = created
        self.spans: list[ReadableSpan] = []  # ended, not yet given to scoring
        self.held: list[Held] = []
        self.open_ids: dict[int, Span] = {}  # open spans by id
        self.parents: dict[int, int | None] = {}  # ended spans' local parents
        self.agents: set[int] = set()  # span ids known to be agent-like
        self.runs: dict[int, PendingRun] = {}  # ended runs waiting for descendants
        self.scored: set[int] = set()  # runs handed to scoring: their late spans only pass
        self.had_run = False  # an agent run of this trace was scored: leftover spans are not a run
        self.genai = False
        self.root_ended = False
        self.last_seen = 0.0  # quiet mode: when the trace's latest span arrived
        self.quiet_scheduled = False


class Buffers:
    """The traces buffered, by trace id, oldest first; the marks of traces too large."""

    def __init__(self, settings: ToolScoreSettings, quiet: bool, timer: Timer, stats: Counter[str]) -> None:
        self._settings = settings
        self._quiet = quiet
        self._timer = timer
        self.stats = stats
        self._max_spans = settings.max_spans_per_trace
        # every span seen of a trace is remembered (with its parent) until the trace is done
        self._max_parents = 4 * self._max_spans
        self._grace = settings.completion_grace
        self.pending: OrderedDict[int, TraceBuffer] = OrderedDict()
        # Traces evicted at max_spans_per_trace, oldest first: their later spans are forwarded
        # only, never buffered again, so no fragment of a run too large to buffer is scored as
        # if it were the whole run. Bounded: the oldest mark goes first.
        self.too_large: OrderedDict[int, None] = OrderedDict()
        self._marks_kept = max(TOO_LARGE_KEPT, settings.max_pending_traces)

    def add_quiet(self, trace_id: int, buf: TraceBuffer, span: ReadableSpan, kind: str | None,
                  held: Held | None, now: float) -> tuple[bool, TraceBuffer | None]:
        """Under the lock (quiet mode): buffer the span; the timer decides completion."""
        if len(buf.spans) >= self._max_spans:
            return False, self.too_big(trace_id)
        buf.spans.append(span)
        if kind is not None:
            buf.genai = True
        if held is not None:
            self._timer.hold(buf, held)
        self.note_quiet(trace_id, buf, span, now)
        return held is not None, None

    def add_live(self, trace_id: int, span_id: int, buf: TraceBuffer, span: ReadableSpan, kind: str | None,
                 held: Held | None, now: float) -> tuple[bool, TraceBuffer | None, list[Ready] | None]:
        """Under the lock (open_spans mode): buffer an ending span and complete what it completes.

        Returns (held, evicted buffer, runs completed or None). Every span of
        the app goes through here: the common case (no run ended yet in the trace, not an agent
        span, something still open) is kept to a few dict operations.
        """
        ready: list[Ready] = []
        was_open = buf.open_ids.pop(span_id, None) is not None
        parent = span.parent
        if parent is None or parent[2]:  # (is_remote)
            buf.root_ended = True
            buf.parents[span_id] = None
            is_root = True
        else:
            buf.parents[span_id] = parent[1]  # (span_id)
            is_root = False
        if held is not None:
            buf.agents.add(span_id)
        owner = self.owner(buf, span_id) if (buf.runs or buf.scored) else None
        if owner is not None and owner in buf.scored:
            # Ends after its run was scored (the run's grace ran out): forwarded, counted, not
            # taken into another run.
            self.stats["late_spans"] += 1
            if not buf.open_ids:
                self.finish_if_idle(trace_id, buf, ready)
            return False, None, ready
        if len(buf.spans) >= self._max_spans or len(buf.parents) >= self._max_parents:
            return False, self.too_big(trace_id), None
        buf.spans.append(span)
        if kind is not None:
            buf.genai = True
        if held is not None:
            self._timer.hold(buf, held)
        if owner is not None:
            run = buf.runs[owner]
            if was_open:
                run.open -= 1
            if run.open <= 0:
                ready.append(self.complete_run(trace_id, buf, owner))
        elif held is not None and (is_root or not self.has_agent_ancestor(buf, span_id)):
            # An outermost run's agent span: complete once its own descendants have ended,
            # whatever else of the trace is still open; else at completion_grace.
            still_open = sum(1 for o in buf.open_ids if self.is_under(buf, o, span_id)) if buf.open_ids else 0
            if still_open == 0:
                ready.append(self.complete_run(trace_id, buf, span_id, pending=False))
            else:
                deadline = now + self._grace
                buf.runs[span_id] = PendingRun(open=still_open, grace_deadline=deadline)
                self._timer.schedule(deadline, "grace", (trace_id, span_id))
        if not buf.open_ids:
            self.finish_if_idle(trace_id, buf, ready)
        return held is not None, None, ready

    def too_big(self, trace_id: int) -> TraceBuffer:
        """Under the lock: the trace has outgrown max_spans_per_trace. Its buffer goes (the caller
        evicts it) and the trace is marked, so that its later spans are only forwarded: a later
        fragment scored would be scored as the whole run (docs/reliability.md, "Runs larger
        than the span bound")."""
        marks = self.too_large
        marks[trace_id] = None
        if len(marks) > self._marks_kept:
            marks.popitem(last=False)
        return self.pending.pop(trace_id)

    def new_buffer(self, trace_id: int, now: float) -> tuple[TraceBuffer, TraceBuffer | None]:
        """Under the lock: a buffer for a new trace, evicting the oldest when at the cap."""
        evicted = None
        if len(self.pending) >= self._settings.max_pending_traces:
            _, evicted = self.pending.popitem(last=False)
        buf = TraceBuffer(created=now)
        self.pending[trace_id] = buf
        return buf, evicted

    def note_quiet(self, trace_id: int, buf: TraceBuffer, ended: ReadableSpan, now: float) -> None:
        """Under the lock (quiet mode): remember activity; one timer entry per trace at a time."""
        parent = ended.parent
        if parent is None or parent.is_remote:
            buf.root_ended = True
        buf.last_seen = now
        if not buf.quiet_scheduled:
            buf.quiet_scheduled = True
            self._timer.schedule(now + self._settings.decision_wait, "quiet", trace_id)

    @staticmethod
    def parent_of(buf: TraceBuffer, span_id: int) -> int | None:
        """Under the lock: the local parent of a span of this buffer (ended: recorded; open: read
        from the live span), None for a local root or a span this buffer does not know."""
        parent = buf.parents.get(span_id, _UNKNOWN)
        if parent is not _UNKNOWN:
            return parent  # type: ignore[return-value]
        live = buf.open_ids.get(span_id)
        ctx = live.parent if live is not None else None
        return ctx.span_id if ctx is not None and not ctx.is_remote else None

    def parent_chain(self, buf: TraceBuffer, span_id: int) -> Iterator[int]:
        """Under the lock: the span's ancestors known to this buffer, nearest first (bounded, so
        a parent cycle in a buggy trace cannot loop)."""
        cur = self.parent_of(buf, span_id)
        for _ in range(len(buf.parents) + len(buf.open_ids)):
            if cur is None:
                return
            yield cur
            cur = self.parent_of(buf, cur)

    def owner(self, buf: TraceBuffer, span_id: int) -> int | None:
        """Under the lock: the ended run (pending or scored) this span belongs to, if any."""
        for a in self.parent_chain(buf, span_id):
            if a in buf.runs or a in buf.scored:
                return a
        return None

    def has_agent_ancestor(self, buf: TraceBuffer, span_id: int) -> bool:
        """Under the lock: is an ancestor an agent span (ended, or open and agent-like now)?"""
        agents, open_spans = buf.agents, buf.open_ids
        for a in self.parent_chain(buf, span_id):
            if a in agents:
                return True
            live = open_spans.get(a)
            if live is not None and classify(live) == "agent":
                agents.add(a)
                return True
        return False

    def is_under(self, buf: TraceBuffer, span_id: int, top: int) -> bool:
        return any(a == top for a in self.parent_chain(buf, span_id))

    def complete_run(self, trace_id: int, buf: TraceBuffer, run_id: int, pending: bool = True) -> Ready:
        """Under the lock: take an outermost run's spans (its agent span and its subtree) out of
        the buffer for scoring. O(spans buffered for the trace), once per run."""
        if pending:
            del buf.runs[run_id]
        buf.scored.add(run_id)
        buf.had_run = True
        if self.parent_of(buf, run_id) is None and not buf.open_ids and not buf.runs:
            # The usual case, an agent span at the root of a trace with nothing else going on:
            # everything buffered is this run's (as whole-trace scoring had it), no walk needed.
            mine_all, held_all = buf.spans, buf.held
            buf.spans, buf.held = [], []
            buf.genai = False
            return Ready(trace_id, mine_all, held_all)
        memo: dict[int, bool] = {run_id: True}

        def inside(sid: int) -> bool:
            chain = [sid]
            found = False
            for a in self.parent_chain(buf, sid):
                known = memo.get(a)
                if known is not None:
                    found = known
                    break
                chain.append(a)
            for c in chain:
                memo.setdefault(c, found)
            return memo[sid]

        mine: list[ReadableSpan] = []
        rest: list[ReadableSpan] = []
        for s in buf.spans:
            (mine if inside(s.context.span_id) else rest).append(s)
        buf.spans = rest
        held_mine = [h for h in buf.held if memo.get(h.span_id)]
        if held_mine:
            buf.held = [h for h in buf.held if not memo.get(h.span_id)]
        # What is left (the request around the runs, spans outside any run) is rarely GenAI.
        buf.genai = any(classify(s) is not None for s in rest)
        return Ready(trace_id, mine, held_mine)

    def finish_if_idle(self, trace_id: int, buf: TraceBuffer, ready: list[Ready]) -> None:
        """Under the lock: nothing of the trace is open any more (and its root has ended): its
        runs were scored as they completed; what is left is scored only as a trace without an
        agent run (one run at its local root) or for agent spans no run took; then it is gone."""
        if buf.open_ids or buf.runs or not (buf.root_ended or buf.had_run):
            return
        del self.pending[trace_id]
        r = self.leftover(trace_id, buf)
        if r is not None:
            ready.append(r)

    @staticmethod
    def leftover(trace_id: int, buf: TraceBuffer) -> Ready | None:
        if buf.held or (buf.genai and not buf.had_run):
            return Ready(trace_id, buf.spans, buf.held)
        return None

    def quiet_due(self, trace_id: int, now: float) -> Ready | None:
        """Under the lock: a quiet-mode trace's timer fired."""
        buf = self.pending.get(trace_id)
        if buf is None:
            return None
        quiet_until = buf.last_seen + self._settings.decision_wait
        if now < quiet_until or not buf.root_ended:
            # Spans still arriving, or the root has not: look again later (TTL bounds the wait).
            self._timer.schedule(max(quiet_until, now + self._settings.decision_wait / 4), "quiet", trace_id)
            return None
        del self.pending[trace_id]
        if buf.held or buf.genai:
            return Ready(trace_id, buf.spans, buf.held)
        return None

    def drain(self) -> list[Ready]:
        """Under the lock: every run whose agent span has ended is complete now (force_flush,
        shutdown); a trace with nothing open left goes with it."""
        ready: list[Ready] = []
        for tid, buf in list(self.pending.items()):
            if self._quiet:
                if buf.held or (buf.genai and buf.root_ended):
                    del self.pending[tid]
                    ready.append(Ready(tid, buf.spans, buf.held))
                continue
            for run_id in list(buf.runs):
                ready.append(self.complete_run(tid, buf, run_id))
            if not buf.open_ids and (buf.root_ended or buf.had_run or buf.held):
                del self.pending[tid]
                r = self.leftover(tid, buf)
                if r is not None:
                    ready.append(r)
        return ready
