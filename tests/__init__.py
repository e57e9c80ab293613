"""The test suite. A package so that ``tests.support`` imports the same way under pytest and
from the benchmarks (``python -m benchmarks.<name>`` from the repository root)."""
