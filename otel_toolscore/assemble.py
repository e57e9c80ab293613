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
import operator
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_toolscore import _genai_direct
from otel_toolscore import semconv as sc
from otel_toolscore.conventions import SpanFacts, ToolExecution, read_trace
from otel_toolscore.conventions.parsing import as_text, is_object_repr, result_error
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


@dataclass(slots=True)
class _Tree:
    facts: dict[str, SpanFacts]
    children: dict[str | None, list[SpanFacts]]
    roots: list[SpanFacts]
    problems: list[str] = field(default_factory=list)
    #: ``walk`` of each span asked, by span id: finding runs and building each walk the same
    #: subtrees; cleared while the tree still changes (``_build_tree`` cutting cycles)
    walks: dict[str, list[SpanFacts]] = field(default_factory=dict)

    def walk(self, top: SpanFacts) -> list[SpanFacts]:
        """Pre-order, children by (start time, input order); iterative so depth cannot overflow.
        The list is shared between callers: read it, never change it."""
        out = self.walks.get(top.span_id)
        if out is None:
            out = self.walks[top.span_id] = self._walk(top)
        return out

    def _walk(self, top: SpanFacts) -> list[SpanFacts]:
        out: list[SpanFacts] = []
        children = self.children
        stack = [top]
        while stack:
            node = stack.pop()
            out.append(node)
            kids = children.get(node.span_id)
            if kids:
                stack.extend(reversed(kids))
        return out


#: children and roots sort by (start time, input order)
_START_ORDER = operator.attrgetter("start", "order")


def _build_tree(facts_list: list[SpanFacts]) -> _Tree:
    problems: list[str] = []
    facts: dict[str, SpanFacts] = {}
    for f in facts_list:
        if f.span_id in facts:
            problems.append(f"span {f.span_id} ({f.name}): duplicate span id, later copy ignored")
            continue
        facts[f.span_id] = f
    children: dict[str | None, list[SpanFacts]] = {}
    roots: list[SpanFacts] = []
    for f in facts.values():
        parent = f.parent_id
        if parent is None:
            roots.append(f)
        elif parent not in facts or parent == f.span_id:
            problems.append(_parent_missing(f.span_id, f.name, parent))
            f.parent_id = None
            roots.append(f)
        else:
            kids = children.get(parent)
            if kids is None:
                children[parent] = [f]
            else:
                kids.append(f)
    for kids in children.values():
        if len(kids) > 1:
            kids.sort(key=_START_ORDER)
    roots.sort(key=_START_ORDER)
    tree = _Tree(facts=facts, children=children, roots=roots, problems=problems)
    # Spans on a parent cycle are unreachable from any root: cut each cycle at its earliest span.
    # (Each span is on one children list at most, so the roots' walks are disjoint: when they
    # hold as many spans as the trace, every span is reached.)
    if sum(len(tree.walk(r)) for r in roots) == len(facts):
        return tree
    reached = {f.span_id for r in roots for f in tree.walk(r)}
    tree.walks.clear()
    for f in sorted(facts.values(), key=_START_ORDER):
        if f.span_id in reached:
            continue
        problems.append(f"span {f.span_id} ({f.name}): parent cycle; read as a root")
        siblings = children.get(f.parent_id, [])
        if f in siblings:
            siblings.remove(f)
        f.parent_id = None
        roots.append(f)
        reached.update(x.span_id for x in tree._walk(f))
    roots.sort(key=_START_ORDER)
    return tree


def _parent_missing(span_id: str, name: str, parent: str) -> str:
    """The problem of a span whose parent is not in the trace (or is itself): it is read as a root.
    (A run the span processor completes alone has its agent span's parent, the app's own span, elsewhere.)"""
    return f"span {span_id} ({name}): parent {parent} not in the trace; read as a root"


# --- which spans are runs --------------------------------------------------------------------


