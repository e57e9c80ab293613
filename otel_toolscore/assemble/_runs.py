"""Which spans of a trace are agent runs: wrappers collapse into the run they wrap, real
sub-agents become nested runs, and a trace without agent spans is one run per local root that did
something.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_toolscore.assemble._tree import _Tree
from otel_toolscore.conventions import SpanFacts

_ACTIVITY = frozenset({"llm", "tool", "retrieval"})



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
