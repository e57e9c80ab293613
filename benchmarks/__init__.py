"""Benchmarks of otel-toolscore: ``python -m benchmarks.run [--quick]`` (see BENCHMARKS.md)."""
