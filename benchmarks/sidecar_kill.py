"""What an in-memory ``otel-toolscore serve`` loses on kill -9, and what it holds while the
upstream fails.

A real ``otel-toolscore serve`` process (the CLI, defaults: export every 5 s or 512 spans,
``decision_wait`` 2 s) receives OTLP/HTTP from a client that sends 10-span GenAI agent runs
(``workload.genai_run``) at ``--rate`` runs/s and, as the SDK's exporters do, retries a request
refused with 503 after its Retry-After (capped at 1 s here). The upstream is an OTLP/HTTP
receiver in this process that records the span ids it accepts, and answers 503 from
``--fail-at`` seconds on (scenario "upstream failing") or never (scenario "healthy"). At
``--kill-at`` seconds the sidecar gets SIGKILL. Figures per scenario: spans the client had
answered 200, spans the upstream received, lost = accepted and never delivered, and spans
refused with 503 (which the client still holds, so are not lost).

With ``--queue``, both scenarios again with ``serve --queue-dir``: after the kill the upstream
recovers and serve restarts on the same queue; duplicated = accepted spans received twice.

    .venv/bin/python -m benchmarks sidecar-kill [--rate 50] [--kill-at 8] [--fail-at 3] [--queue]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from benchmarks.common import child_env, machine
from benchmarks.workload import genai_run, readable_run
from tests.support.otlp_sink import OtlpSink, Received
from tests.support.paths import REPO


class _Upstream(OtlpSink):
    """The receiver: answers 503 to spans from ``fail_at`` s after ``t0`` on (``t0`` is reset
    when the load starts)."""

    def __init__(self, fail_at: float | None) -> None:
        self.t0 = time.monotonic()
        self.fail_at = fail_at
        super().__init__(self._answer)

    def _answer(self, request: Received) -> int:
        failing = self.fail_at is not None and time.monotonic() - self.t0 >= self.fail_at
        return 503 if request.signal == "traces" and failing else 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(upstream: _Upstream, port: int, queue_dir: str | None) -> subprocess.Popen[bytes]:
    queue = ["--queue-dir", queue_dir] if queue_dir else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_toolscore.cli", "serve", "--upstream", upstream.url, "--http-port", str(port),
         "--no-grpc", "--no-forward-signals", *queue],
        cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while True:  # wait for the port
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)


def scenario(rate: float, kill_at: float, fail_at: float | None, queue_dir: str | None = None) -> dict[str, Any]:
    """With ``queue_dir``: after the kill the upstream recovers and serve restarts on the same
    queue; lost and duplicated are counted once it has delivered what it had (60 s at most)."""
    upstream = _Upstream(fail_at)
    port = _free_port()
    proc = _start(upstream, port, queue_dir)
    t0 = upstream.t0 = time.monotonic()  # the failure clock starts with the load
    accepted: set[tuple[int, int]] = set()
    refused = 0
    i = 0
    pending: tuple[bytes, list[tuple[int, int]]] | None = None
    retry_at = 0.0
    while time.monotonic() - t0 < kill_at:
        now = time.monotonic()
        if pending is None and now - t0 >= i / rate:
            spans = readable_run(genai_run(10, seed=i), trace_id=0xC0FFEE0000 + i)
            pending = (encode_spans(spans).SerializeToString(),
                       [(s.context.trace_id, s.context.span_id) for s in spans])
            i += 1
        if pending is None or now < retry_at:
            time.sleep(0.002)
            continue
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("POST", "/v1/traces", body=pending[0], headers={"Content-Type": "application/x-protobuf"})
            resp = conn.getresponse()
            resp.read()
            if resp.status == 200:
                accepted.update(pending[1])
                pending = None
            else:
                refused += len(pending[1])
                retry_at = now + min(float(resp.getheader("Retry-After") or 1), 1.0)
        finally:
            conn.close()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    restart_s = None
    if queue_dir:
        upstream.fail_at = None
        t_restart = time.monotonic()
        proc = _start(upstream, port, queue_dir)
        deadline = time.monotonic() + 60
        while not accepted <= set(upstream.span_ids()) and time.monotonic() < deadline:
            time.sleep(0.1)
        restart_s = round(time.monotonic() - t_restart, 1)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    else:
        time.sleep(0.5)
    counts = Counter(upstream.span_ids())
    delivered = set(counts)
    upstream.stop()
    lost = accepted - delivered
    return {"scenario": ("healthy" if fail_at is None else f"upstream 503 from {fail_at:g} s")
            + (", --queue-dir, restarted" if queue_dir else ", in memory"),
            "runs_sent": i, "spans_accepted": len(accepted), "spans_delivered": len(accepted & delivered),
            "spans_lost": len(lost), "lost_share_of_accepted": round(len(lost) / max(1, len(accepted)), 3),
            "spans_duplicated": sum(1 for k in accepted if counts[k] > 1),
            "spans_refused_503": refused, "kill_at_s": kill_at, "restart_to_all_delivered_s": restart_s}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=50.0, help="agent runs (10 spans) per second")
    ap.add_argument("--kill-at", type=float, default=8.0)
    ap.add_argument("--fail-at", type=float, default=3.0)
    ap.add_argument("--queue", action="store_true", help="also both scenarios with --queue-dir and a restart")
    args = ap.parse_args(argv)
    results = [scenario(args.rate, args.kill_at, None), scenario(args.rate, args.kill_at, args.fail_at)]
    if args.queue:
        for fail_at in (None, args.fail_at):
            with tempfile.TemporaryDirectory(prefix="toolscore-kill-queue-") as queue_dir:
                results.append(scenario(args.rate, args.kill_at, fail_at, queue_dir))
    out = {"machine": machine(), "rate_runs_per_s": args.rate, "results": results}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
