"""The trajectory of one agent run: what the scorers see.

Everything here is convention-neutral. The readers in ``conventions/`` turn spans into these
pieces; ``assemble`` orders and de-duplicates them into one ``Trajectory`` per agent run.
Raw text is kept beside parsed values because real instrumentation often ships JSON as strings,
Python reprs or bare values, and a scorer (or a person) must be able to see what was there.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolDefinition(_Model):
    """A tool offered to the model (or supplied by the user), with its JSON Schema."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    deprecated: bool = False
    replaced_by: str | None = None


class ToolCallRequest(_Model):
    """A tool call as the model wrote it inside a message (not yet matched to an execution)."""

    id: str | None = None
    name: str | None = None
    arguments: Any = None
    arguments_raw: str | None = None


class ToolResultPart(_Model):
    """A tool result as the model received it inside a message."""

    tool_call_id: str | None = None
    name: str | None = None
    content: Any = None
    content_raw: str | None = None
    is_error: bool = False


class Message(_Model):
    role: str
    content: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list)
    tool_results: list[ToolResultPart] = Field(default_factory=list)
    finish_reason: str | None = None


class Document(_Model):
    id: str | None = None
    content: str | None = None
    score: float | None = None
    metadata: dict[str, Any] | None = None


class LLMCall(_Model):
    type: Literal["llm_call"] = "llm_call"
    span_id: str | None = None
    model: str | None = None
    input_messages: list[Message] = Field(default_factory=list)
    output_messages: list[Message] = Field(default_factory=list)
    tool_definitions: list[ToolDefinition] = Field(default_factory=list)
    #: ids (or positional keys) of the tool calls this call's output requested, in output order
    tool_call_ids: list[str] = Field(default_factory=list)
    start_time: int | None = None
    end_time: int | None = None

    @property
    def output_text(self) -> str | None:
        texts = [m.content for m in self.output_messages if m.content]
        return "\n".join(texts) if texts else None


class ToolCall(_Model):
    """One real tool call of the run, however many places it was seen in."""

    type: Literal["tool_call"] = "tool_call"
    id: str | None = None
    name: str | None = None
    arguments: Any = None
    arguments_raw: str | None = None
    #: why the arguments could not be read as an object, when they could not
    arguments_error: str | None = None
    result: Any = None
    result_raw: str | None = None
    has_result: bool = False
    #: the failure text when the tool failed (span status ERROR, exception event, error payload,
    #: or a call rejected before it ran)
    error: str | None = None
    #: the tool span, when the call was executed under a span of its own
    span_id: str | None = None
    #: the LLM span whose output requested the call
    llm_span_id: str | None = None
    #: names of the tools offered in the request that produced this call (None: not known)
    offered_tools: list[str] | None = None
    #: where the call was seen: llm_output, history, tool_span, result_message
    sources: list[str] = Field(default_factory=list)
    start_time: int | None = None


class Retrieval(_Model):
    type: Literal["retrieval"] = "retrieval"
    span_id: str | None = None
    query: str | None = None
    documents: list[Document] = Field(default_factory=list)
    start_time: int | None = None


Step = Annotated[LLMCall | ToolCall | Retrieval, Field(discriminator="type")]


class Trajectory(_Model):
    trace_id: str
    #: the agent run span (or the local root when the trace has no agent span)
    span_id: str | None = None
    agent_name: str | None = None
    #: ``service.name`` of the agent span's resource: which app the run came from
    service_name: str | None = None
    #: True when this run sits inside another scored run (a sub-agent)
    nested: bool = False
    parent_run_span_id: str | None = None
    input: str | None = None
    output: str | None = None
    system_instructions: str | None = None
    steps: list[Step] = Field(default_factory=list)
    tool_definitions: list[ToolDefinition] = Field(default_factory=list)
    conventions: list[str] = Field(default_factory=list)
    #: ``toolscore.*`` attributes of the run span: expectations carried by the trace itself
    expectations: dict[str, Any] = Field(default_factory=dict)
    #: bad parts of the input that were skipped or read leniently, as "span <id>: what"
    problems: list[str] = Field(default_factory=list)
    start_time: int | None = None
    end_time: int | None = None

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [s for s in self.steps if isinstance(s, ToolCall)]

    @property
    def llm_calls(self) -> list[LLMCall]:
        return [s for s in self.steps if isinstance(s, LLMCall)]

    @property
    def retrievals(self) -> list[Retrieval]:
        return [s for s in self.steps if isinstance(s, Retrieval)]

    @property
    def tool_names(self) -> list[str]:
        return [c.name or "" for c in self.tool_calls]

    def to_report(self) -> dict[str, Any]:
        """The JSON shape the CLI prints (``scores`` is added by the caller)."""
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "agent_name": self.agent_name,
            "service_name": self.service_name,
            "nested": self.nested,
            "conventions": self.conventions,
            "input": self.input,
            "output": self.output,
            "system_instructions": self.system_instructions,
            "tool_calls": [
                {
                    "id": c.id,
                    "name": c.name,
                    "arguments": c.arguments if c.arguments_error is None else c.arguments_raw,
                    "result": c.result,
                    "error": c.error,
                    "span_id": c.span_id,
                }
                for c in self.tool_calls
            ],
            "tool_definitions": [
                {"name": d.name, "description": d.description, "parameters": d.parameters}
                for d in self.tool_definitions
            ],
            "retrievals": [
                {
                    "query": r.query,
                    "documents": [
                        {"id": d.id, "content": d.content, "score": d.score} for d in r.documents
                    ],
                }
                for r in self.retrievals
            ],
            "problems": self.problems,
        }
