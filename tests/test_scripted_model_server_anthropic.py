"""The scripted model server's Anthropic Messages endpoint (``POST /v1/messages``), stdlib only."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from otel_toolscore.demo_agent.scripted_model_server import ANTHROPIC_RESPONSE_MODEL, start_server

SCENARIO = {
    "name": "chain",
    "user_question": "Log in, then fetch the weather in Paris and Tokyo.",
    "turns": [
        {"tool_calls": [{"name": "auth", "arguments": {"token": "tok-1"}}]},
        {"tool_calls": [
            {"name": "get_weather", "arguments": {"location": "Paris"}},
            {"name": "get_weather", "arguments": {"location": "Tokyo"}},
        ]},
        {"text": "Paris is 61°F, Tokyo is 75°F."},
    ],
}
SYSTEM = "You are a helpful assistant."
TOOLS = [{"name": n, "description": n, "input_schema": {"type": "object", "properties": {}}}
         for n in ("auth", "get_weather")]


@pytest.fixture()
def server():
    srv, base_url = start_server(SCENARIO)
    yield srv, base_url
    srv.stop()


def _post(base_url: str, body: dict) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(
        base_url + "/messages", data=json.dumps(body).encode("utf-8"), method="POST",
        headers={"Content-Type": "application/json", "x-api-key": "k", "anthropic-version": "2023-06-01"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _body(messages: list, stream: bool = False) -> dict:
    body = {"model": "claude-haiku-4-5", "max_tokens": 1024, "system": SYSTEM, "tools": TOOLS, "messages": messages}
    if stream:
        body["stream"] = True
    return body


def _tool_results(blocks: list) -> dict:
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": b["id"], "content": json.dumps({"ok": b["name"]})} for b in blocks
    ]}


def _sse(raw: bytes) -> list[tuple[str, dict]]:
    events = []
    for chunk in raw.decode("utf-8").split("\n\n"):
        if not chunk.strip():
            continue
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        events.append((lines["event"], data))
    return events


def _assemble(events: list[tuple[str, dict]]) -> dict:
    """Put a streamed message back together, as the SDK's stream accumulator does."""
    assert events[0][0] == "message_start" and events[-1][0] == "message_stop"
    message = dict(events[0][1]["message"])
    blocks: dict[int, dict] = {}
    partial: dict[int, str] = {}
    for kind, data in events[1:-1]:
        if kind == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
        elif kind == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                blocks[data["index"]]["text"] += delta["text"]
            else:
                assert delta["type"] == "input_json_delta"
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif kind == "content_block_stop":
            if data["index"] in partial:
                blocks[data["index"]]["input"] = json.loads(partial.pop(data["index"]))
        elif kind == "message_delta":
            message.update(data["delta"])
            message["usage"] = dict(message["usage"], **data["usage"])
        else:
            assert kind == "ping"
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def _run_conversation(base_url: str, stream: bool) -> list[dict]:
    messages: list = [{"role": "user", "content": SCENARIO["user_question"]}]
    replies = []
    for _ in range(5):
        status, headers, raw = _post(base_url, _body(messages, stream))
        assert status == 200, raw
        if stream:
            assert headers["Content-Type"].startswith("text/event-stream")
            reply = _assemble(_sse(raw))
        else:
            assert headers["Content-Type"] == "application/json"
            reply = json.loads(raw)
        assert headers.get("request-id", "").startswith("req_")
        replies.append(reply)
        if reply["stop_reason"] != "tool_use":
            return replies
        messages.append({"role": "assistant", "content": reply["content"]})
        messages.append(_tool_results([b for b in reply["content"] if b["type"] == "tool_use"]))
    raise AssertionError("no final answer")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_messages_plays_the_script(server, stream: bool) -> None:
    srv, base_url = server
    replies = _run_conversation(base_url, stream)
    assert [r["stop_reason"] for r in replies] == ["tool_use", "tool_use", "end_turn"]
    assert [r["id"] for r in replies] == ["msg_chain_1", "msg_chain_2", "msg_chain_3"]
    for r in replies:
        assert r["type"] == "message" and r["role"] == "assistant"
        assert r["model"] == ANTHROPIC_RESPONSE_MODEL
        assert r["stop_sequence"] is None
        assert r["usage"]["input_tokens"] > 0 and r["usage"]["output_tokens"] > 0
    assert replies[0]["content"] == [
        {"type": "tool_use", "id": "toolu_chain_1", "name": "auth", "input": {"token": "tok-1"}}]
    assert replies[1]["content"] == [
        {"type": "tool_use", "id": "toolu_chain_2", "name": "get_weather", "input": {"location": "Paris"}},
        {"type": "tool_use", "id": "toolu_chain_3", "name": "get_weather", "input": {"location": "Tokyo"}},
    ]
    assert replies[2]["content"] == [{"type": "text", "text": "Paris is 61°F, Tokyo is 75°F."}]
    # later requests carry more input
    assert replies[0]["usage"]["input_tokens"] < replies[1]["usage"]["input_tokens"] < replies[2]["usage"]["input_tokens"]
    assert srv.problems == []
    posts = [r for r in srv.requests if r["method"] == "POST"]
    assert [(r["path"], r["scenario"], r["turn"]) for r in posts] == [("/v1/messages", "chain", t) for t in range(3)]
    assert [r["last_role"] for r in posts] == ["user", "tool_result", "tool_result"]


