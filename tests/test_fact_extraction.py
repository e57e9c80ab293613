"""Fact extraction's shortcuts against their plain forms: the patterns a text's triggers plan
(``_facts._triggers``, with a text without a digit looked at for the triggers of the patterns that
need none) are those checked one by one; a fact is made once per distinct match (``_facts._made``)
and the facts of a text are the same whether its matches were made before, in other texts and
contexts, or not (``facts_oracle.every_pattern``, the first form, is the reference)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_toolscore.scorers import _facts
from tests.support import facts_oracle

_PIECES = list("0123456789 ,.:;/-_#@$€%'\"()abcdefjmnprstuyACDEFJMPSUW°\n") + [
    "Jan", "sept", "USD", "per cent", "http://", "www.", "am", "p.m.", "dollars", "2025-06-14", "12:30",
    "03/04/2025", "1,234.5", "°F", "km/h", "#1234", "AB1234", "deadbeef7", "May 5", "5 pm", "-", "$12", "12 km",
]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)


@settings(max_examples=800, deadline=None)
@given(_TEXT, _TEXT)
def test_a_text_has_the_same_facts_with_its_matches_made_before_or_not(text: str, context: str) -> None:
    _facts._MADE.clear()
    cold = _facts.extract_facts.__wrapped__(text)
    _facts.extract_facts.__wrapped__(context + text + context)  # its matches met elsewhere first
    _facts.extract_facts.__wrapped__(text + context)
    assert _facts.extract_facts.__wrapped__(text) == cold == facts_oracle.every_pattern(text)


def test_the_made_facts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_facts, "_MADE_ENTRIES", 8)
    _facts._MADE.clear()
    text = " ".join(f"{n} km" for n in range(11, 60))
    assert _facts.extract_facts.__wrapped__(text) == facts_oracle.every_pattern(text)
    assert 0 < len(_facts._MADE) <= 8
    long_url = "https://example.com/" + "a" * 100
    _facts._MADE.clear()
    assert [f.value for f in _facts.extract_facts.__wrapped__(long_url)] == ["example.com/" + "a" * 100]
    assert not _facts._MADE  # a long match is made afresh, never kept


@settings(max_examples=1500, deadline=None)
@given(st.one_of(_TEXT, _TEXT.map(lambda text: "".join(ch for ch in text if not ch.isdigit()))))
def test_the_triggers_plan_the_patterns_checked_one_by_one(text: str) -> None:
    assert _facts._plan(_facts._triggers(text)) == _facts._plan_checked_one_by_one(text)
