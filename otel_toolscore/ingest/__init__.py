"""Stage 1, ingest: OTLP (JSON, protobuf, JSON lines) and saved Jaeger/Tempo traces in, SDK ``ReadableSpan`` out."""