def test_messages_counts_tool_result_blocks_only(server) -> None:
    srv, base_url = server
    # a retried request gets the same reply; text blocks in a user turn are not tool results
    question = {"role": "user", "content": [{"type": "text", "text": SCENARIO["user_question"]}]}
    first = json.loads(_post(base_url, _body([question]))[2])
    again = json.loads(_post(base_url, _body([question, {"role": "assistant", "content": "thinking"},
                                              {"role": "user", "content": "go on"}]))[2])
    assert first["content"] == again["content"]
    assert first["content"][0]["id"] == "toolu_chain_1"
    # a tool result with content-block list content counts too
    messages = [question, {"role": "assistant", "content": first["content"]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_chain_1",
                                              "content": [{"type": "text", "text": "{}"}]},
                                             {"type": "text", "text": "here you go"}]}]
    second = json.loads(_post(base_url, _body(messages))[2])
    assert [b["id"] for b in second["content"]] == ["toolu_chain_2", "toolu_chain_3"]
    assert srv.problems == []


def test_messages_errors_in_anthropic_shape(server) -> None:
    srv, base_url = server
    question = {"role": "user", "content": SCENARIO["user_question"]}
    # two tool results do not end a turn of this script (turn 1 has one call, turn 2 two)
    blocks = [{"type": "tool_use", "id": f"toolu_x_{i}", "name": "auth"} for i in range(2)]
    status, _, raw = _post(base_url, _body([question, {"role": "assistant", "content": blocks}, _tool_results(blocks)]))
    assert status == 400
    err = json.loads(raw)
    assert err["type"] == "error"
    assert err["error"]["type"] == "invalid_request_error"
    assert "do not end a turn" in err["error"]["message"]
    assert len(srv.problems) == 1


def test_openai_endpoint_unchanged(server) -> None:
    """Chat Completions still answers with its own ids and error shape beside /v1/messages."""
    srv, base_url = server
    req = urllib.request.Request(
        base_url + "/chat/completions", method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": SCENARIO["user_question"]}]}).encode(),
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        reply = json.loads(resp.read())
        assert "request-id" not in resp.headers
    assert reply["choices"][0]["message"]["tool_calls"][0]["id"] == "call_chain_1"
    assert reply["id"] == "chatcmpl-chain-1"


def test_messages_threads_hold_the_history(server) -> None:
    """The message-threads beta: a continuing request sends only its new messages, no system or tools."""
    srv, base_url = server
    question = {"role": "user", "content": SCENARIO["user_question"]}
    first = json.loads(_post(base_url, dict(_body([question]), thread={"type": "create"}))[2])
    assert [b["id"] for b in first["content"]] == ["toolu_chain_1"]
    body = {"model": "claude-haiku-4-5", "max_tokens": 1024, "messages": [_tool_results(first["content"])],
            "thread": {"type": "continue", "previous_message_id": first["id"]}}
    second = json.loads(_post(base_url, body)[2])
    assert [b["id"] for b in second["content"]] == ["toolu_chain_2", "toolu_chain_3"]
    # the held system prompt and tools count toward the input, as if sent again
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"]
    body = dict(body, messages=[_tool_results(second["content"])],
                thread={"type": "continue", "previous_message_id": second["id"]})
    status, _, raw = _post(base_url, dict(body, stream=True))
    third = _assemble(_sse(raw))
    assert third["stop_reason"] == "end_turn" and third["content"][0]["text"] == SCENARIO["turns"][-1]["text"]
    assert srv.problems == []
    assert [r["turn"] for r in srv.requests] == [0, 1, 2]
    assert srv.requests[1]["thread"] == {"type": "continue", "previous_message_id": "msg_chain_1"}
    # an unknown thread is the error the SDK replays the full history on
    status, _, raw = _post(base_url, dict(body, thread={"type": "continue", "previous_message_id": "msg_nope"}))
    assert status == 404
    assert json.loads(raw)["error"]["details"] == {"error_code": "thread_not_found"}
