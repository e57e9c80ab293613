#!/usr/bin/env python3
"""Atheris (libFuzzer) harness for the OTLP decoding path, from request bytes to scores.

    python tests/fuzz/fuzz_otlp.py --make-corpus=DIR [libFuzzer flags]   # seeds DIR, then fuzzes
    python tests/fuzz/fuzz_otlp.py CRASH_FILE                             # replays one input

``--make-corpus=DIR`` writes seeds built from the OTLP/JSON files in tests/fuzz/corpus/ (and any
``--seed-dir=DIR``) into DIR, then fuzzes with DIR as the corpus. Give libFuzzer an
``-artifact_prefix=`` outside the repository: a crash is written there. The files in corpus/ are
copies of fixture traces (tests/corpora/fixtures.tar.xz, extracted by tests/support/paths.py), one or two per instrumentation library.

One input is a payload plus two trailer bytes, which ``FuzzedDataProvider`` reads first: the
entry point (``MODES``) and option bits for it. The custom mutator knows this layout and mutates
JSON payloads structurally (including JSON held in string attributes, which the conventions
parse), so fuzzing reaches past the JSON parser into the decoder, assembly and the scorers.

The contract (input is untrusted; docs/reliability.md, "Hostile traces are read"): each entry point returns spans and problem notes,
or raises its documented error (``OtlpDecodeError`` from otel_toolscore.ingest; the server's
``Rejection``, an HTTP 4xx, from ``inflate``/``decode_traces``). Anything else is a crash, and
so is any of these, which the code would otherwise swallow:

* a decoder's per-span safety net firing (a "could not be decoded" problem: a span lost to a bug);
* a decoded attribute value the SDK does not allow, or a span the SDK's OTLP encoder cannot
  re-export whole (the sidecar re-exports every decoded span; the encoder logs and drops);
* assembly raising, a code scorer failing with an exception that is not a ``ScoringError``,
  an evaluation span or event that cannot be encoded, or any log record carrying an exception.
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
import random
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["otel_toolscore"]):
    from otel_toolscore.assemble import build_trajectories
    from otel_toolscore.config import ToolScoreSettings
    from otel_toolscore.ingest import (
        MAX_PROBLEMS,
        OtlpBatch,
        OtlpDecodeError,
        decode_export_request,
        load_otlp,
        spans_from_otlp_dict,
    )
    from otel_toolscore.outputs.otel import Emitter
    from otel_toolscore.runtime.engine import Engine
    from otel_toolscore.runtime.replay import replay
    from otel_toolscore.runtime.serve import _http as _serve_http
    from otel_toolscore.runtime.serve import _protocol as _serve_protocol

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

HERE = Path(__file__).resolve().parent
SEED_DIR = HERE / "corpus"
MAX_SEED_BYTES = 60_000

MODES = ("load", "gzip", "http", "protobuf", "json_lines", "dict")
_LOAD, _GZIP, _HTTP, _PROTOBUF, _JSON_LINES, _DICT = range(len(MODES))
_ENCODINGS = ("", "gzip", "deflate", "identity")
_HTTP_LIMITS = (None, 0, 1, 64, 1 << 20)  # None: exactly the decompressed size


# --- input layout ------------------------------------------------------------------------------

# atheris' FuzzedDataProvider takes integers from the end of the data (3.x) or the front (older
# releases); seeds and the mutator put the two header bytes where it reads them.
_INTS_FROM_END = atheris.FuzzedDataProvider(b"\x00\x01").ConsumeIntInRange(0, 255) == 1


def _pack(mode: int, opts: int, payload: bytes) -> bytes:
    header = bytes((opts, mode)) if _INTS_FROM_END else bytes((mode, opts))
    return payload + header if _INTS_FROM_END else header + payload


def _unpack(data: bytes) -> tuple[int, int, bytes]:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 255)
    opts = fdp.ConsumeIntInRange(0, 255)
    return mode, opts, fdp.ConsumeBytes(fdp.remaining_bytes())


# --- oracles -----------------------------------------------------------------------------------


class _Swallowed(logging.Handler):
    """Collects log records that carry an exception, or are errors: code that swallowed a bug."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or record.levelno >= logging.ERROR:
            self.records.append(record)


