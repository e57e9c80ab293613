"""A scripted OpenAI-compatible judge server for the LLM-scorer tests and the throughput benchmark.

Real HTTP on 127.0.0.1 (random port, stdlib ``http.server``), so the real litellm client, its
HTTP stack, our retries and our parsing all run. Every request body is recorded. Answers come
from a script (a queue of ``Reply`` objects, consumed in order) or, when the queue is empty,
from ``responder`` (a function of the request body), else a 500 that says nothing was scripted.

Faults a reply can script: a delay (slow answer), any HTTP status with headers (429 with
Retry-After, 500, 503 …), content that is truncated JSON, prose, wrong verdict counts (just
content), an HTTP body cut short, a connection reset (RST), and never answering (held open until
the client gives up or the server stops).
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest

ReplyKind = Literal["ok", "status", "reset", "hang", "truncated_body"]


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


class JudgeServer:
    def __init__(self, responder: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        #: requests being answered right now, and the most there ever were at once
        self.in_flight = 0
        self.max_in_flight = 0
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="judge-server", daemon=True
        )

    # --- lifecycle ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

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
            self._script.clear()
            self.max_in_flight = self.in_flight

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

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                with server._lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    reply = server._next(body)
                    stopping = bool(reply.delay) and server._stopping.wait(reply.delay)
                finally:
                    # counted down before the answer is written: once the client has its answer
                    # it may send the next request before this thread gets to run again
                    with server._lock:
                        server.in_flight -= 1
                if not stopping:
                    self._answer(reply)

            def _answer(self, reply: Reply) -> None:
                if reply.kind == "reset":
                    # SO_LINGER 0 makes close() send RST instead of FIN
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.connection.close()
                    self.close_connection = True
                    return
                if reply.kind == "hang":
                    server._stopping.wait(120)
                    self.close_connection = True
                    return
                if reply.kind == "status":
                    payload = json.dumps(
                        {"error": {"message": f"scripted {reply.status}", "type": "server_error", "code": reply.status}}
                    ).encode()
                    self._send(reply.status, payload, reply.headers)
                    return
                content = reply.content if isinstance(reply.content, str) else json.dumps(reply.content)
                payload = json.dumps(completion(content, reply.model, reply.usage)).encode()
                if reply.kind == "truncated_body":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self._send(200, payload, reply.headers)

            def _send(self, code: int, payload: bytes, headers: dict[str, str]) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
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


@pytest.fixture(name="judge_server")
def judge_server_fixture() -> Iterator[JudgeServer]:
    """A started server, stopped after the test. Import ``judge_server_fixture`` into a test
    module to use the ``judge_server`` fixture there."""
    with JudgeServer() as server:
        yield server
