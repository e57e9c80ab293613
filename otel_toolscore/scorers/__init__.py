"""Scorers: each takes a ``Trajectory`` and returns a ``Score`` (see SCORERS.md).

Importing this package registers the built-in scorers in ``SCORERS``: the code scorers and the
LLM-judged ones (whose modules do not import litellm until a judge is actually called).
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
)
from otel_toolscore.scorers.context_position import ContextPosition
from otel_toolscore.scorers.judge import JudgeClient, JudgeSettings, LLMScorer
from otel_toolscore.scorers.prompt_alignment import PromptAlignment
from otel_toolscore.scorers.run import run_scorers
from otel_toolscore.scorers.tool_appropriateness import ToolCallAppropriateness
from otel_toolscore.scorers.tool_call_accuracy import ToolCallAccuracy
from otel_toolscore.scorers.tool_results import ToolResultVerification
from otel_toolscore.scorers.tool_validation import ToolCallValidation

#: the LLM-judged scorers (need a judge model; run asynchronously, off the hot path)
LLM_SCORERS: tuple[str, ...] = (
    ToolCallAppropriateness.name,
    PromptAlignment.name,
    ContextPosition.name,
)

__all__ = [
    "CODE_SCORERS",
    "LLM_SCORERS",
    "SCORERS",
    "ContextPosition",
    "Expectations",
    "InvalidExpectationError",
    "JudgeClient",
    "JudgeSettings",
    "LLMScorer",
    "PromptAlignment",
    "Score",
    "Scorer",
    "ScorerConfigError",
    "ScoringError",
    "ToolCallAccuracy",
    "ToolCallAppropriateness",
    "ToolCallValidation",
    "ToolResultVerification",
    "default_code_scorers",
    "get_scorer",
    "register",
    "resolve_expectations",
    "run_scorers",
]
