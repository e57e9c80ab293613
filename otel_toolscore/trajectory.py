"""The trajectory of one agent run: what the scorers see.

Everything here is convention-neutral. The readers in ``conventions/`` turn spans into these
pieces; ``assemble`` orders and de-duplicates them into one ``Trajectory`` per agent run.
Raw text is kept beside parsed values because real instrumentation often ships JSON as strings,
Python reprs or bare values, and a scorer (or a person) must be able to see what was there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from pydantic import ConfigDict, Field, TypeAdapter

_M = TypeVar("_M", bound="_Model")


class _Model:
    """Plain slotted dataclasses: the readers build some forty of these per ten-span run and
    change them while assembling; as pydantic models each cost 3-4x as much to build and 20x to
    change (validation, a checked ``__setattr__``; ``model_construct`` is slower still). Built by our own
    readers from values they already typed, they need no validation; pydantic comes in where a
    trajectory crosses a boundary, through these methods (a ``TypeAdapter`` per class, built on
    first use): JSON in (``model_validate``, ``model_validate_json``) and out (``model_dump``,
    ``model_dump_json``, ``model_json_schema``)."""

    __slots__ = ()
    #: read by pydantic when it validates one (``model_validate``): unknown fields are errors
    __pydantic_config__ = ConfigDict(extra="forbid")

    @classmethod
    def model_validate(cls: type[_M], data: Any) -> _M:
        """A validated instance from a dict (or an instance), as pydantic models validate."""
        value: _M = _adapter(cls).validate_python(data)
        return value

    @classmethod
    def model_validate_json(cls: type[_M], data: str | bytes) -> _M:
        value: _M = _adapter(cls).validate_json(data)
        return value

    @classmethod
    def model_construct(cls: type[_M], **values: Any) -> _M:
        """An instance without validation: the plain constructor (kept for pydantic's name)."""
        return cls(**values)

    @classmethod
    def model_json_schema(cls) -> dict[str, Any]:
        return _adapter(cls).json_schema()

    def model_dump(self, **options: Any) -> dict[str, Any]:
        """The instance as a dict (``TypeAdapter.dump_python`` options: ``mode``, ``exclude_none``, ...)."""
        value: dict[str, Any] = _adapter(type(self)).dump_python(self, **options)
        return value

    def model_dump_json(self, **options: Any) -> str:
        return _adapter(type(self)).dump_json(self, **options).decode()

    def model_copy(self: _M, *, update: dict[str, Any] | None = None) -> _M:
        """A shallow copy, with ``update``'s fields replaced (not validated, as in pydantic)."""
        return dataclasses.replace(self, **(update or {}))  # type: ignore[type-var]


_ADAPTERS: dict[type, TypeAdapter[Any]] = {}


def _adapter(cls: type) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:  # (two threads may build one each: equal, harmless)
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


@dataclass(slots=True)
class ToolDefinition(_Model):
    """A tool offered to the model (or supplied by the user), with its JSON Schema."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    deprecated: bool = False
    replaced_by: str | None = None


@dataclass(slots=True)
class ToolCallRequest(_Model):
    """A tool call as the model wrote it inside a message (not yet matched to an execution)."""

    id: str | None = None
    name: str | None = None
    arguments: Any = None
    arguments_raw: str | None = None


@dataclass(slots=True)
class ToolResultPart(_Model):
    """A tool result as the model received it inside a message."""

    tool_call_id: str | None = None
    name: str | None = None
    content: Any = None
    content_raw: str | None = None
    is_error: bool = False


@dataclass(slots=True)
class Message(_Model):
    role: str
    content: str | None = None
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    tool_results: list[ToolResultPart] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass(slots=True)
class Document(_Model):
    id: str | None = None
    content: str | None = None
    score: float | None = None
    metadata: dict[str, Any] | None = None


@dataclass(slots=True)
class LLMCall(_Model):
    type: Literal["llm_call"] = "llm_call"
    span_id: str | None = None
    model: str | None = None
    input_messages: list[Message] = field(default_factory=list)
    output_messages: list[Message] = field(default_factory=list)
    tool_definitions: list[ToolDefinition] = field(default_factory=list)
    #: ids (or positional keys) of the tool calls this call's output requested, in output order
    tool_call_ids: list[str] = field(default_factory=list)
    start_time: int | None = None
    end_time: int | None = None

    @property
    def output_text(self) -> str | None:
        texts = [m.content for m in self.output_messages if m.content]
        return "\n".join(texts) if texts else None


@dataclass(slots=True)
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
    #: the tool's JSON Schema as the framework recorded it on the call's own tool span (Strands
    #: ``gen_ai.tool.json_schema``, OpenInference ``tool.parameters``); None: none recorded
    schema: dict[str, Any] | None = None
    #: where the call was seen: llm_output, history, tool_span, result_message
    sources: list[str] = field(default_factory=list)
    start_time: int | None = None


@dataclass(slots=True)
class Retrieval(_Model):
    type: Literal["retrieval"] = "retrieval"
    span_id: str | None = None
    query: str | None = None
    documents: list[Document] = field(default_factory=list)
    start_time: int | None = None


Step = Annotated[LLMCall | ToolCall | Retrieval, Field(discriminator="type")]


@dataclass(slots=True)
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
    steps: list[Step] = field(default_factory=list)
    tool_definitions: list[ToolDefinition] = field(default_factory=list)
    conventions: list[str] = field(default_factory=list)
    #: ``toolscore.*`` attributes of the run span: expectations carried by the trace itself
    expectations: dict[str, Any] = field(default_factory=dict)
    #: bad parts of the input that were skipped or read leniently, as "span <id>: what"
    problems: list[str] = field(default_factory=list)
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
