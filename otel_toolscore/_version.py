"""The package version: a leaf module, so reading it loads nothing else (pyproject reads it too)."""

__version__ = "0.1.0"
