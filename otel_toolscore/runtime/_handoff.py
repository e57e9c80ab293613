"""What crosses the pipe between the processor and its scoring process (``scoring="process"``).

Parent to child: completed runs, each its trace id and its spans as plain tuples (what reading
and assembly look at, nothing else: no links, scope or trace state), the resources of a batch
sent once. Child to parent: per run, what its code scores emit, prepared in the child
(``outputs._prepare.Emission``: attribute dicts, event bodies, metric points; the app only makes
the SDK calls); the whole trajectory only when the parent will hand it to LLM judges.

Both ends are this package, on pipes private to the two processes, so the tuples travel as
pickle (C-speed both ways). The encoding side of each direction is the hot one for its process:
the parent's span encoding reads each span once and copies no attribute mapping (the SDK's
plain dict inside its ``BoundedAttributes`` is pickled as it is).
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import DEFAULT_TRACE_STATE

from otel_toolscore.outputs._prepare import Emission
from otel_toolscore.runtime.engine import RunResult
from otel_toolscore.scorers.base import Score
from otel_toolscore.trajectory import Trajectory

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_KINDS = tuple(SpanKind)
_CODES = {code.value: code for code in StatusCode}
_UNSET = Status(StatusCode.UNSET)
_MISSING = object()

# One run to score: (sequence number, trace id, send the trajectory back, span tuples).
# One span: (name, span id, parent span id or 0, parent is remote, kind, start, end, status code,
# status description, attributes, events, resource index); one event: (name, timestamp, attributes).
SpanTuple = tuple[Any, ...]


def _plain(attributes: Any) -> dict[str, Any]:
    """The attributes as a dict pickle writes in C: the SDK's own inner dict when there is one
    (an ended span's attributes no longer change), else a copy."""
    if type(attributes) is dict:
        return attributes
    if attributes is None:
        return {}
    inner = getattr(attributes, "_dict", None)  # the SDK's BoundedAttributes
    return inner if type(inner) is dict else dict(attributes)


def _span_attributes(span: ReadableSpan) -> dict[str, Any]:
    # ReadableSpan.attributes wraps them in a new MappingProxyType, which pickle refuses
    attributes = getattr(span, "_attributes", _MISSING)
    return _plain(span.attributes if attributes is _MISSING else attributes)


#: the properties read of a span; a class that keeps ReadableSpan's own for all of them (the SDK's
#: spans, the sidecar's decoded ones) has its fields read directly, without a call per property
_READ = ("name", "context", "parent", "resource", "status", "events", "kind", "start_time", "end_time",
         "attributes")
_plain_classes: dict[type, bool] = {}


def reads_fields(cls: type) -> bool:
    """Does ``cls`` show a span's fields as ReadableSpan does (so ``__dict__`` can be read)?"""
    plain = _plain_classes.get(cls)
    if plain is None:
        plain = _plain_classes[cls] = all(getattr(cls, name, None) is getattr(ReadableSpan, name) for name in _READ)
    return plain


def _rows(spans: Sequence[ReadableSpan], resources: list[dict[str, Any]],
          resource_index: dict[int, int], dicts: list[Any] | None = None) -> tuple[SpanTuple, ...]:
    """The spans as tuples (``SpanTuple``), their resources' attributes added to ``resources``.
    With ``dicts``, the attribute mappings (spans' and events') are appended to it and the tuples
    hold their positions there instead (``pack``)."""
    encoded = []
    for span in spans:
        fields_ = getattr(span, "__dict__", None) if reads_fields(type(span)) else None
        if fields_ is not None:
            name, ctx, parent, resource = fields_["_name"], fields_["_context"], fields_["_parent"], fields_["_resource"]
            status, events, kind = fields_["_status"] or _UNSET, fields_["_events"], fields_["_kind"]
            start, end, attributes = fields_["_start_time"], fields_["_end_time"], _plain(fields_["_attributes"])
        else:
            name, ctx, parent, resource = span.name, span.context, span.parent, span.resource
            status, events, kind = span.status or _UNSET, span.events, span.kind
            start, end, attributes = span.start_time, span.end_time, _span_attributes(span)
        index = resource_index.get(id(resource))
        if index is None:
            index = resource_index[id(resource)] = len(resources)
            resources.append(_plain(resource.attributes) if resource is not None else {})
        packed_events: tuple[tuple[Any, ...], ...]
        held: Any  # the attributes, or (pack) their position in ``dicts``
        if dicts is None:
            held = attributes
            packed_events = tuple((e.name, e.timestamp, _plain(e.attributes)) for e in events) if events else ()
        else:
            held = _place(dicts, attributes)
            packed_events = tuple((e.name, e.timestamp, _place(dicts, _plain(e.attributes))) for e in events) \
                if events else ()
        encoded.append((
            # SpanContext by index: its named properties are Python calls
            name, ctx[1] if ctx is not None else 0,  # (span_id)
            parent[1] if parent is not None else 0, parent is not None and parent[2],  # (span_id, is_remote)
            kind._value_, start, end,
            status.status_code._value_, status.description,
            held, packed_events, index,
        ))
    return tuple(encoded)


def encode_runs(runs: Sequence[tuple[int, int, bool, Sequence[ReadableSpan]]]) -> bytes:
    """One message for the child: runs as (sequence number, trace id, want trajectory, spans)."""
    resources: list[dict[str, Any]] = []
    resource_index: dict[int, int] = {}
    out = [(seq, trace_id, want_trajectory, _rows(spans, resources, resource_index))
           for seq, trace_id, want_trajectory, spans in runs]
    return pickle.dumps((resources, out), _PROTOCOL)


def _place(dicts: list[Any], attributes: dict[str, Any]) -> int:
    dicts.append(attributes)
    return len(dicts) - 1


#: a run's spans packed (``pack``): ONE tuple the garbage collector keeps walking,
#: ``(rows, first resource, *attribute dicts, *resource dicts)``. The rows (``SpanTuple``s whose
#: attributes and events' attributes are positions in this tuple) hold plain values only, so the
#: collector untracks them the first time it meets them: a tuple holding a dict never is, and a
#: row per span holding its attributes kept ~1 walked object per span (an ended SDK span is ~11).
Packed = tuple[Any, ...]


def pack(spans: Sequence[ReadableSpan]) -> Packed:
    """A run's spans as the child gets them, unpickled (``unpack`` makes them spans again)."""
    resources: list[dict[str, Any]] = []
    dicts: list[Any] = [None, None]  # (rows, first resource): positions are the packed tuple's
    rows = _rows(spans, resources, {}, dicts)
    dicts[0], dicts[1] = rows, len(dicts)
    dicts += resources
    return tuple(dicts)


def unpack(trace_id: int, packed: Packed) -> list[ReadableSpan]:
    return _spans(trace_id, packed[0], [Resource(attrs) for attrs in packed[packed[1]:]], packed)


# --- a held span, packed ---------------------------------------------------------------------
#
# An agent span held for its scores while its run waits (for the child, or in a packed backlog)
# is ~11 objects the app's garbage collector walks in every full collection: the span, its two
# SpanContexts and TraceFlags, its BoundedAttributes, its events' and links' BoundedLists, deques,
# Events and their attributes. ``pack_held`` keeps it as one tuple of plain values (the nested
# tuples and the SDK's own attribute dicts are untracked once the collector has seen them;
# the shared resource, scope, status and trace state by reference), ``unpack_held`` rebuilds it
# field for field, every instance field the SDK set (exporters read dropped counts and trace
# state as well). Only the exact classes and field sets of this SDK release are packed; any
# other span is kept as it is (``pack_held`` returns None).

_SPAN_KEYS = ("_name", "_context", "_kind", "_instrumentation_info", "_instrumentation_scope", "_parent",
              "_start_time", "_end_time", "_attributes", "_events", "_links", "_resource", "_status")
_ATTRIBUTES_KEYS = ("_dict", "maxlen", "dropped", "max_value_len", "_lock", "_immutable")
_LIST_KEYS = ("dropped", "_dq", "_lock")
_EVENT_KEYS = ("_name", "_timestamp", "_attributes")
_LINK_KEYS = ("_context", "_attributes")
_new_object = object.__new__
_new_tuple = tuple.__new__


class _Unpackable(Exception):
    """A part of a span of another class or shape than this SDK release's."""


def _pack_context(ctx: Any) -> Any:
    if ctx is None:
        return None
    if type(ctx) is not SpanContext or type(ctx[3]) is not TraceFlags:
        raise _Unpackable
    trace_id, span_id, remote, flags, state, valid = ctx
    # the default trace state (every span of a trace without one) as None: an untracked tuple
    return trace_id, span_id, remote, int(flags), None if state is DEFAULT_TRACE_STATE else state, valid


def _unpack_context(packed: Any) -> SpanContext | None:
    if packed is None:
        return None
    trace_id, span_id, remote, flags, state, valid = packed
    return _new_tuple(SpanContext, (trace_id, span_id, remote, TraceFlags(flags),
                                    DEFAULT_TRACE_STATE if state is None else state, valid))


def _pack_attributes(attributes: Any) -> tuple[Any, ...]:
    """A BoundedAttributes as its fields (its lock aside); a dict or None as itself alone.
    Spliced into the tuple of what holds them: a tuple holding a dict is never untracked, so
    one tuple fewer per holder is one tracked object fewer."""
    if attributes is None or type(attributes) is dict:
        return (attributes,)
    fields_ = getattr(attributes, "__dict__", None)
    if type(attributes) is not BoundedAttributes or tuple(fields_) != _ATTRIBUTES_KEYS:  # type: ignore[arg-type]
        raise _Unpackable
    return fields_["_dict"], fields_["maxlen"], fields_["dropped"], fields_["max_value_len"], fields_["_immutable"]  # type: ignore[index]


def _unpack_attributes(packed: Sequence[Any]) -> Any:
    if len(packed) == 1:
        return packed[0]
    inner, maxlen, dropped, max_value_len, immutable = packed
    attributes = _new_object(BoundedAttributes)
    attributes.__dict__ = {"_dict": inner, "maxlen": maxlen, "dropped": dropped, "max_value_len": max_value_len,
                           "_lock": threading.Lock(), "_immutable": immutable}
    return attributes


def _pack_list(items: Any, pack_item: Callable[[Any], Any]) -> tuple[Any, ...]:
    """The SDK's BoundedList as (maxlen, dropped, *items); a tuple or list of a span made by
    hand as (type, *items)."""
    kind = type(items)
    if kind is tuple or kind is list:
        return (kind, *[pack_item(item) for item in items])
    fields_ = getattr(items, "__dict__", None)
    if kind is not BoundedList or tuple(fields_) != _LIST_KEYS:  # type: ignore[arg-type]
        raise _Unpackable
    dq = fields_["_dq"]  # type: ignore[index]
    return (dq.maxlen, fields_["dropped"], *[pack_item(item) for item in dq])  # type: ignore[index]


def _unpack_list(packed: tuple[Any, ...], unpack_item: Callable[[Any], Any]) -> Any:
    head = packed[0]
    if head is tuple or head is list:
        return head([unpack_item(item) for item in packed[1:]])
    out = _new_object(BoundedList)
    out.__dict__ = {"dropped": packed[1], "_dq": deque([unpack_item(item) for item in packed[2:]], head),
                    "_lock": threading.Lock()}
    return out


def _pack_event(event: Any) -> tuple[Any, ...]:
    fields_ = getattr(event, "__dict__", None)
    if type(event) is not Event or tuple(fields_) != _EVENT_KEYS:  # type: ignore[arg-type]
        raise _Unpackable
    return (fields_["_name"], fields_["_timestamp"], *_pack_attributes(fields_["_attributes"]))  # type: ignore[index]


def _unpack_event(packed: tuple[Any, ...]) -> Event:
    event = _new_object(Event)
    event.__dict__ = {"_name": packed[0], "_timestamp": packed[1], "_attributes": _unpack_attributes(packed[2:])}
    return event


def _pack_link(link: Any) -> tuple[Any, ...]:
    fields_ = getattr(link, "__dict__", None)
    if type(link) is not Link or tuple(fields_) != _LINK_KEYS:  # type: ignore[arg-type]
        raise _Unpackable
    return (_pack_context(fields_["_context"]), *_pack_attributes(fields_["_attributes"]))  # type: ignore[index]


def _unpack_link(packed: tuple[Any, ...]) -> Link:
    link = _new_object(Link)
    link.__dict__ = {"_context": _unpack_context(packed[0]), "_attributes": _unpack_attributes(packed[1:])}
    return link


#: a held span packed (``pack_held``)
PackedSpan = tuple[Any, ...]


def pack_held(span: ReadableSpan) -> PackedSpan | None:
    """The span as one tuple ``unpack_held`` makes the same span of; None for a span of another
    class or shape (kept as it is)."""
    fields_ = getattr(span, "__dict__", None)
    if type(span) is not ReadableSpan or fields_ is None or tuple(fields_) != _SPAN_KEYS:
        return None
    try:
        return (fields_["_name"], _pack_context(fields_["_context"]), fields_["_kind"],
                fields_["_instrumentation_info"], fields_["_instrumentation_scope"],
                _pack_context(fields_["_parent"]), fields_["_start_time"], fields_["_end_time"],
                _pack_list(fields_["_events"], _pack_event), _pack_list(fields_["_links"], _pack_link),
                fields_["_resource"], fields_["_status"], *_pack_attributes(fields_["_attributes"]))
    except Exception:  # noqa: BLE001 - _Unpackable, or a part that breaks on reading: kept as it is
        return None


def unpack_held(packed: PackedSpan) -> ReadableSpan:
    name, context, kind, info, scope, parent, start, end, events, links, resource, status = packed[:12]
    span = _new_object(ReadableSpan)
    span.__dict__ = {
        "_name": name, "_context": _unpack_context(context), "_kind": kind, "_instrumentation_info": info,
        "_instrumentation_scope": scope, "_parent": _unpack_context(parent), "_start_time": start,
        "_end_time": end, "_attributes": _unpack_attributes(packed[12:]),
        "_events": _unpack_list(events, _unpack_event), "_links": _unpack_list(links, _unpack_link),
        "_resource": resource, "_status": status,
    }
    return span


@dataclass(slots=True)
class RunRequest:
    seq: int
    trace_id: int
    want_trajectory: bool
    spans: list[ReadableSpan]


def decode_runs(message: bytes) -> list[RunRequest]:
    """The child's side of ``encode_runs``: SDK spans again, for reading and assembly."""
    raw_resources, runs = pickle.loads(message)  # our own parent, on a private pipe
    resources = [Resource(attrs) for attrs in raw_resources]
    out = []
    for seq, trace_id, want_trajectory, encoded in runs:
        out.append(RunRequest(seq, trace_id, want_trajectory, _spans(trace_id, encoded, resources)))
    return out


def _spans(trace_id: int, encoded: Sequence[SpanTuple], resources: list[Resource],
           dicts: Packed | None = None) -> list[ReadableSpan]:
    """The spans of ``_rows``' tuples (``dicts``: where ``pack``'s rows have their attributes)."""
    spans = []
    for (name, span_id, parent_id, parent_remote, kind, start, end, code, description, attributes,
         events, res) in encoded:
        if dicts is not None:
            attributes = dicts[attributes]
            events = [(n, t, dicts[a]) for n, t, a in events] if events else ()
        spans.append(ReadableSpan(
            name=name,
            context=SpanContext(trace_id, span_id, False),
            parent=SpanContext(trace_id, parent_id, parent_remote) if parent_id else None,
            resource=resources[res],
            attributes=attributes,
            events=[Event(n, a, t) for n, t, a in events],
            kind=_KINDS[kind],
            status=Status(_CODES[code], description) if code else _UNSET,
            start_time=start,
            end_time=end,
        ))
    return spans


# --- the wire -------------------------------------------------------------------------------------

_HEADER = struct.Struct("!I")


class Pipe:
    """One end of a pipe carrying length-prefixed messages.

    One write per message, and reads of whatever has arrived into a buffer kept for the purpose
    (one system call for a message that arrived whole): in the app's process every system call
    gives up the GIL and then waits for it, and the app's thread pays for each hand-back.
    ``multiprocessing.connection.Connection`` makes three or four calls per message.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False
        self._buffer = bytearray()
        self._chunk = bytearray(1 << 18)

    def send(self, data: bytes) -> None:
        view = memoryview(_HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(self.fd, view):]

    def _message(self) -> bytes | None:
        buffer = self._buffer
        if len(buffer) < 4:
            return None
        end = 4 + _HEADER.unpack_from(buffer)[0]
        if len(buffer) < end:
            return None
        message = bytes(buffer[4:end])
        del buffer[:end]
        return message

    def recv(self) -> bytes:
        """The next message; EOFError once the other end is closed."""
        while True:
            message = self._message()
            if message is not None:
                return message
            n = os.readv(self.fd, [self._chunk])
            if not n:
                raise EOFError
            self._buffer += memoryview(self._chunk)[:n]

    def poll(self, timeout: float) -> bool:
        """Is a message (or the end) there to read, within ``timeout`` s?"""
        if self._message_ready():
            return True
        return bool(select.select([self.fd], [], [], timeout)[0])

    def _message_ready(self) -> bool:
        buffer = self._buffer
        return len(buffer) >= 4 and len(buffer) >= 4 + _HEADER.unpack_from(buffer)[0]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)


# --- answers ------------------------------------------------------------------------------------


@dataclass(slots=True)
class RunAnswer:
    """The child's answer for one run request: its runs' results and how many of its runs were
    scored upstream already, or the error that stopped it."""

    results: list[RunResult]
    already_scored: int = 0
    error: str | None = None


def answer_ok(seq: int, results: Sequence[RunResult], already_scored: int, want_trajectory: bool,
              prepare: Callable[[Trajectory, Sequence[Score]], Emission]) -> tuple[Any, ...]:
    """One run request's answer, as the child sends it (``encode_answers`` a batch of them): per
    run, what its scores emit, prepared here (``prepare``), so that the app only sends it; the
    whole trajectory only when the app hands it to LLM judges."""
    runs = []
    for result in results:
        traj = result.trajectory
        emission = prepare(traj, result.scores)
        runs.append((tuple(getattr(emission, f) for f in _EMISSION), traj if want_trajectory else None))
    return (seq, already_scored, None, runs)


def answer_failed(seq: int, error: str) -> tuple[Any, ...]:
    return (seq, 0, error, [])


def encode_answers(answers: Sequence[tuple[Any, ...]]) -> bytes:
    return pickle.dumps(list(answers), _PROTOCOL)


def decode_answers(message: bytes) -> list[tuple[int, RunAnswer]]:
    """The parent's side: (sequence number, answer) per run request. A run's result carries its
    emission and no scores (nothing in the app reads them), its trajectory only the run's ids
    unless it came whole."""
    out = []
    for seq, already_scored, error, runs in pickle.loads(message):  # our own child, on a private pipe
        results = []
        for values, trajectory in runs:
            emission = Emission(*values)
            traj = trajectory if trajectory is not None else Trajectory(emission.trace_id, emission.span_id)
            results.append(RunResult(traj, [], emission))
        out.append((seq, RunAnswer(results, already_scored, error)))
    return out


#: Emission's fields, in order (its slots), as the answer carries them
_EMISSION = tuple(f.name for f in fields(Emission))
