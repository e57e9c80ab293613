"""A scripted, OpenAI-compatible model server (stdlib only).

It plays the model for real agent loops so that real instrumentation libraries can be
traced without a real LLM.  It binds to 127.0.0.1 on a free port and answers:

* ``POST /v1/chat/completions`` -- non-streaming, and Server-Sent Events when the request
  has ``"stream": true`` (with a final usage chunk when
  ``stream_options.include_usage`` is true);
* ``POST /v1/responses`` -- the Responses API, non-streaming (enough for the OpenAI
  Agents SDK and for clients that call ``client.responses.create``);
* ``POST /v1/messages`` -- the Anthropic Messages API, non-streaming, and Server-Sent Events
  (``message_start`` ... ``message_stop``) when the request has ``"stream": true``; with the
  message-threads beta's ``thread`` field (``{"type": "create"}`` or ``{"type": "continue",
  "previous_message_id": ...}``) the server holds the conversation under each reply's id, so a
  continuing request sends only the new messages (and no ``system``/``tools``);
* ``GET /v1/models`` and ``GET /v1/models/<id>``.

Scripting
---------
A *scenario* is a dict::

    {"name": "sequential_chain",
     "user_question": "...",            # optional; used to pick a scenario when the
                                        # server holds several
     "turns": [
         {"tool_calls": [{"name": "auth", "arguments": {"token": "tok-1"}}]},
         {"tool_calls": [{"name": "fetch_data", "arguments": {"endpoint": "/x"}}]},
         {"text": "final answer"},
     ]}

The reply is chosen from the request alone, so the same scenario works for any client
loop: the server counts the tool results already in the request (``role: tool`` messages
in Chat Completions, ``function_call_output`` items in the Responses API, ``tool_result``
content blocks in the Anthropic Messages API) and answers with the first turn whose
preceding turns' tool calls add up to that count.  A tool-call turn with three calls is
therefore "done" once three tool results are present.  Tool-call ids are deterministic:
``call_<scenario>_<n>`` (``toolu_<scenario>_<n>`` in the Messages API), where ``n`` counts
the scenario's tool calls from 1 in script order (so a retried request gets the same ids).

Every request is recorded in ``server.requests`` (path, method, parsed JSON body, the
scenario and turn chosen) and anything unexpected in ``server.problems``.

Use as a module::

    server, base_url = start_server(scenario)      # or a list of scenarios
    ...  # OpenAI(base_url=base_url, api_key="x")
    server.stop()

or run ``python examples/scripted_model_server.py [scenario.json]``: it prints its base URL
(``http://127.0.0.1:<port>/v1``) and serves until interrupted.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REQUEST_MODEL = "gpt-4o-mini"
RESPONSE_MODEL = "gpt-4o-mini-2024-07-18"
CREATED = 1767225600  # 2026-01-01T00:00:00Z, fixed for determinism
SYSTEM_FINGERPRINT = "fp_conformance01"
ANTHROPIC_RESPONSE_MODEL = "claude-haiku-4-5-20251001"  # the model every /v1/messages reply names

DEMO_SCENARIO = {
    "name": "demo",
    "user_question": "What's the weather in Paris?",
    "turns": [
        {"tool_calls": [{"name": "get_weather", "arguments": {"location": "Paris"}}]},
        {"text": "It's 61°F with light rain in Paris."},
    ],
}


def _tokens(obj: Any) -> int:
    """A deterministic stand-in for a token count (about 4 characters per token)."""
    if obj is None:
        return 0
    text = obj if isinstance(obj, str) else json.dumps(obj, sort_keys=True, ensure_ascii=False)
    return max(1, (len(text) + 3) // 4)


def _text_of(content: Any) -> str:
    """Text of a Chat Completions / Responses message content (string or parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                out.append(str(part.get("text") or part.get("content") or ""))
            else:
                out.append(str(part))
        return "".join(out)
    return str(content)


class ScriptedModelServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, scenarios: list[dict], host: str = "127.0.0.1", port: int = 0):
        if not scenarios:
            raise ValueError("at least one scenario is required")
        for sc in scenarios:
            if "name" not in sc or not sc.get("turns"):
                raise ValueError(f"scenario needs a name and turns: {sc!r}")
        self.scenarios = list(scenarios)
        self.requests: list[dict] = []
        self.problems: list[str] = []
        self._lock = threading.Lock()
        self._counters: dict[str, int] = {}
        self.threads: dict[str, dict] = {}  # Messages API threads: reply id -> {system, tools, messages}
        self._thread: threading.Thread | None = None
        super().__init__((host, port), _Handler)

    # -- lifecycle -----------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> ScriptedModelServer:
        self._thread = threading.Thread(target=self.serve_forever, name="scripted-model-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def reset(self) -> None:
        """Forget recorded requests, problems and id counters."""
        with self._lock:
            self.requests.clear()
            self.problems.clear()
            self._counters.clear()
            self.threads.clear()

    # -- scripting -----------------------------------------------------------------
    def pick_scenario(self, user_text: str) -> dict:
        if len(self.scenarios) == 1:
            return self.scenarios[0]
        for sc in self.scenarios:
            if sc.get("user_question") and sc["user_question"].strip() == user_text.strip():
                return sc
        for sc in self.scenarios:
            q = sc.get("user_question")
            if q and q.strip() in user_text:
                return sc
        raise LookupError(f"no scenario matches user message {user_text!r}")

    @staticmethod
    def pick_turn(scenario: dict, n_tool_results: int) -> tuple[int, dict, int]:
        """Return (turn index, turn, index of the turn's first tool call)."""
        seen = 0
        turns = scenario["turns"]
        for i, turn in enumerate(turns):
            if seen == n_tool_results:
                return i, turn, seen
            seen += len(turn.get("tool_calls") or [])
            if seen > n_tool_results:
                raise LookupError(
                    f"{scenario['name']}: {n_tool_results} tool results do not end a turn "
                    f"(turn {i} has {len(turn.get('tool_calls') or [])} calls)"
                )
        raise LookupError(f"{scenario['name']}: script exhausted after {n_tool_results} tool results")

    def next_id(self, scenario: str) -> int:
        with self._lock:
            self._counters[scenario] = self._counters.get(scenario, 0) + 1
            return self._counters[scenario]

    def record(self, entry: dict) -> None:
        with self._lock:
            self.requests.append(entry)

    def problem(self, text: str) -> None:
        with self._lock:
            self.problems.append(text)


def _call_id(scenario: str, n: int) -> str:
    return f"call_{scenario}_{n}"


def _tool_use_id(scenario: str, n: int) -> str:
    return f"toolu_{scenario}_{n}"


def _anthropic_blocks(content: Any) -> list:
    """The content blocks of an Anthropic message: a string is one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ScriptedModelServer

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr
        pass

    # -- plumbing ------------------------------------------------------------------
    def _send_json(self, status: int, payload: dict, headers: dict | None = None) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-request-id", f"req_{len(self.server.requests)}")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, type_: str = "invalid_request_error") -> None:
        self.server.problem(f"{self.command} {self.path}: {message}")
        self._send_json(status, {"error": {"message": message, "type": type_, "param": None, "code": None}})

    def _read_json(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw.decode("utf-8")) if raw else {}
        except ValueError:
            return None

    def _path(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        # accept both /v1/... and bare /... (some clients drop the /v1 prefix)
        if not path.startswith("/v1/") and path != "/v1":
            path = "/v1" + path
        return path

    # -- GET -----------------------------------------------------------------------
    def do_GET(self) -> None:
        path = self._path()
        self.server.record({"method": "GET", "path": path, "body": None})
        model = {"id": REQUEST_MODEL, "object": "model", "created": CREATED, "owned_by": "scripted"}
        if path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [model]})
        elif path.startswith("/v1/models/"):
            self._send_json(200, dict(model, id=path.rsplit("/", 1)[1]))
        else:
            self._error(404, f"unknown path {path}")

    # -- POST ----------------------------------------------------------------------
    def do_POST(self) -> None:
        path = self._path()
        body = self._read_json()
        entry = {"method": "POST", "path": path, "body": body}
        self.server.record(entry)
        if body is None:
            self._error(400, "request body is not JSON")
            return
        try:
            if path == "/v1/chat/completions":
                self._chat(body, entry)
            elif path == "/v1/responses":
                self._responses(body, entry)
            elif path == "/v1/messages":
                try:
                    self._messages(body, entry)
                except LookupError as exc:
                    self._anthropic_error(400, str(exc))
            else:
                self._error(404, f"unknown path {path}")
        except LookupError as exc:
            self._error(400, str(exc))
        except (BrokenPipeError, ConnectionResetError):
            self.server.problem(f"client went away during {path}")

    # -- Chat Completions ----------------------------------------------------------
    def _chat(self, body: dict, entry: dict) -> None:
        messages = body.get("messages") or []
        user_text = next((_text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
        n_results = sum(1 for m in messages if m.get("role") in ("tool", "function"))
        scenario = self.server.pick_scenario(user_text)
        name = scenario["name"]
        turn_i, turn, first_call = self.server.pick_turn(scenario, n_results)
        entry.update(scenario=name, turn=turn_i, last_role=(messages[-1].get("role") if messages else None))
        req_n = self.server.next_id(name)
        resp_id = f"chatcmpl-{name}-{req_n}"

        prompt_tokens = _tokens(messages) + _tokens(body.get("tools"))
        if turn.get("tool_calls"):
            calls = [
                {
                    "id": _call_id(name, first_call + j + 1),
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
                }
                for j, c in enumerate(turn["tool_calls"])
            ]
            message = {"role": "assistant", "content": None, "tool_calls": calls, "refusal": None}
            finish = "tool_calls"
            completion_tokens = _tokens([c["function"] for c in calls]) + 5 * len(calls)
        else:
            calls = []
            message = {"role": "assistant", "content": turn["text"], "refusal": None}
            finish = "stop"
            completion_tokens = _tokens(turn["text"])
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._chat_stream(resp_id, message, calls, finish, usage if include_usage else None)
            return
        self._send_json(
            200,
            {
                "id": resp_id,
                "object": "chat.completion",
                "created": CREATED,
                "model": RESPONSE_MODEL,
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                "usage": usage,
                "service_tier": "default",
                "system_fingerprint": SYSTEM_FINGERPRINT,
            },
        )

    def _chat_stream(self, resp_id: str, message: dict, calls: list, finish: str, usage: dict | None) -> None:
        base = {
            "id": resp_id,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": RESPONSE_MODEL,
            "service_tier": "default",
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }

        def chunk(delta: dict, finish_reason: str | None = None) -> dict:
            return dict(base, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}])

        events: list[dict] = [chunk({"role": "assistant", "content": "" if not calls else None, "refusal": None})]
        if calls:
            for j, call in enumerate(calls):
                args = call["function"]["arguments"]
                half = len(args) // 2
                events.append(chunk({"tool_calls": [{
                    "index": j, "id": call["id"], "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": ""},
                }]}))
                for piece in (args[:half], args[half:]):
                    events.append(chunk({"tool_calls": [{"index": j, "function": {"arguments": piece}}]}))
        else:
            words = message["content"].split(" ")
            for k, word in enumerate(words):
                events.append(chunk({"content": word if k == 0 else " " + word}))
        events.append(chunk({}, finish))
        if usage is not None:
            events.append(dict(base, choices=[], usage=usage))

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for ev in events:
            self.wfile.write(b"data: " + json.dumps(ev).encode("utf-8") + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    # -- Responses API -------------------------------------------------------------
    def _responses(self, body: dict, entry: dict) -> None:
        if body.get("stream"):
            raise LookupError("streaming is not implemented for /v1/responses")
        items = body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        items = items or []
        user_text = next(
            (_text_of(it.get("content")) for it in items if isinstance(it, dict) and it.get("role") == "user"), ""
        )
        n_results = sum(1 for it in items if isinstance(it, dict) and it.get("type") == "function_call_output")
        scenario = self.server.pick_scenario(user_text)
        name = scenario["name"]
        turn_i, turn, first_call = self.server.pick_turn(scenario, n_results)
        last = items[-1] if items else {}
        entry.update(scenario=name, turn=turn_i, last_role=last.get("role") or last.get("type"))
        req_n = self.server.next_id(name)
        resp_id = f"resp_{name}_{req_n}"

        output: list[dict] = []
        if turn.get("tool_calls"):
            for j, c in enumerate(turn["tool_calls"]):
                n = first_call + j + 1
                output.append({
                    "type": "function_call",
                    "id": f"fc_{name}_{n}",
                    "call_id": _call_id(name, n),
                    "name": c["name"],
                    "arguments": json.dumps(c["arguments"]),
                    "status": "completed",
                })
            output_tokens = _tokens(output) + 5 * len(output)
        else:
            output.append({
                "type": "message",
                "id": f"msg_{name}_{req_n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn["text"], "annotations": [], "logprobs": []}],
            })
            output_tokens = _tokens(turn["text"])
        input_tokens = _tokens(items) + _tokens(body.get("instructions")) + _tokens(body.get("tools"))
        self._send_json(
            200,
            {
                "id": resp_id,
                "object": "response",
                "created_at": CREATED,
                "status": "completed",
                "background": False,
                "error": None,
                "incomplete_details": None,
                "instructions": body.get("instructions"),
                "max_output_tokens": body.get("max_output_tokens"),
                "model": RESPONSE_MODEL,
                "output": output,
                "parallel_tool_calls": body.get("parallel_tool_calls", True),
                "previous_response_id": body.get("previous_response_id"),
                "reasoning": {"effort": None, "summary": None},
                "service_tier": "default",
                "store": bool(body.get("store", False)),
                "temperature": body.get("temperature", 1.0),
                "text": {"format": {"type": "text"}, "verbosity": "medium"},
                "tool_choice": body.get("tool_choice") or "auto",
                "tools": body.get("tools") or [],
                "top_p": body.get("top_p", 1.0),
                "truncation": body.get("truncation") or "disabled",
                "usage": {
                    "input_tokens": input_tokens,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": output_tokens,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": input_tokens + output_tokens,
                },
                "user": None,
                "metadata": body.get("metadata") or {},
            },
        )


    # -- Anthropic Messages API ---------------------------------------------------
    def _anthropic_error(self, status: int, message: str, type_: str = "invalid_request_error",
                         details: dict | None = None) -> None:
        self.server.problem(f"{self.command} {self.path}: {message}")
        error: dict = {"type": type_, "message": message}
        if details:
            error["details"] = details
        self._send_json(status, {"type": "error", "error": error}, {"request-id": f"req_{len(self.server.requests)}"})

    def _messages(self, body: dict, entry: dict) -> None:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        thread = body.get("thread") if isinstance(body.get("thread"), dict) else None
        system, tools = body.get("system"), body.get("tools")
        if thread is not None:
            entry["thread"] = dict(thread)
            if thread.get("type") == "continue":
                with self.server._lock:
                    held = self.server.threads.get(str(thread.get("previous_message_id")))
                if held is None:
                    self._anthropic_error(404, f"thread {thread.get('previous_message_id')!r} not found",
                                          "not_found_error", {"error_code": "thread_not_found"})
                    return
                messages = held["messages"] + messages
                system = held["system"] if system is None else system
                tools = held["tools"] if tools is None else tools
            elif thread.get("type") != "create":
                raise LookupError(f"unknown thread type {thread.get('type')!r}")
        user_text = next((_text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
        n_results = sum(
            1 for m in messages for b in _anthropic_blocks(m.get("content")) if b.get("type") == "tool_result"
        )
        scenario = self.server.pick_scenario(user_text)
        name = scenario["name"]
        turn_i, turn, first_call = self.server.pick_turn(scenario, n_results)
        last = messages[-1] if messages else {}
        last_blocks = _anthropic_blocks(last.get("content"))
        last_role = "tool_result" if any(b.get("type") == "tool_result" for b in last_blocks) else last.get("role")
        entry.update(scenario=name, turn=turn_i, last_role=last_role)
        req_n = self.server.next_id(name)
        msg_id = f"msg_{name}_{req_n}"

        if turn.get("tool_calls"):
            content = [
                {"type": "tool_use", "id": _tool_use_id(name, first_call + j + 1), "name": c["name"],
                 "input": c["arguments"]}
                for j, c in enumerate(turn["tool_calls"])
            ]
            stop_reason = "tool_use"
            output_tokens = _tokens(content) + 5 * len(content)
        else:
            content = [{"type": "text", "text": turn["text"]}]
            stop_reason = "end_turn"
            output_tokens = _tokens(turn["text"])
        input_tokens = _tokens(system) + _tokens(messages) + _tokens(tools)
        usage = {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }
        message = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": ANTHROPIC_RESPONSE_MODEL,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        if thread is not None:
            with self.server._lock:
                self.server.threads[msg_id] = {
                    "system": system, "tools": tools,
                    "messages": messages + [{"role": "assistant", "content": content}],
                }
        if body.get("stream"):
            self._messages_stream(message)
            return
        self._send_json(200, message, {"request-id": f"req_{len(self.server.requests)}"})

    def _messages_stream(self, message: dict) -> None:
        usage = message["usage"]
        start = dict(message, content=[], stop_reason=None, stop_sequence=None,
                     usage=dict(usage, output_tokens=1))
        events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": start})]
        for index, block in enumerate(message["content"]):
            if block["type"] == "tool_use":
                events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                       "content_block": dict(block, input={})}))
                if index == 0:
                    events.append(("ping", {"type": "ping"}))
                args = json.dumps(block["input"])
                half = len(args) // 2
                for piece in (args[:half], args[half:]):
                    events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                           "delta": {"type": "input_json_delta",
                                                                     "partial_json": piece}}))
            else:
                events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                       "content_block": {"type": "text", "text": ""}}))
                if index == 0:
                    events.append(("ping", {"type": "ping"}))
                words = block["text"].split(" ")
                for k, word in enumerate(words):
                    events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                           "delta": {"type": "text_delta",
                                                                     "text": word if k == 0 else " " + word}}))
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"input_tokens": usage["input_tokens"], "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": usage["output_tokens"]},
        }))
        events.append(("message_stop", {"type": "message_stop"}))

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("request-id", f"req_{len(self.server.requests)}")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        for event, data in events:
            self.wfile.write(f"event: {event}\n".encode() + b"data: " + json.dumps(data).encode("utf-8")
                             + b"\n\n")
            self.wfile.flush()


def start_server(script: dict | list[dict], host: str = "127.0.0.1", port: int = 0) -> tuple[ScriptedModelServer, str]:
    """Start a server for one scenario (a dict) or several (a list) on a background thread.

    Returns ``(server, base_url)``; call ``server.stop()`` when done.
    """
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("the scripted server binds to loopback only")
    scenarios = [script] if isinstance(script, dict) else list(script)
    server = ScriptedModelServer(scenarios, host=host, port=port).start()
    return server, server.base_url


def main(argv: list[str]) -> int:
    if argv:
        with open(argv[0], encoding="utf-8") as fh:
            script = json.load(fh)
    else:
        script = DEMO_SCENARIO
    server, base_url = start_server(script)
    print(base_url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
