"""scoring="process" with a second scoring process beside a busy first one.

A child with ``_SPREAD_AT`` runs in flight, or one so busy that a batch waited
``_SPREAD_AFTER_S`` for the sender, has another started beside it (by a thread of its own: the
sender goes on meanwhile), and each batch goes to the child with the fewest runs in flight. The processor's guarantees hold across the two: every run answered once, a dead
child's runs (and only its) counted lost and their spans forwarded, shutdown stops both, and at
most ``MAX_CHILDREN`` run, and no more than the cores the app may use."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from otel_toolscore.runtime import _scoring_process
from otel_toolscore.runtime._scoring_process import OUTCOME_DIED
from tests.support.pipeline import id_counts
from tests.support.spans import weather_run
from tests.test_process_mode import Slow, _agents, _gone, _outcomes, _setup, _wait_gone
from tests.test_process_mode_backlog import _big_run


def _wait(condition: Any, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _loads(remote: Any) -> list[int]:
    with remote._lock:
        return [child.inflight for child in remote._children]


@pytest.fixture
def spread_at_two(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_scoring_process, "_SPREAD_AT", 2)
    monkeypatch.setattr(_scoring_process, "_cores", lambda: 2)  # whatever this machine has


@pytest.mark.usefixtures("spread_at_two")
def test_a_busy_child_gets_a_second_beside_it_and_each_run_is_answered_once() -> None:
    p, tracer = _setup([Slow(0.3), "tool_call_validation"], hold_timeout=60.0)
    remote = p.processor._remote
    assert remote is not None
    try:
        for _ in range(3):  # one batch: the first child has 3 in flight
            weather_run(tracer)
        _wait(lambda: sum(_loads(remote)) == 3)
        assert len(remote.pids) == 1
        runs = 3
        while len(remote.pids) < 2:  # the next batch finds it busy: another starts
            weather_run(tracer)
            runs += 1
            time.sleep(0.05)
        first, second = remote.pids
        # the new one has nothing in flight: the next batches go to it
        for _ in range(2):
            weather_run(tracer)
        runs += 2
        _wait(lambda: _loads(remote)[1] > 0)
        assert p.processor.force_flush(60_000)
        assert remote.pids == [first, second] and remote.stats == {"started": 2, "died": 0, "runs_lost": 0}
        agents = _agents(p)
        assert len(agents) == runs and all("toolscore.slow.label" in s.attributes for s in agents)
        assert max(id_counts(p.exported()).values()) == 1
        assert _outcomes(p)[("slow", "scored")] == runs
        while _loads(remote)[0] < 2:  # both busy: no third one
            weather_run(tracer)
            runs += 1
            time.sleep(0.05)
        weather_run(tracer)
        runs += 1
        assert p.processor.force_flush(60_000)
        assert len(remote.pids) == 2 and remote.stats["started"] == 2
        assert len(_agents(p)) == runs
    finally:
        p.processor.shutdown()
    assert remote.pids == []
    assert all(_gone(pid) or _wait_gone(pid) for pid in (first, second))


@pytest.mark.usefixtures("spread_at_two")
def test_one_of_two_children_killed_loses_only_its_runs() -> None:
    p, tracer = _setup([Slow(0.5), "tool_call_validation"], hold_timeout=60.0)
    remote = p.processor._remote
    assert remote is not None
    try:
        runs = 0
        while len(remote.pids) < 2 or _loads(remote)[1] == 0:
            weather_run(tracer)
            runs += 1
            time.sleep(0.05)
        survivor, victim = remote.pids
        os.kill(victim, signal.SIGKILL)
        # (its runs are counted after it leaves the list of children)
        _wait(lambda: p.processor.stats[f"runs_{OUTCOME_DIED}"] >= 1)
        assert remote.pids[0] == survivor and victim not in remote.pids and remote.stats["died"] == 1
        lost = p.processor.stats[f"runs_{OUTCOME_DIED}"]
        weather_run(tracer)  # the survivor takes it
        runs += 1
        assert p.processor.force_flush(60_000)
        agents = _agents(p)
        assert len(agents) == runs
        assert max(id_counts(p.exported()).values()) == 1  # nothing twice
        scored = sum("toolscore.slow.label" in s.attributes for s in agents)
        assert scored == runs - lost
        outcomes = _outcomes(p)
        assert outcomes[("slow", "scored")] == scored and outcomes[("slow", OUTCOME_DIED)] == lost
        assert remote.pids[0] == survivor
    finally:
        p.processor.shutdown()


@pytest.mark.usefixtures("spread_at_two")
def test_one_core_one_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_scoring_process, "_cores", lambda: 1)
    p, tracer = _setup([Slow(0.2)], hold_timeout=60.0)
    remote = p.processor._remote
    assert remote is not None
    try:
        for _ in range(3):
            weather_run(tracer)
        _wait(lambda: sum(_loads(remote)) >= 2)
        for _ in range(4):  # each batch finds the child busy
            weather_run(tracer)
            time.sleep(0.05)
        assert p.processor.force_flush(60_000)
        assert len(remote.pids) == 1 and remote.stats["started"] == 1
        assert len(_agents(p)) == 7
    finally:
        p.processor.shutdown()


def test_batches_waiting_for_a_busy_child_start_another(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Few runs in flight (each is larger than the pipe holds), but the sender's write waits for
    # the child scoring the first: the batches behind it wait, and that starts another.
    monkeypatch.setattr(_scoring_process, "_SPREAD_AT", 10**9)
    monkeypatch.setattr(_scoring_process, "_cores", lambda: 2)
    p, tracer = _setup([Slow(3.0, marker=str(tmp_path / "slow"))], hold_timeout=60.0)
    remote = p.processor._remote
    assert remote is not None
    try:
        blob = "x" * 300_000
        _big_run(tracer, blob)
        _wait(lambda: (tmp_path / "slow").exists())  # the first child is scoring it, for 3 s
        runs = 1
        deadline = time.monotonic() + 60
        while len(remote.pids) < 2:  # (no child ever has _SPREAD_AT runs in flight)
            assert time.monotonic() < deadline
            _big_run(tracer, blob)
            runs += 1
            time.sleep(0.05)
        _big_run(tracer, blob)  # the new child takes it, and the rest
        runs += 1
        assert p.processor.force_flush(60_000)
        assert remote.stats == {"started": 2, "died": 0, "runs_lost": 0}
        assert len(_agents(p)) == runs and max(id_counts(p.exported()).values()) == 1
    finally:
        p.processor.shutdown()