_SWALLOWED = _Swallowed()
logging.root.addHandler(_SWALLOWED)
logging.root.setLevel(logging.WARNING)
logging.getLogger("otel_toolscore").setLevel(logging.DEBUG)  # the emitter logs repeats at DEBUG
# The SDK warns about odd attribute values; that is expected here and would flood the output.
logging.lastResort = None


def _check_swallowed() -> None:
    if _SWALLOWED.records:
        record = _SWALLOWED.records[0]
        _SWALLOWED.records.clear()
        detail = logging.Formatter().format(record)
        raise AssertionError(f"a log record carries an exception (swallowed bug):\n{detail}")


def _is_sdk_attribute(value: object) -> bool:
    scalar = (str, bool, int, float)
    if type(value) in scalar:
        return type(value) is not int or -(2**63) <= value < 2**63  # type: ignore[operator]
    if type(value) is not tuple:
        return False
    kinds = {type(v) for v in value if v is not None}
    return len(kinds) <= 1 and kinds <= set(scalar) and all(
        type(v) is not int or -(2**63) <= v < 2**63 for v in value
    )


def _check_attributes(attrs: Any, where: str) -> int:
    for key, value in (attrs or {}).items():
        assert type(key) is str, f"{where}: attribute key {key!r} is not a str"
        assert _is_sdk_attribute(value), f"{where}: attribute {key!r} = {value!r} is not an SDK attribute value"
    return len(attrs or {})


def _check_batch(batch: OtlpBatch) -> None:
    assert type(batch.spans) is list and type(batch.problems) is list
    assert len(batch.problems) <= MAX_PROBLEMS + 1, "the problem list is not capped"
    for problem in batch.problems:
        assert type(problem) is str
        assert "could not be decoded" not in problem, f"a decoder's safety net fired: {problem}"
    _check_spans(batch.spans)


def _check_spans(spans: Sequence[ReadableSpan]) -> None:
    """Every decoded span is SDK-valid and re-exports whole, as the sidecar re-exports it."""
    if not spans:
        return
    # (trace id, span id, attribute count) of every span; ids may repeat, hence a multiset
    expected: Counter[tuple[bytes, bytes, int]] = Counter()
    for span in spans:
        assert isinstance(span, ReadableSpan)
        ctx = span.context
        assert ctx is not None and ctx.trace_id and ctx.span_id, "a decoded span without ids"
        n = _check_attributes(span.attributes, "span")
        for event in span.events:
            _check_attributes(event.attributes, "event")
        for link in span.links:
            _check_attributes(link.attributes, "link")
        _check_attributes(span.resource.attributes, "resource")
        if span.instrumentation_scope is not None:
            _check_attributes(span.instrumentation_scope.attributes, "scope")
        expected[(ctx.trace_id.to_bytes(16, "big"), ctx.span_id.to_bytes(8, "big"), n)] += 1
    request = encode_spans(spans)
    encoded = Counter(
        (s.trace_id, s.span_id, len(s.attributes))
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    )
    # The encoder logs and drops an attribute it cannot encode: its log record says why, else the counts tell.
    _check_swallowed()
    lost = ", ".join(f"span {span_id.hex()}" for _, span_id, _ in expected - encoded)
    assert encoded == expected, f"the OTLP encoder dropped attributes of {lost}"
    again = load_otlp(request.SerializeToString())
    assert len(again.spans) == len(spans), f"{len(spans)} spans re-encoded, {len(again.spans)} decode again"
    _check_swallowed()


# --- the scoring side --------------------------------------------------------------------------

_SETTINGS = ToolScoreSettings()
_LOGS = InMemoryLogRecordExporter()
_LOGGER_PROVIDER = LoggerProvider()
_LOGGER_PROVIDER.add_log_record_processor(SimpleLogRecordProcessor(_LOGS))
_METRICS = InMemoryMetricReader()
_EMITTER = Emitter(
    _SETTINGS, meter_provider=MeterProvider(metric_readers=[_METRICS]), logger_provider=_LOGGER_PROVIDER
)
_ENGINE = Engine(_SETTINGS, None, _EMITTER)


