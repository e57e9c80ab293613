"""Benchmarks of otel-toolscore: ``python -m benchmarks --list``, ``python -m benchmarks <workload>`` (see BENCHMARKS.md)."""
