"""``serve``'s health: liveness, readiness, and the standard gRPC health service (grpc.health.v1).

Live: the process answers. Ready: the receivers are up and not stopping, and a request would be
accepted now: the buffer waiting for the upstream is below its bound, the on-disk queue (when
on) has room for a request of ``max_request_bytes``, and scoring has room. A
failing upstream alone leaves it ready (the buffer takes what comes, docs/reliability.md,
"`serve` never acknowledges"); one failing long enough to fill the buffer makes it not ready,
so a load balancer sends to another replica. How to probe it: docs/backends.md, "Health probes".

grpc.health.v1 is served by hand on raw bytes, as the OTLP services are: its two messages
have one field each, and the package that ships its generated code (grpcio-health-checking)
requires a protobuf and grpcio far newer than the OTel SDK releases this package supports.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from otel_toolscore.runtime.serve.server import ToolScoreServer

__all__ = ["HEALTH_SERVICE", "Readiness", "grpc_health_handler", "readiness"]

HEALTH_SERVICE = "grpc.health.v1.Health"
# HealthCheckResponse.ServingStatus
_SERVING, _NOT_SERVING = 1, 2


@dataclass(frozen=True)
class Readiness:
    """What ``/readyz`` answers (as JSON) and the gRPC health service reads."""

    ready: bool
    #: why not ready; empty when ready
    reasons: list[str] = field(default_factory=list)
    queued_spans: int = 0
    max_queued_spans: int = 0
    #: the latest export to the upstream failed (or is stuck) and nothing was delivered since
    upstream_failing: bool = False

    def json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()


def readiness(app: ToolScoreServer) -> Readiness:
    from otel_toolscore.runtime.serve.admission import scoring_full

    reasons = []
    if not app.receiving:
        reasons.append("not receiving (starting or stopping)")
    queued, limit = app.queued_spans(), app.max_queued_spans
    if queued >= limit:
        reasons.append(f"{queued} spans wait for the upstream (max_queued_spans {limit})")
    room = app.queue_room_bytes()
    if room is not None and room < app.max_request_bytes:
        reasons.append(f"the on-disk queue has {room} bytes of room, less than one request (max_request_bytes)")
    full = scoring_full(app.processor) if app.receiving else None
    if full is not None:
        reasons.append(full)
    failing = app.upstream_failing()
    return Readiness(not reasons, reasons, queued, limit, failing)


def _decode_service(request: bytes) -> str | None:
    """``HealthCheckRequest.service`` (field 1, a string); None when the bytes are not one."""
    if not request:
        return ""
    if request[0] != 0x0A:  # field 1, length-delimited
        return None
    length, shift, i = 0, 0, 1
    while i < len(request):
        byte = request[i]
        length |= (byte & 0x7F) << shift
        i += 1
        if not byte & 0x80:
            break
        shift += 7
    name = request[i:i + length]
    if len(name) != length or i + length != len(request):
        return None
    try:
        return name.decode()
    except UnicodeDecodeError:
        return None


def _response(status: int) -> bytes:
    """``HealthCheckResponse{status}``: field 1, a varint (the statuses are below 128)."""
    return bytes([0x08, status])


def grpc_health_handler(app: ToolScoreServer) -> Any:
    """The generic handler of ``grpc.health.v1.Health/Check``: the service "" (the server) and
    the OTLP services it serves answer SERVING when ready, NOT_SERVING otherwise; any other
    name NOT_FOUND, as the health checking protocol says. ``Watch`` is not served
    (UNIMPLEMENTED): probes (Kubernetes, grpc_health_probe) use ``Check``."""
    import grpc

    from otel_toolscore.runtime.serve._protocol import GRPC_SERVICES

    def check(request: bytes, context: Any) -> bytes:
        service = _decode_service(request)
        if service is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "not a grpc.health.v1.HealthCheckRequest")
        served = {"", *(GRPC_SERVICES[s] for s in (("traces", "logs", "metrics") if app.forward_signals
                                                    else ("traces",)))}
        if service not in served:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {service!r}")
        return _response(_SERVING if readiness(app).ready else _NOT_SERVING)

    return grpc.method_handlers_generic_handler(HEALTH_SERVICE, {"Check": grpc.unary_unary_rpc_method_handler(check)})