class _Order(SpanProcessor):
    """Records what ``replay`` hands over, to check it hands over every span exactly once."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.ended: list[int] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started.append(id(span))

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(id(span))


def _score(spans: Sequence[ReadableSpan]) -> None:
    """Assembly, code scorers and emission, as the processor's worker runs them."""
    order = _Order()
    replay(spans, order)
    assert sorted(order.ended) == sorted(order.started) == sorted(id(s) for s in spans), "replay lost a span"
    build_trajectories(spans)
    by_id = {format(s.context.span_id, "016x"): s for s in spans if s.context is not None}
    evaluations: list[ReadableSpan] = []
    for result in _ENGINE.score(spans):
        for score in result.scores:
            # A ScoringError carries its own error.type; any other exception (error.type is then the
            # class name) is a scorer bug.
            unexpected = score.error is not None and score.error == score.details.get("exception")
            assert not unexpected, f"scorer {score.name} raised on decoded input: {score.explanation}"
        _EMITTER.span_attributes(result.scores)
        evaluations.extend(_ENGINE.emit(result, by_id.get(result.trajectory.span_id or "")))
    if evaluations:
        encode_spans(evaluations).SerializeToString()
    records = _LOGS.get_finished_logs()
    if records:
        _LOGS.clear()
        encode_logs(records).SerializeToString()
    _check_swallowed()


# --- entry points ------------------------------------------------------------------------------


def _decoded(load: Callable[[], OtlpBatch]) -> OtlpBatch | None:
    try:
        return load()
    except OtlpDecodeError as exc:
        assert str(exc), "OtlpDecodeError without a message"
        return None


def _compress(payload: bytes, encoding: str, opts: int) -> bytes:
    if encoding in ("gzip", "x-gzip"):
        return gzip.compress(payload, mtime=0)
    if encoding == "deflate":
        # zlib format, or raw deflate (wbits -15) which some clients send
        c = zlib.compressobj(wbits=-zlib.MAX_WBITS if opts & 0x08 else zlib.MAX_WBITS)
        return c.compress(payload) + c.flush()
    return payload


def _http(payload: bytes, opts: int) -> None:
    """The sidecar's OTLP/HTTP path after the socket: inflate the body, decode it, answer."""
    is_json = bool(opts & 0x01)
    encoding = _ENCODINGS[(opts >> 1) & 0x03]
    # bit 4: the payload is sent as it is under the encoding (damaged or hostile compressed data)
    body = payload if opts & 0x10 else _compress(payload, encoding, opts)
    limit = _HTTP_LIMITS[(opts >> 5) % len(_HTTP_LIMITS)]
    try:
        inflated = _serve_http.inflate(body, encoding, len(payload) if limit is None else limit)
    except _serve_protocol.Rejection as rej:
        assert rej.status in (400, 413, 415), rej.status
        return
    if limit is None and not opts & 0x10:
        assert inflated == payload, "inflate changed the body"
    try:
        decoded = _serve_protocol.decode_traces(inflated, is_json)
    except _serve_protocol.Rejection as rej:
        assert rej.status == 400, rej.status
        return
    _check_batch(OtlpBatch(decoded.spans, decoded.problems))
    response = _serve_protocol.trace_response(decoded)
    response.SerializeToString()
    json_format.MessageToJson(response, indent=None)
    _score(decoded.spans)


def _protobuf(payload: bytes) -> None:
    """A structured JSON payload carried as binary protobuf (the receivers' format)."""
    message = ExportTraceServiceRequest()
    try:
        json_format.Parse(payload, message, ignore_unknown_fields=True)
    except Exception:  # noqa: BLE001 - not a proto3 JSON request: then the bytes as protobuf
        message = ExportTraceServiceRequest()
        try:
            message.ParseFromString(payload)
        except Exception:  # noqa: BLE001
            return
    problems: list[str] = []
    spans = decode_export_request(message, problems)
    _check_batch(OtlpBatch(spans, problems))
    batch = _decoded(lambda: load_otlp(message.SerializeToString()))
    if batch is not None:
        _check_batch(batch)
    _score(spans)


def _json_lines(payload: bytes, opts: int) -> bytes | None:
    """The Collector file exporter's layout: one request per resourceSpans entry, per line."""
    try:
        doc = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    entries = doc.get("resourceSpans") if type(doc) is dict else None
    if type(entries) is not list:
        return None

    def line(doc: dict[str, Any]) -> bytes:
        return json.dumps(doc, ensure_ascii=bool(opts & 0x01)).encode("utf-8", "surrogatepass")

    lines = [line({"resourceSpans": [entry]}) for entry in entries]
    if opts & 0x02:  # a damaged line among good ones
        lines.insert((opts >> 4) % (len(lines) + 1), payload[: (opts >> 2) % 64])
    if opts & 0x04 and type(doc.get("resourceLogs")) is list:
        lines.append(line({"resourceLogs": doc["resourceLogs"]}))
    return (b"\r\n" if opts & 0x08 else b"\n").join(lines)


