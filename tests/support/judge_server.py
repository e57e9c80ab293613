"""A scripted OpenAI-compatible judge server for the LLM-scorer tests and the judge benchmarks
(the ``judge_server`` fixture of ``tests/conftest.py`` is one, started).

Real HTTP on 127.0.0.1 (random port, stdlib ``http.server``), so the real litellm client, its
HTTP stack, our retries and our parsing all run. Every request body is recorded. Answers come
from a script (a queue of ``Reply`` objects, consumed in order) or, when the queue is empty,
from ``responder`` (a function of the request body), else a 500 that says nothing was scripted.

Faults a reply can script: a delay (slow answer), any HTTP status with headers (429 with
Retry-After, 500, 503 …), content that is truncated JSON, prose, wrong verdict counts (just
content), an HTTP body cut short, a connection reset (RST) before the request is read, before
the answer or half-way through the answer body, slow-loris answers (status line and headers, or
the body, dribbled a byte at a time), a raw body such as a proxy's HTML 502 page or a 200 that is
not JSON, and never answering (held open until the client gives up or the server stops). Storms
are responders: ``always`` repeats one fault, ``fault_storm`` draws faults at random from a seed.
``BlackHole`` is a port that accepts TCP connections in the kernel and never reads them.

A request is *in flight* from when its body has been read until the server has written its last
byte, or has seen that the client went away (a client that times out closes its connection, and
the server notices at once), so ``max_in_flight`` is what the client really had open at once.
"""

from __future__ import annotations

import json
import random
import re
import select
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

ReplyKind = Literal[
    "ok", "status", "reset", "hang", "truncated_body", "reset_request", "reset_body", "slow_body", "slow_headers", "raw"
]


@dataclass
class Reply:
    kind: ReplyKind = "ok"
    #: the assistant message content (a dict/list is sent as its JSON text)
    content: Any = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    #: seconds to wait before answering
    delay: float = 0.0
    #: model name in the answer (litellm prices by it)
    model: str = "judge-test"
    usage: tuple[int, int] = (100, 20)
    #: slow-loris kinds: seconds between two bytes
    interval: float = 0.1
    #: raw kind: the HTTP body as sent (status, headers and Content-Type from the fields above)
    body: bytes = b""
    content_type: str = "application/json"


def ok(content: Any, *, delay: float = 0.0, model: str = "judge-test", usage: tuple[int, int] = (100, 20)) -> Reply:
    """A normal chat completion whose message content is ``content`` (JSON-encoded if not str)."""
    return Reply("ok", content=content, delay=delay, model=model, usage=usage)


def status(code: int, *, retry_after: float | str | None = None, delay: float = 0.0) -> Reply:
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return Reply("status", status=code, headers=headers, delay=delay)


def truncated_content(content: Any, keep: float = 0.6) -> Reply:
    """A 200 whose message content is the first ``keep`` fraction of the JSON text."""
    text = content if isinstance(content, str) else json.dumps(content)
    return Reply("ok", content=text[: max(1, int(len(text) * keep))])


def truncated_body() -> Reply:
    """A 200 whose HTTP body (the completion JSON itself) stops half-way."""
    return Reply("truncated_body")


def reset() -> Reply:
    """Close the connection with a TCP RST before answering."""
    return Reply("reset")


def hang() -> Reply:
    """Never answer; the connection stays open until the client times out."""
    return Reply("hang")


def reset_request() -> Reply:
    """RST after the request headers, before its body is read (the client may still be sending)."""
    return Reply("reset_request")


def reset_body(content: Any = "") -> Reply:
    """Status line, headers and part of a valid answer's body, then RST."""
    return Reply("reset_body", content=content)


def slow_body(content: Any = "", *, interval: float = 0.1) -> Reply:
    """Slow loris: status line and headers at once, then the body one byte every ``interval``
    seconds (every byte resets a per-read timeout, so only a whole-attempt deadline stops it)."""
    return Reply("slow_body", content=content, interval=interval)


def slow_headers(content: Any = "", *, interval: float = 0.1) -> Reply:
    """Slow loris one step earlier: the status line and headers one byte every ``interval`` s."""
    return Reply("slow_headers", content=content, interval=interval)


def raw(body: bytes | str, *, code: int = 200, content_type: str = "application/json") -> Reply:
    """Any HTTP body, as sent: ``raw(b'{"choices": [', )`` is a JSON body cut mid-object with a
    correct Content-Length, ``html_page(502)`` a proxy's error page."""
    return Reply("raw", status=code, body=body.encode() if isinstance(body, str) else body, content_type=content_type)


