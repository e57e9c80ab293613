"""``_grounding.walk`` takes a dict's strings and numbers without a call of their own: it must
give the (key, leaf) pairs and totals of the plain recursive walk below, under every limit."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_toolscore.scorers import _grounding
from tests.test_fast_paths import _VALUE


def _plain_walk(value: Any, limit: int) -> tuple[list[Any], list[float]]:
    out: list[Any] = []
    totals: list[float] = []

    def collect(value: Any, key: str | None, depth: int, totals: list[float] | None) -> None:
        if depth > _grounding.LEAF_DEPTH or len(out) >= limit:
            return
        if isinstance(value, dict):
            for k, item in value.items():
                collect(item, str(k), depth + 1, totals)
        elif isinstance(value, list):
            for item in value:
                collect(item, key, depth + 1, totals)
            if totals is not None:
                _grounding._column_totals(value, totals)
        elif isinstance(value, tuple):
            for item in value:
                collect(item, key, depth + 1, None)
        elif isinstance(value, str):
            text = value.strip()
            if text[:1] in ("{", "[") and len(text) <= _grounding.MAX_TEXT:
                try:
                    inner = json.loads(text)
                except (ValueError, RecursionError):
                    inner = None
                if isinstance(inner, (dict, list)):
                    collect(inner, key, depth + 1, None)
                    return
            out.append((key, value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and _grounding.finite(value):
            out.append((key, value))

    collect(value, None, 0, totals)
    return out, totals


def _deep(value: Any, levels: int) -> Any:
    for i in range(levels):
        value = {f"k{i}": value, "n": i, "x": 1.5, "s": "v"}
    return value


@settings(max_examples=1500, deadline=None)
@given(_VALUE, st.integers(0, 12), st.sampled_from([0, 1, 3, 48, 49, 50, 51]))
def test_the_walk_is_the_plain_walk(value: Any, limit: int, levels: int) -> None:
    value = _deep(value, levels)  # numbers and strings at and around the depth cap
    for cap in (limit, 10**9):
        fast, plain = _grounding.walk(value, cap), _plain_walk(value, cap)
        assert repr(fast) == repr(plain)
