"""Tool calls: one per real call. A tool call is seen in up to four places (the model's output,
later input history, a tool span, a ``role=tool`` result message); ``_CallBuilder`` makes all of
them one ``ToolCall``. The direct path (``_direct``) shares its pieces: the canonical key of a
call's arguments, what a tool span says of its run, the sources a call was seen in.
"""

from __future__ import annotations

import json
import operator
from collections import defaultdict, deque
from typing import Any

from otel_toolscore.assemble._rules import _Scope, give_result, settle_errors
from otel_toolscore.conventions import SpanFacts, ToolExecution
from otel_toolscore.trajectory import LLMCall, Message, ToolCall, ToolCallRequest, ToolResultPart

#: json.dumps(…, sort_keys=True, default=str), its encoder built once (public API only: issue 31,
#: BENCHMARKS.md "Private APIs (issue 31)")
_CANON_ENCODER = json.JSONEncoder(sort_keys=True, default=str)


def _canon(args: Any) -> str:
    """The canonical JSON text of a call's arguments (its repr when it has none): two requests
    with equal arguments have one."""
    try:
        return _CANON_ENCODER.encode(args)
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
            give_result(call, part)
        settle_errors(self.calls)
        return self.calls


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
