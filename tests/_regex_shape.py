"""The shape of a regular expression that backtracks without bound, found in its parse tree.

A variable-length part inside an unbounded quantifier is exponential when it can end on what
follows it, the rest of its iteration or the next iteration: `(a+)+`, `(\\w+\\s?)*`, `(\\d{1,3})+`,
`(a+a)+` split the same text into parts in exponentially many ways, and a failing match tries them
all. It is safe when every such part ends before something it cannot match (`(?:\\.[\\w-]+)+`: a
dot starts each iteration, no dot ends one).
Character sets are compared on a sample alphabet (ASCII, Latin-1 and a few wider letters and
spaces), enough for the classes patterns use.

What this cannot see, a pattern rescanned from every position of a long run (quadratic, not
exponential), is measured on adversarial input by `python -m benchmarks regex-scan`.
"""

from __future__ import annotations

import re

try:  # the parser re itself uses; named sre_* before Python 3.11
    from re import _constants as C  # type: ignore[attr-defined]  # noqa: N812
    from re import _parser as P  # type: ignore[attr-defined]  # noqa: N812
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as C  # noqa: N812
    import sre_parse as P  # noqa: N812
from typing import Any

_ALPHABET = frozenset(chr(i) for i in range(0x250)) | frozenset("АяΩ中\u2028\u3000\u00a0")
_CATEGORY = {
    C.CATEGORY_DIGIT: re.compile(r"\d"), C.CATEGORY_NOT_DIGIT: re.compile(r"\D"),
    C.CATEGORY_WORD: re.compile(r"\w"), C.CATEGORY_NOT_WORD: re.compile(r"\W"),
    C.CATEGORY_SPACE: re.compile(r"\s"), C.CATEGORY_NOT_SPACE: re.compile(r"\S"),
}
_REPEATS = (C.MAX_REPEAT, C.MIN_REPEAT)
_ZERO_WIDTH = (C.AT, C.ASSERT, C.ASSERT_NOT)


class _Shape:
    def __init__(self, flags: int) -> None:
        self.ignore_case = bool(flags & re.IGNORECASE)
        self.dot_all = bool(flags & re.DOTALL)

    def _folded(self, chars: set[str]) -> frozenset[str]:
        if self.ignore_case:
            chars = chars | {c.lower() for c in chars} | {c.upper() for c in chars if len(c.upper()) == 1}
        return frozenset(chars)

    def item_chars(self, op: Any, av: Any) -> frozenset[str] | None:
        """The characters a one-character item matches; None for anything else."""
        if op == C.LITERAL:
            return self._folded({chr(av)})
        if op == C.NOT_LITERAL:
            return _ALPHABET - self._folded({chr(av)})
        if op == C.ANY:
            return _ALPHABET if self.dot_all else _ALPHABET - {"\n"}
        if op == C.IN:
            negate, chars = False, set()
            for sub_op, sub_av in av:
                if sub_op == C.NEGATE:
                    negate = True
                elif sub_op == C.LITERAL:
                    chars.add(chr(sub_av))
                elif sub_op == C.RANGE:
                    chars.update(c for c in _ALPHABET if sub_av[0] <= ord(c) <= sub_av[1])
                elif sub_op == C.CATEGORY:
                    chars.update(c for c in _ALPHABET if _CATEGORY[sub_av].match(c))
            folded = self._folded(chars)
            return _ALPHABET - folded if negate else folded
        if op == C.CATEGORY:  # \b, \B and the like are AT; a bare category is a class
            return frozenset(c for c in _ALPHABET if _CATEGORY[av].match(c))
        return None

    def children(self, op: Any, av: Any) -> list[Any]:
        if op in _REPEATS or op == C.POSSESSIVE_REPEAT:
            return [av[2]]
        if op == C.SUBPATTERN:
            return [av[-1]]
        if op == C.BRANCH:
            return list(av[1])
        if op in (C.ASSERT, C.ASSERT_NOT):
            return [av[1]]
        if op == C.ATOMIC_GROUP:
            return [av]
        return []

    def nullable(self, seq: Any) -> bool:
        return all(self._item_nullable(op, av) for op, av in seq)

    def _item_nullable(self, op: Any, av: Any) -> bool:
        if op in _ZERO_WIDTH or op == C.GROUPREF:
            return True
        if op in _REPEATS or op == C.POSSESSIVE_REPEAT:
            return av[0] == 0 or self.nullable(av[2])
        if op == C.BRANCH:
            return any(self.nullable(alt) for alt in av[1])
        if op in (C.SUBPATTERN, C.ATOMIC_GROUP):
            return self.nullable(self.children(op, av)[0])
        return False

    def chars(self, seq: Any) -> frozenset[str]:
        found: set[str] = set()
        for op, av in seq:
            own = self.item_chars(op, av)
            if own is not None:
                found |= own
            elif op == C.GROUPREF:
                found |= _ALPHABET
            elif op not in (C.ASSERT, C.ASSERT_NOT):
                for child in self.children(op, av):
                    found |= self.chars(child)
        return frozenset(found)

    def first(self, seq: Any) -> frozenset[str]:
        """What the first character of a match of seq can be."""
        found: set[str] = set()
        for op, av in seq:
            own = self.item_chars(op, av)
            if own is not None:
                return frozenset(found | own)
            if op == C.GROUPREF:
                found |= _ALPHABET
            elif op == C.BRANCH:
                for alt in av[1]:
                    found |= self.first(alt)
            elif op not in _ZERO_WIDTH:
                found |= self.first(self.children(op, av)[0])
            if not self._item_nullable(op, av):
                break
        return frozenset(found)

    def overlaps(self, seq: Any, after: frozenset[str], found: list[str]) -> None:
        """Each variable-length repeat in seq that can give characters to what follows it (the
        rest of seq, then `after`): where a match could stop early or late."""
        items = list(seq)
        for i, (op, av) in enumerate(items):
            rest = items[i + 1:]
            follow = self.first(rest) | (after if self.nullable(rest) else frozenset())
            if op in _REPEATS:
                if av[0] != av[1]:
                    overlap = self.chars(av[2]) & follow
                    if overlap:
                        sample = "".join(sorted(overlap)[:8])
                        found.append(f"{P.SubPattern(P.State(), [(op, av)])} can end on what follows it ({sample!r}…)")
                again = self.first(av[2]) if av[1] > 1 else frozenset()
                self.overlaps(av[2], follow | again, found)
            elif op == C.BRANCH:
                for alt in av[1]:
                    self.overlaps(alt, follow, found)
            elif op == C.SUBPATTERN:
                self.overlaps(av[-1], follow, found)
            # possessive repeats and atomic groups give nothing back; lookarounds match nothing


def nested_ambiguous_repeats(pattern: re.Pattern[str]) -> list[str]:
    """Each unbounded quantifier of the pattern whose body can match nothing, or whose
    iterations can end where the next begins (described, for the failure message)."""
    shape = _Shape(pattern.flags)
    found: list[str] = []

    def walk(seq: Any) -> None:
        for op, av in seq:
            if op in _REPEATS and av[1] == C.MAXREPEAT:
                body = av[2]
                if shape.nullable(body):
                    found.append(f"an unbounded repeat of a body that can match nothing: {body}")
                else:
                    shape.overlaps(body, shape.first(body), found)
            if op == C.ATOMIC_GROUP or op == C.POSSESSIVE_REPEAT:
                continue  # no backtracking into them
            for child in shape.children(op, av):
                walk(child)

    walk(P.parse(pattern.pattern, pattern.flags))
    return found
