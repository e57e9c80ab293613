"""OTLP/JSON export requests (already parsed JSON objects) decoded into spans.

Reads the OTLP/JSON mapping (hex ids, lowerCamelCase fields, integer enums) and protobuf's
generic JSON mapping (base64 ids, snake_case fields, enum names) alike, and OTLP before 0.15
(``instrumentationLibrarySpans``). Log records with a ``spanId`` become events of their span
(the body under ``semconv.EVENT_BODY``); metrics requests are counted, not read.
"""

from __future__ import annotations

from typing import Any, Final

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link
from opentelemetry.util.types import AttributeValue

from otel_toolscore import semconv
from otel_toolscore.ingest._decoder import STATUS_UNSET, Decoder, OtlpBatch, OtlpDecodeError
from otel_toolscore.ingest._values import (
    EMPTY,
    SPAN_ID_BYTES,
    TRACE_ID_BYTES,
    UINT32_LIMIT,
    BadValue,
    as_attribute,
    as_body_attribute,
    json_any,
    json_field,
    json_id,
    json_integer,
    json_uint,
    safe_text,
    type_name,
    undecodable,
)
from otel_toolscore.ingest.spans import format_span_id, link_context

NOT_OTLP: Final = "JSON but not OTLP: no resourceSpans/resourceLogs"


