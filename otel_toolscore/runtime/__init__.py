"""Where the stages run: the in-app span processor and its scoring engine, ``install()``, the ``serve``
sidecar, offline replay, and the OTEL_* settings they share."""
