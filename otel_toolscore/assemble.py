"""Spans of one trace → one Trajectory per agent run.

Steps: read every span with the conventions (``conventions.read_trace``), rebuild the tree,
decide which agent-like spans are runs (wrappers collapse into the run they wrap; real
sub-agents become nested runs), then gather each run's LLM calls, tool calls and retrievals in
call order. A tool call is seen in up to four places (the model's output, later input history,
a tool span, a ``role=tool`` result message); all of them become one ``ToolCall``.

Nothing here raises on bad input: cycles, duplicate ids, missing parents and unreadable values
become ``Trajectory.problems`` entries.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore.conventions import SpanFacts, read_trace
from otel_toolscore.conventions.parsing import as_text, result_error
from otel_toolscore.trajectory import (
    LLMCall,
    Message,
    Retrieval,
    ToolCall,
    ToolCallRequest,
    ToolDefinition,
    ToolResultPart,
    Trajectory,
)

_ACTIVITY = frozenset({"llm", "tool", "retrieval"})


def build_trajectories(spans: Iterable[ReadableSpan]) -> list[Trajectory]:
    """Group spans by trace and build every trace's trajectories (outermost run first)."""
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        ctx = span.context
        if ctx is None:
            continue
        by_trace.setdefault(ctx.trace_id, []).append(span)
    out: list[Trajectory] = []
    for trace_id, trace_spans in by_trace.items():
        out.extend(assemble_trace(format(trace_id, "032x"), trace_spans))
    return out


# --- the span tree ---------------------------------------------------------------------------


@dataclass
class _Tree:
    facts: dict[str, SpanFacts]
    children: dict[str | None, list[SpanFacts]]
    roots: list[SpanFacts]
    problems: list[str] = field(default_factory=list)

    def walk(self, top: SpanFacts) -> list[SpanFacts]:
        """Pre-order, children by (start time, input order); iterative so depth cannot overflow."""
        out: list[SpanFacts] = []
        stack = [top]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(self.children.get(node.span_id, [])))
        return out


def _sort_key(f: SpanFacts) -> tuple[int, int]:
    return (f.start, f.order)


def _build_tree(facts_list: list[SpanFacts]) -> _Tree:
    problems: list[str] = []
    facts: dict[str, SpanFacts] = {}
    for f in facts_list:
        if f.span_id in facts:
            problems.append(f"span {f.span_id} ({f.name}): duplicate span id, later copy ignored")
            continue
        facts[f.span_id] = f
    children: dict[str | None, list[SpanFacts]] = defaultdict(list)
    roots: list[SpanFacts] = []
    for f in facts.values():
        if f.parent_id is None:
            roots.append(f)
        elif f.parent_id not in facts or f.parent_id == f.span_id:
            problems.append(f"span {f.span_id} ({f.name}): parent {f.parent_id} not in the trace; read as a root")
            f.parent_id = None
            roots.append(f)
        else:
            children[f.parent_id].append(f)
    for kids in children.values():
        kids.sort(key=_sort_key)
    roots.sort(key=_sort_key)
    tree = _Tree(facts=facts, children=children, roots=roots, problems=problems)
    # Spans on a parent cycle are unreachable from any root: cut each cycle at its earliest span.
    reached = {f.span_id for r in roots for f in tree.walk(r)}
    for f in sorted(facts.values(), key=_sort_key):
        if f.span_id in reached:
            continue
        problems.append(f"span {f.span_id} ({f.name}): parent cycle; read as a root")
        siblings = children.get(f.parent_id, [])
        if f in siblings:
            siblings.remove(f)
        f.parent_id = None
        roots.append(f)
        reached.update(x.span_id for x in tree.walk(f))
    roots.sort(key=_sort_key)
    return tree


# --- which spans are runs --------------------------------------------------------------------


@dataclass
class _Run:
    span: SpanFacts  # innermost agent span of the run
    wrappers: list[SpanFacts]  # agent-like spans around it that are the same run, innermost first
    name: str | None
    parent: _Run | None


