"""The ceiling of reading and assembly: ``assemble_trace`` against a minimal hand-written
spans → Trajectory for the two workloads' own shapes, which gives the same trajectories (the
differences are counted) with none of the general code's checks, fallbacks or layers.

* ``ideal``: the shape's fields read by hand (``json.loads`` of what a history adds, the earlier
  span's messages reused), on synthetic 10-span runs and on the shared real conversations (in
  order: a turn's trace extends the history of the turn before);
* ``ideal, today's readers``: the same, but the histories, definitions, arguments and results
  read by the readers ``assemble_trace`` uses (the trace's memo) and every span looked at for
  lone surrogates: what a direct path that keeps those could reach (synthetic runs only).

    .venv/bin/python -m benchmarks.layers_ceiling [--repeats 7]

Figures are per run (per trace), thread CPU time, min and median over the repeats, each repeat
on fresh runs with what earlier traces read forgotten.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from benchmarks.throughput import synthetic
from otel_toolscore.assemble import assemble_trace
from otel_toolscore.conventions import _memo, _texts_may_hold_surrogates
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions.genai import messages_of
from otel_toolscore.trajectory import (
    LLMCall,
    Message,
    ToolCall,
    ToolCallRequest,
    ToolDefinition,
    ToolResultPart,
    Trajectory,
)
from tests.realworld import corpus

_SOURCES = ("llm_output", "history", "tool_span", "result_message")
_DEFINITIONS: dict[str, list[ToolDefinition]] = {}


class _Last:
    """The last chat span's input text and messages, and its output messages (kept across
    traces: a conversation's next turn extends them)."""

    text: str | None = None
    inputs: list[Message] = []
    outputs: list[Message] = []


