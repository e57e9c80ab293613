"""Run one stack x scenario inside that stack's venv and write one OTLP/JSON capture.

Started by generator.py as
``<venv>/bin/python runner.py --stack S --scenario N --base-url URL --out FILE --result FILE``.
It runs a small real agent loop with the real ``openai`` client pointed at the scripted
model server, instrumented by the stack's real library; spans go to an SDK
``TracerProvider`` with ``SimpleSpanProcessor(InMemorySpanExporter())`` and are written
as an ``ExportTraceServiceRequest`` in OTLP/JSON.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import json
import os
import socket
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import scenarios as S

# ---------------------------------------------------------------------------------------
# Loopback-only guard: nothing in this process may reach beyond 127.0.0.0/8 / ::1.
# ---------------------------------------------------------------------------------------
BLOCKED: list[str] = []
_orig_connect = socket.socket.connect
_orig_connect_ex = socket.socket.connect_ex
_orig_getaddrinfo = socket.getaddrinfo
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _check(sock: socket.socket, address) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
        if not _is_loopback(str(address[0])):
            BLOCKED.append(f"connect {address[0]}:{address[1]}")
            raise ConnectionRefusedError(f"conformance runner: non-loopback connection blocked: {address!r}")


def _connect(self, address):
    _check(self, address)
    return _orig_connect(self, address)


def _connect_ex(self, address):
    _check(self, address)
    return _orig_connect_ex(self, address)


def _getaddrinfo(host, *args, **kwargs):
    if host is not None and not _is_loopback(host.decode() if isinstance(host, bytes) else str(host)):
        BLOCKED.append(f"getaddrinfo {host}")
        raise socket.gaierror(socket.EAI_NONAME, f"conformance runner: name lookup blocked: {host}")
    return _orig_getaddrinfo(host, *args, **kwargs)


socket.socket.connect = _connect
socket.socket.connect_ex = _connect_ex
socket.getaddrinfo = _getaddrinfo


# ---------------------------------------------------------------------------------------
# Tracing set-up and OTLP/JSON encoding
# ---------------------------------------------------------------------------------------
def make_provider(stack: str):
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    resource = Resource.create({
        "service.name": f"conformance-{stack}",
        "service.version": "1.0.0",
        "deployment.environment.name": "conformance-captures",
    })
    provider = TracerProvider(resource=resource)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider, exporter


def _b64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _fix_ids(obj) -> None:
    for rs in obj.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = _b64_to_hex(span[key])
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if link.get(key):
                            link[key] = _b64_to_hex(link[key])


def encode(spans) -> dict:
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    # proto3 JSON: lowerCamelCase names, int64 as strings, enums as integers (as the
    # OTLP/JSON spec requires); only the ids need fixing (proto3 JSON writes bytes as base64,
    # OTLP/JSON wants lowercase hex).
    doc = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    _fix_ids(doc)
    return doc


def one_trace(spans) -> tuple[list, list]:
    """Keep the spans of the trace that holds the (first) root; return (kept, dropped)."""
    roots = [s for s in spans if s.parent is None]
    if not roots:
        return list(spans), []
    trace_id = sorted(roots, key=lambda s: s.start_time)[0].context.trace_id
    kept = [s for s in spans if s.context.trace_id == trace_id]
    dropped = [s for s in spans if s.context.trace_id != trace_id]
    return kept, dropped


# ---------------------------------------------------------------------------------------
# Agent loops
# ---------------------------------------------------------------------------------------
def app_root_span(provider, stack: str):
    tracer = provider.get_tracer("conformance.app")
    if stack.startswith("openinference"):
        attrs = {"openinference.span.kind": "AGENT", "agent.name": S.AGENT_NAME}
    else:
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": S.AGENT_NAME}
    return tracer.start_as_current_span(f"invoke_agent {S.AGENT_NAME}", attributes=attrs)


def chat_loop(base_url: str, question: str, stream: bool) -> tuple[str, list]:
    """A hand-written tool loop over Chat Completions with the real openai client."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key="sk-conformance", max_retries=0)
    messages: list[dict] = [
        {"role": "system", "content": S.SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    executed = []
    for _ in range(8):
        kwargs = dict(model=S.REQUEST_MODEL, messages=messages, tools=S.openai_tools())
        if stream:
            content, calls = _consume_stream(
                client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)
            )
        else:
            msg = client.chat.completions.create(**kwargs).choices[0].message
            content = msg.content
            calls = [(tc.id, tc.function.name, tc.function.arguments) for tc in (msg.tool_calls or [])]
        if not calls:
            return content or "", executed
        messages.append({
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in calls
            ],
        })
        for cid, name, args in calls:
            try:
                arguments = json.loads(args)
                result = S.run_tool(name, arguments)
            except ValueError as exc:
                arguments, result = args, {"error": f"invalid JSON arguments: {exc}"}
            executed.append({"id": cid, "name": name, "arguments": arguments, "result": result})
            messages.append({"role": "tool", "tool_call_id": cid, "content": json.dumps(result)})
    raise RuntimeError("no final answer after 8 model calls")


def _consume_stream(stream) -> tuple[str, list]:
    text: list[str] = []
    calls: dict[int, list] = {}
    for chunk in stream:
        for choice in chunk.choices or []:
            delta = choice.delta
            if delta.content:
                text.append(delta.content)
            for tc in delta.tool_calls or []:
                slot = calls.setdefault(tc.index, [None, "", ""])
                if tc.id:
                    slot[0] = tc.id
                if tc.function and tc.function.name:
                    slot[1] += tc.function.name
                if tc.function and tc.function.arguments:
                    slot[2] += tc.function.arguments
    return "".join(text) or None, [tuple(calls[i]) for i in sorted(calls)]


