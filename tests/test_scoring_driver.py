"""One scoring driver (``scorers.run``): the engine (processor and ``serve``), ``score`` (CLI) and
the pytest plugin all score through it, so a failing scorer reads the same on every path: an
error score naming the exception, never a value of 0 and never a lost run."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, ClassVar

import pytest

from otel_toolscore.config import ToolScoreSettings
from otel_toolscore.outputs.otel import Emitter
from otel_toolscore.runtime.engine import Engine
from otel_toolscore.scorers import run
from otel_toolscore.scorers.base import Score
from otel_toolscore.trajectory import Trajectory
from tests.support.trajectory_factory import make_trajectory


class _Raises:
    """Scorers as the driver sees them: anything with a name and score() (or ascore() for "llm")."""

    name: ClassVar[str] = "raises"

    def score(self, trajectory: Trajectory) -> Score:
        raise ValueError("bad scorer")


class _Exits:
    name: ClassVar[str] = "exits"

    def score(self, trajectory: Trajectory) -> Score:
        raise SystemExit(3)


class _Fine:
    name: ClassVar[str] = "fine"

    def score(self, trajectory: Trajectory) -> Score:
        return Score(name=self.name, value=1.0)


class _Judge:
    name: ClassVar[str] = "judge"
    kind: ClassVar[Any] = "llm"

    def score(self, trajectory: Trajectory) -> Score:  # pragma: no cover - the driver awaits ascore
        raise AssertionError("sync path used for an LLM scorer")

    async def ascore(self, trajectory: Trajectory) -> Score:
        await asyncio.sleep(0)
        raise RuntimeError("judge down")


def _is_error(score: Score, name: str, exc: type[BaseException]) -> None:
    assert score.name == name
    assert score.value is None
    assert score.error is not None
    assert score.details.get("exception") == exc.__name__


def test_split_keeps_order_and_kind() -> None:
    scorers = [_Fine(), _Judge(), _Raises()]
    code, llm = run.split(scorers)
    assert [s.name for s in code] == ["fine", "raises"]
    assert [s.name for s in llm] == ["judge"]


def test_score_runs_gives_error_scores_in_scorer_order() -> None:
    runs = [make_trajectory(), make_trajectory()]
    scorers = [_Raises(), _Judge(), _Fine()]
    seen: list[int] = []
    for scores in run.score_runs(runs, scorers, seen.append):
        _is_error(scores[0], "raises", ValueError)
        _is_error(scores[1], "judge", RuntimeError)
        assert scores[2].value == 1.0
    assert sum(seen) == 6


def test_the_engine_scores_through_the_same_driver() -> None:
    engine = Engine(ToolScoreSettings(), [_Raises(), _Fine()], Emitter(ToolScoreSettings()))
    traj = make_trajectory()
    assert [s.to_dict() for s in run.run_scorers(traj, engine.code_scorers)] == [
        s.to_dict() for s in run.run_scorers(traj, [_Raises(), _Fine()])
    ]
    judged = asyncio.run(run.ascore_all(traj, [_Judge()]))
    _is_error(judged[0], "judge", RuntimeError)


def test_a_system_exit_inside_a_scorer_off_the_main_thread_is_its_error_score() -> None:
    out: list[list[Score]] = []
    worker = threading.Thread(target=lambda: out.append(run.run_scorers(make_trajectory(), [_Exits(), _Fine()])))
    worker.start()
    worker.join(10)
    _is_error(out[0][0], "exits", SystemExit)
    assert out[0][1].value == 1.0


def test_on_the_main_thread_a_system_exit_is_not_swallowed() -> None:
    with pytest.raises(SystemExit):
        run.run_scorers(make_trajectory(), [_Exits()])
