"""Mastra: ``mastra.span.type`` spans (agent_run, model_step, tool_call, ...).

Runs before the generic readers, so what it decides (a role, a final answer) stands.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import semconv as sc
from otel_toolscore.conventions import parsing as p
from otel_toolscore.conventions.base import Attributes, Convention, SpanFacts, Stated
from otel_toolscore.conventions.genai import last_user_text
from otel_toolscore.trajectory import Message

NAME = "mastra"
_PLACEHOLDER_PREFIXES = ("[tool: ", "[tool-result: ")
# model_inference duplicates its model_step parent; chunks and generations are detail
_ROLES: dict[str, Stated] = {"agent_run": "agent", "model_step": "llm", "tool_call": "tool"}


def detect(span: ReadableSpan, attrs: Attributes) -> Stated | None:
    kind = attrs.get(sc.MASTRA_SPAN_TYPE)
    return None if kind is None else _ROLES.get(kind, "other")


def read(span: ReadableSpan, attrs: Attributes, facts: SpanFacts, stated: Stated) -> None:
    facts.note(NAME)
    if stated == "agent":
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
    elif stated == "llm":
        # The step is the model call: it holds the tool calls; its `chat` child holds only text.
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


CONVENTION = Convention(NAME, frozenset({sc.MASTRA_SPAN_TYPE}), detect, read, stated=((sc.MASTRA_SPAN_TYPE, _ROLES, "other"),))
