"""A streamed response recorded chunk by chunk is read as one response (issue 30).

Google ADK in SSE mode writes one assistant message per streamed chunk into
``gen_ai.output.messages`` (``finish_reason: ""``, the call with ``arguments: null``, or a text
delta), then the whole response. The captures ``adk_native_sse`` were made by ADK itself
(``tests/conformance/generator.py``); the other shapes (text deltas, the text so far, argument
deltas, chunks of an emitter that states no finish reason, a cut stream) are emitted through a
real SDK tracer. What must not merge: finished messages (``n`` choices), and two calls of one
finished message that share an id.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_toolscore import build_trajectories, read_otlp_json
from otel_toolscore.conventions._chunks import merged_chunks
from otel_toolscore.scorers.tool_call_accuracy import ToolCallAccuracy
from otel_toolscore.trajectory import Message, ToolCallRequest, Trajectory
from tests.support.paths import CAPTURES

_LABELS = json.loads((CAPTURES / "labels.json").read_text())["scenarios"] if (CAPTURES / "labels.json").is_file() else {}
_SSE = sorted((CAPTURES / "adk_native_sse").glob("*.json"))


def _top(path: Path) -> Trajectory:
    runs = [t for t in build_trajectories(read_otlp_json(path)) if not t.nested]
    assert len(runs) == 1
    return runs[0]


def _raw_output_lists(path: Path) -> list[list[dict[str, Any]]]:
    doc = json.loads(path.read_text())
    out = []
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for a in span.get("attributes", []):
                    if a["key"] == "gen_ai.output.messages":
                        out.append(json.loads(a["value"]["stringValue"]))
    return out


def test_the_adk_sse_captures_are_chunked() -> None:
    """The captures hold what the issue saw: partial messages before the whole one."""
    assert len(_SSE) == 6
    chunked = [msgs for p in _SSE for msgs in _raw_output_lists(p) if len(msgs) > 1]
    assert chunked and all(m["finish_reason"] == "" for msgs in chunked for m in msgs[:-1])
    assert any(part.get("arguments") is None for msgs in chunked for m in msgs[:-1] for part in m["parts"]
               if part["type"] == "tool_call")


@pytest.mark.parametrize("path", _SSE, ids=lambda p: p.stem)
def test_adk_sse_runs_read_exactly(path: Path) -> None:
    label = _LABELS[path.stem]
    traj = _top(path)
    # each call once, with its arguments and result
    assert [c.name for c in traj.tool_calls] == label["actual_tool_sequence"]
    assert len({c.id for c in traj.tool_calls}) == len(traj.tool_calls)
    assert [c.arguments for c in traj.tool_calls] == [c["arguments"] for t in label["actual_tool_calls_by_turn"]
                                                      for c in t]
    # the answer is the final text, not the chunks and the final text joined
    assert traj.output == label["final_answer"]
    # every model call answered with one message
    assert all(len(llm.output_messages) == 1 for llm in traj.llm_calls)
    if label["actual_tool_sequence"]:
        strict = ToolCallAccuracy(expected_tool_order=label["actual_tool_sequence"], strict=True).score(traj)
        assert strict.value == 1.0, strict.explanation


# --- other streamed shapes, through a real SDK tracer ---------------------------------------------


def _spans_of(outputs: list[list[dict[str, Any]]], tools: list[tuple[str, str, dict[str, Any]]]) -> list[ReadableSpan]:
    """An agent run: one chat span per output list (in order), the tool spans after the first."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("streamed")
    user = [{"role": "user", "parts": [{"type": "text", "content": "Weather in Oslo?"}]}]
    with tracer.start_as_current_span("invoke_agent streamer",
                                      attributes={"gen_ai.operation.name": "invoke_agent",
                                                  "gen_ai.agent.name": "streamer"}):
        for i, output in enumerate(outputs):
            with tracer.start_as_current_span("chat m", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                    "gen_ai.input.messages": json.dumps(user), "gen_ai.output.messages": json.dumps(output)}):
                pass
            if i == 0:
                for call_id, name, args in tools:
                    with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                            "gen_ai.tool.call.id": call_id, "gen_ai.tool.call.arguments": json.dumps(args),
                            "gen_ai.tool.call.result": json.dumps({"temp_c": 4})}):
                        pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def _run(outputs: list[list[dict[str, Any]]], tools: Sequence[tuple[str, str, dict[str, Any]]] = ()) -> Trajectory:
    runs = build_trajectories(_spans_of(outputs, list(tools)))
    assert len(runs) == 1
    return runs[0]


def _msg(*parts: dict[str, Any], finish: str | None = "") -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "parts": list(parts)}
    if finish is not None:
        out["finish_reason"] = finish
    return out


def _text(t: str) -> dict[str, Any]:
    return {"type": "text", "content": t}


def _call(call_id: str, args: Any, name: str = "get_weather") -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": args}


_OSLO = ("c1", "get_weather", {"city": "Oslo"})


def test_text_deltas_with_a_final_delta_are_joined() -> None:
    """OpenAI-style deltas: each chunk holds only its new text, the last one too."""
    traj = _run([[_msg(_text("It is")), _msg(_text(" 4 °C")), _msg(_text(" in Oslo."), finish="stop")]])
    assert traj.output == "It is 4 °C in Oslo."
    assert len(traj.llm_calls[0].output_messages) == 1


