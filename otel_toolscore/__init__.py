"""otel-toolscore: score AI-agent tool use from OpenTelemetry spans."""

from __future__ import annotations

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
    "Document",
    "LLMCall",
    "Message",
    "Retrieval",
    "ToolCall",
    "ToolDefinition",
    "Trajectory",
    "__version__",
]