def _find_runs(tree: _Tree) -> list[_Run]:
    activity_count: dict[str, int] = {}
    nearest_agents: dict[str, list[SpanFacts]] = defaultdict(list)
    # Post-order accumulation without recursion.
    for root in tree.roots:
        order = tree.walk(root)
        for f in reversed(order):
            n = 1 if f.role in _ACTIVITY else 0
            for c in tree.children.get(f.span_id, []):
                n += activity_count[c.span_id]
                if c.role == "agent":
                    nearest_agents[f.span_id].append(c)
                else:
                    nearest_agents[f.span_id].extend(nearest_agents.get(c.span_id, []))
            activity_count[f.span_id] = n

    def is_wrapper(a: SpanFacts) -> SpanFacts | None:
        inner = [b for b in nearest_agents.get(a.span_id, []) if activity_count[b.span_id] > 0]
        if len(inner) == 1 and activity_count[inner[0].span_id] == activity_count[a.span_id]:
            return inner[0]
        return None

    runs: list[_Run] = []
    for root in tree.roots:
        # (span, enclosing run, wrappers collected so far)
        stack: list[tuple[SpanFacts, _Run | None, list[SpanFacts]]] = [(root, None, [])]
        while stack:
            f, enclosing, wrappers = stack.pop()
            current, pass_wrappers = enclosing, []
            if f.role == "agent" and activity_count[f.span_id] > 0:
                inner = is_wrapper(f)
                if inner is not None:
                    pass_wrappers = [f, *wrappers]
                else:
                    chain = [f, *wrappers]
                    name = next((x.agent_name for x in chain if x.agent_name), None)
                    if enclosing is not None and name is not None and name == enclosing.name:
                        pass  # the same agent seen again inside its own run: one run
                    else:
                        current = _Run(span=f, wrappers=list(wrappers), name=name, parent=enclosing)
                        runs.append(current)
            for c in reversed(tree.children.get(f.span_id, [])):
                stack.append((c, current, pass_wrappers))
    if not runs:
        # No agent span: every local root with LLM/tool activity is one run.
        for root in tree.roots:
            if activity_count[root.span_id] > 0:
                runs.append(_Run(span=root, wrappers=[], name=root.agent_name, parent=None))
    return runs


# --- one run → Trajectory --------------------------------------------------------------------


def assemble_trace(trace_id: str, spans: Sequence[ReadableSpan]) -> list[Trajectory]:
    facts = read_trace(spans)
    tree = _build_tree(facts)
    runs = _find_runs(tree)
    return [_trajectory(trace_id, tree, run) for run in runs]


def _trajectory(trace_id: str, tree: _Tree, run: _Run) -> Trajectory:
    subtree = tree.walk(run.span)
    chain = [run.span, *run.wrappers]
    activity = [f for f in subtree if f.role in _ACTIVITY]
    llms = [f for f in activity if f.role == "llm"]
    builder = _CallBuilder()
    steps: list[Any] = []
    for i, f in enumerate(llms):
        steps.append(builder.add_llm(f, first=(i == 0)))
    for f in activity:
        if f.role == "tool":
            builder.add_tool_span(f)
        elif f.role == "retrieval":
            steps.append(
                Retrieval(span_id=f.span_id, query=f.retrieval_query, documents=list(f.documents or []),
                          start_time=f.start)
            )
    calls = builder.finish()
    steps.extend(calls)
    steps.sort(key=_step_key(builder))

    problems = list(tree.problems) + [p for f in subtree for p in f.problems]
    problems.extend(builder.problems)
    for f in subtree:
        for ref in f.external_content:
            problems.append(f"span {f.span_id} ({f.name}): content kept outside the span ({ref})")
    conventions: list[str] = []
    for f in subtree:
        for c in f.conventions:
            if c not in conventions:
                conventions.append(c)
    expectations: dict[str, Any] = {}
    for f in reversed(chain):
        expectations.update(f.expectations)

    first_llm = llms[0] if llms else None
    return Trajectory(
        trace_id=trace_id,
        span_id=run.span.span_id,
        agent_name=run.name,
        nested=run.parent is not None,
        parent_run_span_id=run.parent.span.span_id if run.parent else None,
        input=_first(f.run_input for f in chain) or _llm_input(first_llm),
        output=_first(f.run_output for f in chain) or _last_output(steps),
        system_instructions=_first(f.system_instructions for f in chain)
        or _first(f.system_instructions for f in llms),
        steps=steps,
        tool_definitions=_definitions([*chain, *llms, *(f for f in activity if f.role == "tool")]),
        conventions=conventions,
        expectations=expectations,
        problems=problems,
        start_time=run.span.start,
        end_time=run.span.end,
    )