def html_page(code: int = 502) -> Reply:
    """What a reverse proxy answers when the model server behind it is gone: text/html, not JSON."""
    page = (
        f"<html><head><title>{code} Bad Gateway</title></head><body><center><h1>{code} Bad Gateway</h1>"
        "</center><hr><center>nginx</center></body></html>"
    )
    return raw(page, code=code, content_type="text/html")


def always(make: Callable[[], Reply]) -> Callable[[dict[str, Any]], Reply]:
    """A responder that answers every request with a fresh ``make()``: a storm of one fault."""
    return lambda body: make()


def fault_storm(
    seed: int,
    faults: list[Callable[[], Reply]],
    *,
    answer: Callable[[dict[str, Any]], Reply] | None = None,
    answer_weight: int = 0,
) -> Callable[[dict[str, Any]], Reply]:
    """A responder that answers each request with a fault drawn from ``faults`` by a seeded RNG
    (the same seed gives the same sequence of draws, whichever request each lands on). With
    ``answer``, that responder takes ``answer_weight`` shares of the draws (valid answers mixed in)."""
    rng = random.Random(seed)
    lock = threading.Lock()
    shares = len(faults) + (answer_weight if answer is not None else 0)

    def respond(body: dict[str, Any]) -> Reply:
        with lock:
            pick = rng.randrange(shares)
        if pick >= len(faults):
            assert answer is not None
            return answer(body)
        return faults[pick]()

    return respond


def completion(content: str, model: str, usage: tuple[int, int]) -> dict[str, Any]:
    prompt, completion_tokens = usage
    return {
        "id": "chatcmpl-judge",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        },
    }


_BLOCK = re.compile(r"<<<DATA id=(\w+?)_(\d+)>>>")


def auto_answer(body: dict[str, Any], *, verdict: str = "yes", appropriate: bool = True) -> dict[str, Any]:
    """A valid answer to any of our judge prompts, shaped by what the prompt holds: one verdict
    per ``context_N`` / ``instruction_N`` block, one evaluation per ``tool_call_N`` block, and a
    two-item split for an instruction-split request. Used by the CLI tests and the benchmark."""
    text = "\n".join(str(m.get("content")) for m in body.get("messages", []))
    counts: dict[str, int] = {}
    for kind, index in _BLOCK.findall(text):
        counts[kind] = max(counts.get(kind, 0), int(index))
    if "<<<DATA id=system_instructions>>>" in text:
        return {"instructions": ["Be brief.", "Answer in English."]}
    if "instruction" in counts:
        return {
            "verdicts": [
                {"instruction": f"instruction {i}", "verdict": verdict, "reason": "scripted"}
                for i in range(counts["instruction"])
            ]
        }
    if "context" in counts:
        return {"verdicts": [{"verdict": verdict, "reason": "scripted"} for _ in range(counts["context"])]}
    calls = re.findall(r'"tool": "([^"]*)"', text)
    return {
        "evaluations": [
            {"tool_called": name, "was_appropriate": appropriate, "reasoning": "scripted"} for name in calls
        ],
        "missing_tools": [],
        "reason": "Scripted judgement.",
    }


