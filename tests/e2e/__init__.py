"""End-to-end tests: the examples, the demo, Phoenix and Prometheus as real processes."""
