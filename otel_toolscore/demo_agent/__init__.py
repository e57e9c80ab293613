"""The demo's agent and its scripted OpenAI-compatible model (``otel-toolscore demo``, ``examples/``).

Shipped inside the package so that the demo runs from an installed wheel; ``examples/`` and the
conformance generator import the same modules.
"""
