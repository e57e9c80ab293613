"""Stage 1, ingest: OTLP (JSON, protobuf, JSON lines) and saved Jaeger/Tempo traces in, SDK ``ReadableSpan`` out.

Every entry point (sidecar, offline ``score FILE``) turns its input into the SDK's own span type
here, so the rest of the package has one span type and the sidecar can re-export with the SDK's
exporters. This package is the public surface; its modules, one job each:

``files``        ``load_otlp``: a path, stdin, bytes or a stream; the format sniffed (gzip, JSON, protobuf)
``foreign``      traces saved from Jaeger and Tempo, turned into OTLP/JSON requests
``_json``        OTLP/JSON requests -> spans (and log records -> span events)
``_protobuf``    protobuf requests -> spans; ``_utf8`` repairs string fields that are not UTF-8
``_values``      one value at a time: ``AnyValue`` -> attribute value, ids, integers, text
``_decoder``     what both formats share: ``OtlpBatch``, problem notes, span building
``spans``        the decoded span type, ``copy_span``, trace/span ids as hex
``_wire``        an OTLP request built from the bytes protobuf spans came in (what ``serve`` forwards)

The names below load on first use (PEP 562): a stage that needs only ``spans`` does not load
the decoders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from otel_toolscore import _lazy

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "OtlpSource": "otel_toolscore.ingest.files",
    "load_otlp": "otel_toolscore.ingest.files",
    "read_otlp_json": "otel_toolscore.ingest.files",
    "MAX_PROBLEMS": "otel_toolscore.ingest._decoder",
    "OtlpBatch": "otel_toolscore.ingest._decoder",
    "OtlpDecodeError": "otel_toolscore.ingest._decoder",
    "count_json_spans": "otel_toolscore.ingest._json",
    "spans_from_otlp_dict": "otel_toolscore.ingest._json",
    "decode_export_request": "otel_toolscore.ingest._protobuf",
    "parse_export_request": "otel_toolscore.ingest._protobuf",
    "copy_span": "otel_toolscore.ingest.spans",
    "format_span_id": "otel_toolscore.ingest.spans",
    "format_trace_id": "otel_toolscore.ingest.spans",
}

__all__ = [  # grouped by module, as _EXPORTS
    "OtlpSource",
    "load_otlp",
    "read_otlp_json",
    "MAX_PROBLEMS",
    "OtlpBatch",
    "OtlpDecodeError",
    "count_json_spans",
    "spans_from_otlp_dict",
    "decode_export_request",
    "parse_export_request",
    "copy_span",
    "format_span_id",
    "format_trace_id",
]
assert set(__all__) == set(_EXPORTS)

if TYPE_CHECKING:  # the static view of the same names, for type checkers and IDEs
    from otel_toolscore.ingest._decoder import MAX_PROBLEMS, OtlpBatch, OtlpDecodeError
    from otel_toolscore.ingest._json import count_json_spans, spans_from_otlp_dict
    from otel_toolscore.ingest._protobuf import decode_export_request, parse_export_request
    from otel_toolscore.ingest.files import OtlpSource, load_otlp, read_otlp_json
    from otel_toolscore.ingest.spans import copy_span, format_span_id, format_trace_id


__getattr__, __dir__ = _lazy.exports(__name__, _EXPORTS, globals())
