"""otel-toolscore: score AI-agent tool use from OpenTelemetry spans."""

from __future__ import annotations

__version__ = "0.1.0"  # before the imports: submodules read it while the package initialises

from otel_toolscore import scorers
from otel_toolscore.assemble import build_trajectories
from otel_toolscore.bootstrap import InstallError, install
from otel_toolscore.config import ToolScoreSettings, load_settings
from otel_toolscore.otlp import load_otlp, read_otlp_json
from otel_toolscore.processor import ToolScoreSpanProcessor
from otel_toolscore.replay import replay, replay_file
from otel_toolscore.scorers.base import Score, Scorer
from otel_toolscore.trajectory import (
    Document,
    LLMCall,
    Message,
    Retrieval,
    ToolCall,
    ToolDefinition,
    Trajectory,
)


__all__ = [
    "InstallError",
    "Score",
    "Scorer",
    "ToolScoreSettings",
    "ToolScoreSpanProcessor",
    "install",
    "load_settings",
    "replay",
    "replay_file",
    "scorers",
    "build_trajectories",
    "load_otlp",
    "read_otlp_json",
    "Document",
    "LLMCall",
    "Message",
    "Retrieval",
    "ToolCall",
    "ToolDefinition",
    "Trajectory",
    "__version__",
]
