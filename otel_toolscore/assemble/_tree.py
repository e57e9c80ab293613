"""The span tree of one trace: parents, children in call order, cycles and missing parents cut.

Nothing here raises on bad input: duplicate ids, missing parents and parent cycles become the
tree's ``problems`` (each run's ``Trajectory.problems``), and the spans concerned are read as roots.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

from otel_toolscore.conventions import SpanFacts


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