@dataclass(slots=True)
class _Run:
    span: SpanFacts  # innermost agent span of the run
    wrappers: list[SpanFacts]  # agent-like spans around it that are the same run, innermost first
    name: str | None
    parent: _Run | None


def _find_runs(tree: _Tree) -> list[_Run]:
    roots = tree.roots
    if len(roots) == 1 and roots[0].role == "agent":
        # The usual trace: one agent span above all the others (one root: every span is below
        # it). With no other agent span, it is the one run when anything ran below it: what the
        # walk below finds, without counting each span's activity.
        roles = [f.role for f in tree.facts.values()]
        if roles.count("agent") == 1:
            if _ACTIVITY.isdisjoint(roles):
                return []
            root = roots[0]
            return [_Run(span=root, wrappers=[], name=root.agent_name or root.agent_name_fallback or None, parent=None)]
    children = tree.children
    #: LLM, tool and retrieval spans in each span's subtree, itself included
    activity: dict[str, int] = {}
    #: the agent spans nearest below each span (no agent span between), in pre-order; only
    #: spans that have some
    nearest: dict[str, list[SpanFacts]] = {}
    for root in tree.roots:
        for f in reversed(tree.walk(root)):  # post-order: children before their parent
            n = 1 if f.role in _ACTIVITY else 0
            kids = children.get(f.span_id)
            if kids:
                below: list[SpanFacts] = []
                for c in kids:
                    n += activity[c.span_id]
                    if c.role == "agent":
                        below.append(c)
                    else:
                        below.extend(nearest.get(c.span_id, ()))
                if below:
                    nearest[f.span_id] = below
            activity[f.span_id] = n

    runs: list[_Run] = []
    # Only agent spans decide runs: from each span, the walk jumps to the agent spans nearest
    # below it, in pre-order. What an agent span passes down (the run it is in, the wrappers
    # around it) reaches those below the spans between unchanged, but for the wrappers, which
    # only its own children are given (a span between starts over with none).
    stack: list[tuple[SpanFacts, _Run | None, list[SpanFacts]]] = []
    for root in reversed(roots):
        if root.role == "agent":
            stack.append((root, None, []))
        else:
            stack.extend((a, None, []) for a in reversed(nearest.get(root.span_id, ())))
    while stack:
        f, enclosing, wrappers = stack.pop()
        current, pass_wrappers = enclosing, []
        count = activity[f.span_id]
        if count == 0:
            continue  # nothing below: no run, and no agent span below it has any either
        inner = [b for b in nearest.get(f.span_id, ()) if activity[b.span_id] > 0]
        if len(inner) == 1 and activity[inner[0].span_id] == count:
            pass_wrappers = [f, *wrappers]  # a wrapper: the one agent inside it is the run
        else:
            chain = [f, *wrappers]
            name = next((x.agent_name for x in chain if x.agent_name), None) or next(
                (x.agent_name_fallback for x in chain if x.agent_name_fallback), None)
            if enclosing is not None and name is not None and name == enclosing.name:
                pass  # the same agent seen again inside its own run: one run
            else:
                current = _Run(span=f, wrappers=list(wrappers), name=name, parent=enclosing)
                runs.append(current)
        own = f.span_id
        for a in reversed(inner):
            stack.append((a, current, pass_wrappers if a.parent_id == own else []))
    if not runs:
        # No agent span: every local root with LLM/tool activity is one run.
        for root in tree.roots:
            if activity[root.span_id] > 0:
                runs.append(_Run(span=root, wrappers=[], name=root.agent_name, parent=None))
    return runs


# --- one run → Trajectory --------------------------------------------------------------------


