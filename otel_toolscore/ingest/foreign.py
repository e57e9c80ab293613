"""Traces saved from Jaeger and Tempo, turned into OTLP/JSON requests for the OTLP decoder.

People score what their backend shows them: the JSON Jaeger's UI downloads (and its
``/api/traces`` answers), Jaeger's ``/api/v3`` answers, and Tempo's ``/api/traces`` (``batches``)
and ``/api/v2/traces`` (``trace``) answers. Tempo and Jaeger v3 already hold OTLP under another
key; Jaeger's own model is converted here span by span, back to what the OpenTelemetry SDK had
before its Jaeger translation (span kind, status, scope and event names come back from the tags
and log fields that translation wrote). ``files`` calls ``to_otlp_requests`` on any JSON
document that is not OTLP itself, so every reader of trace files gets these formats for free.
"""

from __future__ import annotations

from typing import Any

#: Jaeger's span.kind tag values → OTLP span kinds
_KINDS = {"internal": 1, "server": 2, "client": 3, "producer": 4, "consumer": 5}
#: tags the OTel→Jaeger translation wrote for fields Jaeger has no place for
_SCOPE_NAME_TAGS = ("otel.scope.name", "otel.library.name")
_SCOPE_VERSION_TAGS = ("otel.scope.version", "otel.library.version")
_STATUS_TAGS = ("otel.status_code", "otel.status_description", "error", "span.kind")


def to_otlp_requests(doc: Any) -> tuple[str, list[dict[str, Any]]] | None:
    """``(format name, OTLP/JSON trace requests)`` for a Jaeger or Tempo document, else None."""
    if type(doc) is not dict:
        return None
    if type(doc.get("batches")) is list:  # Tempo /api/traces/{id}
        return "Tempo (batches)", [{"resourceSpans": doc["batches"]}]
    if type(doc.get("trace")) is dict and "resourceSpans" in doc["trace"]:  # Tempo /api/v2/traces/{id}
        return "Tempo (trace)", [doc["trace"]]
    result = doc.get("result")
    if type(result) is dict and "resourceSpans" in result:  # Jaeger /api/v3 (grpc-gateway)
        return "Jaeger api/v3", [result]
    data = doc.get("data")
    if type(data) is list and all(type(t) is dict and "spans" in t for t in data):  # Jaeger UI / api/traces
        return "Jaeger JSON", [_jaeger_trace(trace) for trace in data]
    if "spans" in doc and "processes" in doc:  # one trace of Jaeger's, without the envelope
        return "Jaeger JSON", [_jaeger_trace(doc)]
    return None


def _value(tag: dict[str, Any]) -> dict[str, Any]:
    """A Jaeger tag's typed value as an OTLP AnyValue."""
    kind = str(tag.get("type", "string")).lower()
    value = tag.get("value")
    if kind == "bool":
        return {"boolValue": value if isinstance(value, bool) else str(value).lower() == "true"}
    if kind == "int64":
        return {"intValue": str(value)}
    if kind == "float64":
        return {"doubleValue": value}
    if kind == "binary":
        return {"bytesValue": value}
    return {"stringValue": value if isinstance(value, str) else str(value)}


def _attributes(tags: Any, skip: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [{"key": t["key"], "value": _value(t)} for t in tags or []
            if type(t) is dict and isinstance(t.get("key"), str) and t["key"] not in skip]


def _tag_map(tags: Any) -> dict[str, Any]:
    return {t["key"]: t.get("value") for t in tags or [] if type(t) is dict and isinstance(t.get("key"), str)}


def _trace_id(value: Any) -> str:
    # Jaeger drops leading zeros and may hold 64-bit ids: OTLP wants 32 hex digits
    return str(value or "").rjust(32, "0")


def _span_id(value: Any) -> str:
    return str(value or "").rjust(16, "0")


def _jaeger_trace(trace: dict[str, Any]) -> dict[str, Any]:
    found_processes = trace.get("processes")
    processes: dict[str, Any] = found_processes if isinstance(found_processes, dict) else {}
    # process → scope → spans: OTLP's resource and scope grouping
    grouped: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {}
    for span in trace.get("spans") or []:
        if type(span) is not dict:
            continue
        tags = _tag_map(span.get("tags"))
        scope = (str(next((tags[k] for k in _SCOPE_NAME_TAGS if k in tags), "")),
                 str(next((tags[k] for k in _SCOPE_VERSION_TAGS if k in tags), "")))
        grouped.setdefault(str(span.get("processID", "")), {}).setdefault(scope, []).append(_jaeger_span(span, tags))
    resource_spans = []
    for process_id, scopes in grouped.items():
        found = processes.get(process_id)
        process: dict[str, Any] = found if isinstance(found, dict) else {}
        attributes = _attributes(process.get("tags"))
        if process.get("serviceName"):
            attributes.insert(0, {"key": "service.name", "value": {"stringValue": str(process["serviceName"])}})
        resource_spans.append({
            "resource": {"attributes": attributes},
            "scopeSpans": [{"scope": {"name": name, "version": version}, "spans": spans}
                           for (name, version), spans in scopes.items()],
        })
    return {"resourceSpans": resource_spans}


def _jaeger_span(span: dict[str, Any], tags: dict[str, Any]) -> dict[str, Any]:
    start_us = int(span.get("startTime") or 0)
    duration_us = int(span.get("duration") or 0)
    references = [r for r in span.get("references") or [] if type(r) is dict]
    parent = next((r for r in references if r.get("refType") == "CHILD_OF"), None)
    if parent is None and span.get("parentSpanID"):  # the older, flat spelling
        parent = {"traceID": span.get("traceID"), "spanID": span["parentSpanID"]}
    out: dict[str, Any] = {
        "traceId": _trace_id(span.get("traceID")),
        "spanId": _span_id(span.get("spanID")),
        "name": str(span.get("operationName", "")),
        "startTimeUnixNano": str(start_us * 1000),
        "endTimeUnixNano": str((start_us + duration_us) * 1000),
        "kind": _KINDS.get(str(tags.get("span.kind", "")).lower(), 1),
        "attributes": _attributes(span.get("tags"), _STATUS_TAGS + _SCOPE_NAME_TAGS + _SCOPE_VERSION_TAGS),
        "events": [_jaeger_event(log) for log in span.get("logs") or [] if type(log) is dict],
        "links": [{"traceId": _trace_id(r.get("traceID")), "spanId": _span_id(r.get("spanID"))}
                  for r in references if r is not parent],
    }
    if parent is not None:
        out["parentSpanId"] = _span_id(parent.get("spanID"))
    status = str(tags.get("otel.status_code", "")).upper()
    if status == "ERROR" or (not status and tags.get("error") in (True, "true")):
        out["status"] = {"code": 2, "message": str(tags.get("otel.status_description", ""))}
    elif status == "OK":
        out["status"] = {"code": 1}
    return out


def _jaeger_event(log: dict[str, Any]) -> dict[str, Any]:
    fields = log.get("fields") or []
    # the OTel→Jaeger translation keeps an event's name in its "event" field
    name = next((str(f.get("value")) for f in fields if type(f) is dict and f.get("key") == "event"), "log")
    return {"timeUnixNano": str(int(log.get("timestamp") or 0) * 1000), "name": name,
            "attributes": _attributes(fields, ("event",))}