def fuzz_one_input(data: bytes) -> None:
    mode, opts, payload = _unpack(data)
    mode %= len(MODES)
    if mode == _HTTP:
        _http(payload, opts)
        return
    if mode == _PROTOBUF:
        _protobuf(payload)
        return
    if mode == _GZIP:
        packed = gzip.compress(payload, mtime=0)
        if opts & 0x01:  # truncated
            packed = packed[: max(0, len(packed) - 1 - (opts >> 1))]
        source = packed
    elif mode == _JSON_LINES:
        lines = _json_lines(payload, opts)
        if lines is None:
            return
        source = lines
    elif mode == _DICT:
        try:
            doc = json.loads(payload)
        except (ValueError, RecursionError):
            return
        if type(doc) is not dict:
            return
        batch = _decoded(lambda: spans_from_otlp_dict(doc))
        if batch is not None:
            _check_batch(batch)
            _score(batch.spans)
        return
    else:
        source = payload
    batch = _decoded(lambda: load_otlp(source))
    if batch is not None:
        _check_batch(batch)
        _score(batch.spans)
    _check_swallowed()


# --- structure-aware mutation ------------------------------------------------------------------

_ID16 = "5b8efff798038103d269b633813fc60c"
_ID8 = "eee19b7ec3c1b174"
_INTERESTING: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2, 3, 255, 256, 512, 768, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64,
    -(2**63), -(2**63) - 1, 10**400, 0.5, -0.0, 1e308, 1e-320, float("nan"), float("inf"), -float("inf"),
    "", "0", "-1", " 7", "1e3", "0x10", "١٢", "１２", "18446744073709551616", "-9223372036854775809",
    "NaN", "Infinity", "-Infinity", "9" * 5000, "\ud800", "a\udfffb", "\U0001f600", "é", "\x00", "\u2028",
    "a" * 300, _ID16, _ID8, _ID16.upper(), "0" * 32, "0" * 16, "W47/95gDgQPSabYzgT/GDA==", "7uGbfsPBsXQ=",
    "W47_95gDgQPSabYzgT_GDA", "7uGbfsPBsXQ", "AAEC", "a=b", "a=b,c=d", "@=x", "null", "true", "[]", "{}",
    "[" * 3000, '{"a":' * 40, json.dumps({"name": "t", "arguments": '{"q": 1}'}), '{"q":1}',
    # JSON that the conventions read from string attributes: messages, tool calls, definitions
    json.dumps([{"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", "name": "t", "arguments": {}}]}]),
    json.dumps([{"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": 1}]}]),
    json.dumps([{"type": "function", "name": "t", "parameters": {"type": "object", "required": ["q"]}}]),
    json.dumps({"type": "object", "properties": {"q": {"type": "string", "pattern": "(a+)+$"}}}),
    "SPAN_KIND_CLIENT", "STATUS_CODE_ERROR", "invoke_agent", "execute_tool", "chat", "tool",
    [], {}, [None], [[]], [{}], {"": None}, [1, "a"], [1.5, 2], [True, None],
    {"stringValue": "x"}, {"stringValue": None}, {"intValue": "9223372036854775808"}, {"intValue": 1.5},
    {"doubleValue": "NaN"}, {"boolValue": "true"}, {"bytesValue": "AAEC"}, {"bytesValue": 7},
    {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}]}}, {"arrayValue": {"values": [{}]}},
    {"arrayValue": {"values": [{"arrayValue": {}}]}}, {"arrayValue": []},
    {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": True}}]}}, {"kvlistValue": {"values": [{}]}},
    {"key": "gen_ai.tool.name", "value": {"stringValue": "t"}}, {"key": "gen_ai.operation.name", "value": {}},
    {"traceId": _ID16, "spanId": _ID8}, {"traceId": _ID16, "spanId": _ID8, "parentSpanId": _ID8},
    {"spanId": _ID8, "traceId": _ID16, "eventName": "gen_ai.choice", "body": {"kvlistValue": {}}},
)
_KEYS: tuple[str, ...] = (
    "resourceSpans", "resource_spans", "scopeSpans", "scope_spans", "instrumentationLibrarySpans", "spans",
    "resourceLogs", "scopeLogs", "logRecords", "resourceMetrics", "resource", "scope", "instrumentationLibrary",
    "attributes", "key", "value", "values", "traceId", "spanId", "parentSpanId", "parent_span_id", "name", "kind",
    "flags", "traceState", "startTimeUnixNano", "endTimeUnixNano", "start_time_unix_nano", "events", "links",
    "status", "code", "message", "droppedAttributesCount", "droppedEventsCount", "timeUnixNano",
    "observedTimeUnixNano", "eventName", "body", "schemaUrl", "version", "stringValue", "intValue",
    "doubleValue", "boolValue", "arrayValue", "kvlistValue", "bytesValue", "string_value", "gen_ai.tool.name",
    "gen_ai.tool.call.id", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.operation.name",
    "gen_ai.agent.name", "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.definitions",
    "openinference.span.kind", "toolscore.expected_tool", "toolscore.expected_tool_order", "toolscore.strict",
    "role", "parts", "type", "id", "arguments", "tool_calls", "function", "content", "response", "result",
    "parameters", "properties", "required", "",
)
_MAX_NODES = 4000


