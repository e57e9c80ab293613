"""Helpers for the end-to-end tests: run the examples and the demo as real processes, with every
network address on 127.0.0.1 and no proxy."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment less proxies and OTEL_* settings, plus ``extra``."""
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "PHOENIX_")) and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")
    }
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def run_python(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def require_examples_extra(*modules: str) -> None:
    """Skip when the examples extra (real openai client + instrumentation) is not installed."""
    for module in modules or ("openai", "opentelemetry.instrumentation.openai_v2"):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[examples]')")
