"""Bounds on what the process keeps from run to run (docs/reliability.md, "Memory"), and the soak
benchmark's verdict on a series of resident-set samples (issue 30)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.soak import verdict
from otel_toolscore.scorers import judge


def test_the_models_without_a_price_are_remembered_within_a_bound() -> None:
    pytest.importorskip("litellm")
    judge._UNPRICED.clear()
    try:
        for i in range(judge._UNPRICED_ENTRIES + 50):
            # a response litellm cannot price: a model name it has never heard of, no usage
            response = SimpleNamespace(model=f"proxy/unknown-model-{i}", usage=None, _hidden_params={})
            assert judge._cost(response) is None
        assert len(judge._UNPRICED) == judge._UNPRICED_ENTRIES
        # one remembered is still answered without asking litellm
        assert "proxy/unknown-model-0" in judge._UNPRICED
    finally:
        judge._UNPRICED.clear()


def _samples(values: list[float], step: float = 10.0) -> list[dict[str, float]]:
    return [{"t_s": i * step, "rss_mb": v} for i, v in enumerate(values)]


def test_rss_that_levels_off_is_flat() -> None:
    # grows during the first third (caches filling), then stays within 5 % of the window's start
    r = verdict(_samples([50, 80, 100, 120, 121, 122, 121, 123, 124, 122, 121, 123]))
    assert r["flat"] is True
    assert r["window_from_s"] == 40.0 and r["first_mb"] == 121


def test_rss_that_keeps_growing_is_not_flat() -> None:
    r = verdict(_samples([50 + 3 * i for i in range(30)]))
    assert r["flat"] is False
    assert r["slope_mb_per_min"] == pytest.approx(18.0)


def test_too_few_samples_give_no_verdict() -> None:
    assert verdict(_samples([50]))["flat"] is None
