"""The code scorers' two scoring shortcuts (``Scorer._details_are_json``: details JSON-safe by
construction skip the checking encode; ``Score.of_code``: a score built without pydantic's
validation) held against the long way: both switched off."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from otel_toolscore.scorers.base import Score, Scorer, _check_json_serialisable
from otel_toolscore.trajectory import Trajectory


def the_long_way(scorer: Scorer, trajectory: Trajectory, monkeypatch: pytest.MonkeyPatch) -> Score:
    with monkeypatch.context() as m:
        m.setattr(type(scorer), "_details_are_json", lambda self, result: False)
        m.setattr(Score, "of_code", classmethod(
            lambda cls, name, value, label, explanation, details, call_results: cls(
                name=name, value=value, label=label, explanation=explanation, details=details,
                call_results=call_results)))
        return scorer.score(trajectory)


def assert_scores_as_the_long_way(scorers: Iterable[Scorer], trajectory: Trajectory) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        for scorer in scorers:
            try:
                result = scorer._score(trajectory)
            except Exception:  # noqa: BLE001 - an odd value the scorer itself fails on: an error score both ways
                result = None
            if result is not None and scorer._details_are_json(result):
                _check_json_serialisable(result.details)  # raises if the shortcut was wrong
            short = scorer.score(trajectory)
            long = the_long_way(scorer, trajectory, monkeypatch)
            assert short.model_dump() == long.model_dump()
            assert short.model_fields_set == long.model_fields_set
            assert short.call_results == long.call_results