def run_hand_loop(stack: str, provider, base_url: str, question: str, stream: bool) -> tuple[str, list]:
    with app_root_span(provider, stack):
        return chat_loop(base_url, question, stream)


def instrument(stack: str, provider) -> None:
    if stack.startswith("openinference_openai"):
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif stack.startswith("otel_genai_openai_v2"):
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif stack.startswith("openllmetry_openai"):
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif stack.startswith("pydantic_ai"):
        from pydantic_ai import Agent

        Agent.instrument_all()  # uses the global tracer provider set in make_provider()
    elif stack.startswith("openai_agents_"):
        import agents

        # Drop the SDK's default processor, which would upload traces to OpenAI's backend.
        agents.set_trace_processors([])
        if stack == "openai_agents_openinference":
            from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

            OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
        elif stack == "openai_agents_openllmetry":
            from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

            OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
        else:
            raise SystemExit(f"unknown stack {stack}")
    elif stack.startswith("anthropic_"):
        from frameworks import anthropic_sdk

        anthropic_sdk.instrument(stack, provider)
    else:
        raise SystemExit(f"unknown stack {stack}")


def run_pydantic_ai(base_url: str, question: str) -> tuple[str, list]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel(S.REQUEST_MODEL, provider=OpenAIProvider(base_url=base_url, api_key="sk-conformance"))
    agent = Agent(model, name=S.AGENT_NAME, system_prompt=S.SYSTEM_PROMPT, tools=list(S.TOOLS.values()))
    result = agent.run_sync(question)
    calls, executed = {}, []
    for message in result.all_messages():
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                calls[part.tool_call_id] = part
            elif isinstance(part, ToolReturnPart):
                call = calls.get(part.tool_call_id)
                executed.append({
                    "id": part.tool_call_id,
                    "name": part.tool_name,
                    "arguments": call.args_as_dict() if call else None,
                    "result": part.content,
                })
    return str(result.output), executed


def run_openai_agents(base_url: str, question: str) -> tuple[str, list]:
    """OpenAI Agents SDK: Agent + function tools, Responses API against the scripted server."""
    import agents
    from agents import Agent, Runner, function_tool
    from agents.items import ToolCallItem, ToolCallOutputItem
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="sk-conformance", max_retries=0)
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_default_openai_api("responses")
    agent = Agent(
        name=S.AGENT_NAME,
        instructions=S.SYSTEM_PROMPT,
        model=S.REQUEST_MODEL,
        tools=[function_tool(fn) for fn in S.TOOLS.values()],
    )
    result = Runner.run_sync(agent, question)
    calls, executed = {}, []
    for item in result.new_items:
        if isinstance(item, ToolCallItem):
            raw = item.raw_item
            calls[raw.call_id] = raw
        elif isinstance(item, ToolCallOutputItem):
            call_id = item.raw_item["call_id"] if isinstance(item.raw_item, dict) else item.raw_item.call_id
            raw = calls.get(call_id)
            executed.append({
                "id": call_id,
                "name": raw.name if raw else None,
                "arguments": json.loads(raw.arguments) if raw else None,
                "result": item.output,
            })
    return str(result.final_output), executed


# Frameworks whose agent run lives in frameworks/<module>.py: stack-name prefix -> module.
FRAMEWORKS = {
    "llamaindex_": "llamaindex",
    "smolagents_": "smolagents",
    "crewai_": "crewai",
    "agno_": "agno",
    "adk_": "adk",
    "strands_": "strands",
    "agent_framework_": "agent_framework",
}


def framework_of(stack: str):
    import importlib

    for prefix, module in FRAMEWORKS.items():
        if stack.startswith(prefix):
            return importlib.import_module(f"frameworks.{module}")
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stack", required=True)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--result", required=True)
    ap.add_argument("--stream", action="store_true", help="use streaming Chat Completions (hand-written loops)")
    args = ap.parse_args()

    summary: dict = {"stack": args.stack, "scenario": args.scenario, "ok": False}
    try:
        provider, exporter = make_provider(args.stack)
        framework = framework_of(args.stack)
        if framework is not None:
            framework.instrument(args.stack, provider)
        else:
            instrument(args.stack, provider)
        question = S.SCENARIOS[args.scenario]["user_question"]
        if framework is not None:
            final, executed = framework.run(args.stack, args.base_url, question, provider)
        elif args.stack.startswith("pydantic_ai"):
            final, executed = run_pydantic_ai(args.base_url, question)
        elif args.stack.startswith("openai_agents_"):
            final, executed = run_openai_agents(args.base_url, question)
        elif args.stack.startswith("anthropic_"):
            from frameworks import anthropic_sdk

            final, executed = anthropic_sdk.run(args.stack, provider, args.base_url, question, args.stream)
        else:
            final, executed = run_hand_loop(args.stack, provider, args.base_url, question, args.stream)
        provider.force_flush()
        spans, dropped = one_trace(exporter.get_finished_spans())
        doc = encode(spans)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, ensure_ascii=False)
            fh.write("\n")
        summary.update(
            ok=True,
            final_answer=final,
            executed=executed,
            span_count=len(spans),
            dropped_spans=[f"{s.name} (trace {s.context.trace_id:032x})" for s in dropped],
        )
    except Exception as exc:  # noqa: BLE001 - reported to the generator
        summary.update(error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    summary["blocked_network"] = BLOCKED
    with open(args.result, "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=1, ensure_ascii=False, default=repr)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