def _first(values: Iterable[str | None]) -> str | None:
    for v in values:
        if v:
            return v
    return None


def _llm_input(f: SpanFacts | None) -> str | None:
    if f is None or not f.input_messages:
        return None
    for m in reversed(f.input_messages):
        if m.role == "user" and m.content:
            return m.content
    return None


def _last_output(steps: list[Any]) -> str | None:
    for s in reversed(steps):
        if isinstance(s, LLMCall) and s.output_text:
            return s.output_text
    return None


def _definitions(sources: Iterable[SpanFacts]) -> list[ToolDefinition]:
    """Every tool offered in the run, by name; a definition with a schema beats a bare name."""
    out: dict[str, ToolDefinition] = {}
    for f in sources:
        for d in f.tool_definitions or []:
            have = out.get(d.name)
            if have is None or (have.parameters is None and d.parameters is not None):
                out[d.name] = d
    return list(out.values())


def _step_key(builder: _CallBuilder):
    def key(step: Any) -> tuple[int, int]:
        if isinstance(step, ToolCall):
            return builder.sort_key(step)
        # An LLM call sorts at its start; the calls it requested sort just after it (anchor+1).
        return (step.start_time or 0, -1)

    return key


# --- tool calls: one per real call --------------------------------------------------------------


#: json.dumps(…, sort_keys=True, default=str), its encoder built once
_CANON_ENCODER = json.JSONEncoder(sort_keys=True, default=str)


def _canon(args: Any) -> str:
    try:
        return _CANON_ENCODER.encode(args)
    except (TypeError, ValueError, RecursionError):
        return repr(args)


