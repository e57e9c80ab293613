"""OTLP trace files and byte streams: where the bytes come from, what format they are in, and
``load_otlp``, the one entry point for a whole input.

The format is sniffed, not declared: gzip by its magic bytes, then JSON (one document, an array
of requests, the Collector file exporter's JSON lines, or a trace saved from Jaeger or Tempo,
see ``foreign``) by its first character, else protobuf; a protobuf request can start like JSON
and damaged JSON lines like protobuf, so each falls back on the other.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import re
import sys
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Final

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore.ingest._decoder import OtlpBatch, OtlpDecodeError
from otel_toolscore.ingest._json import NOT_OTLP, JsonDecoder
from otel_toolscore.ingest._protobuf import decode_protobuf
from otel_toolscore.ingest._values import type_name
from otel_toolscore.ingest.foreign import to_otlp_requests

__all__ = ["OtlpSource", "load_otlp", "read_otlp_json"]

# A path, "-" for stdin, the data itself, or a binary file object.
OtlpSource = str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes]

_GZIP_MAGIC: Final = b"\x1f\x8b"
_GC_PAUSE_BYTES: Final = 1 << 20
_UTF8_BOM: Final = b"\xef\xbb\xbf"
_LEADING_WS = re.compile(rb"[ \t\r\n]*")


def load_otlp(source: OtlpSource) -> OtlpBatch:
    """Decode OTLP trace data from a path, ``'-'`` (stdin), bytes or a binary file object.

    Accepts an OTLP/JSON ``ExportTraceServiceRequest`` (hex or base64 ids, camelCase or snake_case
    fields), a JSON array of requests, the Collector file exporter's JSON lines (trace, log and
    metric lines; metrics are ignored), traces saved from Jaeger (UI JSON, api/v3) and Tempo
    (``batches``, ``trace``), and binary protobuf, each optionally gzip-compressed.
    Raises ``OtlpDecodeError`` only when nothing in the input is OTLP; ``OSError`` when a path
    cannot be read.
    """
    label, data = _read_source(source)
    if len(data) < _GC_PAUSE_BYTES:
        return _decode_bytes(data, label)
    with _gc_paused():
        return _decode_bytes(data, label)


def read_otlp_json(source: OtlpSource) -> list[ReadableSpan]:
    """The spans of ``load_otlp(source)``, for callers that do not report problems."""
    return load_otlp(source).spans


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while a large input is parsed.

    Parsing allocates millions of acyclic objects, which triggers full collections that find
    nothing; pausing them halves the time for a large file. Restored as it was, whatever happens.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _read_source(source: OtlpSource) -> tuple[str, bytes]:
    if isinstance(source, bytes):
        return "<bytes>", source
    if isinstance(source, (bytearray, memoryview)):
        return "<bytes>", bytes(source)
    if isinstance(source, str) and source == "-":
        return "<stdin>", sys.stdin.buffer.read()
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        return str(path), path.read_bytes()
    read = getattr(source, "read", None)
    if callable(read):
        data = read()
        if isinstance(data, str):
            data = data.encode("utf-8")
        name = getattr(source, "name", None)
        return (name if isinstance(name, str) else "<stream>"), bytes(data)
    raise TypeError(f"cannot read OTLP from {type(source).__name__}: pass a path, '-', bytes or a binary file")


def _json_error(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno} column {exc.colno}: {exc.msg}"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text: {exc.reason} at byte {exc.start}"
    return str(exc)


def _add_json_document(decoder: JsonDecoder, doc: Any, prefix: str) -> bool:
    """One JSON value holding a request, or an array of requests; False when none is OTLP.

    A document that is not OTLP may be a trace saved from Jaeger or Tempo (``foreign``)."""
    if type(doc) is not list:
        if decoder.add_json_request(doc, prefix):
            return True
        try:
            converted = to_otlp_requests(doc)
        except (TypeError, ValueError, AttributeError, OverflowError) as exc:  # a damaged foreign trace
            decoder.problems.add(f"{prefix}looks like a Jaeger trace but cannot be read: {type(exc).__name__}: {exc}")
            return False
        if converted is None:
            return False
        name, requests = converted
        return any([decoder.add_json_request(request, f"{prefix}{name}: ") for request in requests])
    found = False
    for i, item in enumerate(doc):
        item_prefix = f"{prefix}request[{i}]: "
        if decoder.add_json_request(item, item_prefix):
            found = True
        else:
            decoder.problems.add(f"{item_prefix}{NOT_OTLP}, skipped")
    return found


def _decode_json(data: bytes, label: str) -> OtlpBatch:
    decoder = JsonDecoder()
    try:
        doc = json.loads(data)
    except RecursionError:
        raise OtlpDecodeError(f"{label}: not JSON (nested too deeply)") from None
    except ValueError as exc:
        # The Collector file exporter writes one request per line, which fails as one document
        # ("Extra data"); a truly broken document fails line by line too, and then we report the
        # whole-document error, which points at the real defect.
        batch = _decode_json_lines(data)
        if batch is None:
            raise OtlpDecodeError(f"{label}: not JSON ({_json_error(exc)})") from None
        return batch
    if not _add_json_document(decoder, doc, ""):
        if type(doc) is dict or type(doc) is list:
            raise OtlpDecodeError(f"{label}: {NOT_OTLP}")
        raise OtlpDecodeError(f"{label}: JSON but not OTLP: {type_name(doc)}, not an object")
    return decoder.finish()


def _decode_json_lines(data: bytes) -> OtlpBatch | None:
    decoder = JsonDecoder()
    found = False
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        prefix = f"line {number}: "
        try:
            doc = json.loads(line)
        except RecursionError:
            decoder.problems.add(f"{prefix}not JSON (nested too deeply), skipped")
            continue
        except ValueError as exc:
            decoder.problems.add(f"{prefix}not JSON ({_json_error(exc)}), skipped")
            continue
        if _add_json_document(decoder, doc, prefix):
            found = True
        elif type(doc) is not list:
            decoder.problems.add(f"{prefix}{NOT_OTLP}, skipped")
    return decoder.finish() if found else None
def _decode_bytes(data: bytes, label: str) -> OtlpBatch:
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise OtlpDecodeError(f"{label}: gzip decompression failed ({exc})") from None
    start = 3 if data.startswith(_UTF8_BOM) else 0
    match = _LEADING_WS.match(data, start)
    first = data[match.end() : match.end() + 1] if match else b""
    if not first:
        raise OtlpDecodeError(f"{label}: empty input")
    if first in b"{[":
        try:
            return _decode_json(data, label)
        except OtlpDecodeError as json_error:
            # A protobuf request starts with 0x0A, a newline: it can look like JSON after whitespace.
            if data[:1] != b"\n":
                raise
            try:
                return decode_protobuf(data, label)
            except OtlpDecodeError:
                raise json_error from None
    try:
        return decode_protobuf(data, label)
    except OtlpDecodeError as pb_error:
        pb_reason = str(pb_error).removeprefix(f"{label}: ")
    # JSON lines whose first line is damaged do not start like JSON; the other lines still count.
    batch = _decode_json_lines(data)
    if batch is not None:
        return batch
    try:
        doc = json.loads(data)
    except RecursionError:
        raise OtlpDecodeError(f"{label}: not JSON (nested too deeply), and {pb_reason}") from None
    except ValueError as exc:
        raise OtlpDecodeError(f"{label}: not JSON ({_json_error(exc)}), and {pb_reason}") from None
    raise OtlpDecodeError(f"{label}: JSON but not OTLP: {type_name(doc)}, not an object")