def _result(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _message(item: dict[str, Any]) -> Message:
    texts, calls, results = [], [], []
    for part in item["parts"]:
        kind = part["type"]
        if kind == "text":
            texts.append(part["content"])
        elif kind == "tool_call":
            args = part["arguments"]
            calls.append(ToolCallRequest(id=part["id"], name=part["name"], arguments=args, arguments_raw=json.dumps(args)))
        else:
            raw = part["response"]
            results.append(ToolResultPart(tool_call_id=part["id"], content=_result(raw), content_raw=raw))
    return Message(role=item["role"], content="\n".join(texts) if texts else None, tool_calls=calls,
                   tool_results=results, finish_reason=item.get("finish_reason"))


def _history(text: str, last: type[_Last]) -> list[Message]:
    """The input: the last input and output (without finish_reason) and what the text adds."""
    if last.text is not None and text.startswith(last.text[:-1]):
        added = json.loads("[" + text[len(last.text):]) if len(text) > len(last.text) else []
        earlier = [Message(role=m.role, content=m.content, tool_calls=list(m.tool_calls),
                           tool_results=list(m.tool_results)) if m.finish_reason else m for m in last.outputs]
        return [*last.inputs, *earlier, *map(_message, added[len(last.outputs):])]
    return [_message(x) for x in json.loads(text)]


def _definitions(text: str) -> list[ToolDefinition]:
    found = _DEFINITIONS.get(text)
    if found is None:
        found = _DEFINITIONS[text] = [ToolDefinition(name=x["name"], description=x.get("description"),
                                                     parameters=x.get("parameters")) for x in json.loads(text)]
    return found


def ideal(trace_id: str, spans: Sequence[ReadableSpan], readers: bool = False) -> list[Trajectory]:
    """The trajectory of a run of the synthetic or the real conversations' shape, by hand."""
    if not readers:
        return _ideal(trace_id, spans, False)
    memo, token = _memo.begin()
    try:
        return _ideal(trace_id, spans, True)
    finally:
        _memo.reset(token)
        memo.keep_for_later_traces()


def _ideal(trace_id: str, spans: Sequence[ReadableSpan], readers: bool) -> list[Trajectory]:
    steps: list[Any] = []
    calls: dict[str, ToolCall] = {}
    first: list[Message] | None = None
    agent: Any = None
    known: list[ToolDefinition] = []
    for span in spans:
        attrs = span._attributes  # type: ignore[attr-defined]
        attrs = attrs if type(attrs) is dict else attrs._dict
        if readers and _texts_may_hold_surrogates(attrs.values()):
            raise ValueError("not this shape")
        op = attrs["gen_ai.operation.name"]
        span_id = f"{span.context.span_id:016x}"  # type: ignore[union-attr]
        if op == "chat":
            text = attrs["gen_ai.input.messages"]
            if readers:
                inputs = messages_of(text, "gen_ai.input.messages") or []
                outputs = messages_of(attrs["gen_ai.output.messages"], "gen_ai.output.messages") or []
            else:
                inputs = _history(text, _Last)
                outputs = [_message(x) for x in json.loads(attrs["gen_ai.output.messages"])]
                _Last.text, _Last.inputs, _Last.outputs = text, inputs, outputs
            value = attrs.get("gen_ai.tool.definitions")
            defs = (p.tool_definitions_from(value) if readers else _definitions(value)) if value else []
            known = known or defs
            first = first or inputs
            own = max((i for i, m in enumerate(inputs) if m.role == "user"), default=0)
            for m in inputs[own:]:
                for r in m.tool_calls:
                    call = calls.get(r.id or "")
                    if call is not None and "history" not in call.sources:
                        call.sources.append("history")
                for part in m.tool_results:
                    call = calls.get(part.tool_call_id or "")
                    if call is not None and "result_message" not in call.sources:
                        call.sources.append("result_message")
                        if not call.has_result:
                            call.result, call.result_raw, call.has_result = part.content, part.content_raw, True
            made = [ToolCall(id=r.id, name=r.name, arguments=r.arguments, arguments_raw=r.arguments_raw,
                             llm_span_id=span_id, offered_tools=[d.name for d in defs] if defs else None,
                             sources=["llm_output"], start_time=span.start_time)
                    for m in outputs for r in m.tool_calls]
            calls.update((c.id or "", c) for c in made)
            steps.append(LLMCall(span_id=span_id, model=attrs["gen_ai.response.model"], input_messages=list(inputs),
                                 output_messages=list(outputs), tool_definitions=list(defs),
                                 tool_call_ids=[c.id or "" for c in made], start_time=span.start_time,
                                 end_time=span.end_time))
            steps.extend(made)
        elif op == "execute_tool":
            call = calls[attrs["gen_ai.tool.call.id"]]
            call.span_id = span_id
            call.sources.append("tool_span")
            if readers:
                p.parse_arguments(attrs["gen_ai.tool.call.arguments"])
                call.result, call.result_raw, _ = p.read_result(attrs["gen_ai.tool.call.result"])
            else:
                call.result_raw = attrs["gen_ai.tool.call.result"]
                call.result = json.loads(call.result_raw)
            call.has_result = True
        else:
            agent = (span, span_id, attrs)
    for call in calls.values():
        call.sources.sort(key=_SOURCES.index)
        if call.error is None and call.has_result:
            call.error = p.result_error(call.result)
    span, span_id, attrs = agent
    answers = [s for s in steps if isinstance(s, LLMCall) and s.output_text
               and not any(m.tool_calls for m in s.output_messages)]
    return [Trajectory(
        trace_id=trace_id, span_id=span_id, agent_name=attrs["gen_ai.agent.name"],
        service_name=span.resource.attributes.get("service.name"),
        input=next((m.content for m in reversed(first or []) if m.role == "user" and m.content), None),
        output=answers[-1].output_text if answers else None,
        system_instructions=next((m.content for m in first or [] if m.role == "system"), None), steps=steps,
        tool_definitions=list(known), conventions=["otel_genai"],
        expectations={k: v for k, v in attrs.items() if k.startswith("toolscore.")}, problems=[],
        start_time=span.start_time, end_time=span.end_time,
    )]


def _forget() -> None:
    p.forget_earlier_traces()
    _Last.text, _Last.inputs, _Last.outputs = None, [], []


def _per_run(build: Callable[[str, Sequence[ReadableSpan]], Any], traces: Sequence[Sequence[ReadableSpan]]) -> float:
    _forget()
    gc.collect()
    t0 = time.thread_time()
    for spans in traces:
        build("0" * 32, spans)
    return (time.thread_time() - t0) / len(traces) * 1e6


def _differences(build: Callable[[str, Sequence[ReadableSpan]], Any], traces: Sequence[Sequence[ReadableSpan]]) -> int:
    _forget()
    today = [assemble_trace("0" * 32, s)[0].model_dump_json() for s in traces]
    _forget()
    return sum(a != build("0" * 32, s)[0].model_dump_json() for a, s in zip(today, traces))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    ways: dict[str, Callable[[str, Sequence[ReadableSpan]], Any]] = {
        "assemble_trace": assemble_trace,
        "ideal": ideal,
        "ideal, today's readers": lambda trace_id, spans: ideal(trace_id, spans, readers=True),
    }
    real = corpus.span_traces() if corpus.available() else []
    check = synthetic(10, 100, seed0=77)
    print("differences from assemble_trace:",
          {name: _differences(build, check) for name, build in ways.items() if name != "assemble_trace"},
          "of", len(check), "synthetic runs;", _differences(ideal, real), "of", len(real), "real traces (ideal)")
    times: dict[str, list[float]] = {}
    for r in range(args.repeats):
        runs = synthetic(10, 200, seed0=(r + 1) * 1_000_000)
        for name, build in ways.items():
            times.setdefault(f"synthetic 10-span runs, {name}", []).append(_per_run(build, runs))
        for name in ("assemble_trace", "ideal") if real else ():
            times.setdefault(f"real conversations ({len(real)} traces), {name}", []).append(_per_run(ways[name], real))
    for metric, values in times.items():
        print(f"{metric}: min {min(values):.0f} µs, median {statistics.median(values):.0f} µs")


if __name__ == "__main__":
    main()
