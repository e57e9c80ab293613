"""Stage 5, outputs: scores out to OpenTelemetry (``otel``: span attributes, evaluation events and spans,
metrics) and to people and CI (``report``: table, JSON, JUnit, the CI verdict)."""