def _nodes(doc: Any) -> list[tuple[Any, Any]]:
    """(container, key) for every value under doc, breadth first, at most _MAX_NODES."""
    out: list[tuple[Any, Any]] = []
    queue = [doc]
    while queue and len(out) < _MAX_NODES:
        node = queue.pop()
        items: Iterator[tuple[Any, Any]]
        if type(node) is dict:
            items = iter(list(node.items()))
        elif type(node) is list:
            items = iter(list(enumerate(node)))
        else:
            continue
        for key, value in items:
            out.append((node, key))
            if type(value) in (dict, list):
                queue.append(value)
    return out


def _mutate_string(text: str, rng: random.Random, max_size: int) -> str:
    if rng.random() < 0.5 and text[:1] in ("{", "["):
        try:
            inner = json.loads(text)
        except (ValueError, RecursionError):
            pass
        else:  # JSON inside a string attribute (messages, arguments, schemas): mutate that
            mutated = _mutate_doc(inner, rng, max_size)
            if mutated is not None:
                return json.dumps(mutated, ensure_ascii=rng.random() < 0.5)
    raw = text.encode("utf-8", "surrogatepass")
    return atheris.Mutate(raw, max(len(raw) * 2, 16)).decode("utf-8", "replace")


def _fresh(rng: random.Random, nodes: list[tuple[Any, Any]]) -> Any:
    if nodes and rng.random() < 0.25:  # splice: a copy of another part of the same document
        container, key = rng.choice(nodes)
        try:
            return copy.deepcopy(container[key])
        except (LookupError, RecursionError):  # removed by an earlier step; too deep to copy
            return None
    return copy.deepcopy(rng.choice(_INTERESTING))


def _mutate_doc(doc: Any, rng: random.Random, max_size: int) -> Any | None:
    nodes = _nodes(doc)
    if not nodes:
        return copy.deepcopy(rng.choice(_INTERESTING)) if rng.random() < 0.1 else None
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        container, key = rng.choice(nodes)
        present = key in container if type(container) is dict else key < len(container)
        if not present:
            continue  # removed by an earlier step
        value = container[key]
        roll = rng.random()
        if roll < 0.3:
            container[key] = _fresh(rng, nodes)
        elif roll < 0.45:
            del container[key]
        elif roll < 0.55 and type(container) is list:
            container.insert(rng.randrange(len(container) + 1), _fresh(rng, nodes))
        elif roll < 0.65 and type(container) is dict:
            container[rng.choice(_KEYS)] = container.pop(key) if rng.random() < 0.5 else _fresh(rng, nodes)
        elif type(value) is str:
            container[key] = _mutate_string(value, rng, max_size)
        elif type(value) is int and type(value) is not bool:
            container[key] = rng.choice((value + 1, value - 1, -value, value << 32, value ^ 0x300))
        elif type(value) is list and value:
            value.append(copy.deepcopy(rng.choice(value)))
        else:
            container[key] = _fresh(rng, nodes)
    return doc