def assemble_trace(trace_id: str, spans: Sequence[ReadableSpan]) -> list[Trajectory]:
    # the usual GenAI trace, read straight into its trajectory; any other the general way
    direct = _genai_direct.trajectories(trace_id, spans)
    if direct is not None:
        return direct
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
    # An LLM call or retrieval sorts at its start; the calls an LLM call requested, just after it.
    keys: list[tuple[int, int]] = [(s.start_time or 0, -1) for s in steps]
    calls, answers = _answer_calls(builder.finish(), answer_tools)
    steps.extend(calls)
    keys.extend(map(builder.sort_key, calls))
    steps = [steps[i] for i in sorted(range(len(steps)), key=keys.__getitem__)]

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
        output=_first(chain, "run_output", _words) or _last_output(steps, answers),
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
    return _last_user_text(f.input_messages) if f is not None else None


def _last_user_text(messages: list[Message] | None) -> str | None:
    for m in reversed(messages or ()):
        if m.role == "user" and m.content:
            return m.content
    return None


def _last_output(steps: list[Any], answers: Sequence[ToolCall] = ()) -> str | None:
    """The text of the run's last model response that is an answer. Text a model writes beside
    tool calls is a preamble to them, not an answer: a run that ends on a tool call (a
    hand-off, a final action) has none of its own unless an earlier response answered. A
    response that calls an answer tool (``_answer_calls``) answers with that call."""
    by_response = {c.llm_span_id: c for c in answers if c.llm_span_id is not None}
    for s in reversed(steps):
        if not isinstance(s, LLMCall):
            continue
        answer = by_response.get(s.span_id) if s.span_id is not None else None
        if answer is not None and (text := _answer_text(answer)):
            return text
        if s.output_text and not any(m.tool_calls for m in s.output_messages):
            return s.output_text
    return None


def _answer_calls(calls: list[ToolCall], named: set[str]) -> tuple[list[ToolCall], list[ToolCall]]:
    """The run's tool calls, and apart from them the calls of its framework's answer tools.

    A framework that has the model answer through a tool (``semconv.ANSWER_TOOLS``, or a tool a
    span of the run names as its answer tool) ends the run with that call: it is how the run
    returns its answer, not a tool use, so it is no call of the run, and what it "returns" (the
    answer again, or a receipt) is no tool result that could ground the answer. ``named``: the
    answer tools the run's spans name.
    """
    answers = [c for c in calls if c.name is not None and (
        c.name in sc.ANSWER_TOOLS or c.name in named or c.name.startswith(sc.ANSWER_TOOL_PREFIXES))]
    if not answers:
        return calls, answers
    dropped = {id(c) for c in answers}
    return [c for c in calls if id(c) not in dropped], answers


def _answer_text(call: ToolCall) -> str | None:
    """The answer an answer-tool call gives: its one argument (smolagents ``answer``), else all of
    them (a structured output)."""
    args = call.arguments
    if isinstance(args, dict) and args:
        return as_text(next(iter(args.values()))) if len(args) == 1 else as_text(args)
    return call.arguments_raw


def _definitions(sources: Iterable[SpanFacts]) -> list[ToolDefinition]:
    """Every tool offered in the run, by name; a definition with a schema beats a bare name."""
    out: dict[str, ToolDefinition] = {}
    for f in sources:
        for d in f.tool_definitions or []:
            have = out.get(d.name)
            if have is None or (have.parameters is None and d.parameters is not None):
                out[d.name] = d
    return list(out.values())


# --- tool calls: one per real call --------------------------------------------------------------


#: json.dumps(…, sort_keys=True, default=str), its encoder built once
_CANON_ENCODER = json.JSONEncoder(sort_keys=True, default=str)
# The C encoder ``_CANON_ENCODER.encode`` builds on every call (two thirds of the cost of a small
# value), built once, and without circular-reference markers: a value that holds itself fails
# with RecursionError instead of ValueError, read the same.
_c_canon = (c_make_encoder(None, str, encode_basestring_ascii, None, ": ", ", ", True, False, True)
            if c_make_encoder is not None else None)


def _canon(args: Any) -> str:
    try:
        if _c_canon is not None:
            return "".join(_c_canon(args, 0))
        return _CANON_ENCODER.encode(args)  # pragma: no cover - CPython has the C encoder
    except (TypeError, ValueError, RecursionError):
        return repr(args)


