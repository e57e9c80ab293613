"""`serve` limits (issue 8): loopback by default, request size, concurrent requests and streams,
bearer tokens, slow and stalled HTTP clients. Real sockets on 127.0.0.1 throughout; where a
request must be in flight for a while, it is a logs request forwarded to an upstream that holds
its answer until told."""

from __future__ import annotations

import hmac
import http.client
import ipaddress
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_toolscore.runtime.serve import ToolScoreServer
from tests.support.env import without_otel
from tests.support.otlp_sink import GRPC_LOGS, GRPC_TRACES, PB, OtlpSink, Received
from tests.support.spans import pb_body, plain_spans
from tests.support.timing import MARGIN_S, wait_for

pytestmark = pytest.mark.usefixtures("clean_otel_env")

PROC_NET = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]


BODY = pb_body(plain_spans(2))


def post(port: int, body: bytes = BODY, token: str | None = None, **headers: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    hdrs = {"Content-Type": PB, **{k.replace("_", "-"): v for k, v in headers.items()}}
    if token is not None:
        hdrs["Authorization"] = f"Bearer {token}"
    try:
        conn.request("POST", "/v1/traces", body=body, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def raw_response(sock: socket.socket, timeout: float, until_closed: bool = False) -> bytes:
    """What the server sends until its response's headers are complete, or until it closes the
    connection (``until_closed``), or the timeout."""
    deadline = time.monotonic() + timeout
    data = b""
    try:
        while until_closed or b"\r\n\r\n" not in data:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


class HoldingUpstream(OtlpSink):
    """An OTLP/HTTP upstream that answers 200 only once released (requests pile up in flight)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        super().__init__(answer=self._hold, keep_alive=True)

    def _hold(self, request: Received) -> int:
        self.release.wait(30)
        return 200

    def wait_arrived(self, n: int, timeout: float = 10.0) -> bool:
        return wait_for(lambda: self.arrived >= n, timeout)

    def stop(self) -> None:
        self.release.set()
        super().stop()


@pytest.fixture
def upstream() -> Iterator[HoldingUpstream]:
    up = HoldingUpstream()
    yield up
    up.stop()


def make_server(**kwargs: Any) -> ToolScoreServer:
    kwargs.setdefault("grpc_port", 0)
    kwargs.setdefault("http_port", 0)
    srv = ToolScoreServer(span_exporter=InMemorySpanExporter(), metrics=False, events=False, decision_wait=0.2,
                          **kwargs)
    srv.start()
    return srv


# --- loopback by default ---------------------------------------------------------------------------


def _address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_addr)
    # /proc/net/tcp* print addresses as 32-bit words in host (little-endian) order
    address = ipaddress.ip_address(b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)))
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped  # gRPC listens for 127.0.0.1 on an IPv6 socket, as ::ffff:127.0.0.1
    return address


def listening_addresses(port: int) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The local addresses of the sockets listening on ``port``, read from the kernel."""
    found = []
    for table in PROC_NET:
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if fields[3] == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                found.append(_address(address))
    return found


needs_proc_net = pytest.mark.skipif(not PROC_NET[0].exists(), reason="reads the kernel's /proc/net/tcp")


@needs_proc_net
def test_the_server_listens_on_loopback_only_by_default() -> None:
    srv = make_server()  # host not given
    try:
        for port in (srv.addresses.grpc_port, srv.addresses.http_port):
            found = listening_addresses(port)
            assert found, f"nothing listens on {port}"
            assert all(a.is_loopback for a in found), found
    finally:
        srv.stop(10)


@needs_proc_net
def test_serve_command_listens_on_loopback_and_takes_its_token_from_the_environment(upstream: HoldingUpstream) -> None:
    upstream.release.set()
    token = "env-token-4f2a9c"
    env = without_otel(OTEL_TOOLSCORE_AUTH_TOKEN=token)
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_toolscore.cli", "serve", "--grpc-port", "0", "--http-port", "0",
         "--upstream", upstream.url, "--decision-wait", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        grpc_endpoint = lines[0].strip().rsplit(" ", 1)[-1]
        http_port = int(lines[1].strip().rsplit(":", 1)[-1])
        grpc_port = int(grpc_endpoint.rsplit(":", 1)[-1])
        for port in (grpc_port, http_port):
            found = listening_addresses(port)
            assert found and all(a.is_loopback for a in found), (port, found)
        # not on the command line, so not in `ps`
        assert token.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert post(http_port)[0] == 401
        assert post(http_port, token="wrong")[0] == 401
        assert post(http_port, token=token)[0] == 200
        with grpc.insecure_channel(grpc_endpoint) as channel:
            export = channel.unary_unary(GRPC_TRACES)
            with pytest.raises(grpc.RpcError) as err:
                export(BODY, timeout=10)
            assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
            assert export(BODY, timeout=10, metadata=(("authorization", f"Bearer {token}"),)) == b""
        proc.send_signal(signal.SIGTERM)
        _, err_text = proc.communicate(timeout=60)
        assert proc.returncode == 0, err_text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


# --- gRPC: size and concurrency ----------------------------------------------------------------------


def test_grpc_oversize_request_is_resource_exhausted_and_the_server_keeps_serving() -> None:
    srv = make_server(http_port=None, max_request_bytes=64 * 1024)
    try:
        with grpc.insecure_channel(srv.addresses.grpc_endpoint) as channel:
            export = channel.unary_unary(GRPC_TRACES)
            with pytest.raises(grpc.RpcError) as err:
                export(pb_body(plain_spans(2)) + b"\x62\x83\x80\x04" + b"\0" * (65 * 1024), timeout=10)
            assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert export(BODY, timeout=10) == b""  # same connection
        with grpc.insecure_channel(srv.addresses.grpc_endpoint) as channel:
            assert channel.unary_unary(GRPC_TRACES)(BODY, timeout=10) == b""
    finally:
        srv.stop(10)


def test_grpc_rpcs_beyond_the_concurrency_limit_are_refused_while_others_are_in_flight(upstream: HoldingUpstream) -> None:
    srv = make_server(upstream=upstream.url, http_port=None, max_concurrent_requests=2)
    # Separate clients: channels of one process would otherwise share a connection, whose
    # stream limit makes the third RPC wait instead (the next test).
    channels = [grpc.insecure_channel(srv.addresses.grpc_endpoint, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(4)]
    try:
        # two clients' RPCs held in flight by the upstream
        held = [ch.unary_unary(GRPC_LOGS).future(b"", timeout=30) for ch in channels[:2]]
        assert upstream.wait_arrived(2)
        # a third client's: refused while the two are still held, not queued behind them
        with pytest.raises(grpc.RpcError) as err:
            channels[2].unary_unary(GRPC_TRACES)(BODY, timeout=20)
        assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert not any(f.done() for f in held)
        upstream.release.set()
        assert [f.result(timeout=20) for f in held] == [b"", b""]
        assert channels[3].unary_unary(GRPC_TRACES)(BODY, timeout=20) == b""  # still serving
    finally:
        upstream.release.set()
        for ch in channels:
            ch.close()
        srv.stop(10)


def test_grpc_rpcs_beyond_the_stream_limit_wait_in_their_own_connection(upstream: HoldingUpstream) -> None:
    """grpc.max_concurrent_streams: one connection's extra RPCs wait for a free stream (HTTP/2
    flow control), they are not refused; the server never sees more than the limit."""
    srv = make_server(upstream=upstream.url, http_port=None, max_concurrent_requests=2)
    channel = grpc.insecure_channel(srv.addresses.grpc_endpoint)
    try:
        held = [channel.unary_unary(GRPC_LOGS).future(b"", timeout=30) for _ in range(2)]
        assert upstream.wait_arrived(2)
        extra = channel.unary_unary(GRPC_TRACES).future(BODY, timeout=30)
        time.sleep(1.0)
        assert not extra.done(), f"refused instead of waiting: {extra.exception()}"
        upstream.release.set()
        assert [f.result(timeout=20) for f in held] == [b"", b""]
        assert extra.result(timeout=20) == b""
    finally:
        upstream.release.set()
        channel.close()
        srv.stop(10)


# --- bearer token -----------------------------------------------------------------------------------

TOKEN = "t0ken-Value_42"


@pytest.mark.parametrize(
    ("header", "allowed"),
    [
        (f"Bearer {TOKEN}", True),
        (f"bearer {TOKEN}", True),  # the scheme is case-insensitive (RFC 9110)
        (f"Bearer  {TOKEN} ", True),
        (None, False),
        ("", False),
        ("Bearer", False),
        ("Bearer ", False),
        (f"Basic {TOKEN}", False),
        (TOKEN, False),
        (f"Bearer {TOKEN[:-1]}", False),  # a prefix
        (f"Bearer {TOKEN}x", False),  # longer
        (f"Bearer {TOKEN.upper()}", False),  # the token is case-sensitive
    ],
)
def test_bearer_token_over_http_and_grpc(header: str | None, allowed: bool) -> None:
    srv = make_server(auth_token=TOKEN)
    try:
        headers = {} if header is None else {"Authorization": header}
        status, reply_headers, _ = post(srv.addresses.http_port, **headers)
        assert status == (200 if allowed else 401)
        if not allowed:
            assert reply_headers["www-authenticate"].startswith("Bearer")
        with grpc.insecure_channel(srv.addresses.grpc_endpoint) as channel:
            metadata = None if header is None else (("authorization", header),)
            try:
                channel.unary_unary(GRPC_TRACES)(BODY, timeout=10, metadata=metadata)
                code = grpc.StatusCode.OK
            except grpc.RpcError as exc:
                code = exc.code()
        assert code is (grpc.StatusCode.OK if allowed else grpc.StatusCode.UNAUTHENTICATED)
    finally:
        srv.stop(10)


def test_bearer_token_is_compared_in_constant_time_and_odd_bytes_are_a_401(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    srv = make_server(auth_token=TOKEN)
    try:
        assert post(srv.addresses.http_port, token="guess")[0] == 401
        with grpc.insecure_channel(srv.addresses.grpc_endpoint) as channel, pytest.raises(grpc.RpcError):
            channel.unary_unary(GRPC_TRACES)(BODY, timeout=10, metadata=(("authorization", "Bearer other"),))
        assert (b"guess", TOKEN.encode()) in seen and (b"other", TOKEN.encode()) in seen
        # bytes that are not text in the header: refused like any wrong token, not a 500
        with socket.create_connection(("127.0.0.1", srv.addresses.http_port), timeout=10) as sock:
            sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                         b"Authorization: Bearer \xff\xfe\x80\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                         % len(BODY) + BODY)
            assert raw_response(sock, 10).startswith(b"HTTP/1.1 401 ")
        assert post(srv.addresses.http_port, token=TOKEN)[0] == 200
    finally:
        srv.stop(10)


# --- HTTP: slow and stalled clients -------------------------------------------------------------------

HEADERS = (b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
           b"Content-Length: %d\r\n\r\n")


def test_slow_loris_headers_are_cut_off_at_request_timeout() -> None:
    """A client sending its headers one byte at a time never lets a socket timeout fire; the
    request as a whole must still arrive within request_timeout."""
    srv = make_server(grpc_port=None, request_timeout=1.0)
    sock = socket.create_connection(("127.0.0.1", srv.addresses.http_port), timeout=10)
    stop = threading.Event()
    headers = (HEADERS % 10) * 100
    sent = []

    def dribble() -> None:
        try:
            for byte in headers:
                if stop.wait(0.05):
                    return
                sock.send(bytes([byte]))
                sent.append(byte)
        except OSError:
            pass  # the server closed the connection

    thread = threading.Thread(target=dribble)
    thread.start()
    try:
        raw_response(sock, 1.0 + 2 * MARGIN_S, until_closed=True)
        stop.set()
        thread.join(5)
        # every byte kept the socket timeout from firing, yet the server closed the connection
        # long before the client was done (it would have taken len(headers) x 50 ms)
        assert 0 < len(sent) < len(headers) // 4, "the dribbling client kept its connection"
    finally:
        stop.set()
        thread.join(5)
        sock.close()
        srv.stop(10)


def test_a_declared_body_that_never_comes_is_answered_408_at_request_timeout() -> None:
    srv = make_server(grpc_port=None, request_timeout=1.0)
    try:
        with socket.create_connection(("127.0.0.1", srv.addresses.http_port), timeout=10) as sock:
            sock.sendall(HEADERS % 100 + b"0123456789")
            reply = raw_response(sock, 1.0 + MARGIN_S)
        assert reply.startswith(b"HTTP/1.1 408 ")
        assert b"Connection: close" in reply
        assert srv.stats["http_408"] == 1
        assert post(srv.addresses.http_port)[0] == 200
    finally:
        srv.stop(10)


def test_stalled_clients_do_not_keep_a_normal_client_from_being_served() -> None:
    """max_concurrent_requests + 5 connections stall (half mid-body, half mid-headers), with the
    default request_timeout far away: a normal request is still served, at once."""
    limit = 2
    srv = make_server(grpc_port=None, max_concurrent_requests=limit)
    stalled = []
    try:
        for i in range(limit + 5):
            sock = socket.create_connection(("127.0.0.1", srv.addresses.http_port), timeout=10)
            sock.sendall(HEADERS % 100 + b"0123456789" if i % 2 else b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nCon")
            stalled.append(sock)
        time.sleep(0.3)  # every stalled request is being read by its handler
        status, _, _ = post(srv.addresses.http_port)
        assert status == 200
        # served while every stalled connection is still held open (request_timeout is 30 s)
        for sock in stalled:
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in stalled:
            sock.close()
        srv.stop(10)


def test_bodies_being_received_are_bounded_in_total_bytes() -> None:
    """Bodies are received outside the request slots, so their bytes have a bound of their own
    (max_concurrent_requests x max_request_bytes): past it, 503 at once; when they are done the
    room is back."""
    size = 100 * 1024
    srv = make_server(grpc_port=None, max_concurrent_requests=1, max_request_bytes=size)
    try:
        first = socket.create_connection(("127.0.0.1", srv.addresses.http_port), timeout=10)
        first.sendall(HEADERS % size + b"\0" * (70 * 1024))  # most of its body, then a pause
        time.sleep(0.3)
        status, headers, _ = post(srv.addresses.http_port, b"\0" * (80 * 1024))
        assert status == 503 and headers["retry-after"] == "1"
        first.sendall(b"\0" * (size - 70 * 1024))
        assert raw_response(first, 10).startswith(b"HTTP/1.1 400 ")  # read whole (and not OTLP)
        first.close()
        assert post(srv.addresses.http_port)[0] == 200
        status, _, _ = post(srv.addresses.http_port, b"\0" * (80 * 1024))
        assert status == 400  # 80 KiB received this time
    finally:
        srv.stop(10)


def test_a_huge_declared_content_length_is_refused_413_before_reading() -> None:
    srv = make_server(grpc_port=None, max_request_bytes=1 << 20)
    try:
        with socket.create_connection(("127.0.0.1", srv.addresses.http_port), timeout=10) as sock:
            sock.sendall(HEADERS % (1 << 40))  # a terabyte, and no body at all: an answer means none was awaited
            reply = raw_response(sock, MARGIN_S)
        assert reply.startswith(b"HTTP/1.1 413 ")
        assert post(srv.addresses.http_port)[0] == 200
    finally:
        srv.stop(10)
