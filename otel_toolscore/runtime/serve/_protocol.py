"""OTLP requests and answers as both receivers (gRPC, HTTP) and the forwarder share them: a request
refused as a whole (``Rejection``: an HTTP status, a gRPC code, why), a reply, ``google.rpc.Status``
error bodies, and trace request bodies decoded into spans with what to report back."""

from __future__ import annotations

import json
from dataclasses import dataclass

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore.ingest import (
    OtlpDecodeError,
    count_json_spans,
    decode_export_request,
    parse_export_request,
    spans_from_otlp_dict,
)

RETRY_AFTER_S = 1

SIGNALS = ("traces", "logs", "metrics")
GRPC_SERVICES = {
    "traces": "opentelemetry.proto.collector.trace.v1.TraceService",
    "logs": "opentelemetry.proto.collector.logs.v1.LogsService",
    "metrics": "opentelemetry.proto.collector.metrics.v1.MetricsService",
}
JSON_TYPE = "application/json"
CT_PROTOBUF = "application/x-protobuf"
_MAX_ERROR_MESSAGE = 1000

# gRPC status codes by name (google.rpc.Code numbering), for error bodies.
_CODE = {
    "OK": 0, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5, "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14,
    "UNAUTHENTICATED": 16, "UNKNOWN": 2,
}


class Rejection(Exception):
    """A request refused as a whole: an HTTP status, a gRPC code, and why."""

    def __init__(self, status: int, code: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after


@dataclass
class Reply:
    body: bytes
    content_type: str = CT_PROTOBUF
    status: int = 200


@dataclass
class DecodedTraces:
    spans: list[ReadableSpan]
    #: spans in the request, decodable or not
    total: int
    problems: list[str]

    @property
    def rejected(self) -> int:
        return max(0, self.total - len(self.spans))


def decode_traces(body: bytes, is_json: bool) -> DecodedTraces:
    """An OTLP trace request body (already decompressed) → spans; ``Rejection`` (400) if it is not one."""
    problems: list[str] = []
    if is_json:
        try:
            doc = json.loads(body)
        except RecursionError:
            raise Rejection(400, "INVALID_ARGUMENT", "not JSON (nested too deeply)") from None
        except ValueError as exc:
            raise Rejection(400, "INVALID_ARGUMENT", f"not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise Rejection(400, "INVALID_ARGUMENT",
                            f"JSON but not an OTLP trace request: {type(doc).__name__}, not an object")
        resource_spans = doc.get("resourceSpans", doc.get("resource_spans"))
        if resource_spans is None:
            if not doc:  # {} is the JSON form of an empty request
                return DecodedTraces([], 0, [])
            raise Rejection(400, "INVALID_ARGUMENT", "JSON but not an OTLP trace request: no resourceSpans")
        total = count_json_spans(resource_spans)
        try:
            batch = spans_from_otlp_dict({"resourceSpans": resource_spans})
        except OtlpDecodeError as exc:
            raise Rejection(400, "INVALID_ARGUMENT", str(exc)) from None
        spans, problems = batch.spans, batch.problems
    else:
        try:
            message = parse_export_request(body, problems)
        except Exception as exc:  # noqa: BLE001 - the C parser's error types vary across protobuf versions
            raise Rejection(400, "INVALID_ARGUMENT",
                            f"not an OTLP protobuf trace request: {exc or type(exc).__name__}") from None
        if body and not message.resource_spans:
            # Only unknown fields: random bytes often parse that way.
            raise Rejection(400, "INVALID_ARGUMENT", "not an OTLP protobuf trace request: no resourceSpans")
        total = sum(len(group.spans) for entry in message.resource_spans for group in entry.scope_spans)
        spans = decode_export_request(message, problems, keep_wire=True)
    if not spans and (total or problems):
        first = problems[0] if problems else "no span"
        raise Rejection(400, "INVALID_ARGUMENT", f"no span in the request could be decoded: {first}")
    return DecodedTraces(spans, total, problems)


def trace_response(decoded: DecodedTraces) -> ExportTraceServiceResponse:
    response = ExportTraceServiceResponse()
    if decoded.rejected:
        response.partial_success.rejected_spans = decoded.rejected
        message = f"{decoded.rejected} of {decoded.total} spans could not be decoded: " + "; ".join(decoded.problems)
        response.partial_success.error_message = message[:_MAX_ERROR_MESSAGE]
    return response


def status_body(code: str, message: str, is_json: bool) -> tuple[bytes, str]:
    from google.rpc import status_pb2

    status = status_pb2.Status(code=_CODE.get(code, 2), message=message[:_MAX_ERROR_MESSAGE])
    if is_json:
        return json_format.MessageToJson(status, indent=None).encode(), JSON_TYPE
    return status.SerializeToString(), CT_PROTOBUF



def traces_reply(decoded: DecodedTraces, is_json: bool) -> Reply:
    """The success answer to a trace request, in the request's encoding."""
    response = trace_response(decoded)
    if is_json:
        return Reply(json_format.MessageToJson(response, indent=None).encode(), JSON_TYPE)
    return Reply(response.SerializeToString())