class _CallBuilder:
    """Merges the places a tool call is seen in into one ToolCall per real call.

    A run's own calls are those after its last user message (``_Scope``); what comes before is
    the conversation's earlier turns. Tool-call ids are not unique: models reuse them, across
    turns and within one (GPT-4o sent two different calls with one id), so an id alone never
    merges two calls that differ in name or arguments, and a result pairs with the call of its
    id that is still unanswered in the same model input, in order.
    """

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self._keys: dict[int, tuple[int, int]] = {}
        #: id → the calls that carry it, in creation order (ids repeat)
        self._by_id: dict[str, list[ToolCall]] = {}
        #: (name, canonical arguments) of each call, by id(call); arguments do not change while
        #: LLM spans are added, which is when this is used
        self._call_keys: dict[int, str] = {}
        #: canonical JSON of each arguments value met, by id (the value kept, so the id stays its
        #: own): a call keeps its request's arguments, and spans share the requests they repeat
        self._canon: dict[int, tuple[Any, str]] = {}
        #: the requesting LLM span's (start, end), by id(call): one model call that two nested
        #: instrumentations record (a framework's LLM span around the client's) is one request
        self._requested_in: dict[int, tuple[int, int]] = {}
        #: results seen in model input: (part, the call it answers when known, position of an
        #: id-less result among that input's id-less results)
        self._results: list[tuple[ToolResultPart, ToolCall | None, int | None]] = []
        #: history messages already resolved: id(message) → (message, the calls it echoes or
        #: answers, one per request or result part). Later LLM spans repeat the history as the
        #: same message objects (ReadMemo), and resolve to the same calls.
        self._resolved: dict[int, tuple[Message, list[ToolCall | None]]] = {}
        self._scope = _Scope()
        #: the last LLM span's own history and the echo counts, unanswered calls and id-less
        #: result count its messages left (``add_llm``): the next span's history repeats it
        self._after_history: tuple[list[Message], _Echoes, dict[str, deque[ToolCall]], int] | None = None
        self._seq = 0
        self.problems: list[str] = []
        # Indexes that keep matching linear in the number of calls (a run may echo thousands of
        # id-less calls): built on first need, then kept up to date.
        #: (name, canonical arguments) → calls in creation order
        self._by_key: dict[str, list[ToolCall]] | None = None
        #: calls without a tool span, by name and by (name, canonical arguments), creation order
        self._free_by_name: dict[str | None, dict[int, ToolCall]] | None = None
        self._free_by_key: dict[str, dict[int, ToolCall]] = {}

    def sort_key(self, call: ToolCall) -> tuple[int, int]:
        return self._keys[id(call)]

    def _key(self, name: str | None, arguments: Any) -> str:
        """``_call_key``, each arguments value encoded once."""
        if arguments is None:
            return _call_key(name, None)
        hit = self._canon.get(id(arguments))
        if hit is None:
            hit = self._canon[id(arguments)] = (arguments, _canon(arguments))
        return f"{name}\x00{hit[1]}"

    def _key_of(self, call: ToolCall) -> str:
        key = self._call_keys.get(id(call))
        if key is None:
            key = self._call_keys[id(call)] = self._key(call.name, call.arguments)
        return key

    def _new(self, anchor: int, call: ToolCall) -> ToolCall:
        """``call``, a call of the run from now on, sorting at ``anchor``."""
        self._seq += 1
        self._keys[id(call)] = (anchor, self._seq)
        self.calls.append(call)
        if call.id:
            self._by_id.setdefault(call.id, []).append(call)
        if self._by_key is not None:
            self._by_key.setdefault(self._key_of(call), []).append(call)
        return call

    # LLM spans: requested calls (output), echoed calls and results (input history)
    def add_llm(self, f: SpanFacts, encloses_tools: bool = False) -> LLMCall:
        inputs = list(f.input_messages) if f.input_messages else []
        outputs = list(f.output_messages) if f.output_messages else []
        if encloses_tools:
            # several model calls on one span: an output call its own input already holds is a
            # stale key of an earlier call's output, not a new request
            outputs = _without_echoed_calls(outputs, inputs)
        history, continued = self._scope.own_history(inputs)
        after = self._after_history
        start = 0
        if after is not None and (continued or (len(after[0]) <= len(history)
                                                and all(map(operator.is_, after[0], history)))):
            # A history that begins with the last span's (the same message objects) leaves, over
            # that part, what it left there: its messages resolve to the calls they resolved to.
            # Only what the history adds is walked, so a run's model calls cost linear time.
            # (What it left is taken over, not copied: it is this span's from here on, and the
            # next span starts from this one's or from nothing.)
            _, seen, pending, idless = after
            start = len(after[0])
        else:
            seen = _Echoes()
            #: id → calls echoed in this input and not yet answered there, in order
            pending = defaultdict(deque)
            idless = 0
        resolved_by_id = self._resolved
        for m in history[start:] if start else history:
            if not m.tool_calls and not m.tool_results:
                continue
            resolved = resolved_by_id.get(id(m))
            known = resolved is not None and resolved[0] is m
            targets: list[ToolCall | None] = resolved[1] if known else []  # type: ignore[index]
            for i, req in enumerate(m.tool_calls):
                if known:
                    call = targets[i]
                    _count_echo(seen, req, self._key_of(call) if call is not None else None)
                else:
                    call = self._history_call(req, f, seen)
                    targets.append(call)
                if req.id and call is not None:
                    pending[req.id].append(call)
            for part in m.tool_results:
                if part.tool_call_id is None:
                    if not known:
                        self._results.append((part, None, idless))
                        targets.append(None)
                    idless += 1
                    continue
                queue = pending.get(part.tool_call_id)
                answered = queue.popleft() if queue else None
                if not known:
                    answered = answered or self._latest_unanswered(part.tool_call_id)
                    self._results.append((part, answered, None))
                    targets.append(answered)
            if not known:
                resolved_by_id[id(m)] = (m, targets)
        self._after_history = (history, seen, pending, idless)
        offered: list[str] | None = None  # (one list for the span's calls, made for its first)
        requested: list[str] = []
        for m in outputs:
            for req in m.tool_calls:
                # (a call of this id already made: maybe this very request, seen twice)
                call = self._same_request(req, f) if req.id and req.id in self._by_id else None
                if call is None:
                    if offered is None and f.tool_definitions:
                        offered = [d.name for d in f.tool_definitions]
                    call = self._new(f.start, ToolCall(
                        id=req.id, name=req.name, arguments=req.arguments, arguments_raw=req.arguments_raw,
                        arguments_error=_args_error(req), llm_span_id=f.span_id, offered_tools=offered,
                        sources=["llm_output"], start_time=f.start,
                    ))
                    self._requested_in[id(call)] = (f.start, f.end)
                else:
                    _add_source(call, "llm_output")
                requested.append(call.id or f"#{self._keys[id(call)][1]}")
        return LLMCall(
            span_id=f.span_id, model=f.model, input_messages=inputs, output_messages=outputs,
            tool_definitions=list(f.tool_definitions) if f.tool_definitions else [], tool_call_ids=requested,
            start_time=f.start, end_time=f.end,
        )

    def _same_request(self, req: ToolCallRequest, f: SpanFacts) -> ToolCall | None:
        """The call already created for this very request: same id, name and arguments, asked
        for by an LLM span that overlaps this one in time (nested instrumentations of one model
        call). Two responses in sequence never overlap, so a model that repeats a call with its
        id (GPT-4o does) makes two calls."""
        if not req.id:
            return None
        key = None  # encoded only for a call that could be the same request
        for call in self._by_id.get(req.id, ()):
            span = self._requested_in.get(id(call))
            if span is not None and span[0] <= f.end and f.start <= span[1]:
                if key is None:
                    key = self._key(req.name, req.arguments)
                if self._key_of(call) == key:
                    return call
        return None

    def _latest_unanswered(self, call_id: str) -> ToolCall | None:
        """A result whose call is not echoed before it in the same input (a history that was
        cut, or an emitter that sends results alone): the latest call of that id still
        without a result."""
        for call in reversed(self._by_id.get(call_id, ())):
            if "result_message" not in call.sources and not call.has_result:
                return call
        return None

    def _history_call(self, req: ToolCallRequest, f: SpanFacts, seen: _Echoes) -> ToolCall:
        if req.id and (req.id,) not in seen:
            same_id = self._by_id.get(req.id)
            if same_id is not None and len(same_id) == 1:
                c = same_id[0]
                if c.arguments is req.arguments and c.name == req.name:
                    # The first echo of its id in this input, of the one call of that id, with
                    # the very arguments object that call was made with (the readers share it):
                    # that call, as below, without encoding its arguments (``_Echoes.unkeyed``).
                    seen[req.id,] = 1
                    seen.unkeyed.append((req.id, c))
                    _add_source(c, "history")
                    return c
        key = self._key(req.name, req.arguments)
        self._keyed(seen)
        if req.id:
            # The n-th echo of (id, name, arguments) in this input is the n-th such call.
            nth = seen[req.id, key]
            for c in self._by_id.get(req.id, ()):
                ck = self._call_keys.get(id(c))
                if ck is None and c.name == req.name and _plainly_equal(c.arguments, req.arguments):
                    # (the echo of a call, mostly: its key without encoding its arguments again)
                    ck = self._call_keys[id(c)] = key
                if (ck or self._key_of(c)) == key:
                    if nth == 0:
                        seen[key] += 1
                        seen[req.id, key] += 1
                        seen[req.id,] += 1
                        _add_source(c, "history")
                        return c
                    nth -= 1
        # Same call under another id (Responses bridges echo `fc_…` item ids for `call_…` calls),
        # or no id at all: the n-th echo of (name, arguments) is the n-th such call.
        nth = seen[key]
        _count_echo(seen, req, key)
        if self._by_key is None:
            self._by_key = {}
            for c in self.calls:
                self._by_key.setdefault(self._key_of(c), []).append(c)
        same = self._by_key.get(key, ())
        if nth < len(same):
            call = same[nth]
            if req.id and call not in self._by_id.get(req.id, ()):
                self._by_id.setdefault(req.id, []).append(call)
            _add_source(call, "history")
            return call
        # Requested by a model output that was not recorded: it still happened before this call.
        return self._new(f.start - 1, ToolCall(
            id=req.id, name=req.name, arguments=req.arguments, arguments_raw=req.arguments_raw,
            arguments_error=_args_error(req), sources=["history"], start_time=f.start,
        ))

    def _keyed(self, seen: _Echoes) -> None:
        """Count by key the echoes ``seen`` holds unkeyed: before any count by key is read."""
        if seen.unkeyed:
            for call_id, call in seen.unkeyed:
                key = self._key_of(call)
                seen[key] += 1
                seen[call_id, key] += 1
            seen.unkeyed.clear()

    # Tool spans: the call as executed
    def add_tool_span(self, f: SpanFacts) -> None:
        t = f.tool
        if t is None:
            return
        call = self._unexecuted_with_id(t.call_id, t.name) if t.call_id else None
        if call is None and t.call_id and any(c.span_id is not None for c in self._by_id.get(t.call_id, ())):
            self.problems.append(f"span {f.span_id} ({f.name}): second tool span for call {t.call_id}")
        if call is None:
            call = self._first_free(t.name, t.arguments)
        if call is None:
            call = self._new(f.start, ToolCall(id=t.call_id, name=t.name, start_time=f.start))
        call.span_id = f.span_id
        self._unfree(call)
        _add_source(call, "tool_span")
        if call.id is None and t.call_id:
            call.id = t.call_id
            self._by_id.setdefault(t.call_id, []).append(call)
        _take_tool_run(call, t)

    def _unexecuted_with_id(self, call_id: str, name: str | None) -> ToolCall | None:
        """The first call of that id without a tool span, one of the same name preferred."""
        first = None
        for c in self._by_id.get(call_id, ()):
            if c.span_id is None:
                if c.name == name:
                    return c
                if first is None:
                    first = c
        return first

    def _first_free(self, name: str | None, arguments: Any) -> ToolCall | None:
        """The first call (in creation order) of that name without a tool span, one with the
        same arguments preferred."""
        if self._free_by_name is None:
            self._free_by_name = {}
            for c in self.calls:
                if c.span_id is None:
                    self._free_by_name.setdefault(c.name, {})[id(c)] = c
                    self._free_by_key.setdefault(self._key(c.name, c.arguments), {})[id(c)] = c
        if arguments is not None:
            exact = self._free_by_key.get(self._key(name, arguments))
            if exact:
                return next(iter(exact.values()))
        free = self._free_by_name.get(name)
        return next(iter(free.values())) if free else None

    def _unfree(self, call: ToolCall) -> None:
        if self._free_by_name is None:
            return
        self._free_by_name.get(call.name, {}).pop(id(call), None)
        self._free_by_key.get(self._key(call.name, call.arguments), {}).pop(id(call), None)

    def finish(self) -> list[ToolCall]:
        """Apply results seen only in later model input, then settle errors."""
        # (sorted on their keys, which are unique: the calls themselves are never compared)
        keys = self._keys
        self.calls = [c for _, c in sorted(zip(map(keys.__getitem__, map(id, self.calls)), self.calls))]
        # name → calls in call order not yet answered by a result message: an answered call
        # stays answered, so each list is consumed from the front
        unanswered: dict[str | None, deque[ToolCall]] | None = None
        for part, call, position in self._results:
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
                if part.tool_call_id is not None and part.tool_call_id not in self._by_id:
                    self.problems.append(f"tool result for unknown call id {part.tool_call_id}")
                continue
            if "result_message" in call.sources:
                continue  # the same result echoed in every later model input
            call.sources.append("result_message")
            if not call.has_result:
                call.result, call.result_raw, call.has_result = part.content, part.content_raw, True
            if part.is_error and call.error is None:
                call.error = as_text(part.content) or "error"
        for call in self.calls:
            if call.error is None and call.has_result:
                call.error = result_error(call.result)
        return self.calls