class _CallBuilder:
    """Merges the places a tool call is seen in into one ToolCall per real call."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self._keys: dict[int, tuple[int, int]] = {}
        self._by_id: dict[str, ToolCall] = {}
        #: results seen in model input; id-less ones keep their position among that input's results
        self._results: list[tuple[ToolResultPart, int | None]] = []
        #: history messages whose echo is known to change nothing but add these results again
        #: (message objects are shared between the LLM spans that repeat them: ReadMemo)
        self._settled: dict[int, tuple[Message, tuple[tuple[ToolResultPart, None], ...]]] = {}
        self._seq = 0
        self.problems: list[str] = []
        # Indexes that keep matching linear in the number of calls (a run may echo thousands of
        # id-less calls): built on first need, then kept up to date.
        #: (name, canonical arguments) → calls in creation order; arguments do not change while
        #: LLM spans are added, which is when this is used
        self._by_key: dict[str, list[ToolCall]] | None = None
        #: calls without a tool span, by name and by (name, canonical arguments), creation order
        self._free_by_name: dict[str | None, dict[int, ToolCall]] | None = None
        self._free_by_key: dict[str, dict[int, ToolCall]] = {}

    def sort_key(self, call: ToolCall) -> tuple[int, int]:
        return self._keys[id(call)]

    def _new(self, anchor: int, **fields: Any) -> ToolCall:
        call = ToolCall(**fields)
        self._seq += 1
        self._keys[id(call)] = (anchor, self._seq)
        self.calls.append(call)
        if call.id:
            self._by_id[call.id] = call
        if self._by_key is not None:
            self._by_key.setdefault(_call_key(call.name, call.arguments), []).append(call)
        return call

    # LLM spans: requested calls (output), echoed calls and results (input history)
    def add_llm(self, f: SpanFacts, first: bool) -> LLMCall:
        inputs = list(f.input_messages or [])
        if first:
            # Before the run's last user message is earlier conversation, not this run's calls.
            last_user = max((i for i, m in enumerate(inputs) if m.role == "user" and m.content), default=-1)
            history = inputs[last_user + 1 :] if last_user >= 0 else inputs
        else:
            history = inputs
        seen_in_this_input: dict[str, int] = defaultdict(int)
        idless = 0
        for m in history:
            settled = self._settled.get(id(m))
            if settled is not None:
                self._results.extend(settled[1])
                continue
            for req in m.tool_calls:
                self._history_call(req, f, seen_in_this_input)
            for part in m.tool_results:
                if part.tool_call_id is None:
                    self._results.append((part, idless))
                    idless += 1
                else:
                    self._results.append((part, None))
            self._settle(m)
        offered = [d.name for d in f.tool_definitions] if f.tool_definitions else None
        requested: list[str] = []
        for m in f.output_messages or []:
            for req in m.tool_calls:
                call = self._by_id.get(req.id) if req.id else None
                if call is None:
                    call = self._new(
                        f.start, id=req.id, name=req.name, arguments=req.arguments, arguments_raw=req.arguments_raw,
                        arguments_error=_args_error(req), llm_span_id=f.span_id, offered_tools=offered,
                        start_time=f.start,
                    )
                _add_source(call, "llm_output")
                requested.append(call.id or f"#{self._keys[id(call)][1]}")
        return LLMCall(
            span_id=f.span_id, model=f.model, input_messages=inputs, output_messages=list(f.output_messages or []),
            tool_definitions=list(f.tool_definitions or []), tool_call_ids=requested, start_time=f.start,
            end_time=f.end,
        )

    def _settle(self, m: Message) -> None:
        """Remember a history message whose next echo can only repeat what this one did.

        Every call it echoes has an id that now names a call already marked as seen in history
        (ids are not re-mapped while LLM spans are added), and every result it carries has an
        id: a later echo of the same message object adds those results again and nothing else.
        Later LLM spans repeat the whole history, so this keeps a run's assembly from
        re-walking it call by call for every model request.
        """
        if all(req.id and req.id in self._by_id for req in m.tool_calls) and all(
            part.tool_call_id is not None for part in m.tool_results
        ):
            self._settled[id(m)] = (m, tuple((part, None) for part in m.tool_results))

    def _history_call(self, req: ToolCallRequest, f: SpanFacts, seen: dict[str, int]) -> None:
        if req.id and req.id in self._by_id:
            _add_source(self._by_id[req.id], "history")
            return
        # Same call under another id (Responses bridges echo `fc_…` item ids for `call_…` calls),
        # or no id at all: the n-th echo of (name, arguments) is the n-th such call.
        key = _call_key(req.name, req.arguments)
        nth = seen[key]
        seen[key] += 1
        if self._by_key is None:
            self._by_key = {}
            for c in self.calls:
                self._by_key.setdefault(_call_key(c.name, c.arguments), []).append(c)
        same = self._by_key.get(key, ())
        if nth < len(same):
            call = same[nth]
            if req.id:
                self._by_id.setdefault(req.id, call)
            _add_source(call, "history")
            return
        # Requested by a model output that was not recorded: it still happened before this call.
        call = self._new(
            f.start - 1, id=req.id, name=req.name, arguments=req.arguments, arguments_raw=req.arguments_raw,
            arguments_error=_args_error(req), start_time=f.start,
        )
        _add_source(call, "history")

    # Tool spans: the call as executed
    def add_tool_span(self, f: SpanFacts) -> None:
        t = f.tool
        if t is None:
            return
        call = self._by_id.get(t.call_id) if t.call_id else None
        if call is not None and call.span_id is not None:
            self.problems.append(f"span {f.span_id} ({f.name}): second tool span for call {t.call_id}")
            call = None
        if call is None:
            call = self._first_free(t.name, t.arguments)
        if call is None:
            call = self._new(f.start, id=t.call_id, name=t.name, start_time=f.start)
        call.span_id = f.span_id
        self._unfree(call)
        _add_source(call, "tool_span")
        if call.id is None and t.call_id:
            call.id = t.call_id
            self._by_id.setdefault(t.call_id, call)
        if (call.arguments is None or call.arguments_error) and t.arguments is not None:
            call.arguments, call.arguments_raw, call.arguments_error = t.arguments, t.arguments_raw, None
        elif call.arguments is None and call.arguments_raw is None:
            call.arguments_raw, call.arguments_error = t.arguments_raw, t.arguments_error
        if t.has_result:
            call.result, call.result_raw, call.has_result = t.result, t.result_raw, True
        if t.error and call.error is None:
            call.error = t.error

    def _first_free(self, name: str | None, arguments: Any) -> ToolCall | None:
        """The first call (in creation order) of that name without a tool span, one with the
        same arguments preferred."""
        if self._free_by_name is None:
            self._free_by_name = {}
            for c in self.calls:
                if c.span_id is None:
                    self._free_by_name.setdefault(c.name, {})[id(c)] = c
                    self._free_by_key.setdefault(_call_key(c.name, c.arguments), {})[id(c)] = c
        if arguments is not None:
            exact = self._free_by_key.get(_call_key(name, arguments))
            if exact:
                return next(iter(exact.values()))
        free = self._free_by_name.get(name)
        return next(iter(free.values())) if free else None

    def _unfree(self, call: ToolCall) -> None:
        if self._free_by_name is None:
            return
        self._free_by_name.get(call.name, {}).pop(id(call), None)
        self._free_by_key.get(_call_key(call.name, call.arguments), {}).pop(id(call), None)

    def finish(self) -> list[ToolCall]:
        """Apply results seen only in later model input, then settle errors."""
        self.calls.sort(key=self.sort_key)
        # name → calls in call order not yet answered by a result message: an answered call
        # stays answered, so each list is consumed from the front
        unanswered: dict[str | None, deque[ToolCall]] | None = None
        for part, position in self._results:
            call = self._by_id.get(part.tool_call_id) if part.tool_call_id else None
            if call is None and position is not None:
                # No ids (litellm's callback): every model input repeats all results so far, in
                # call order, so the n-th id-less result of an input answers the n-th call.
                call = self.calls[position] if position < len(self.calls) else None
                if call is not None and part.name is not None and call.name != part.name:
                    if unanswered is None:
                        unanswered = defaultdict(deque)
                        for c in self.calls:
                            unanswered[c.name].append(c)
                    queue = unanswered[part.name]
                    while queue and "result_message" in queue[0].sources:
                        queue.popleft()
                    call = queue[0] if queue else None
            if call is None:
                if part.tool_call_id is not None:
                    self.problems.append(f"tool result for unknown call id {part.tool_call_id}")
                continue
            if "result_message" in call.sources:
                continue  # the same result echoed in every later model input
            _add_source(call, "result_message")
            if not call.has_result:
                call.result, call.result_raw, call.has_result = part.content, part.content_raw, True
            if part.is_error and call.error is None:
                call.error = as_text(part.content) or "error"
        for call in self.calls:
            if call.error is None and call.has_result:
                call.error = result_error(call.result)
        return self.calls


def _call_key(name: str | None, arguments: Any) -> str:
    return f"{name}\x00{_canon(arguments)}"


def _args_error(req: ToolCallRequest) -> str | None:
    if req.arguments is None and req.arguments_raw:
        return "arguments are not a JSON object"
    return None


def _add_source(call: ToolCall, source: str) -> None:
    if source not in call.sources:
        call.sources.append(source)


__all__ = ["assemble_trace", "build_trajectories", "Message"]
