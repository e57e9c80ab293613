"""Workloads for the benchmarks: synthetic GenAI agent runs and the recorded fixture traces.

Synthetic runs follow the shapes the official OpenAI v2 instrumentation writes with the latest
GenAI conventions (``paths.FIXTURES / "B_otel_genai_openai_v2"``): an
``invoke_agent`` span over ``chat`` spans carrying ``gen_ai.input.messages`` (the whole history
so far, as JSON) / ``gen_ai.output.messages`` / ``gen_ai.tool.definitions``, and
``execute_tool`` spans with arguments and results. A run of ``n`` spans is the agent span, then
steps of one chat span followed by up to two tool spans, then a final chat span with the answer.

A run is a list of ``SpanSpec``: replayed through a real SDK tracer (``emit_run``) for the
in-process benchmarks, or turned into ended ``ReadableSpan``s (``readable_run``) for the
scoring-throughput benchmark.
"""

from __future__ import annotations

import glob
import json
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

from tests.support.paths import CAPTURES, FIXTURES

FIXTURE_DIRS = (Path(os.environ.get("TOOLSCORE_FIXTURES", FIXTURES)), CAPTURES)

SYSTEM = "You are a helpful travel assistant. Use the available tools when they help answer the user's request."
CITIES = ("London", "Berlin", "Paris", "Madrid", "Rome", "Vienna", "Prague", "Lisbon", "Oslo", "Dublin")
CONDITIONS = ("sunny", "overcast", "light rain", "partly cloudy", "windy")

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "get_flights",
        "description": "Flights between two cities on a date.",
        "parameters": {
            "type": "object",
            "properties": {
                "origin": {"type": "string"},
                "destination": {"type": "string"},
                "date": {"type": "string", "format": "date"},
                "max_stops": {"type": "integer", "minimum": 0},
            },
            "required": ["origin", "destination", "date"],
        },
    },
]
TOOL_DEFINITIONS = json.dumps(TOOLS, separators=(",", ":"))


@dataclass
class SpanSpec:
    """One span of a run: its parent is an index into the run (None: the root)."""

    name: str
    kind: SpanKind
    attributes: dict[str, Any]
    parent: int | None
    children: list[int] = field(default_factory=list)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _tool_call(rng: random.Random, step: int, i: int) -> tuple[str, dict[str, Any], str]:
    """(tool name, arguments, result JSON) of one call."""
    city = CITIES[(step * 2 + i) % len(CITIES)]
    if (step + i) % 2 == 0:
        temp = rng.randint(40, 90)
        return "get_weather", {"location": city}, _dumps(
            {"temperature": f"{temp}°F", "condition": rng.choice(CONDITIONS), "humidity": rng.randint(20, 95)}
        )
    dest = CITIES[(step * 2 + i + 3) % len(CITIES)]
    price = rng.randint(49, 420)
    flight = f"{city[:2].upper()}{rng.randint(100, 999)}"
    return "get_flights", {"origin": city, "destination": dest, "date": "2025-06-14"}, _dumps(
        {"flights": [{"flight": flight, "departs": f"{rng.randint(6, 21):02d}:{rng.choice((0, 15, 30, 45)):02d}",
                      "price_usd": price, "stops": 0}]}
    )


def genai_run(n_spans: int = 10, seed: int = 0, agent_name: str = "travel-assistant") -> list[SpanSpec]:
    """A synthetic agent run of exactly ``n_spans`` spans (n ≥ 3), GenAI conventions."""
    if n_spans < 3:
        raise ValueError("a run needs at least 3 spans (agent, chat, final chat)")
    rng = random.Random(seed)
    question = "Plan my trip: weather and flights for " + ", ".join(CITIES[:3]) + " next weekend."
    history: list[dict[str, Any]] = [_text("system", SYSTEM), _text("user", question)]
    specs = [SpanSpec(f"invoke_agent {agent_name}", SpanKind.INTERNAL,
                      {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent_name,
                       "gen_ai.provider.name": "openai",
                       # the expectation a test or the app sets, so tool_call_accuracy scores too
                       "toolscore.expected_tool": "get_weather"}, None)]
    facts: list[str] = []
    budget = n_spans - 2  # spans left for tool steps: everything but the agent and the final chat
    step = 0
    while budget > 0:
        # a chat span, then one or two tool spans (never more than the budget allows)
        calls = min(2, budget - 1) if budget > 1 else 0
        if calls == 0:
            # one span left: a tool-free chat step (the model thinking aloud)
            specs.append(_chat(rng, history, [_text("assistant", "Let me check the details.")], "stop"))
            history.append(_text("assistant", "Let me check the details."))
            budget -= 1
            break
        made = [_tool_call(rng, step, i) for i in range(calls)]
        ids = [f"call_{rng.getrandbits(96):024x}" for _ in made]
        parts = [{"type": "tool_call", "id": cid, "name": name, "arguments": args}
                 for cid, (name, args, _) in zip(ids, made)]
        out = [{"role": "assistant", "parts": parts, "finish_reason": "tool_calls"}]
        specs.append(_chat(rng, history, out, "tool_calls"))
        history.append({"role": "assistant", "parts": parts})
        results = []
        for cid, (name, args, result) in zip(ids, made):
            specs.append(SpanSpec(f"execute_tool {name}", SpanKind.INTERNAL, {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.type": "function",
                "gen_ai.tool.call.id": cid, "gen_ai.tool.call.arguments": _dumps(args),
                "gen_ai.tool.call.result": result,
            }, 0))
            results.append({"type": "tool_call_response", "id": cid, "response": result})
            parsed = json.loads(result)
            if name == "get_weather":
                facts.append(f"{args['location']} is {parsed['temperature']} and {parsed['condition']}")
            else:
                f = parsed["flights"][0]
                facts.append(f"flight {f['flight']} from {args['origin']} leaves at {f['departs']} for ${f['price_usd']}")
        history.append({"role": "tool", "parts": results})
        budget -= 1 + calls
        step += 1
    answer = "Here is your plan: " + "; ".join(facts[-6:]) + "."
    specs.append(_chat(rng, history, [{"role": "assistant", "parts": [{"type": "text", "content": answer}],
                                       "finish_reason": "stop"}], "stop"))
    for i, s in enumerate(specs):
        if s.parent is not None:
            specs[s.parent].children.append(i)
    assert len(specs) == n_spans, (len(specs), n_spans)
    return specs


