"""The scorers' cross-run caches live on the app's heap (``scoring="thread"``): what they keep
must be left untracked by the garbage collector where it can be, or every full collection the
app's threads trigger walks it. A tuple of untracked values is untracked by a collection that
finds it so; a nested one, one level per collection (hence ``_collect``)."""

from __future__ import annotations

import gc

from otel_toolscore.scorers import _facts
from otel_toolscore.scorers import tool_results as tr


def _collect() -> None:
    for _ in range(3):
        gc.collect()


def test_fact_maker_cache_keys_are_untracked_after_a_collection() -> None:
    _facts._MADE.clear()
    _facts.extract_facts.__wrapped__("It costs $375.20 on 2025-03-04 at 14:30, order AB-1234, 72°F.")
    assert len(_facts._MADE) >= 4
    _collect()
    assert not any(gc.is_tracked(key) for key in _facts._MADE)


def test_equal_sets_of_kinds_are_one_object() -> None:
    one = _facts.extract_facts.__wrapped__("It was 72°F and cost $5.")
    two = _facts.extract_facts.__wrapped__("It was 61°F and cost $9.")
    assert _facts.kinds_of(one) == _facts.kinds_of(two)
    assert _facts.kinds_of(one) is _facts.kinds_of(two)
    assert _facts.kinds_of(()) is _facts.kinds_of([])


def test_salient_values_without_words_are_keyed_untracked() -> None:
    values = [*tr._salient_of_value(375.2), *tr._salient_of_value("Paris"), *tr._salient_of_value("a")]
    assert values and all(not v.tokens for v in values)
    assert all(v.tokens is tr._NO_TOKENS for v in values)
    _collect()
    assert not any(gc.is_tracked(v.key) for v in values)


def test_salient_values_with_words_keep_them_in_the_key() -> None:
    (value,) = tr._salient_of_value("partly cloudy with light northern winds")
    assert value.tokens and value.key[1] == value.tokens
