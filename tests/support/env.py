"""The runner's own ``OTEL_*`` settings kept out of what a test checks: a developer's shell or a
CI job may export ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_BSP_*`` or ``OTEL_TOOLSCORE_*``, and
the SDK, ``install()``, ``serve`` and the settings loader all read them."""

from __future__ import annotations

import os

import pytest


def without_otel(*also: str, **extra: str) -> dict[str, str]:
    """An environment for a child process: this one less every ``OTEL_*`` variable (and those
    starting with a prefix in ``also``), plus ``extra``."""
    drop = ("OTEL_", *also)
    return {**{k: v for k, v in os.environ.items() if not k.upper().startswith(drop)}, **extra}


def clear_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset every ``OTEL_*`` variable for the rest of the test (``monkeypatch`` restores them)."""
    for name in list(os.environ):
        if name.upper().startswith("OTEL_"):
            monkeypatch.delenv(name)
