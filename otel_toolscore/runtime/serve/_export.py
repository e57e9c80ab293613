"""The SDK's OTLP span exporters, sending the request body ``ingest._wire.encode_request``
builds: spans that arrived as protobuf and leave unchanged (or with attributes added) go out as
the bytes they came in, the others as the SDK encodes them. Everything else is the SDK's:
endpoint, headers, TLS, compression, timeouts, retries, its own metrics.

Each class reaches one private part of its SDK exporter (the HTTP exporter's client, the gRPC
exporter's stub); where an SDK release lacks it, export falls back to the SDK's own encoding,
which sends the same message.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.semconv.attributes.http_attributes import HTTP_RESPONSE_STATUS_CODE

from otel_toolscore.ingest._wire import encode_request
from otel_toolscore.runtime.serve._protocol import GRPC_SERVICES

logger = logging.getLogger(__name__)


class WireHttpSpanExporter(HttpSpanExporter):
    """``OTLPSpanExporter`` (http/protobuf) whose request body is ``encode_request(spans)``."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        client = getattr(self, "_client", None)
        metrics = getattr(self, "_metrics", None)
        if getattr(self, "_shutdown", True) or not callable(getattr(client, "export", None)) or metrics is None:
            return super().export(spans)  # shut down (the SDK warns), or an SDK release without these parts
        # What the SDK's export does (1.45), with the body built here.
        with metrics.export_operation(len(spans)) as result:
            try:
                body = encode_request(spans)
            except Exception as error:  # noqa: BLE001 - as the SDK: a batch that cannot be encoded fails
                logger.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            limit = getattr(self, "_max_request_size", 0)
            if limit and limit > 0 and len(body) > limit:
                logger.warning("Dropping span batch: serialized size %d bytes exceeds max_request_size %d bytes.",
                               len(body), limit)
                result.error = ValueError(f"Serialized span request size {len(body)} bytes exceeds "
                                          f"max_request_size {limit} bytes.")
                return SpanExportResult.FAILURE
            sent = client.export(body)  # type: ignore[union-attr]
            if not sent.success:
                result.error = sent.error
                status = getattr(sent, "status_code", None)
                result.error_attrs = {HTTP_RESPONSE_STATUS_CODE: status} if status is not None else None
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS


class _BytesTraceStub:
    """``TraceServiceStub`` whose ``Export`` takes the serialized request."""

    def __init__(self, channel: Any) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        # `Export`: the name the SDK's exporter calls
        self.Export = channel.unary_unary(
            f"/{GRPC_SERVICES['traces']}/Export",
            request_serializer=None,  # the request is already bytes
            response_deserializer=ExportTraceServiceResponse.FromString,
        )


def wire_grpc_span_exporter(**kwargs: Any) -> Any:
    """The SDK's gRPC ``OTLPSpanExporter`` sending ``encode_request(spans)`` as the request."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

    class WireGrpcSpanExporter(GrpcSpanExporter):  # type: ignore[misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._wire = getattr(self, "_stub", None) is not None and getattr(self, "_channel", None) is not None
            if self._wire:
                # The stub is made again, from self._stub, when the exporter reconnects.
                self._stub = _BytesTraceStub
                self._client = _BytesTraceStub(self._channel)  # type: ignore[assignment]

        def _translate_data(self, data: Sequence[ReadableSpan]) -> Any:
            return encode_request(data) if self._wire else super()._translate_data(data)

    return WireGrpcSpanExporter(**kwargs)
