"""What one span says about an agent run, independent of the convention it was written in."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore.trajectory import Document, Message, ToolDefinition

Role = Literal["agent", "llm", "tool", "retrieval", "other"]
#: what a convention's ``detect`` says of a span: its role, or "" for "mine, but I state no role"
#: (another convention, or "other", decides); ``None`` (not this convention's span) is separate
Stated = Literal["agent", "llm", "tool", "retrieval", "other", ""]


@dataclass(slots=True)
class ToolExecution:
    """A tool span: the call as executed."""

    name: str | None = None
    call_id: str | None = None
    arguments: Any = None
    arguments_raw: str | None = None
    arguments_error: str | None = None
    result: Any = None
    result_raw: str | None = None
    has_result: bool = False
    error: str | None = None
    #: the tool's JSON Schema recorded on its own span (not the request's offered definitions)
    schema: dict[str, Any] | None = None


@dataclass(slots=True)
class SpanFacts:
    """A span read by every convention that recognises it.

    Readers run most-specific first; a field already set by an earlier reader is kept, so a
    framework quirk handled by a specific reader is not overwritten by a generic one.
    """

    span_id: str
    parent_id: str | None
    name: str
    start: int
    end: int
    order: int  # position in the input: breaks ties between equal (millisecond) timestamps
    role: Role | None = None
    conventions: list[str] = field(default_factory=list)
    agent_name: str | None = None
    #: the span's own name, for an agent span whose convention names no agent (an OpenInference
    #: AGENT span without ``agent.name``): used only when no span of the run names one, so that
    #: ``agent:`` rules still have a name to match
    agent_name_fallback: str | None = None
    #: ``service.name`` of the span's resource (which app the run came from, for reports)
    service_name: str | None = None
    #: an agent-like span that never names an agent of its own (framework wrappers)
    run_input: str | None = None
    run_output: str | None = None
    system_instructions: str | None = None
    model: str | None = None
    input_messages: list[Message] | None = None
    output_messages: list[Message] | None = None
    tool_definitions: list[ToolDefinition] | None = None
    tool: ToolExecution | None = None
    #: tools the span names as its framework's answer (output) tools, beside the documented names
    #: of ``semconv.ANSWER_TOOLS``: a call of one is how the run answers, not a tool use
    answer_tools: list[str] | None = None
    retrieval_query: str | None = None
    documents: list[Document] | None = None
    #: failure of the span itself: status ERROR description or an exception event
    error: str | None = None
    #: ``toolscore.*`` attributes (expectations the app or a test put on the span)
    expectations: dict[str, Any] = field(default_factory=dict)
    #: the content lives outside the span (``gen_ai.*_ref``): record it, do not treat as empty
    external_content: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def note(self, convention: str) -> None:
        if convention not in self.conventions:
            self.conventions.append(convention)

    def set_role(self, role: Role) -> None:
        if self.role is None:
            self.role = role

    def problem(self, what: str) -> None:
        self.problems.append(f"span {self.span_id} ({self.name}): {what}")


Attributes = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Convention:
    """One convention: the names it writes, the cheap test that says a span is its kind, and its reader.

    ``detect`` is the only place the convention decides what a span is; ``read_span`` and the
    processor's hot-path ``classify`` both call it, so the two cannot disagree. It may only look
    a few attributes up: it runs on every span an app ends. ``keys``/``span_names`` are its gate:
    ``detect`` answers ``None`` for a span that carries none of ``keys`` and whose name starts with
    none of ``span_names`` (``tests/test_detection.py`` holds every convention to that).
    """

    name: str
    keys: frozenset[str]
    detect: Callable[[ReadableSpan, Attributes], Stated | None]
    #: reads the span's content, told what its own ``detect`` stated
    read: Callable[[ReadableSpan, Attributes, SpanFacts, Stated], None]
    span_names: tuple[str, ...] = ()
    #: roles the convention states outright in one attribute: (key, {value: role}, the role of any
    #: other value or None), which ``detect`` answers the same way; asked first (a lookup, no call)
    stated: tuple[tuple[str, Mapping[str, Stated], Stated | None], ...] = ()