def auto_responder(delay: float = 0.0, **answer: Any) -> Callable[[dict[str, Any]], Reply]:
    return lambda body: ok(auto_answer(body, **answer), delay=delay)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that resets or drops its connection (a timed-out attempt, a pool closed at
        # exit) is part of the faults under test, not a server error worth a traceback.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class JudgeServer:
    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        #: time.monotonic() at which each request's body had been read, in arrival order
        self.arrivals: list[float] = []
        #: requests being answered right now, and the most there ever were at once
        self.in_flight = 0
        self.max_in_flight = 0
        #: requests the client gave up on before the answer was complete (it closed the connection)
        self.abandoned = 0
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="judge-server", daemon=True
        )

    # --- lifecycle ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}/v1"

    def start(self) -> JudgeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # releases hanging handlers
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> JudgeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- scripting -----------------------------------------------------------------------------
    def script(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def reset_log(self) -> None:
        with self._lock:
            self.requests.clear()
            self.headers.clear()
            self.arrivals.clear()
            self._script.clear()
            self.max_in_flight = self.in_flight
            self.abandoned = 0

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        with self._lock:
            return len(self._script)

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return self.responder(body)
        return Reply("status", status=500, content="no scripted answer")

    # --- the handler ---------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:  # http.server's naming
                self._counted = False
                self._body_read = False
                try:
                    self._handle()
                except OSError:
                    # the client went away mid-answer (it timed out, or a fault closed the socket)
                    self.close_connection = True
                finally:
                    self._finish_request()

            def _handle(self) -> None:
                # A reset before the body is read must be decided before reading it, so peek at
                # the script first only for that kind; every other reply is chosen after the body.
                length = int(self.headers.get("Content-Length") or 0)
                with server._lock:
                    early = bool(server._script) and server._script[0].kind == "reset_request"
                    if early:
                        server._script.popleft()
                if early:
                    with server._lock:
                        server.requests.append({"_unread": length})
                        server.headers.append({k.lower(): v for k, v in self.headers.items()})
                        server.arrivals.append(time.monotonic())
                    self._rst()
                    return
                raw_body = self.rfile.read(length)
                try:
                    body = json.loads(raw_body)
                except ValueError:
                    body = {"_raw": raw_body.decode("utf-8", "replace")}
                with server._lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    server.arrivals.append(time.monotonic())
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    self._counted = True
                reply = server._next(body)
                if reply.kind == "reset_request":  # from a responder: the body is read by now
                    self._rst()
                    return
                if reply.delay and not self._wait(reply.delay):
                    return
                self._answer(reply)

            # -- bookkeeping --
            def _done(self) -> None:
                """The server is done with this request: called before its last byte is written
                (once the client has the answer it may send the next request at once)."""
                with server._lock:
                    if self._counted:
                        server.in_flight -= 1
                        self._counted = False

            def _finish_request(self) -> None:
                with server._lock:
                    if self._counted:  # never answered: the client left, or the server stopped
                        server.in_flight -= 1
                        server.abandoned += 1
                        self._counted = False

            def _client_gone(self, timeout: float) -> bool:
                """Wait up to ``timeout`` s; True as soon as the client closes its side."""
                try:
                    readable, _, _ = select.select([self.connection], [], [], timeout)
                    if not readable:
                        return False
                    if self.connection.recv(1, socket.MSG_PEEK) == b"":
                        return True
                except (OSError, ValueError):
                    return True
                time.sleep(timeout)  # bytes waiting (a pipelined request): the client is still there
                return False

            def _wait(self, seconds: float) -> bool:
                """Sleep ``seconds``; False when the client left or the server is stopping first
                (the request is then abandoned, not answered)."""
                deadline = time.monotonic() + seconds
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return True
                    if server._stopping.is_set() or self._client_gone(min(remaining, 0.05)):
                        self.close_connection = True
                        return False

            def _rst(self) -> None:
                # SO_LINGER 0 makes close() send RST instead of FIN
                self._done()
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True

            def _dribble(self, data: bytes, interval: float) -> None:
                """Write ``data`` one byte every ``interval`` s, the last byte after ``_done``."""
                for i in range(len(data)):
                    if i and not self._wait(interval):
                        return
                    if i == len(data) - 1:
                        self._done()
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()

            # -- answers --
            def _answer(self, reply: Reply) -> None:
                if reply.kind == "reset":
                    self._rst()
                    return
                if reply.kind == "hang":
                    self._wait(120)
                    self.close_connection = True
                    return
                if reply.kind == "status":
                    payload = json.dumps(
                        {"error": {"message": f"scripted {reply.status}", "type": "server_error", "code": reply.status}}
                    ).encode()
                    self._send(reply.status, payload, reply.headers)
                    return
                if reply.kind == "raw":
                    self._send(reply.status, reply.body, reply.headers, content_type=reply.content_type)
                    return
                content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
                payload = json.dumps(completion(content, reply.model, reply.usage)).encode()
                head = (
                    f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(payload)}\r\n\r\n"
                ).encode()
                if reply.kind == "truncated_body":
                    self._done()
                    self.wfile.write(head + payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if reply.kind == "reset_body":
                    self.wfile.write(head + payload[: len(payload) // 2])
                    self.wfile.flush()
                    self._rst()
                    return
                if reply.kind == "slow_body":
                    self.wfile.write(head)
                    self.wfile.flush()
                    self._dribble(payload, reply.interval)
                    return
                if reply.kind == "slow_headers":
                    self._dribble(head + payload, reply.interval)
                    return
                self._send(200, payload, reply.headers)

            def _send(
                self, code: int, payload: bytes, headers: dict[str, str], content_type: str = "application/json"
            ) -> None:
                self._done()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

        return Handler

    # --- what the tests inspect ------------------------------------------------------------------
    def prompts(self) -> list[str]:
        """Every received request's messages flattened to one text each."""
        return ["\n".join(str(m.get("content")) for m in r.get("messages", [])) for r in self.requests]


class BlackHole:
    """A port that completes TCP handshakes (the kernel's backlog) but never accepts or reads:
    a judge host that is up but wedged. Connecting works; no answer ever comes."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)

    @property
    def url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> BlackHole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def closed_port_url() -> str:
    """The URL of a 127.0.0.1 port that nothing listens on (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"

