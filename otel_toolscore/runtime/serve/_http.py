"""The OTLP/HTTP receiver of ``serve``: ``POST /v1/{traces,logs,metrics}``, protobuf or JSON,
optionally gzip/deflate, and the probes ``GET /healthz`` and ``/readyz`` (``_health``), on an HTTP/1.1 reader built to hold up against slow or hostile clients:
a deadline for each whole request (``_DeadlineReader``), bodies read a chunk at a time against a
budget of bytes being received (``ByteBudget``) before a request slot is taken, and a bound on
connections (each has a thread). The limits as a client sees them: ``server``'s docstring.
"""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
import zlib
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from otel_toolscore.runtime.serve._protocol import JSON_TYPE, RETRY_AFTER_S, SIGNALS, Rejection, status_body
from otel_toolscore.runtime.serve.admission import ByteBudget

if TYPE_CHECKING:
    from otel_toolscore.runtime.serve.server import ToolScoreServer

logger = logging.getLogger(__name__)

#: bodies are read this much at a time (the memory a stalled body holds is what has arrived)
_READ_CHUNK = 64 * 1024
_HTTP_PATHS = {f"/v1/{s}": s for s in SIGNALS}
_PROTOBUF_TYPES = frozenset({"application/x-protobuf", "application/protobuf"})


