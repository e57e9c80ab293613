"""A local Arize Phoenix for ``otel-toolscore demo --phoenix`` and the end-to-end tests: found in
this venv, on PATH or in a ``.venv-phoenix`` of its own, and run on 127.0.0.1 with free ports, its
own working directory and no telemetry."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["PHOENIX_INSTALL_HINT", "Phoenix", "PhoenixError", "find_phoenix", "free_port"]

PHOENIX_INSTALL_HINT = (
    "python3 -m venv .venv-phoenix && .venv-phoenix/bin/pip install 'arize-phoenix==20.26.1' "
    "(a venv of its own: Phoenix needs openai>=3, the judge extra's litellm openai<3)"
)


class PhoenixError(RuntimeError):
    """Phoenix did not start; the message says why (its log's tail)."""


def find_phoenix() -> str | None:
    """The ``phoenix`` command: $OTEL_TOOLSCORE_PHOENIX, this venv, PATH, or a .venv-phoenix."""
    explicit = os.environ.get("OTEL_TOOLSCORE_PHOENIX")
    candidates = [explicit] if explicit else []
    candidates.append(str(Path(sys.executable).parent / "phoenix"))
    on_path = shutil.which("phoenix")
    if on_path:
        candidates.append(on_path)
    for root in (Path.cwd(), Path(__file__).resolve().parents[2]):  # the checkout this package is in
        candidates.append(str(root / ".venv-phoenix" / "bin" / "phoenix"))
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Phoenix:
    """``phoenix serve`` on 127.0.0.1 (free ports, its own working directory, no telemetry)."""

    def __init__(self, command: str, working_dir: Path, port: int | None = None) -> None:
        self.command = command
        self.working_dir = working_dir
        self.port = port or free_port()
        self.grpc_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = working_dir / "phoenix.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def traces_endpoint(self) -> str:
        return f"{self.url}/v1/traces"

    def start(self, timeout: float = 120.0) -> Phoenix:
        self.working_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        for var in [v for v in env if v.startswith(("PHOENIX_", "OTEL_"))]:
            del env[var]
        env.update(
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.port),
            PHOENIX_GRPC_PORT=str(self.grpc_port),
            PHOENIX_WORKING_DIR=str(self.working_dir),
            PHOENIX_TELEMETRY_ENABLED="false",
            PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
            PHOENIX_DISABLE_AGENT_ASSISTANT="true",
        )
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen([self.command, "serve"], env=env, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise PhoenixError(f"Phoenix exited with {self.process.returncode}: {self.log_tail()}")
            try:
                with opener.open(f"{self.url}/healthz", timeout=2) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise PhoenixError(f"Phoenix did not answer on {self.url} within {timeout:.0f}s: {self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
