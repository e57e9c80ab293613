"""Framework emitters whose spans need more than the generic readers: Mastra, Pydantic AI, litellm.

Each runs before the generic readers, so what it decides (a role, a final answer) stands.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions.genai import last_user_text
from otel_toolscore.conventions.base import Attributes, SpanFacts
from otel_toolscore.trajectory import Message

_PLACEHOLDER_PREFIXES = ("[tool: ", "[tool-result: ")


def read_mastra(span: ReadableSpan, attrs: Attributes, facts: SpanFacts) -> None:
    kind = attrs.get(sc.MASTRA_SPAN_TYPE)
    if kind is None:
        return
    facts.note("mastra")
    if kind == "agent_run":
        facts.set_role("agent")
        if facts.run_input is None and sc.MASTRA_AGENT_RUN_INPUT in attrs:
            value = p.loads(attrs[sc.MASTRA_AGENT_RUN_INPUT])
            if isinstance(value, list) and any(isinstance(m, dict) and "role" in m for m in value):
                # the conversation so far: the run's input is its last user message
                facts.run_input = last_user_text(p.messages_from_list(value))
            else:
                facts.run_input = p.text_of(value) if value is not None else p.as_text(attrs[sc.MASTRA_AGENT_RUN_INPUT])
        if facts.run_output is None and sc.MASTRA_AGENT_RUN_OUTPUT in attrs:
            out = p.loads(attrs[sc.MASTRA_AGENT_RUN_OUTPUT])
            facts.run_output = p.text_of(out) if out is not None else p.as_text(attrs[sc.MASTRA_AGENT_RUN_OUTPUT])
    elif kind == "model_step":
        # The step is the model call: it holds the tool calls; its `chat` child holds only text.
        facts.set_role("llm")
        out = p.loads(attrs.get(sc.MASTRA_MODEL_STEP_OUTPUT))
        if isinstance(out, dict) and facts.output_messages is None:
            msg = Message(role="assistant", content=out.get("text") or None)
            for item in out.get("toolCalls") or []:
                if isinstance(item, dict):
                    req = p.tool_call_from(item)
                    if req is not None:
                        msg.tool_calls.append(req)
            facts.output_messages = [msg]
        inputs = p.messages_from_list(p.loads(attrs.get(sc.MASTRA_MODEL_STEP_INPUT)))
        # Earlier tool calls and results are replaced by placeholders in this attribute: drop
        # them, or they would read as empty results.
        facts.input_messages = [
            m for m in inputs
            if not (m.content or "").startswith(_PLACEHOLDER_PREFIXES) and not m.tool_results
        ]
        if facts.system_instructions is None:
            facts.system_instructions = p.system_from_messages(facts.input_messages)
    elif kind == "tool_call":
        facts.set_role("tool")
    else:
        # model_inference duplicates its model_step parent; chunks and generations are detail.
        facts.set_role("other")


def read_pydantic_ai(span: ReadableSpan, attrs: Attributes, facts: SpanFacts) -> None:
    if sc.PYDANTIC_AI_ALL_MESSAGES not in attrs and sc.PYDANTIC_AI_FINAL_RESULT not in attrs:
        return
    facts.note("pydantic_ai")
    if facts.run_output is None and sc.PYDANTIC_AI_FINAL_RESULT in attrs:
        facts.run_output = p.as_text(attrs[sc.PYDANTIC_AI_FINAL_RESULT])


def read_litellm(span: ReadableSpan, attrs: Attributes, facts: SpanFacts) -> None:
    if span.name == sc.LITELLM_RAW_REQUEST_SPAN:
        # Python reprs of the same request its litellm_request parent already records.
        facts.note("litellm")
        facts.set_role("other")
    elif span.name == sc.LITELLM_REQUEST_SPAN:
        facts.note("litellm")
        facts.set_role("llm")