def test_the_text_so_far_in_each_chunk_is_not_repeated() -> None:
    traj = _run([[_msg(_text("It is")), _msg(_text("It is 4 °C")), _msg(_text("It is 4 °C in Oslo."), finish="stop")]])
    assert traj.output == "It is 4 °C in Oslo."


def test_argument_deltas_make_one_call() -> None:
    """A call streamed as argument fragments, never repeated whole: the fragments joined."""
    first = [_msg(_call("c1", None)), _msg(_call("c1", '{"city":')), _msg(_call("c1", ' "Oslo"}')),
             _msg(finish="tool_calls")]
    traj = _run([first, [_msg(_text("4 °C in Oslo."), finish="stop")]], [_OSLO])
    assert [(c.id, c.name, c.arguments) for c in traj.tool_calls] == [("c1", "get_weather", {"city": "Oslo"})]
    assert traj.tool_calls[0].result == {"temp_c": 4}
    assert traj.output == "4 °C in Oslo."


def test_chunks_of_an_emitter_that_states_no_finish_reason() -> None:
    """No finish reason anywhere: a call written again later with its arguments supersedes the chunk."""
    first = [_msg(_call("c1", None), finish=None), _msg(_call("c1", {"city": "Oslo"}), finish=None)]
    traj = _run([first, [_msg(_text("4 °C."), finish=None)]], [_OSLO])
    assert [(c.id, c.arguments) for c in traj.tool_calls] == [("c1", {"city": "Oslo"})]
    strict = ToolCallAccuracy(expected_tool_order=["get_weather"], strict=True).score(traj)
    assert strict.value == 1.0


def test_parallel_calls_streamed_keep_their_order() -> None:
    chunks = [_msg(_call("a", None)), _msg(_call("a", None), _call("b", None, "get_time")),
              _msg(_call("a", {"city": "Oslo"}), _call("b", {"tz": "CET"}, "get_time"), finish="stop")]
    traj = _run([chunks, [_msg(_text("done"), finish="stop")]],
                [("a", "get_weather", {"city": "Oslo"}), ("b", "get_time", {"tz": "CET"})])
    assert [(c.id, c.name, c.arguments) for c in traj.tool_calls] == [
        ("a", "get_weather", {"city": "Oslo"}), ("b", "get_time", {"tz": "CET"})]


def test_a_stream_cut_before_its_end_is_what_had_arrived() -> None:
    traj = _run([[_msg(_text("It is")), _msg(_text(" 4"))]])
    assert traj.output == "It is 4"
    assert traj.llm_calls[0].output_messages[0].finish_reason is None


def test_finished_messages_stay_apart() -> None:
    """Two choices (``n=2``), each finished: two messages, nothing merged."""
    traj = _run([[_msg(_text("4 °C."), finish="stop"), _msg(_text("Cold."), finish="stop")]])
    assert [m.content for m in traj.llm_calls[0].output_messages] == ["4 °C.", "Cold."]


def test_a_finished_message_that_reuses_an_id_is_left_as_written() -> None:
    """A model that sent two different calls under one id: both stay (assemble pairs them)."""
    one = Message(role="assistant", finish_reason="tool_calls", tool_calls=[
        ToolCallRequest(id="x", name="get_weather", arguments={"city": "Oslo"}),
        ToolCallRequest(id="x", name="get_weather", arguments={"city": "Rome"})])
    two = Message(role="assistant", finish_reason="stop", content="ok")
    messages = [one, two]
    assert merged_chunks(messages) is messages


def test_tool_messages_break_a_response() -> None:
    """Partials end at a message of another role: what came before it is one message."""
    messages = [Message(role="assistant", content="a", finish_reason=""),
                Message(role="tool", content="r"),
                Message(role="assistant", content="b", finish_reason="stop")]
    merged = merged_chunks(messages)
    assert [(m.role, m.content) for m in merged] == [("assistant", "a"), ("tool", "r"), ("assistant", "b")]


@pytest.mark.parametrize("path", [p for p in _SSE if p.stem in ("sequential_chain", "three_parallel")],
                         ids=lambda p: p.stem)
def test_adk_sse_runs_score_in_an_app_with_strict_order_1(path: Path) -> None:
    """The processor in an app (the capture's spans replayed through a real SDK pipeline) scores
    the run on each call once: strict order accuracy 1, not 0 as with every chunk's call."""
    from otel_toolscore import semconv as sc
    from otel_toolscore.runtime.replay import replay
    from tests.support.pipeline import Pipeline

    sequence = _LABELS[path.stem]["actual_tool_sequence"]
    pipeline = Pipeline(["tool_call_accuracy"], scorer_options={
        "tool_call_accuracy": {"expected_tool_order": sequence, "strict": True}})
    replay(read_otlp_json(path), pipeline.processor)
    assert pipeline.processor.force_flush(30_000)
    pipeline.processor.shutdown()
    value = sc.toolscore_attr("tool_call_accuracy", sc.TOOLSCORE_FIELD_SCORE)
    scored = [s.attributes[value] for s in pipeline.exported() if s.attributes and value in s.attributes]
    assert scored == [1.0]
