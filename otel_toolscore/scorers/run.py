"""The one scoring driver (``scorers.run``): runs scorers on trajectories and turns every failure into an error score.

The processor's engine, ``serve``, ``score`` and the pytest plugin all score through here, so a
scorer that raises (or returns something that is not a ``Score``) reads the same everywhere: an
error score naming the exception, never a score of 0 and never a lost run. Code scorers run
inline (microseconds); LLM-judged scorers are awaited, on the one judge loop for sync callers.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from otel_toolscore.scorers.base import Score, Scorer
from otel_toolscore.trajectory import Trajectory


def name_of(scorer: Any) -> str:
    return str(getattr(scorer, "name", None) or type(scorer).__name__)


def is_llm(scorer: Any) -> bool:
    return getattr(scorer, "kind", "code") == "llm" and hasattr(scorer, "ascore")


def split(scorers: Iterable[Any]) -> tuple[list[Any], list[Any]]:
    """(code scorers, LLM-judged scorers), each in the given order."""
    code: list[Any] = []
    llm: list[Any] = []
    for scorer in scorers:
        (llm if is_llm(scorer) else code).append(scorer)
    return code, llm


def score_one(scorer: Any, trajectory: Trajectory) -> Score:
    """One scorer's score; never raises. Scorers that do not derive from ``Scorer`` (user
    callables) get the same protection."""
    try:
        result = scorer.score(trajectory) if hasattr(scorer, "score") else scorer(trajectory)
        if not isinstance(result, Score):
            raise TypeError(f"scorer {name_of(scorer)} returned {type(result).__name__}, not Score")
        return result
    except Exception as exc:  # noqa: BLE001 - one bad scorer must not hide the others
        return Score.failed(name_of(scorer), exc)
    except BaseException as exc:
        # SystemExit or KeyboardInterrupt raised inside a scorer off the main thread is a bug in
        # the scorer, never a signal (signals reach the main thread only): its error score.
        if threading.current_thread() is threading.main_thread():
            raise
        return Score.failed(name_of(scorer), exc)


def run_scorers(trajectory: Trajectory, scorers: Iterable[Any]) -> list[Score]:
    """Run each scorer on the trajectory; one ``Score`` per scorer, in order, never raising."""
    return [score_one(scorer, trajectory) for scorer in scorers]


async def ascore_one(scorer: Scorer, trajectory: Trajectory) -> Score:
    """An LLM scorer's judgement; like ``score_one``, it never raises (but for cancellation)."""
    try:
        result = await scorer.ascore(trajectory)  # type: ignore[attr-defined]
        if not isinstance(result, Score):
            raise TypeError(f"scorer {name_of(scorer)} returned {type(result).__name__}, not Score")
        return result
    except asyncio.CancelledError:
        raise  # shutdown cancelling what is in flight
    except BaseException as exc:  # noqa: BLE001 - a judge failure is an error score, never a lost run;
        # SystemExit/KeyboardInterrupt escaping a task would also stop the judge loop
        return Score.failed(name_of(scorer), exc)


async def ascore_all(trajectory: Trajectory, scorers: Sequence[Scorer]) -> list[Score]:
    """The LLM scorers of one run, concurrently; scores in scorer order."""
    return list(await asyncio.gather(*(ascore_one(s, trajectory) for s in scorers)))


def score_runs(
    trajectories: Sequence[Trajectory], scorers: Sequence[Any], on_scored: Callable[[int], None] | None = None
) -> list[list[Score]]:
    """Scores per run, in scorer order, from sync code: code scorers inline, the LLM scorers of
    all runs concurrently on the judge loop (the judge client bounds the concurrency).
    ``on_scored(n)`` is told as scores are done (a progress bar)."""
    code, llm = split(scorers)
    code_scores = []
    for trajectory in trajectories:
        code_scores.append(run_scorers(trajectory, code))
        if on_scored is not None:
            on_scored(len(code))
    llm_scores: list[Score] = []
    if llm and trajectories:
        from otel_toolscore.scorers._loop import run_sync

        async def one(scorer: Any, trajectory: Trajectory) -> Score:
            result = await ascore_one(scorer, trajectory)
            if on_scored is not None:
                on_scored(1)
            return result

        async def everything() -> list[Score]:
            return list(await asyncio.gather(*(one(s, t) for t in trajectories for s in llm)))

        llm_scores = run_sync(everything())
    out = []
    for i in range(len(trajectories)):
        by_scorer = dict(zip((id(s) for s in code), code_scores[i]))
        by_scorer.update(zip((id(s) for s in llm), llm_scores[i * len(llm) : (i + 1) * len(llm)]))
        out.append([by_scorer[id(s)] for s in scorers])
    return out