class JsonDecoder(Decoder):
    """Decodes OTLP/JSON requests, one ``add_json_request`` each, into one batch."""

    def add_json_request(self, obj: Any, prefix: str) -> bool:
        """Decode one export request object; False when it is not OTLP at all."""
        if type(obj) is not dict:
            return False
        found = False
        resource_spans = json_field(obj, "resourceSpans", "resource_spans")
        if resource_spans is not None:
            found = True
            self._json_resource_spans(resource_spans, prefix)
        resource_logs = json_field(obj, "resourceLogs", "resource_logs")
        if resource_logs is not None:
            found = True
            self._json_resource_logs(resource_logs, prefix)
        if json_field(obj, "resourceMetrics", "resource_metrics") is not None:
            found = True
            self._metrics_requests += 1
        return found

    def _json_list(self, raw: Any, what: str) -> list[Any]:
        if raw is None:
            return []
        if type(raw) is not list:
            self.problems.add(f"{what} is {type_name(raw)}, not an array; skipped")
            return []
        return raw

    def _json_attributes(self, raw: Any, label: str) -> dict[str, AttributeValue]:
        out: dict[str, AttributeValue] = {}
        if not raw:
            return out
        if type(raw) is not list:
            self.problems.add(f"{label}: attributes is {type_name(raw)}, not an array; skipped")
            return out
        for item in raw:
            if type(item) is not dict or type(item.get("key")) is not str:
                self.problems.add(f"{label}: attribute entry without a string key, skipped")
                continue
            key: str = item["key"]
            if not key.isascii():
                key = safe_text(key)
            value = item.get("value")
            # Nearly every attribute is a plain string: skip the generic path for it.
            if type(value) is dict:
                text = value.get("stringValue")
                if type(text) is str:
                    out[key] = text if text.isascii() else safe_text(text)
                    continue
            try:
                decoded = json_any(value)
            except BadValue as exc:
                self.problems.add(f"{label}: attribute {key!r} has an unsupported value ({exc}), skipped")
                continue
            except RecursionError:
                self.problems.add(f"{label}: attribute {key!r} is nested too deeply, skipped")
                continue
            if decoded is not EMPTY:
                out[key] = as_attribute(decoded)
        return out

    def _json_time(self, raw: Any, label: str, what: str) -> int:
        if raw is None:
            return 0
        try:
            return json_uint(raw, what)
        except BadValue as exc:
            self.problems.add(f"{label}: {exc}; read as 0")
            return 0

    def _json_resource_spans(self, raw: Any, prefix: str) -> None:
        for i, entry in enumerate(self._json_list(raw, f"{prefix}resourceSpans")):
            where = f"resourceSpans[{i}]"
            if type(entry) is not dict:
                self.problems.add(f"{prefix}{where} is {type_name(entry)}, not an object; skipped")
                continue
            resource = self._json_resource(entry, f"{prefix}{where}")
            scope_spans = json_field(entry, "scopeSpans", "scope_spans")
            if scope_spans is None:  # OTLP before 0.15 called them instrumentation library spans
                scope_spans = json_field(entry, "instrumentationLibrarySpans", "instrumentation_library_spans")
            for j, group in enumerate(self._json_list(scope_spans, f"{prefix}{where}.scopeSpans")):
                group_where = f"{where}.scopeSpans[{j}]"
                if type(group) is not dict:
                    self.problems.add(f"{prefix}{group_where} is {type_name(group)}, not an object; skipped")
                    continue
                scope = self._json_scope(group, f"{prefix}{group_where}")
                for k, span in enumerate(self._json_list(group.get("spans"), f"{prefix}{group_where}.spans")):
                    span_where = f"{prefix}span #{k} in {group_where}"
                    try:
                        self._json_span(span, resource, scope, span_where, prefix)
                    except Exception as exc:  # noqa: BLE001
                        # Untrusted input must never stop a sidecar or a CI run: lose this span, not the batch.
                        self.problems.add(undecodable(span_where, exc))

    def _json_resource(self, entry: dict[str, Any], where: str) -> Resource:
        schema_url = json_field(entry, "schemaUrl", "schema_url")
        schema_url = safe_text(schema_url) if type(schema_url) is str else ""
        raw = entry.get("resource")
        if raw is not None and type(raw) is not dict:
            self.problems.add(f"{where}.resource is {type_name(raw)}, not an object; read as empty")
            raw = None
        attributes = self._json_attributes(raw.get("attributes"), f"{where}.resource") if raw else {}
        return self._resource(attributes, schema_url)

    def _json_scope(self, group: dict[str, Any], where: str) -> InstrumentationScope:
        schema_url = json_field(group, "schemaUrl", "schema_url")
        schema_url = safe_text(schema_url) if type(schema_url) is str else ""
        raw = group.get("scope")
        if raw is None:
            raw = json_field(group, "instrumentationLibrary", "instrumentation_library")
        if raw is not None and type(raw) is not dict:
            self.problems.add(f"{where}.scope is {type_name(raw)}, not an object; read as empty")
            raw = None
        if not raw:
            return self._scope("", "", schema_url, {})
        name = raw.get("name")
        version = raw.get("version")
        return self._scope(
            safe_text(name) if type(name) is str else "",
            # The SDK's own tracers use "" for "no version"; match them so equal scopes compare equal.
            safe_text(version) if type(version) is str else "",
            schema_url,
            self._json_attributes(raw.get("attributes"), f"{where}.scope"),
        )

    def _json_span(self, raw: Any, resource: Resource, scope: InstrumentationScope, where: str, prefix: str) -> None:
        if type(raw) is not dict:
            self.problems.add(f"{where}: is {type_name(raw)}, not an object; skipped")
            return
        try:
            trace_id = json_id(json_field(raw, "traceId", "trace_id"), TRACE_ID_BYTES)
        except BadValue as exc:
            self.problems.add(f"{where}: invalid traceId ({exc}), skipped")
            return
        try:
            span_id = json_id(json_field(raw, "spanId", "span_id"), SPAN_ID_BYTES)
        except BadValue as exc:
            self.problems.add(f"{where}: invalid spanId ({exc}), skipped")
            return
        if self._lacks_ids(trace_id, span_id, where):
            return
        label = f"{prefix}span {format_span_id(span_id)}"
        try:
            parent_id = json_id(json_field(raw, "parentSpanId", "parent_span_id"), SPAN_ID_BYTES)
        except BadValue as exc:
            self.problems.add(f"{label}: invalid parentSpanId ({exc}); kept as a root")
            parent_id = 0
        name = raw.get("name")
        if name is None:
            name = ""
        elif type(name) is not str:
            self.problems.add(f"{label}: name is {type_name(name)}, read as empty")
            name = ""
        else:
            name = safe_text(name)
        flags = raw.get("flags")
        if flags is not None:
            flags = self._json_time(flags, label, "flags")  # same shape: an unsigned integer
        status = raw.get("status")
        if status is None:
            status_value = STATUS_UNSET
        elif type(status) is dict:
            message = status.get("message")
            status_value = self._status(status.get("code"), safe_text(message) if type(message) is str else None, label)
        else:
            self.problems.add(f"{label}: status is {type_name(status)}, read as UNSET")
            status_value = STATUS_UNSET
        self._add_span(
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            flags=flags or 0,
            trace_state=self._trace_state(json_field(raw, "traceState", "trace_state"), label),
            name=name,
            kind=self._kind(raw.get("kind"), label),
            start=self._json_time(
                json_field(raw, "startTimeUnixNano", "start_time_unix_nano"), label, "startTimeUnixNano"
            ),
            end=self._json_time(json_field(raw, "endTimeUnixNano", "end_time_unix_nano"), label, "endTimeUnixNano"),
            attributes=self._json_attributes(raw.get("attributes"), label),
            events=self._json_events(raw.get("events"), label),
            links=self._json_links(raw.get("links"), label),
            status=status_value,
            resource=resource,
            scope=scope,
            dropped=(
                self._json_count(json_field(raw, "droppedAttributesCount", "dropped_attributes_count"), label),
                self._json_count(json_field(raw, "droppedEventsCount", "dropped_events_count"), label),
                self._json_count(json_field(raw, "droppedLinksCount", "dropped_links_count"), label),
            ),
        )

    def _json_count(self, raw: Any, label: str) -> int:
        if raw is None or raw == 0:
            return 0
        try:
            # uint32 in OTLP: a larger count would make the OTLP encoder fail the whole re-export.
            return json_integer(raw, "dropped count", 0, UINT32_LIMIT - 1, "out of the uint32 range")
        except BadValue as exc:
            self.problems.add(f"{label}: {exc}; read as 0")
            return 0

    def _json_events(self, raw: Any, label: str) -> list[Event]:
        events: list[Event] = []
        for i, entry in enumerate(self._json_list(raw, f"{label}: events")):
            if type(entry) is not dict:
                self.problems.add(f"{label}: event #{i} is {type_name(entry)}, not an object; skipped")
                continue
            name = entry.get("name")
            if type(name) is not str:
                self.problems.add(f"{label}: event #{i} has no string name, skipped")
                continue
            name = safe_text(name)
            time = self._json_time(json_field(entry, "timeUnixNano", "time_unix_nano"), label, f"event {name!r} time")
            attributes = self._json_attributes(entry.get("attributes"), f"{label} event {name!r}")
            events.append(Event(name, attributes, time))
        return events

    def _json_links(self, raw: Any, label: str) -> list[Link]:
        links: list[Link] = []
        for i, entry in enumerate(self._json_list(raw, f"{label}: links")):
            if type(entry) is not dict:
                self.problems.add(f"{label}: link #{i} is {type_name(entry)}, not an object; skipped")
                continue
            try:
                trace_id = json_id(json_field(entry, "traceId", "trace_id"), TRACE_ID_BYTES)
                span_id = json_id(json_field(entry, "spanId", "span_id"), SPAN_ID_BYTES)
            except BadValue as exc:
                self.problems.add(f"{label}: link #{i} has an invalid id ({exc}), skipped")
                continue
            if not trace_id or not span_id:
                self.problems.add(f"{label}: link #{i} has no traceId or spanId, skipped")
                continue
            flags = self._json_time(entry.get("flags"), label, f"link #{i} flags")
            context = link_context(
                trace_id, span_id, flags, self._trace_state(json_field(entry, "traceState", "trace_state"), label)
            )
            links.append(Link(context, self._json_attributes(entry.get("attributes"), f"{label} link #{i}")))
        return links

    def _json_resource_logs(self, raw: Any, prefix: str) -> None:
        for i, entry in enumerate(self._json_list(raw, f"{prefix}resourceLogs")):
            where = f"resourceLogs[{i}]"
            if type(entry) is not dict:
                self.problems.add(f"{prefix}{where} is {type_name(entry)}, not an object; skipped")
                continue
            groups = self._json_list(json_field(entry, "scopeLogs", "scope_logs"), f"{prefix}{where}.scopeLogs")
            for j, group in enumerate(groups):
                group_where = f"{where}.scopeLogs[{j}]"
                if type(group) is not dict:
                    self.problems.add(f"{prefix}{group_where} is {type_name(group)}, not an object; skipped")
                    continue
                records = self._json_list(
                    json_field(group, "logRecords", "log_records"), f"{prefix}{group_where}.logRecords"
                )
                for k, record in enumerate(records):
                    record_where = f"{prefix}log record #{k} in {group_where}"
                    try:
                        self._json_log_record(record, record_where)
                    except Exception as exc:  # noqa: BLE001
                        # Same reason as for spans: one bad record must not lose the batch.
                        self.problems.add(undecodable(record_where, exc))

    def _json_log_record(self, raw: Any, where: str) -> None:
        if type(raw) is not dict:
            self.problems.add(f"{where}: is {type_name(raw)}, not an object; skipped")
            return
        try:
            span_id = json_id(json_field(raw, "spanId", "span_id"), SPAN_ID_BYTES)
            trace_id = json_id(json_field(raw, "traceId", "trace_id"), TRACE_ID_BYTES)
        except BadValue as exc:
            self.problems.add(f"{where}: invalid id ({exc}), skipped")
            return
        if not span_id:
            # Plain application logs: not span events, and not a defect of the input.
            self._logs_without_span += 1
            return
        if not trace_id:
            self.problems.add(f"{where}: has a spanId but no traceId, skipped")
            return
        attributes = self._json_attributes(raw.get("attributes"), where)
        name = json_field(raw, "eventName", "event_name")
        if type(name) is not str or not name:
            name = attributes.get(semconv.EVENT_NAME_ATTR)
        if type(name) is not str or not name:
            self.problems.add(f"{where}: no eventName or {semconv.EVENT_NAME_ATTR} attribute, skipped")
            return
        name = safe_text(name)
        body = raw.get("body")
        if body is not None:
            try:
                decoded = json_any(body)
            except (BadValue, RecursionError) as exc:
                self.problems.add(f"{where}: body is unsupported ({exc or 'nested too deeply'}), left out")
                decoded = EMPTY
            if decoded is not EMPTY:
                attributes[semconv.EVENT_BODY] = as_body_attribute(decoded)
        time = self._json_time(json_field(raw, "timeUnixNano", "time_unix_nano"), where, "timeUnixNano")
        if not time:
            time = self._json_time(
                json_field(raw, "observedTimeUnixNano", "observed_time_unix_nano"), where, "observedTimeUnixNano"
            )
        self._log_event(trace_id, span_id, name, attributes, time, where)



def spans_from_otlp_dict(d: dict[str, Any]) -> OtlpBatch:
    """Decode an already parsed OTLP/JSON request (traces and/or logs)."""
    decoder = JsonDecoder()
    if not decoder.add_json_request(d, ""):
        raise OtlpDecodeError(f"<dict>: {NOT_OTLP}")
    return decoder.finish()


def count_json_spans(resource_spans: Any) -> int:
    """Spans in an OTLP/JSON request's ``resourceSpans``, counted leniently (the decoder reports
    what is wrong): every span the decoder will try, so that a receiver can report every one it
    skipped."""
    total = 0
    for entry in resource_spans if isinstance(resource_spans, list) else ():
        if not isinstance(entry, dict):
            continue
        # The same field lookup as JsonDecoder's, old OTLP names included.
        groups = json_field(entry, "scopeSpans", "scope_spans")
        if groups is None:
            groups = json_field(entry, "instrumentationLibrarySpans", "instrumentation_library_spans")
        for group in groups if isinstance(groups, list) else ():
            spans = group.get("spans") if isinstance(group, dict) else None
            total += len(spans) if isinstance(spans, list) else 0
    return total
