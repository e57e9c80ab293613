"""otel-toolscore: score AI-agent tool use from OpenTelemetry spans."""

from __future__ import annotations

from otel_toolscore.assemble import build_trajectories
from otel_toolscore.otlp import load_otlp, read_otlp_json
from otel_toolscore.trajectory import (
    Document,
    LLMCall,
    Message,
    Retrieval,
    ToolCall,
    ToolDefinition,
    Trajectory,
)

__version__ = "0.1.0"

__all__ = [
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
