"""otel-toolscore: score AI-agent tool use from OpenTelemetry spans.

The data flows one way through the stages, one subpackage or module each:
``ingest`` (OTLP in) -> ``conventions`` (read a span) -> ``assemble`` (spans to ``trajectory``)
-> ``scorers`` -> ``outputs`` (OpenTelemetry, reports); ``runtime`` runs them in an app, a sidecar or offline.

The public names below load on first use (PEP 562), so importing one submodule, or this package
for ``__version__``, does not load the whole pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_toolscore import _lazy, _log_redaction
from otel_toolscore._version import __version__

_log_redaction.install()  # our log lines are redacted (docs/reliability.md, "Redaction")

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "build_trajectories": "otel_toolscore.assemble",
    "load_otlp": "otel_toolscore.ingest",
    "read_otlp_json": "otel_toolscore.ingest",
    "InstallError": "otel_toolscore.runtime.bootstrap",
    "install": "otel_toolscore.runtime.bootstrap",
    "ToolScoreSpanProcessor": "otel_toolscore.runtime.processor",
    "replay": "otel_toolscore.runtime.replay",
    "replay_file": "otel_toolscore.runtime.replay",
    "ToolScoreSettings": "otel_toolscore.config",
    "load_settings": "otel_toolscore.config",
    "tool_schemas": "otel_toolscore.schemas",
    "Score": "otel_toolscore.scorers.base",
    "Scorer": "otel_toolscore.scorers.base",
    "Document": "otel_toolscore.trajectory",
    "LLMCall": "otel_toolscore.trajectory",
    "Message": "otel_toolscore.trajectory",
    "Retrieval": "otel_toolscore.trajectory",
    "ToolCall": "otel_toolscore.trajectory",
    "ToolDefinition": "otel_toolscore.trajectory",
    "Trajectory": "otel_toolscore.trajectory",
}

__all__ = [  # grouped by stage, as _EXPORTS
    "build_trajectories",
    "load_otlp",
    "read_otlp_json",
    "InstallError",
    "install",
    "ToolScoreSpanProcessor",
    "replay",
    "replay_file",
    "ToolScoreSettings",
    "load_settings",
    "tool_schemas",
    "Score",
    "Scorer",
    "Document",
    "LLMCall",
    "Message",
    "Retrieval",
    "ToolCall",
    "ToolDefinition",
    "Trajectory",
    "scorers",
    "__version__",
]
assert set(__all__) == set(_EXPORTS) | {"scorers", "__version__"}

if TYPE_CHECKING:  # the static view of the same names, for type checkers and IDEs
    from otel_toolscore import scorers
    from otel_toolscore.assemble import build_trajectories
    from otel_toolscore.config import ToolScoreSettings, load_settings
    from otel_toolscore.ingest import load_otlp, read_otlp_json
    from otel_toolscore.runtime.bootstrap import InstallError, install
    from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
    from otel_toolscore.runtime.replay import replay, replay_file
    from otel_toolscore.schemas import tool_schemas
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


__getattr__, __dir__ = _lazy.exports(__name__, _EXPORTS, globals(), submodules=("scorers",))