def start_http(app: ToolScoreServer, port: int) -> tuple[HttpServer, threading.Thread, int]:
    """Bind ``app.host:port`` and serve in a thread; (the server, its thread, the port bound)."""
    server_cls = HttpServer6 if ":" in app.host else HttpServer
    try:
        httpd = server_cls((app.host, port), _HttpHandler, app)
    except OSError as exc:
        raise OSError(f"cannot listen for OTLP/HTTP on {app.host}:{port}: {exc.strerror or exc}") from exc
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                              name="otel-toolscore-http", daemon=True)
    thread.start()
    return httpd, thread, int(httpd.server_address[1])


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def inflate(data: bytes, encoding: str, limit: int) -> bytes:
    """Decompress a request body (gzip, deflate, or none), never producing more than ``limit`` bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return data
    if encoding in ("gzip", "x-gzip"):
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        # HTTP "deflate" is the zlib format; some clients send raw deflate: 32+ would not accept it.
        wbits = zlib.MAX_WBITS if data[:1] and (data[0] & 0x0F) == 8 else -zlib.MAX_WBITS
    else:
        raise Rejection(415, "INVALID_ARGUMENT", f"unsupported Content-Encoding {encoding!r} (gzip, deflate or none)")
    out = bytearray()
    decomp = zlib.decompressobj(wbits)
    rest = data
    try:
        while True:
            # At most one byte more than the limit: enough to know the limit is crossed, and a
            # gzip bomb never inflates further than that.
            out += decomp.decompress(rest, limit + 1 - len(out))
            if len(out) > limit:
                raise Rejection(413, "RESOURCE_EXHAUSTED",
                                f"decompressed request body is over the {limit}-byte limit")
            if decomp.eof:
                rest = decomp.unused_data
                if wbits > 0 and rest.strip(b"\x00"):  # another gzip member follows
                    decomp = zlib.decompressobj(wbits)
                    continue
                return bytes(out)
            if decomp.unconsumed_tail:
                rest = decomp.unconsumed_tail
                continue
            raise Rejection(400, "INVALID_ARGUMENT", f"{encoding} body is truncated")
    except zlib.error as exc:
        raise Rejection(400, "INVALID_ARGUMENT", f"{encoding} body cannot be decompressed: {exc}") from None



class HttpServer(ThreadingHTTPServer):
    daemon_threads = True  # idle keep-alive connections must not keep the process alive
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], app: ToolScoreServer) -> None:
        self.app = app
        # Connections, not requests: each has a thread; idle keep-alive ones count too.
        self._connections = threading.BoundedSemaphore(4 * app.max_concurrent_requests)
        #: requests whose body has arrived, being handled
        self.slots = threading.BoundedSemaphore(app.max_concurrent_requests)
        #: what the request slots bounded when bodies were read inside them
        self.body_bytes = ByteBudget(app.max_concurrent_requests * app.max_request_bytes)
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN (a DNS query); not needed here.
        import socketserver

        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._connections.acquire(blocking=False):
            # Over the connection bound: close at once, the client reconnects later.
            self.app._count("connections_refused", 1)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._connections.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()


class HttpServer6(HttpServer):
    address_family = socket.AF_INET6


class _DeadlineReader(io.RawIOBase):
    """A connection's reads, bounded by the handler's deadline for the whole request.

    A socket timeout alone bounds the wait for the next byte: a client sending one byte every
    few seconds would hold its thread forever (slow loris). Each read here may wait only for
    what is left until the deadline.
    """

    def __init__(self, sock: socket.socket, handler: _HttpHandler) -> None:
        super().__init__()
        self._sock = sock
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self._handler.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request did not arrive within request_timeout")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


class _HttpHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "otel-toolscore"
    sys_version = ""
    server: HttpServer
    #: when the request being read must have arrived whole (monotonic seconds)
    deadline = 0.0

    def setup(self) -> None:
        super().setup()
        self.deadline = time.monotonic() + self.server.app.request_timeout
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self))

    def handle_one_request(self) -> None:
        # The wait for a keep-alive connection's next request counts: an idle one is closed.
        self.deadline = time.monotonic() + self.server.app.request_timeout
        super().handle_one_request()

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.client_address[0], *args)

    def _not_allowed(self) -> None:
        path = urlsplit(self.path).path
        if path in _HTTP_PATHS:
            self._error(Rejection(405, "UNIMPLEMENTED", f"{self.command} is not allowed on {path}; use POST"),
                        is_json=True, extra={"Allow": "POST"})
        else:
            self._error(Rejection(404, "NOT_FOUND", f"no such path {path}"), is_json=True)

    do_PUT = do_DELETE = do_PATCH = do_HEAD = _not_allowed

    def do_GET(self) -> None:
        # The probes: no token asked (a kubelet has none) and nothing told but readiness.
        path = urlsplit(self.path).path
        if path == "/healthz":
            self._send(200, "text/plain", b"ok\n")
        elif path == "/readyz":
            state = self.server.app.readiness()
            self._send(200 if state.ready else 503, "application/json", state.json())
        else:
            self._not_allowed()

    def do_POST(self) -> None:
        app = self.server.app
        self._body_read = False
        self._reserved = 0
        path = urlsplit(self.path).path
        signal_name = _HTTP_PATHS.get(path)
        media = _media_type(self.headers.get("Content-Type"))
        is_json = media == JSON_TYPE
        try:
            if signal_name is None or (signal_name != "traces" and not app.forward_signals):
                raise Rejection(404, "NOT_FOUND", f"no such path {path}")
            if not app.authorized(self.headers.get("Authorization")):
                app._count("unauthenticated", 1)
                raise Rejection(401, "UNAUTHENTICATED", "missing or wrong bearer token (Authorization header)")
            if media not in _PROTOBUF_TYPES and not is_json:
                raise Rejection(415, "INVALID_ARGUMENT",
                                f"unsupported Content-Type {media or '(none)'!r}: use application/x-protobuf "
                                "or application/json")
            # The body is received before a request slot is taken: a client that is slow to send
            # it (or never does) holds its connection until the deadline, never a slot.
            raw = self._read_body(app.max_request_bytes)
            if not self.server.slots.acquire(blocking=False):
                raise Rejection(503, "UNAVAILABLE", "too many concurrent requests", RETRY_AFTER_S)
            try:
                with app._request():
                    body = inflate(raw, self.headers.get("Content-Encoding", ""), app.max_request_bytes)
                    del raw
                    if signal_name == "traces":
                        reply = app.ingest_traces(body, is_json)
                    else:
                        reply = app.forward(signal_name, body, is_json)
            finally:
                self.server.slots.release()
        except Rejection as rej:
            app._count(f"http_{rej.status}", 1)
            self._give_back()
            self._error(rej, is_json)
            return
        except Exception:  # one bad request must not take the server down
            logger.exception("otel-toolscore serve: request failed")
            self._give_back()
            self._error(Rejection(500, "INTERNAL", "internal error"), is_json)
            return
        self._give_back()
        self._send(reply.status, reply.content_type, reply.body)

    def _give_back(self) -> None:
        if self._reserved:
            self.server.body_bytes.give_back(self._reserved)
            self._reserved = 0

    def _read_body(self, limit: int) -> bytes:
        try:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                body = self._read_chunked(limit)
            else:
                raw = self.headers.get("Content-Length")
                if raw is None:
                    raise Rejection(411, "INVALID_ARGUMENT", "Content-Length is required")
                try:
                    length = int(raw)
                except ValueError:
                    raise Rejection(400, "INVALID_ARGUMENT", f"bad Content-Length {raw[:40]!r}") from None
                if length < 0:
                    raise Rejection(400, "INVALID_ARGUMENT", f"bad Content-Length {length}")
                if length > limit:
                    raise Rejection(413, "RESOURCE_EXHAUSTED",
                                    f"request body is {length} bytes, over the {limit}-byte limit")
                body = bytearray()
                self._read_into(body, length)
                if len(body) < length:
                    raise Rejection(400, "INVALID_ARGUMENT", "request body is shorter than its Content-Length")
        except TimeoutError:
            raise Rejection(408, "DEADLINE_EXCEEDED", "the request body did not arrive within "
                            f"{self.server.app.request_timeout:g} s") from None
        self._body_read = True
        return bytes(body)

    def _read_into(self, body: bytearray, n: int) -> None:
        """Append up to ``n`` more bytes (fewer at EOF), a chunk at a time: what a stalled body
        holds in memory is what has arrived, not what it declared."""
        budget = self.server.body_bytes
        end = len(body) + n
        while len(body) < end:
            size = min(_READ_CHUNK, end - len(body))
            if not budget.take(size):
                raise Rejection(503, "UNAVAILABLE", "too many request bytes being received", RETRY_AFTER_S)
            self._reserved += size
            chunk = self.rfile.read(size)
            body += chunk
            if len(chunk) < size:
                return

    def _read_chunked(self, limit: int) -> bytearray:
        body = bytearray()
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise Rejection(400, "INVALID_ARGUMENT", "bad chunked encoding") from None
            if size == 0:
                while self.rfile.readline(1024).strip():  # trailers
                    pass
                return body
            if len(body) + size > limit:
                raise Rejection(413, "RESOURCE_EXHAUSTED", f"request body is over the {limit}-byte limit")
            expected = len(body) + size
            self._read_into(body, size)
            if len(body) < expected:
                raise Rejection(400, "INVALID_ARGUMENT", "chunked body is truncated")
            self.rfile.readline(1024)  # the CRLF after the chunk

    def _error(self, rej: Rejection, is_json: bool, extra: Mapping[str, str] | None = None) -> None:
        body, content_type = status_body(rej.code, rej.message, is_json)
        headers = dict(extra or {})
        if rej.retry_after is not None:
            headers["Retry-After"] = str(rej.retry_after)
        if rej.status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="otel-toolscore"'
        # A body left unread would be parsed as the next request: close the connection instead.
        close = not getattr(self, "_body_read", False) and self._has_body()
        if close:
            headers["Connection"] = "close"
            self.close_connection = True
        self._send(rej.status, content_type, body, headers)
        if close:
            self._linger()

    def _has_body(self) -> bool:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return True
        try:
            return int(self.headers.get("Content-Length") or 0) != 0
        except ValueError:
            return True

    def _send(self, status: int, content_type: str, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        # Writes get request_timeout each; reads may have left the socket's timeout at what
        # remained of the deadline.
        self.connection.settimeout(self.server.app.request_timeout)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _linger(self) -> None:
        """Half-close and drain what the client is still sending, so it reads our answer.

        Closing a socket with unread data sends a TCP reset, which can destroy the response
        before the client has read it (413 and 401 on large bodies). Bounded in bytes and time.
        """
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(0.5)
            budget = 2 * self.server.app.max_request_bytes + 65536
            deadline = time.monotonic() + 2.0
            while budget > 0 and time.monotonic() < deadline:
                chunk = self.connection.recv(min(65536, budget))
                if not chunk:
                    break
                budget -= len(chunk)
        except OSError:
            pass

