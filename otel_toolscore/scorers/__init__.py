"""Scorers: each takes a ``Trajectory`` and returns a ``Score`` (see docs/scorers.md).

``registry.py`` lists the built-in scorers, one line each; ``results.py`` holds the typed
per-call results they produce. The LLM-judged scorers' modules do not import litellm until a
judge is actually called.
"""

from __future__ import annotations

from otel_toolscore.scorers.base import (
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
from otel_toolscore.scorers.registry import CODE_SCORERS, LLM_SCORERS
from otel_toolscore.scorers.results import BLOCKING_SEVERITIES, CallResult, Issue
from otel_toolscore.scorers.run import run_scorers
from otel_toolscore.scorers.tool_appropriateness import ToolCallAppropriateness
from otel_toolscore.scorers.tool_call_accuracy import ToolCallAccuracy
from otel_toolscore.scorers.tool_results import ToolResultVerification
from otel_toolscore.scorers.tool_validation import ToolCallValidation

__all__ = [
    "BLOCKING_SEVERITIES",
    "CODE_SCORERS",
    "LLM_SCORERS",
    "SCORERS",
    "CallResult",
    "ContextPosition",
    "Expectations",
    "InvalidExpectationError",
    "Issue",
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
