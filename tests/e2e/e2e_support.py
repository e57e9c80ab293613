"""Helpers for the end-to-end tests: run the examples and the demo as real processes, with every
network address on 127.0.0.1 and no proxy."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.support.env import without_otel
from tests.support.paths import REPO


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment less proxies and OTEL_* and PHOENIX_* settings, plus ``extra``."""
    env = {k: v for k, v in without_otel("PHOENIX_").items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def run_python(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def require_examples_extra(*modules: str) -> None:
    """Skip when the examples extra (real openai client + instrumentation) is not installed."""
    for module in modules or ("openai", "opentelemetry.instrumentation.openai_v2"):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[examples]')")
