"""Scorers: each takes a ``Trajectory`` and returns a ``Score`` (see SCORERS.md).

Importing this package registers the built-in code scorers in ``SCORERS``.
"""

from __future__ import annotations

from otel_toolscore.scorers.base import (
    CODE_SCORERS,
    SCORERS,
    Expectations,
    InvalidExpectationError,
    Score,
    Scorer,
    ScorerConfigError,
    ScoringError,
    default_code_scorers,
    get_scorer,
    register,
    resolve_expectations,
    run_scorers,
)
from otel_toolscore.scorers.tool_call_accuracy import ToolCallAccuracy
from otel_toolscore.scorers.tool_results import ToolResultVerification
from otel_toolscore.scorers.tool_validation import ToolCallValidation

__all__ = [
    "CODE_SCORERS",
    "SCORERS",
    "Expectations",
    "InvalidExpectationError",
    "Score",
    "Scorer",
    "ScorerConfigError",
    "ScoringError",
    "ToolCallAccuracy",
    "ToolCallValidation",
    "ToolResultVerification",
    "default_code_scorers",
    "get_scorer",
    "register",
    "resolve_expectations",
    "run_scorers",
]
