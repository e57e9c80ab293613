"""``gen_ai.evaluation.result`` records made for the SDK's ``Logger.emit`` as it would make them
itself, minus the per-record work whose outcome is known: the attributes are ours, plain and
already clean (names, floats, cut texts), so they are not cleaned again key by key.

``Logger.emit`` given an API ``LogRecord`` builds the SDK's ``ReadWriteLogRecord`` around it and
re-cleans its attributes into a ``BoundedAttributes`` (~10 µs a record, three or more records
a run). Given a ``ReadWriteLogRecord`` it takes it as it is, and still does everything else
(its enabled switch, the exception attributes, its own metrics, the processors). So this module
builds that record directly: the objects the SDK would have built, field for field, with the
logger's resource, scope and limits.

The fields are copied from prototypes the SDK builds once (``RecordMaker.of``), so an SDK whose
records hold other fields is noticed there and gets the SDK's own path (None). A record whose
attributes are not plain, or that the logger's limits would cut, also takes the SDK's path.
"""

from __future__ import annotations

import threading
from time import time_ns
from typing import Any

from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.trace import SpanContext
from opentelemetry.util.types import AttributeValue

try:
    from opentelemetry.sdk._logs import Logger as _SdkLogger
    from opentelemetry.sdk._logs import ReadWriteLogRecord
except ImportError:  # an SDK without them: the SDK's own path
    _SdkLogger = ReadWriteLogRecord = None  # type: ignore[assignment,misc]

#: attribute values the SDK's cleaning returns as they are (exact types: a subclass may not be)
_PLAIN = frozenset((str, float, bool, int))
_KEYS = frozenset((str,))
#: the fields of the SDK's records as this module fills them
_API_FIELDS = ("timestamp", "observed_timestamp", "context", "trace_id", "span_id", "trace_flags",
               "severity_text", "severity_number", "body", "attributes", "event_name", "exception")
_RW_FIELDS = ("log_record", "resource", "instrumentation_scope", "limits")
_BOUNDED_FIELDS = ("_dict", "maxlen", "dropped", "max_value_len", "_lock", "_immutable")


class RecordMaker:
    """Builds ``ReadWriteLogRecord``s for one SDK ``Logger`` (``of``), or says it cannot."""

    def __init__(self, logger: Any, record_class: type[LogRecord]) -> None:
        self._logger = logger
        self._record_class = record_class
        # A Logger's limits are set when it is made; a limit on value lengths would cut values,
        # which the SDK's cleaning does (``of`` then makes no maker).
        self._limits = logger._log_record_limits  # the limits Logger.emit applies
        self._maxlen: int | None = self._limits.max_log_record_attributes

    @classmethod
    def of(cls, logger: Any, record_class: type[LogRecord]) -> RecordMaker | None:
        """A maker for ``logger`` when it is the SDK's own and its records are what this module
        knows how to build (checked on records the SDK builds itself); else None."""
        if _SdkLogger is None or type(logger).emit is not _SdkLogger.emit:
            return None
        try:
            maker = cls(logger, record_class)
            return maker if maker._matches_sdk() else None
        except Exception:  # noqa: BLE001 - an SDK other than the one this was written for
            return None

    def _matches_sdk(self) -> bool:
        if self._limits.max_log_record_attribute_length is not None or (self._maxlen is not None and self._maxlen < 2):
            return False  # (the check below would have the SDK warn of the sample's dropped attributes)
        from opentelemetry.trace import INVALID_SPAN, set_span_in_context

        context = set_span_in_context(INVALID_SPAN)
        attributes: dict[str, AttributeValue] = {"a": "b", "c": 1.5}
        api = self._record_class(timestamp=1, context=context, severity_number=SeverityNumber.INFO,
                                 event_name="e", attributes=attributes)
        theirs = ReadWriteLogRecord._from_api_log_record(  # what Logger.emit calls
            record=api, resource=self._logger.resource,
            instrumentation_scope=self._logger.instrumentation_scope, limits=self._limits)
        ours = self.make(context, INVALID_SPAN.get_span_context(), SeverityNumber.INFO, "e", dict(attributes),
                         timestamp=1, observed_timestamp=api.observed_timestamp)
        if ours is None or tuple(vars(theirs)) != _RW_FIELDS or tuple(vars(api)) != _API_FIELDS:
            return False
        bounded = theirs.log_record.attributes
        if type(bounded) is not BoundedAttributes or tuple(vars(bounded)) != _BOUNDED_FIELDS:
            return False
        return _state(theirs) == _state(ours)

    def make(self, context: Context, span_context: SpanContext, severity: SeverityNumber, event_name: str,
             attributes: dict[str, AttributeValue], *, timestamp: int | None = None,
             observed_timestamp: int | None = None) -> Any:
        """The record ``Logger.emit`` would build for an API record of these fields (the span
        context ``context``'s span's), taking ``attributes`` as its own; None when they need
        the SDK's cleaning (not plain, or more than the logger keeps): emit the API record then."""
        maxlen = self._maxlen
        if (maxlen is not None and len(attributes) > maxlen) or "" in attributes \
                or not _PLAIN.issuperset(map(type, attributes.values())) or not _KEYS.issuperset(map(type, attributes)):
            return None
        bounded = object.__new__(BoundedAttributes)
        bounded.__dict__.update(_dict=attributes, maxlen=maxlen, dropped=0, max_value_len=None,
                                _lock=threading.Lock(), _immutable=False)
        api = object.__new__(self._record_class)
        api.__dict__.update(
            timestamp=time_ns() if timestamp is None else timestamp,
            observed_timestamp=time_ns() if observed_timestamp is None else observed_timestamp,
            context=context, trace_id=span_context.trace_id, span_id=span_context.span_id,
            trace_flags=span_context.trace_flags, severity_text=None, severity_number=severity, body=None,
            attributes=bounded, event_name=event_name, exception=None,
        )
        record = object.__new__(ReadWriteLogRecord)
        logger = self._logger
        record.__dict__.update(log_record=api, resource=logger.resource,
                               instrumentation_scope=logger.instrumentation_scope, limits=self._limits)
        return record


def _state(record: Any) -> tuple[Any, ...]:
    """What an exporter or processor can see of a record (the lock aside)."""
    api = record.log_record
    bounded = api.attributes
    return (
        {k: v for k, v in vars(record).items() if k != "log_record"},
        {k: v for k, v in vars(api).items() if k != "attributes"},
        {k: v for k, v in vars(bounded).items() if k != "_lock"},
        type(api), type(bounded),
    )
