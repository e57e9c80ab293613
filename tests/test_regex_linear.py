"""No regular expression of the package can backtrack without bound, and a hostile tool result
cannot freeze the app: patterns run on the judge's and the worker's threads while they hold the GIL.

What is checked here is the shape of every pattern (no quantifier nested in a quantifier where one
iteration could end inside the next: the exponential kind) and what bounds a hostile result's cost
(the budget). How long each pattern takes on adversarial input, linear or not, is measured in
benchmarks/ (`python -m benchmarks regex-scan`); how long an app thread waits for the GIL was
measured once (BENCHMARKS.md, "History"). Speed targets live there, never in a unit test.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any

import pytest

import otel_toolscore
from otel_toolscore.scorers.redaction import (
    _CUT_MARGIN,
    ContentBudget,
    DataBlocks,
    default_redactor,
    redact_shortened,
)
from tests._regex_shape import nested_ambiguous_repeats


def _package_patterns() -> dict[str, re.Pattern[str]]:
    """Every compiled pattern held at module level (alone, or in a list, tuple, dict)."""
    found: dict[tuple[str, int], tuple[str, re.Pattern[str]]] = {}

    def visit(obj: Any, where: str, depth: int = 0) -> None:
        if isinstance(obj, re.Pattern):
            if isinstance(obj.pattern, str):
                found.setdefault((obj.pattern, obj.flags), (where, obj))
        elif depth < 3 and isinstance(obj, (list, tuple, set, frozenset)):
            for x in obj:
                visit(x, where, depth + 1)
        elif depth < 3 and isinstance(obj, dict):
            for x in obj.values():
                visit(x, where, depth + 1)

    for info in pkgutil.walk_packages(otel_toolscore.__path__, "otel_toolscore."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            visit(value, f"{info.name}.{name}")
    return {f"{where}:{i}": p for i, (where, p) in enumerate(found.values())}


PATTERNS = _package_patterns()


def test_the_package_has_patterns_to_check() -> None:
    assert len(PATTERNS) > 30  # the walk finds them (redaction, tool results, facts, conventions)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_no_pattern_nests_a_quantifier_that_can_end_inside_the_next_iteration(name: str) -> None:
    pattern = PATTERNS[name]
    assert nested_ambiguous_repeats(pattern) == [], f"{name} {pattern.pattern!r}"


@pytest.mark.parametrize("bad", [r"(a+)+$", r"(\w+\s?)*x", r"(?:[a-z0-9]+[-.]?)+@", r"(x|\w+)*y", r"((ab)*c?)*d",
                                 r"(\d{1,3})+x", r"(?i)(?:A+a)+!", r"(?:[^,]+,?)+;", r"(?:.*?)+x"])
def test_the_shape_check_finds_the_exponential_kind(bad: str) -> None:
    assert nested_ambiguous_repeats(re.compile(bad)) != []


@pytest.mark.parametrize("good", [r"(?:\.[\w-]+)+", r"[a-z0-9]+(?:[-_][a-z0-9]+)+", r"(?:ab)+", r"(?:\d{3})+",
                                  r"(?:\s*,\s*\w+)*", r"(?:[^\"\\]|\\.)*", r"(?:\w+ )+", r"(?:[^,]+,)+;", r"(?>a+)+b"])
def test_the_shape_check_passes_unambiguous_nesting(good: str) -> None:
    assert nested_ambiguous_repeats(re.compile(good)) == []


def test_redaction_is_unchanged_where_the_value_fits() -> None:
    text = "mail bob@example.com, key sk-abcdefghijklmnopqrstuvwx, url https://u:hunter2@h.io/x"
    assert redact_shortened(text, 4000, default_redactor) == default_redactor(text)
    assert "hunter2" not in default_redactor(text) and "bob@example.com" not in default_redactor(text)


def test_shortened_value_keeps_no_secret_in_clear_at_a_cut() -> None:
    limit = 4000
    head, tail = limit * 2 // 3, limit - limit * 2 // 3
    secret = "sk-" + "Z" * 40
    filler = "x " * 300_000
    # secrets in the kept head, straddling the head's cut, straddling the tail's cut, in the tail
    text = (secret + " " + "y " * ((head - 60) // 2) + secret + " " + filler
            + secret + "y " * ((tail - 20) // 2) + " bob@example.com")
    out = redact_shortened(text, limit, default_redactor)
    assert "ZZZZ" not in out and "bob@example.com" not in out, out
    assert "[REDACTED:api_key]" in out and "[REDACTED:email]" in out
    assert "…[shortened" in out and len(out) < limit + 100


@pytest.mark.parametrize("hostile", [".a" * 500_000, "x@" * 500_000, "a://" * 250_000, " " * 1_000_000],
                         ids=["dot-a", "x-at", "scheme", "spaces"])
def test_a_megabyte_hostile_result_costs_the_judge_thread_no_more_than_its_budget(hostile: str) -> None:
    """The judge thread builds the prompt while the app runs, holding the GIL while a pattern
    scans: what a block costs is bounded by the block budget, never by the result's size. The
    redactor (every pattern) sees at most the kept head and tail with their margins, and the
    rendered block is within the budget. (How long an app thread then waits, target under
    50 ms: BENCHMARKS.md, "History".)"""
    seen: list[int] = []

    def recording(text: str) -> str:
        seen.append(len(text))
        return default_redactor(text)

    budget = ContentBudget()
    blocks = DataBlocks(redactor=recording, budget=budget)
    blocks.add("tool_result", hostile)
    rendered = blocks.render()
    assert 1 <= len(seen) <= 2  # the head and the tail, each redacted once
    assert sum(seen) <= budget.max_block_chars + 2 * _CUT_MARGIN
    assert len(rendered) < budget.max_block_chars + 200  # the kept text, the marker, the delimiters


def test_data_blocks_still_redact_and_shorten() -> None:
    blocks = DataBlocks()
    blocks.add("r", {"result": "contact bob@example.com " + "z" * 10_000})
    out = blocks.render()
    assert "bob@example.com" not in out and "[REDACTED:email]" in out and "…[shortened" in out
