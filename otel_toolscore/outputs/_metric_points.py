"""Histogram points handed to the SDK as its ``Histogram.record`` hands them on, minus the
re-cleaning of attributes known clean: ours are names and labels (plain strings), built once per
series and shared by every point of it.

``Histogram.record`` checks the amount, builds a ``Measurement`` (whose ``__post_init__`` cleans
the attributes into a new dict, ~3 µs a point) and gives it to the meter's measurement consumer,
which does the aggregating (copying and hashing the attributes again, exemplars, views). This
builds the same ``Measurement``, the attributes as they are, and gives it to the same consumer:
everything past that point is the SDK's own.

Only for the SDK's own histograms whose ``Measurement`` holds the fields this module fills
(checked once on one the SDK builds, ``PointRecorder.of``); a point the SDK would warn about or
drop (negative, not finite), a switched-off instrument, or attributes not plain take the SDK's
``record``.
"""

from __future__ import annotations

from dataclasses import fields
from time import time_ns
from typing import Any

from opentelemetry.context import get_current
from opentelemetry.util.types import AttributeValue

try:
    from opentelemetry.sdk.metrics._internal.instrument import Histogram as _SdkHistogram
    from opentelemetry.sdk.metrics._internal.measurement import Measurement
except ImportError:  # an SDK laid out otherwise: its own path
    _SdkHistogram = Measurement = None  # type: ignore[assignment,misc]

#: attribute values the SDK's cleaning returns as they are (exact types: a subclass may not be)
_PLAIN = frozenset((str, float, bool, int))
_FIELDS = ("value", "time_unix_nano", "instrument", "context", "attributes")
_INFINITY = float("inf")


class PointRecorder:
    """``record(value, attributes)`` for one SDK histogram (``of``)."""

    def __init__(self, histogram: Any) -> None:
        self._histogram = histogram
        self._consume = histogram._measurement_consumer.consume_measurement  # what record() calls

    @classmethod
    def of(cls, histogram: Any) -> PointRecorder | None:
        """A recorder for ``histogram`` when it is the SDK's own and its measurements hold what
        this module fills; else None (call its ``record``)."""
        if _SdkHistogram is None or getattr(type(histogram), "record", None) is not _SdkHistogram.record:
            return None
        try:
            if tuple(f.name for f in fields(Measurement)) != _FIELDS:
                return None
            sample = Measurement(1.0, 1, histogram, get_current(), {"a": "b"})
            if tuple(vars(sample)) != _FIELDS or not callable(histogram._is_enabled):
                return None
            return cls(histogram)
        except Exception:  # noqa: BLE001 - an SDK other than the one this was written for
            return None

    def record(self, value: float, attributes: dict[str, AttributeValue]) -> None:
        histogram = self._histogram
        # (a NaN fails both comparisons)
        if not (0 <= value < _INFINITY) or not histogram._is_enabled():
            histogram.record(value, attributes)
            return
        for key, item in attributes.items():
            if type(item) not in _PLAIN or type(key) is not str or not key:
                histogram.record(value, attributes)
                return
        point = object.__new__(Measurement)
        # A frozen dataclass: its fields are set as its own __init__ sets them.
        point.__dict__.update(value=value, time_unix_nano=time_ns(), instrument=histogram, context=get_current(),
                              attributes=attributes)
        self._consume(point)
