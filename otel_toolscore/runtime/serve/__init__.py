"""``otel-toolscore serve``: the OTLP sidecar that scores what it receives and forwards every span upstream.

This package is the public surface; its modules, one job each:

``server``      ``ToolScoreServer``: the pipeline (processor, export queue, delivery), life cycle, requests
``_grpc``       the OTLP/gRPC receiver
``_http``       the OTLP/HTTP receiver: an HTTP/1.1 reader with deadlines and byte budgets
``_app_service`` the app each run came from, on the sidecar's events (bounded)
``_disk_queue`` ``--queue-dir``: accepted requests on disk (SQLite, WAL) until delivered
``_health``     liveness, readiness (``/healthz``, ``/readyz``) and the gRPC health service
``_protocol``   what both share: refusals, replies, error bodies, trace request decoding
``admission``   never accept what would be dropped: the export backlog and the processor's bounds
``delivery``    ``RetryingExporter``: what was accepted is retried until the upstream takes it
``upstream``    where everything goes (``--upstream*``, ``OTEL_EXPORTER_OTLP_*``), its exporters
``_forward``    logs and metrics passed to the upstream as they came

The names below load on first use (PEP 562).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_toolscore import _lazy

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "ServerAddresses": "otel_toolscore.runtime.serve.server",
    "ToolScoreServer": "otel_toolscore.runtime.serve.server",
    "RetryingExporter": "otel_toolscore.runtime.serve.delivery",
    "TlsFiles": "otel_toolscore.runtime.serve.upstream",
    "Upstream": "otel_toolscore.runtime.serve.upstream",
    "parse_header_items": "otel_toolscore.runtime.serve.upstream",
}

__all__ = [  # grouped by module, as _EXPORTS
    "ServerAddresses",
    "ToolScoreServer",
    "RetryingExporter",
    "TlsFiles",
    "Upstream",
    "parse_header_items",
]
assert set(__all__) == set(_EXPORTS)

if TYPE_CHECKING:  # the static view of the same names, for type checkers and IDEs
    from otel_toolscore.runtime.serve.delivery import RetryingExporter
    from otel_toolscore.runtime.serve.server import ServerAddresses, ToolScoreServer
    from otel_toolscore.runtime.serve.upstream import TlsFiles, Upstream, parse_header_items


__getattr__, __dir__ = _lazy.exports(__name__, _EXPORTS, globals())
