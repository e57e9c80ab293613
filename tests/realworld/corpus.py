"""The real-conversation corpus (``paths.REALWORLD``, committed in ``tests/corpora``): loading, runs in trace order,
and their truth. Used by the tests and by ``python -m tests.realworld.measure``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import build_trajectories, read_otlp_json
from otel_toolscore.trajectory import Trajectory
from tests.realworld import corpora
from tests.support.paths import REALWORLD

ROOT = REALWORLD
TRACES = ROOT / "tau_airline"
TRUTH = ROOT / "tau_airline_truth.json"
SCHEMAS = ROOT / "tool_schemas_airline.json"


@dataclass(frozen=True)
class Run:
    conversation: str
    index: int  # position of the run in its conversation (trace order)
    trajectory: Trajectory
    truth: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.conversation}#{self.index}"


def available() -> bool:
    return TRUTH.is_file() and TRACES.is_dir()


@lru_cache(maxsize=1)
def truth() -> dict[str, Any]:
    return json.loads(TRUTH.read_text())


@lru_cache(maxsize=1)
def schemas() -> dict[str, Any]:
    return json.loads(SCHEMAS.read_text())


def conversation_runs(name: str) -> list[Run]:
    """The conversation's top-level runs, ordered by their root span's start (as the truth is)."""
    trajectories = [t for t in build_trajectories(read_otlp_json(TRACES / f"{name}.json")) if not t.nested]
    trajectories.sort(key=lambda t: t.start_time or 0)
    expected = truth()[name]["runs"]
    return [Run(name, i, t, expected[i] if i < len(expected) else {}) for i, t in enumerate(trajectories)]


def conversations() -> list[str]:
    return sorted(truth(), key=lambda k: tuple(int(x) for x in k.replace("_t", " ").split()))


def span_traces() -> list[list[ReadableSpan]]:
    """Every conversation's spans, a list per trace, the files in name order and each file's traces
    in the order they appear (a turn's trace extends the history of the turn before)."""
    traces: list[list[ReadableSpan]] = []
    for path in sorted(TRACES.glob("*.json")):
        by_trace: dict[int, list[ReadableSpan]] = {}
        for span in read_otlp_json(path):
            by_trace.setdefault(span.context.trace_id, []).append(span)  # type: ignore[union-attr]
        traces.extend(by_trace.values())
    return traces


def all_runs() -> list[Run]:
    return [run for name in conversations() for run in conversation_runs(name)]


def reading_mismatches(run: Run) -> list[str]:
    """How the run as read differs from its truth (empty: read exactly): ``corpora``'s, for this
    corpus's runs (they carry the same trajectory and truth)."""
    return corpora.reading_mismatches(run)  # type: ignore[arg-type]