def _chat(rng: random.Random, history: list[dict[str, Any]], output: list[dict[str, Any]], finish: str) -> SpanSpec:
    return SpanSpec("chat gpt-4o-mini", SpanKind.CLIENT, {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.response.id": f"chatcmpl-{rng.getrandbits(64):016x}",
        "gen_ai.response.finish_reasons": (finish,),
        "gen_ai.usage.input_tokens": 40 * len(history),
        "gen_ai.usage.output_tokens": 50,
        "gen_ai.input.messages": _dumps(history),
        "gen_ai.output.messages": _dumps(output),
        "gen_ai.tool.definitions": TOOL_DEFINITIONS,
    }, 0)


# --- the recorded fixtures --------------------------------------------------------------------


def fixture_files() -> list[Path]:
    out: list[Path] = []
    for d in FIXTURE_DIRS:
        out.extend(Path(p) for p in sorted(glob.glob(str(d / "*" / "*.json"))))
    return out


def fixture_runs() -> list[tuple[str, list[ReadableSpan]]]:
    """Every fixture trace as (name, ended spans); files that hold no spans are left out."""
    from otel_toolscore.ingest import read_otlp_json

    runs = []
    for path in fixture_files():
        try:
            spans = read_otlp_json(path)
        except Exception:  # noqa: BLE001 - labels and other non-trace JSON sit beside them
            continue
        if spans:
            runs.append((f"{path.parent.name}/{path.stem}", list(spans)))
    return runs


def specs_from_spans(spans: Sequence[ReadableSpan]) -> list[SpanSpec]:
    """A recorded trace as span specs (tree kept, start order), to emit it through a tracer."""
    ordered = sorted(spans, key=lambda s: (s.start_time or 0))
    index = {s.context.span_id: i for i, s in enumerate(ordered)}
    specs = []
    for s in ordered:
        parent = index.get(s.parent.span_id) if s.parent is not None else None
        specs.append(SpanSpec(s.name, s.kind, dict(s.attributes or {}), parent))
    for i, s in enumerate(specs):
        if s.parent is not None:
            specs[s.parent].children.append(i)
    return specs


# --- emitting ---------------------------------------------------------------------------------


def emit_run(tracer: trace.Tracer, specs: Sequence[SpanSpec]) -> int:
    """Create and end the run's spans through ``tracer`` as an app would (depth first: a span
    ends after its children). Returns the number of spans."""
    return _emit(tracer, specs, 0, None)


def _emit(tracer: trace.Tracer, specs: Sequence[SpanSpec], i: int, parent: Any) -> int:
    spec = specs[i]
    ctx = trace.set_span_in_context(parent) if parent is not None else None
    span = tracer.start_span(spec.name, context=ctx, kind=spec.kind, attributes=spec.attributes)
    n = 1
    for c in spec.children:
        n += _emit(tracer, specs, c, span)
    span.end()
    return n


def emit_run_open_root(tracer: trace.Tracer, specs: Sequence[SpanSpec]) -> int:
    """The run's spans with the root started and never ended (a trace that never completes)."""
    root = tracer.start_span(specs[0].name, kind=specs[0].kind, attributes=specs[0].attributes)
    n = 0
    for c in specs[0].children:
        n += _emit(tracer, specs, c, root)
    return n


_RESOURCE = Resource.create({"service.name": "toolscore-bench"})
_SCOPE = InstrumentationScope("toolscore-bench")


def readable_run(specs: Sequence[SpanSpec], trace_id: int, base_time: int = 1_700_000_000_000_000_000,
                 sdk_attributes: bool = True) -> list[ReadableSpan]:
    """The run as ended spans (end order: children before parents), for scoring directly.

    With ``sdk_attributes`` the attributes are held as the SDK holds them on the spans a
    TracerProvider hands to processors (``BoundedAttributes``), else as plain dicts (as in
    spans decoded from OTLP)."""
    ids = [(trace_id * 7919 + i + 1) & 0xFFFFFFFFFFFFFFFF or 1 for i in range(len(specs))]
    spans: list[ReadableSpan] = []
    clock = [base_time]

    def visit(i: int) -> None:
        spec = specs[i]
        start = clock[0]
        clock[0] += 1_000
        for c in spec.children:
            visit(c)
        clock[0] += 1_000
        parent = None
        if spec.parent is not None:
            parent = SpanContext(trace_id, ids[spec.parent], False, TraceFlags(TraceFlags.SAMPLED))
        spans.append(ReadableSpan(
            name=spec.name,
            context=SpanContext(trace_id, ids[i], False, TraceFlags(TraceFlags.SAMPLED)),
            parent=parent, resource=_RESOURCE, kind=spec.kind,
            attributes=BoundedAttributes(attributes=spec.attributes, immutable=True) if sdk_attributes
            else spec.attributes,
            start_time=start, end_time=clock[0], instrumentation_scope=_SCOPE,
        ))

    visit(0)
    return spans


def cycle(items: Sequence[Any]) -> Iterator[Any]:
    while True:
        yield from items