class _Scope:
    """Where a run's own part of each model input starts (docs/design.md, "Runs in conversations").

    A chat app sends the whole conversation with every model call. The run's own calls are
    those after its last user message, as the first of its LLM spans that carries a user
    message shows it; later spans repeat that message (and may add user-role messages of the
    framework's own after it), so the boundary there is the last user message with the same
    text, else their own last user message. Everything before is context: it grounds the
    answer, it is never this run's calls.
    """

    __slots__ = ("_anchor", "_anchored", "_inputs", "_start")

    def __init__(self) -> None:
        self._anchor: str | None = None
        self._anchored = False
        #: the last input asked about, and where its own part started
        self._inputs: list[Message] | None = None
        self._start = 0

    def own_history(self, inputs: list[Message]) -> tuple[list[Message], bool]:
        """The run's own part of ``inputs``, and True when it continues the last input's own
        part: the last input (the same message objects) with only messages after it that are no
        user's, so the boundary has not moved (the last user message is the one it was)."""
        prev = self._inputs
        self._inputs = inputs
        if (prev is not None and len(prev) <= len(inputs) and all(map(operator.is_, prev, inputs))
                and _last_user(inputs, len(prev)) < 0):
            return (inputs[self._start :] if self._start else inputs), True
        start = self._start = self._boundary(inputs)
        return (inputs[start:] if start else inputs), False

    def _boundary(self, inputs: list[Message]) -> int:
        last_user = _last_user(inputs)
        if last_user < 0:
            return 0
        if not self._anchored:
            self._anchored = True
            self._anchor = inputs[last_user].content
            return last_user + 1
        for i in range(last_user, -1, -1):
            m = inputs[i]
            if m.role == "user" and m.content == self._anchor:
                return i + 1
        return last_user + 1


