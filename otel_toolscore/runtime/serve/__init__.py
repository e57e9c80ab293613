"""``otel-toolscore serve``: the OTLP sidecar that scores what it receives and forwards every span upstream."""
