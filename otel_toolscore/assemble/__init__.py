"""Stage 3, assembly: spans of one trace -> one Trajectory per agent run.

Two ways, one result: the usual GenAI trace (one agent span, its chat and tool spans, the app's
own spans around) is read straight into its trajectory (``_direct``); any other trace, or any
doubt, is read the general way (``_general``: every span into ``SpanFacts`` by the conventions, the
span tree, the runs in it, each run's calls matched across the places they are seen in). Both
build on the same pieces: the call matching's keys and merges (``_calls``), and one set of rules
for what belongs to a run (``_rules``: its own part of each model input, its calls without answer
tools, its steps in call order, its question and answer).

Nothing here raises on bad input: cycles, duplicate ids, missing parents and unreadable values
become ``Trajectory.problems`` entries.

    _tree.py      the span tree (duplicates, missing parents, parent cycles cut)
    _runs.py      which agent-like spans are runs (wrappers, nested runs)
    _calls.py     _CallBuilder: one ToolCall per real call; the canonical key of arguments
    _rules.py     what belongs to a run, for both ways
    _general.py   the general way
    _direct.py    the direct path for the usual GenAI trace
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore.assemble import _direct, _general
from otel_toolscore.assemble._calls import _CallBuilder, _canon, _Echoes, _plainly_equal
from otel_toolscore.assemble._rules import _Scope
from otel_toolscore.assemble._runs import _find_runs
from otel_toolscore.assemble._tree import _build_tree
from otel_toolscore.trajectory import Trajectory


def build_trajectories(spans: Iterable[ReadableSpan]) -> list[Trajectory]:
    """Group spans by trace and build every trace's trajectories (outermost run first)."""
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        ctx = span.context
        if ctx is None:
            continue
        by_trace.setdefault(ctx.trace_id, []).append(span)
    out: list[Trajectory] = []
    for trace_id, trace_spans in by_trace.items():
        out.extend(assemble_trace(format(trace_id, "032x"), trace_spans))
    return out


def assemble_trace(trace_id: str, spans: Sequence[ReadableSpan]) -> list[Trajectory]:
    """The trace's trajectories: the usual GenAI trace read straight into its one trajectory, any
    other the general way."""
    direct = _direct.trajectories(trace_id, spans)
    if direct is not None:
        return direct
    return _general.trajectories(trace_id, spans)


# (the building blocks tests/test_assemble_shortcuts.py holds to their contracts)
__all__ = [
    "_CallBuilder",
    "_Echoes",
    "_Scope",
    "_build_tree",
    "_canon",
    "_find_runs",
    "_plainly_equal",
    "assemble_trace",
    "build_trajectories",
]