def custom_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    rng = random.Random(seed)
    mode, opts, payload = _unpack(data)
    roll = rng.random()
    if roll < 0.04:
        return _pack(rng.randrange(len(MODES)), opts, payload)[:max_size]
    if roll < 0.1:
        return _pack(mode, rng.randrange(256), payload)[:max_size]
    if roll < 0.65 and payload.lstrip()[:1] in (b"{", b"["):
        try:
            doc = json.loads(payload)
        except (ValueError, RecursionError):
            doc = None
        if doc is not None:
            try:
                mutated = _mutate_doc(doc, rng, max_size)
                if mutated is not None:
                    text = json.dumps(mutated, ensure_ascii=rng.random() < 0.3, indent=rng.choice((None, None, 1)))
                    out = _pack(mode, opts, text.encode("utf-8", "surrogatepass"))
                    if len(out) <= max_size:
                        return out
            except (LookupError, RecursionError):
                pass
    return atheris.Mutate(data, max_size)


# --- seeds -------------------------------------------------------------------------------------


def _seed_documents(dirs: Sequence[Path]) -> list[bytes]:
    docs = []
    for directory in dirs:
        for path in sorted(directory.glob("**/*.json")):
            data = path.read_bytes()
            if len(data) <= MAX_SEED_BYTES:
                docs.append(data)
    return docs


def _with_log_records(doc: dict[str, Any]) -> bytes:
    """Collector file-exporter lines: the spans, then a log line whose records are span events."""
    spans = [s for rs in doc.get("resourceSpans", []) for ss in rs.get("scopeSpans", []) for s in ss.get("spans", [])]
    first = spans[0] if spans else {"traceId": _ID16, "spanId": _ID8}
    record = {
        "traceId": first.get("traceId"), "spanId": first.get("spanId"), "timeUnixNano": "1",
        "eventName": "gen_ai.user.message",
        "body": {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": "hi"}}]}},
    }
    logs = {"resourceLogs": [{"scopeLogs": [{"logRecords": [record, {"body": {"stringValue": "plain log"}}]}]}]}
    lines = [json.dumps({"resourceSpans": [entry]}) for entry in doc.get("resourceSpans", [])]
    return "\n".join([*lines, json.dumps(logs), json.dumps({"resourceMetrics": []})]).encode()


def make_seeds(dirs: Sequence[Path]) -> list[bytes]:
    seeds = [
        _pack(_LOAD, 0, b"{}"),
        _pack(_HTTP, 0x01, b"{}"),
        _pack(_HTTP, 0x00, b""),
        _pack(_LOAD, 0, b'\n\x00{"resourceSpans": []}'),
    ]
    for raw in _seed_documents(dirs):
        batch = load_otlp(raw)
        pb = encode_spans(batch.spans)
        binary = pb.SerializeToString()
        proto_json = json_format.MessageToJson(pb, indent=None).encode()
        doc = json.loads(raw)
        seeds += [
            _pack(_LOAD, 0, raw),
            _pack(_LOAD, 0, binary),
            _pack(_LOAD, 0, proto_json),  # base64 ids, enum names: protobuf's own JSON mapping
            _pack(_LOAD, 0, _with_log_records(doc)),
            _pack(_GZIP, 0, raw),
            _pack(_HTTP, 0x01 | 0x02, raw),  # JSON, gzip
            _pack(_HTTP, 0x00, binary),  # protobuf, identity
            _pack(_HTTP, 0x04, binary),  # protobuf, deflate
            _pack(_PROTOBUF, 0, proto_json),
            _pack(_JSON_LINES, 0x04, raw),
            _pack(_DICT, 0, raw),
        ]
    return seeds


def main(argv: list[str]) -> None:
    args = [argv[0]]
    corpus: Path | None = None
    seed_dirs = [SEED_DIR]
    for arg in argv[1:]:
        if arg.startswith("--make-corpus="):
            corpus = Path(arg.split("=", 1)[1])
        elif arg.startswith("--seed-dir="):
            seed_dirs.append(Path(arg.split("=", 1)[1]))
        else:
            args.append(arg)
    if corpus is not None:
        corpus.mkdir(parents=True, exist_ok=True)
        for i, seed in enumerate(make_seeds(seed_dirs)):
            (corpus / f"seed-{i:04d}").write_bytes(seed)
        args.append(str(corpus))
    atheris.Setup(args, fuzz_one_input, custom_mutator=custom_mutator)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
