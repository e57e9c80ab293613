"""The OTLP/gRPC receiver of ``serve``: ``TraceService/Export``, and ``LogsService``/``MetricsService``
when forwarding is on (else UNIMPLEMENTED); the standard health service (``_health``).

Requests are handled as raw bytes (no serializers): traces are decoded by the server, logs and
metrics go upstream as they came. gRPC itself bounds what a client can hold: the message size
(decompressed too), the RPCs being handled, and HTTP/2 streams per connection. A refusal carries
``google.rpc.RetryInfo`` when the client should retry.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from otel_toolscore.extras import require
from otel_toolscore.runtime.serve._health import grpc_health_handler
from otel_toolscore.runtime.serve._protocol import GRPC_SERVICES, Rejection, Reply

if TYPE_CHECKING:
    from otel_toolscore.runtime.serve.server import ToolScoreServer


def start_grpc(app: ToolScoreServer, port: int) -> tuple[Any, int]:
    """Bind ``app.host:port`` and serve in gRPC's threads; (the server, the port bound)."""
    grpc = require("grpc", "serve", "the sidecar's OTLP/gRPC receiver (or serve --no-grpc)")

    def traces(request: bytes, context: Any) -> bytes:
        return _call(app, context, lambda: app.ingest_traces(request, is_json=False))

    handlers = [grpc.method_handlers_generic_handler(
        GRPC_SERVICES["traces"], {"Export": grpc.unary_unary_rpc_method_handler(traces)}), grpc_health_handler(app)]
    if app.forward_signals:
        for signal_name in ("logs", "metrics"):
            handlers.append(grpc.method_handlers_generic_handler(
                GRPC_SERVICES[signal_name],
                {"Export": grpc.unary_unary_rpc_method_handler(_forwarder(app, signal_name))}))
    server = grpc.server(
        ThreadPoolExecutor(max_workers=app.max_concurrent_requests, thread_name_prefix="otel-toolscore-grpc"),
        handlers=handlers,
        maximum_concurrent_rpcs=app.max_concurrent_requests,
        options=[
            # gRPC checks this on the decompressed message too: no gzip bomb gets through.
            ("grpc.max_receive_message_length", app.max_request_bytes),
            # HTTP/2 streams per connection: a client's RPCs beyond it wait in its own
            # connection (the others keep their share) instead of being refused.
            ("grpc.max_concurrent_streams", app.max_concurrent_requests),
            # Without this a second server could bind the same port and steal half the traffic.
            ("grpc.so_reuseport", 0),
        ],
    )
    host = f"[{app.host}]" if ":" in app.host else app.host
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:
        bound = 0
    if not bound:
        raise OSError(f"cannot listen for OTLP/gRPC on {host}:{port} (address in use?)")
    server.start()
    return server, bound


def _forwarder(app: ToolScoreServer, signal_name: str) -> Callable[[bytes, Any], bytes]:
    def handle(request: bytes, context: Any) -> bytes:
        return _call(app, context, lambda: app.forward(signal_name, request, is_json=False))

    return handle


def _call(app: ToolScoreServer, context: Any, work: Callable[[], Reply]) -> bytes:
    import grpc

    try:
        metadata = dict(context.invocation_metadata() or ())
        if not app.authorized(metadata.get("authorization")):
            app._count("unauthenticated", 1)
            raise Rejection(401, "UNAUTHENTICATED", "missing or wrong bearer token (authorization metadata)")
        with app._request():
            return work().body
    except Rejection as rej:
        if rej.retry_after is not None:
            from google.protobuf.duration_pb2 import Duration
            from google.rpc.error_details_pb2 import RetryInfo

            info = RetryInfo(retry_delay=Duration(seconds=rej.retry_after))
            context.set_trailing_metadata((("google.rpc.retryinfo-bin", info.SerializeToString()),))
        context.abort(getattr(grpc.StatusCode, rej.code), rej.message)
        raise  # abort raises; this line is for type checkers