def _last_user(inputs: list[Message], stop: int = 0) -> int:
    """Index of the last user message with content, looking no further back than ``stop``; -1: none."""
    for i in range(len(inputs) - 1, stop - 1, -1):
        m = inputs[i]
        if m.role == "user" and m.content:
            return i
    return -1


class _Echoes(defaultdict[Any, int]):
    """The echoes of calls met so far in one model input: how many per (name, arguments) key,
    per (id, key) and per id alone (``(id,)``). An echo that ``_history_call`` finds to be the
    very call of its id is counted by id at once and by key only before a count by key is read
    (``_CallBuilder._keyed``): most inputs never read one, and a key costs an encode."""

    __slots__ = ("unkeyed",)

    def __init__(self) -> None:
        super().__init__(int)
        #: (id, call) of the echoes not yet counted by key
        self.unkeyed: list[tuple[str, ToolCall]] = []


def _count_echo(seen: _Echoes, req: ToolCallRequest, key: str | None) -> None:
    if key is None:
        return
    seen[key] += 1
    if req.id:
        seen[req.id, key] += 1
        seen[req.id,] += 1


def _without_echoed_calls(outputs: list[Message], inputs: list[Message]) -> list[Message]:
    """The output messages without the tool calls (same id, name and arguments) that the input
    already holds; changed messages are copies (messages are shared between spans)."""
    echoed = {(r.id, _call_key(r.name, r.arguments)) for m in inputs for r in m.tool_calls}
    if not echoed:
        return outputs
    out = []
    for m in outputs:
        kept = [r for r in m.tool_calls if (r.id, _call_key(r.name, r.arguments)) not in echoed]
        out.append(m if len(kept) == len(m.tool_calls) else m.model_copy(update={"tool_calls": kept}))
    return out


