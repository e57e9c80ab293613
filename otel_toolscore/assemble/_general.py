"""The general way: spans of one trace -> one Trajectory per agent run.

Steps: read every span with the conventions (``conventions.read_trace``), rebuild the tree
(``_tree``), decide which agent-like spans are runs (``_runs``), then gather each run's LLM calls,
tool calls (``_calls``) and retrievals in call order, by the rules of what belongs to a run
(``_rules``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore.assemble._calls import _CallBuilder
from otel_toolscore.assemble._rules import add_definitions, in_call_order, last_output, last_user_text, run_calls
from otel_toolscore.assemble._runs import _find_runs, _Run
from otel_toolscore.assemble._tree import _build_tree, _Tree
from otel_toolscore.conventions import SpanFacts, read_trace
from otel_toolscore.conventions.parsing import is_object_repr
from otel_toolscore.trajectory import Retrieval, ToolDefinition, Trajectory


def trajectories(trace_id: str, spans: Sequence[ReadableSpan]) -> list[Trajectory]:
    """Every run of the trace, outermost first."""
    facts = read_trace(spans)
    tree = _build_tree(facts)
    runs = _find_runs(tree)
    return [_trajectory(trace_id, tree, run) for run in runs]


def _trajectory(trace_id: str, tree: _Tree, run: _Run) -> Trajectory:
    subtree = tree.walk(run.span)
    chain = [run.span, *run.wrappers]
    # one pass over the run's spans for everything read from all of them
    llms: list[SpanFacts] = []
    tools: list[SpanFacts] = []
    retrievals: list[Retrieval] = []
    problems = list(tree.problems)
    external: list[str] = []
    conventions: dict[str, None] = {}
    answer_tools: set[str] = set()
    for f in subtree:
        role = f.role
        if role == "llm":
            llms.append(f)
        elif role == "tool":
            tools.append(f)
        elif role == "retrieval":
            retrievals.append(Retrieval(span_id=f.span_id, query=f.retrieval_query,
                                        documents=list(f.documents or []), start_time=f.start))
        if f.problems:
            problems.extend(f.problems)
        for ref in f.external_content:
            external.append(f"span {f.span_id} ({f.name}): content kept outside the span ({ref})")
        for c in f.conventions:
            conventions[c] = None
        if f.answer_tools:
            answer_tools.update(f.answer_tools)

    builder = _CallBuilder()
    enclosing = _llms_enclosing_tools(tree, run.span, tools) if tools and llms else ()
    steps: list[Any] = [builder.add_llm(f, encloses_tools=f.span_id in enclosing) for f in llms]
    for f in tools:
        builder.add_tool_span(f)
    steps.extend(retrievals)
    calls, answers = run_calls(builder.finish(), answer_tools)
    steps = in_call_order(steps, calls, builder.sort_key)

    problems.extend(builder.problems)
    problems.extend(external)
    expectations: dict[str, Any] = {}
    for f in reversed(chain):
        expectations.update(f.expectations)

    # an LLM-kind helper span without messages (a framework preparing a request) says nothing
    first_llm = next((f for f in llms if f.input_messages), None)
    return Trajectory(
        trace_id=trace_id,
        span_id=run.span.span_id,
        agent_name=run.name,
        service_name=_first(chain, "service_name"),
        nested=run.parent is not None,
        parent_run_span_id=run.parent.span.span_id if run.parent else None,
        input=_first(chain, "run_input", _words) or _llm_input(first_llm),
        output=_first(chain, "run_output", _words) or last_output(steps, answers),
        system_instructions=_first(chain, "system_instructions") or _first(llms, "system_instructions"),
        steps=steps,
        tool_definitions=_definitions([*chain, *llms, *tools]),
        conventions=list(conventions),
        expectations=expectations,
        problems=problems,
        start_time=run.span.start,
        end_time=run.span.end,
    )


def _llms_enclosing_tools(tree: _Tree, top: SpanFacts, tools: list[SpanFacts]) -> set[str]:
    """The LLM spans of the run that have one of its tool spans below them.

    One model call never contains the running of the tools it asks for: an LLM span that does
    stands for several model calls recorded onto one span (an instrumentation that writes each
    call's attributes onto the agent's span), and holds the last call's input beside stale
    keys of earlier calls' outputs (``_CallBuilder.add_llm``)."""
    out: set[str] = set()
    seen: set[str] = set()
    for t in tools:
        node = tree.facts.get(t.parent_id) if t.parent_id else None
        while node is not None and node.span_id not in seen:
            seen.add(node.span_id)
            if node.role == "llm":
                out.add(node.span_id)
            if node is top or node.parent_id is None:
                break
            node = tree.facts.get(node.parent_id)
    return out


def _first(spans: list[SpanFacts], attribute: str, keep: Callable[[str | None], str | None] | None = None) -> str | None:
    """The first truthy value of the attribute on the spans (what ``keep`` keeps of it)."""
    for f in spans:
        v = getattr(f, attribute)
        if keep is not None:
            v = keep(v)
        if v:
            return v  # type: ignore[no-any-return]
    return None


def _words(text: str | None) -> str | None:
    """A run input or output that can be the run's question or answer: text that is not blank
    and not a Python object's repr (frameworks that stringify their event objects into the
    run span, e.g. LlamaIndex's ``StopEvent(result=AgentOutput(...``); else None, and the run's
    LLM calls say what it was asked and answered."""
    return text if text and text.strip() and not is_object_repr(text) else None


def _llm_input(f: SpanFacts | None) -> str | None:
    return last_user_text(f.input_messages) if f is not None else None


def _definitions(sources: Iterable[SpanFacts]) -> list[ToolDefinition]:
    """Every tool offered in the run, by name (``add_definitions``)."""
    out: dict[str, ToolDefinition] = {}
    for f in sources:
        if f.tool_definitions:
            add_definitions(out, f.tool_definitions)
    return list(out.values())
