"""litellm's OTel callback: known by span name alone (its content is OpenLLMetry's flattened form)."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions.base import Attributes, Convention, SpanFacts, Stated

NAME = "litellm"
# raw_gen_ai_request holds Python reprs of the request its litellm_request parent already records
_ROLES: dict[str, Stated] = {sc.LITELLM_REQUEST_SPAN: "llm", sc.LITELLM_RAW_REQUEST_SPAN: "other"}


def detect(span: ReadableSpan, attrs: Attributes) -> Stated | None:
    return _ROLES.get(span.name)


def read(span: ReadableSpan, attrs: Attributes, facts: SpanFacts, stated: Stated) -> None:
    facts.note(NAME)


CONVENTION = Convention(NAME, frozenset(), detect, read, span_names=tuple(_ROLES))