#: value types two equal values of which, of one type, have one JSON text
_PLAIN = frozenset({str, int, bool, type(None)})


def _plainly_equal(a: Any, b: Any) -> bool:
    """True only when the two arguments values certainly have one canonical JSON text: the same
    object, or flat dicts with the same string keys and equal values of one plain type each (no
    float, no nesting); False when not sure."""
    if a is b:
        return True
    if type(a) is not dict or type(b) is not dict or len(a) != len(b):
        return False
    for k, v in a.items():
        w = b.get(k, _PLAIN)  # (a default no value can be)
        if type(k) is not str or type(v) is not type(w) or type(v) not in _PLAIN or v != w:
            return False
    return True


def _call_key(name: str | None, arguments: Any) -> str:
    return f"{name}\x00{_canon(arguments)}"


def _args_error(req: ToolCallRequest) -> str | None:
    if req.arguments is None and req.arguments_raw:
        return "arguments are not a JSON object"
    return None


def _take_tool_run(call: ToolCall, t: ToolExecution) -> None:
    """What a tool span says of its run, into the call it ran: arguments the model's request
    lacked or got wrong, the result, the error."""
    if (call.arguments is None or call.arguments_error) and t.arguments is not None:
        call.arguments, call.arguments_raw, call.arguments_error = t.arguments, t.arguments_raw, None
    elif call.arguments is None and call.arguments_raw is None:
        call.arguments_raw, call.arguments_error = t.arguments_raw, t.arguments_error
    if t.has_result:
        call.result, call.result_raw, call.has_result = t.result, t.result_raw, True
    if t.error and call.error is None:
        call.error = t.error
    if t.schema is not None and call.schema is None:
        call.schema = t.schema


def _add_source(call: ToolCall, source: str) -> None:
    if source not in call.sources:
        call.sources.append(source)


__all__ = ["assemble_trace", "build_trajectories", "Message"]
