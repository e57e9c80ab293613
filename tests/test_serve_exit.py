"""``otel-toolscore serve``'s exit status (issue 29): a SIGTERM whose stop leaves accepted data
undelivered exits 3 and prints how much, by signal; one that delivered everything exits 0 (the
clean case: ``tests/test_server.py``). A real subprocess, an upstream on loopback that refuses."""

from __future__ import annotations

import http.client
import re
import signal
import subprocess
import sys
from urllib.parse import urlsplit

from otel_toolscore.cli import SERVE_UNDELIVERED_EXIT
from tests.support.env import without_otel
from tests.support.otlp_sink import PB, OtlpSink
from tests.support.spans import pb_body, plain_spans


def test_sigterm_with_the_upstream_down_exits_non_zero_and_prints_what_was_left() -> None:
    upstream = OtlpSink(answer=lambda request: 503)  # down for the whole test
    env = without_otel(OTEL_BSP_SCHEDULE_DELAY="100", OTEL_EXPORTER_OTLP_TIMEOUT="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_toolscore.cli", "serve", "--no-grpc", "--http-port", "0",
         "--upstream", upstream.url, "--decision-wait", "0.2", "--stop-timeout", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        http_url = proc.stdout.readline().strip().rsplit(" ", 1)[-1]
        conn = http.client.HTTPConnection(urlsplit(http_url).netloc, timeout=10)
        conn.request("POST", "/v1/traces", body=pb_body(plain_spans(25)), headers={"Content-Type": PB})
        assert conn.getresponse().status == 200  # accepted: the buffer has room
        conn.close()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        upstream.stop()
    assert upstream.refused >= 1
    assert proc.returncode == SERVE_UNDELIVERED_EXIT == 3, err
    assert "stopped (25 spans received)" in out
    found = re.search(r"(\d+) accepted items undelivered to the upstream: (.*)", err.replace("\n", " "))
    assert found, err
    assert "25 spans (stop_deadline)" in found.group(2)
