"""The answer's claims, each read in its place, checked against the conversation
(docs/scorers.md, ``tool_result_verification``: facts, grounding, entities).

The answer is cut into *units*: a sentence, a list item (with its sub-items: one *block*) or a
table row. Each fact a unit states is a claim, decided in that unit:

* **literal**: a source says it (``_grounding.Sources``: the same value, normalised; an id only as
  it appears);
* **derived**, only where the unit frames it so (framing words, or a written expression): a total
  or difference of amounts of the sources and of the answer's own grounded amounts; a written
  expression (``2 × $50 = $100``) is evaluated as written, its result grounded when the arithmetic
  holds, flagged when it does not;
* **counts** (``8 passengers``, ``Passengers: 8``): small numbers are claims where they count
  something, grounded by a number of the sources or the length of a list a result holds;
* **entity-anchored**: in a block that names exactly one entity of the results (a record's id),
  an amount, date or time that the entity's records do not hold, while another entity's record
  does, is the wrong entity's value (the other flight's fare, the other leg's date).

Precision first: a flag pages a person. A fact whose kind no source holds is not judged.
"""

from __future__ import annotations

import ast
import datetime
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from otel_toolscore.scorers._facts import Fact, facts_of

#: kinds a record's value is compared in (entity anchoring)
_ANCHORED = ("money", "date", "time")

# --- units -------------------------------------------------------------------------------------

_ITEM = re.compile(r"^(?P<indent>\s*)(?:[-*•+▪◦]|\d{1,2}[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]*]*\s+(?=[A-Z*\"'(\[])")
#: where ``_SENTENCE_END`` splits, begun with a character class (searched in C): a text without it
#: is one sentence
_SENTENCE_BREAK = re.compile(r"[.!?][\"')\]*]*\s+[A-Z*\"'(\[]")
_TABLE_ROW = re.compile(r"^\s*\|")


@dataclass(slots=True)
class Unit:
    """A sentence, list item line or table row, and the block it belongs to (a list item with
    its sub-items, or the unit itself)."""

    text: str
    block: int
    #: the line that introduces the list the unit is an item of ("Here is the breakdown:")
    lead: str = ""
    #: ``framed``, once asked
    is_framed: bool | None = None
    #: the facts extraction finds in it (``read``)
    facts: tuple[Fact, ...] = ()


def units(text: str) -> list[Unit]:
    if "\n" not in text and "\\n" not in text and _SENTENCE_BREAK.search(text) is None:
        return [Unit(text.strip(), 0)] if text.strip() else []  # one line, one sentence
    out: list[Unit] = []
    block = -1
    item_indent: int | None = None  # the indent of the list item whose sub-items follow
    lead = ""  # the last line that ends with a colon, while a list follows it
    for raw in text.replace("\\n", "\n").split("\n"):
        line = raw.rstrip()
        if not line.strip():
            item_indent = None
            continue
        item = _ITEM.match(line)
        indent = len(line) - len(line.lstrip())
        if item is not None:
            if item_indent is None or indent <= item_indent:
                block += 1
                item_indent = indent
            out.append(Unit(line.strip(), block, lead))
            if line.rstrip(" *").endswith(":"):
                lead = line.strip()  # a sub-list's own heading
            continue
        if _TABLE_ROW.match(line):
            block += 1
            item_indent = None
            out.append(Unit(line.strip(), block, lead))
            continue
        if item_indent is not None and indent > item_indent:
            out.append(Unit(line.strip(), block, lead))  # a continuation of the item
            continue
        item_indent = None
        lead = line.strip() if line.rstrip(" *").endswith(":") else ""
        for sentence in _SENTENCE_END.split(line.strip()):
            if sentence.strip():
                block += 1
                out.append(Unit(sentence.strip(), block))
    return out


# --- framing and written expressions --------------------------------------------------------

_NUMBER_WORDS = r"(?:\d+|two|three|four|five|six|seven|eight|nine|ten|both|all|each)"
_FRAMING_WORDS = (
    r"\b(?:(?:sub)?totals?(?:ing|ed|led|ling)?|altogether|combined|sum|difference|refund(?:s|ed|able)?|"
    r"balance|remaining|remainder|left\b|leftover|sav(?:e|es|ed|ing|ings)\b|net\b|more\s+than|less\s+than|"
    r"after\s+(?:the\s+|a\s+)?(?:discount|deduct\w*|credit|appl\w+)|before\s+(?:the\s+|a\s+)?discount|"
    r"breakdown|split|structured|divided|calculat\w*|payments?\b|includ\w*|in\s+all\b|all[\s-]in\b|back\b)")
#: "for 3 passengers", "for both flights": an amount for several is a count times one
_FOR_SEVERAL = (
    rf"\b(?:for|across|between|of)\s+(?:the\s+)?{_NUMBER_WORDS}\s+(?:\w+\s+)?"
    r"(?:passengers?|people|persons?|travell?ers?|guests?|items?|tickets?|nights?|flights?|bags?|"
    r"segments?|legs?|reservations?|orders?|lines?|months?|units?|seats?|rooms?|adults?|children)\b")
_FRAMING = re.compile(f"{_FRAMING_WORDS}|{_FOR_SEVERAL}", re.I)
#: what frames the items of a list from the line that introduces it ("Payment breakdown:")
_LEAD_FRAMING = re.compile(_FRAMING_WORDS, re.I)
_OPERATOR_SIGN = re.compile(r"\s[x×*]\s|[×÷]|\s[-−–+/]\s|[+=]")


def framed(unit: Unit) -> bool:
    """The unit frames its amounts as derived: framing words (in it, or in the line that introduces
    its list), or arithmetic written out. Asked only of units with a claim that needs it."""
    if unit.is_framed is None:
        unit.is_framed = (bool(_FRAMING.search(unit.text)) or bool(_OPERATOR_SIGN.search(unit.text))
                          or bool(unit.lead and _LEAD_FRAMING.search(unit.lead)))
    return unit.is_framed


_EXPR_TOKEN = re.compile(
    r"(?P<num>[$€£¥₹]?\s?\d[\d,]*(?:\.\d+)?)|(?P<op>(?<=\s)[x×](?=\s)|[×*÷/+()]|[-−–](?=\s*[$€£¥₹(]?\s?\d))",
)
#: "(flights)", "(insurance)": words between operands, dropped before the arithmetic is read
_WORDS_IN_PARENS = re.compile(r"\([^()\d]*\)")
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _evaluate(expression: str) -> float | None:
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError("not arithmetic")

    try:
        result = value(tree)
    except (ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    return result if math.isfinite(result) else None


def _left_expression(left: str) -> tuple[str, int] | None:
    """The arithmetic written at the end of ``left`` (what stands before an ``=``), as Python, and
    how many numbers it has; None when no arithmetic with an operator stands there."""
    tokens: list[tuple[str, str]] = []
    for match in _EXPR_TOKEN.finditer(left):
        if match["num"] is not None:
            tokens.append(("num", re.sub(r"[^\d.]", "", match["num"])))
        else:
            op = match["op"]
            tokens.append(("op", {"x": "*", "×": "*", "÷": "/", "−": "-", "–": "-"}.get(op, op)))
    # the longest suffix that is an expression with at least one operator between numbers
    for start in range(len(tokens)):
        suffix = tokens[start:]
        if not suffix or suffix[0][1] in (")", "*", "/", "+") or not any(
                kind == "op" and tok not in "()" for kind, tok in suffix):
            continue
        text = " ".join(tok for _, tok in suffix)
        if _evaluate(text) is not None:
            return text, sum(1 for kind, _ in suffix if kind == "num")
    return None


@dataclass(slots=True)
class Written:
    """An expression written in the answer: ``left = fact``."""

    left: str
    value: float
    fact: Fact
    #: the numbers the arithmetic is written with
    operands: tuple[float, ...] = ()


def written_expressions(unit: str, facts: list[Fact]) -> list[Written]:
    """Each ``<arithmetic> = <amount>`` of the unit, with the amount's fact."""
    out = []
    cleaned = _WORDS_IN_PARENS.sub(" ", unit.replace("*", " ").replace("`", " "))
    for match in re.finditer(r"=\s*(?P<rhs>[$€£¥₹]?\s?\d[\d,]*(?:\.\d+)?)", cleaned):
        left = cleaned[: match.start()]
        left = left.rsplit("=", 1)[-1]  # a chain "a + b = c = d": the last step
        found = _left_expression(left)
        if found is None:
            continue
        value = _evaluate(found[0])
        rhs = re.sub(r"[^\d.]", "", match["rhs"])
        fact = next((f for f in facts if f.kind in ("money", "number") and isinstance(f.value, float)
                     and abs(f.value - float(rhs)) < 1e-9), None)
        if value is not None and fact is not None:
            operands = tuple(float(n) for n in re.findall(r"\d+(?:\.\d+)?", found[0]))
            out.append(Written(found[0], value, fact, operands))
    return out


def holds(written: Written) -> bool:
    """The written arithmetic gives the amount written, to the precision written."""
    stated = written.fact.value
    decimals = written.fact.decimals
    return abs(round(written.value, decimals) - stated) < 1e-6 or abs(written.value - stated) <= 0.01 + 1e-9


# --- counts -------------------------------------------------------------------------------------

_NOT_COUNTED = frozenset(
    "of or and to the a an in on at by for from with per x times more less than percent hours hour minutes "
    "minute days day weeks week months month years year am pm st nd rd th".split())
_ORDINAL_BEFORE = frozenset(
    "option step flight day part item segment leg number no page version level tier phase round gate terminal "
    "seat row class chapter section question point stage priority".split())
_COUNT_AT = r"(?<![\w.,/:$€£#+-]){n}(?![\w.,:/%°-]|\s*[)\]])"


def counts(unit: str, facts: Iterable[Fact]) -> list[Fact]:
    """The small numbers of the unit that count something (``8 passengers``, ``Passengers: 8``,
    ``9 total``), as claims: extraction leaves numbers up to 10 out, as ordinals and list
    numbering are not facts."""
    out = []
    for fact in facts:
        if not (fact.kind == "number" and fact.minor and fact.unit is None and fact.value > 0):
            continue
        n = re.escape(fact.text)
        for match in re.finditer(_COUNT_AT.format(n=n), unit):
            before, after = unit[: match.start()], unit[match.end():]
            if re.match(r"^\s*(?:\d{1,2}[.)]|[-*•+])?\s*$", before) and re.match(r"^[.)]\s", after):
                continue  # list numbering
            previous = re.search(r"([A-Za-z]+)\W*$", before)
            label = re.search(r"[A-Za-z][A-Za-z ()/-]{0,40}\**\s*:\s*\**\s*$", before)
            noun = re.match(r"\s+([A-Za-z]{3,})", after)
            if label is not None and not re.match(r"\s*[:.]\s*\d", after):
                out.append(Fact("number", fact.value, fact.text, decimals=0))
                break
            if noun is None or noun[1].lower() in _NOT_COUNTED:
                continue
            if previous is not None and (previous[1].lower() in _ORDINAL_BEFORE or previous[1][0].isupper()
                                         and before.rstrip().endswith(previous[1])):
                continue  # "Option 2 costs", "Flight 1 departs": a name, not a count
            out.append(Fact("number", fact.value, fact.text, decimals=0))
            break
    return out


# --- records (entity anchoring) -------------------------------------------------------------

_NEXT_DAY_TIME = re.compile(r"\d{1,2}:\d{2}(?::\d{2})?\s?\+1\b")
#: keys whose numbers are amounts of money (what a price in the answer is held against)
_MONEY_KEY = re.compile(r"price|amount|cost|balance|fee|total|refund|fare|charge|paid|payment|credit|"
                        r"economy|business|first|premium|basic", re.I)
_ID_KEY = re.compile(r"(?:^|_)(?:id|number|code|ref|reference)$|^(?:id|uuid|pnr)$", re.I)


@dataclass(slots=True)
class Record:
    """What the results hold for one entity (every record keyed by its id, merged)."""

    key: str
    numbers: set[float] = field(default_factory=set)
    facts: list[Fact] = field(default_factory=list)
    kinds: set[str] = field(default_factory=set)
    shown: dict[str, Any] = field(default_factory=dict)
    #: a time of the record is marked as the next day ("00:00:00+1"): its dates' next days are its too
    overnight: bool = False

    def add_leaf(self, key: str, leaf: Any) -> None:
        if isinstance(leaf, bool) or leaf is None:
            return
        if isinstance(leaf, (int, float)):
            if math.isfinite(leaf):
                self.numbers.add(round(abs(float(leaf)), 2))
                if _MONEY_KEY.search(key):
                    self.kinds.add("money")
        elif isinstance(leaf, str):
            if "+1" in leaf and _NEXT_DAY_TIME.search(leaf):
                self.overnight = True
            for fact in facts_of(leaf[:2000]):
                self.facts.append(fact)
                if fact.kind in ("money", "number"):
                    self.numbers.add(round(abs(float(fact.value)), 2))
                    if fact.kind == "money" or _MONEY_KEY.search(key):
                        self.kinds.add("money")
                elif fact.kind in ("date", "time"):
                    self.kinds.add(fact.kind)
        if len(self.shown) < 12 and key not in self.shown:
            self.shown[key] = leaf if not isinstance(leaf, str) else leaf[:60]

    def holds(self, fact: Fact) -> bool:
        if fact.kind == "money":
            value = round(abs(fact.value), 2)
            return value in self.numbers or any(abs(n - value) < 0.5 * 10.0 ** -fact.decimals + 1e-9
                                                for n in self.numbers)
        if fact.kind == "date":
            readings = fact.alternatives or (fact.value,)
            for other in self.facts:
                if other.kind != "date":
                    continue
                for y, m, d in other.alternatives or (other.value,):
                    days = [(y, m, d), _shifted((y, m, d), 1)] if self.overnight else [(y, m, d)]
                    for fy, fm, fd in readings:
                        for y2, m2, d2 in days:
                            if (fm, fd) == (m2, d2) and (fy is None or y2 is None or fy == y2):
                                return True
            return False
        if fact.kind == "time":
            return any(other.kind == "time" and (other.value == fact.value or (
                (fact.ambiguous or other.ambiguous) and other.value % 720 == fact.value % 720))
                for other in self.facts)
        return True


class Records:
    """The results' records by the (case-folded) ids that key them: of the ``wanted`` ids only
    (the ones an answer names), every id's with None."""

    def __init__(self, values: Iterable[Any], wanted: set[str] | None = None) -> None:
        self.by_id: dict[str, list[Record]] = {}
        stack: list[tuple[Any, int]] = [(value, 0) for value in values]
        while stack:
            value, depth = stack.pop()
            if depth > 20:
                continue
            if type(value) is list:
                stack.extend((item, depth + 1) for item in value[:2000])
                continue
            if type(value) is not dict:
                continue
            ids: list[str] = []
            for key, item in value.items():
                kind = type(item)
                if kind is dict or kind is list:
                    stack.append((item, depth + 1))
                elif kind is str or kind is int:
                    text = item if kind is str else str(item)
                    if 3 <= len(text) <= 64:
                        folded = text.casefold()
                        if (wanted is None or folded in wanted) and _id_key(str(key)):
                            ids.append(folded)
            if ids:
                record = Record(ids[0])
                _fill(record, value, depth)
                for key in dict.fromkeys(ids):
                    self.by_id.setdefault(key, []).append(record)


@lru_cache(maxsize=1024)
def _id_key(key: str) -> bool:
    return _ID_KEY.search(key) is not None


def _fill(record: Record, value: Any, depth: int, key: str = "") -> None:
    if depth > 20:
        return
    if isinstance(value, dict):
        for k, item in value.items():
            _fill(record, item, depth + 1, str(k))
    elif isinstance(value, list):
        for item in value[:500]:
            _fill(record, item, depth + 1, key)
    else:
        record.add_leaf(key, value)


# --- the check -------------------------------------------------------------------------------


@dataclass(slots=True)
class Finding:
    """A claim of the answer nothing supports (``reason``), with its evidence."""

    fact: Fact
    sentence: str
    reason: str  # "unsupported", "arithmetic", "entity"
    entity: str | None = None
    record: dict[str, Any] | None = None
    #: for arithmetic that does not hold: its operands that no source states as they are
    operands: tuple[str, ...] = ()


_LABEL_WORDS = frozenset({"item", "option", "step", "part", "chapter", "section", "page", "question", "round",
                          "phase", "stage", "level", "tier", "no", "no.", "number", "#"})


def _label_number(unit: str, fact: Fact) -> bool:
    """"Item 11", "Option 2", "Step 3": a number that names or orders, not a fact."""
    if fact.kind != "number" or fact.unit is not None:
        return False
    at = unit.find(fact.text)
    if at > 0 and unit[at - 1] not in (" ", "#", "."):
        return False
    words = unit[max(0, at - 20):at].split() if at > 0 else []
    return bool(words) and words[-1].strip("*").lower() in _LABEL_WORDS


def compound_word(fact: Fact) -> bool:
    """"3G-only", "5G-preferred", "55-year-old": a word built on a short code or number, which an
    answer uses as a word, not an identifier it states."""
    text = fact.text
    if fact.kind != "identifier" or "-" not in text or "_" in text:
        return False
    parts = text.split("-")
    coded = [part for part in parts if any(ch.isdigit() for ch in part)]
    return len(coded) == 1 and len(coded[0]) <= 3 and all(p.isalpha() for p in parts if p not in coded)


def read(text: str) -> list[Unit]:
    """The answer's units, each with the facts extraction finds in it (the answer's facts are
    those of its units: it is read once)."""
    out = units(text)
    for unit in out:
        unit.facts = facts_of(unit.text)
    return out


def _range_end(unit: str, fact: Fact) -> bool:
    """``-27`` of "May 26-27" or "10-12": the end of a range, not a negative number."""
    if fact.kind != "number" or fact.text[:1] not in ("-", "−"):
        return False
    at = unit.find(fact.text)
    return at > 0 and (unit[at - 1].isdigit() or unit[at - 1].isalpha())


#: the derived amounts of an answer may build on each other (a balance after each payment): rounds
_DERIVED_ROUNDS = 8
#: entities of one block whose values are summed (a fare of several flights), and values per entity
_MAX_SUMMED_ENTITIES = 6
_MAX_ENTITY_VALUES = 12
_MAX_COMBINATIONS = 4096
_NEXT_OR_PREVIOUS_DAY = re.compile(
    r"\b(?:day\s+(?:after|before)|next\s+day|following\s+day|previous\s+day|tomorrow|yesterday|overnight)\b|\+1\b",
    re.I)


class Context:
    """What the check asks of the run (``tool_results`` answers each when first asked)."""

    __slots__ = ()

    def supports(self, fact: Fact, derived: bool) -> bool:
        """A source says the fact (``derived``: or it is a total of their amounts), or the agent
        stated the amount in an earlier answer."""
        raise NotImplementedError

    #: ``supports`` of the sources alone, asked first of every claim: (fact, derived) -> bool
    literal: Callable[[Fact, bool], bool]

    def kind_known(self, fact: Fact) -> bool:
        """The sources hold facts of the fact's kind (a fact of a kind no source holds is not judged)."""
        raise NotImplementedError

    def add_amounts(self, values: Iterable[float]) -> None:
        """The answer's grounded amounts, for the totals it derives from them."""
        raise NotImplementedError

    def records(self, wanted: set[str]) -> Records:
        """The results' records of the entities with these (case-folded) ids."""
        raise NotImplementedError

    def user_facts(self) -> list[Fact]:
        """The facts of the user's messages."""
        raise NotImplementedError

    def list_lengths(self) -> set[int]:
        """The lengths of the lists the results hold (what a count may count)."""
        raise NotImplementedError

    def source_dates(self) -> set[tuple[int | None, int, int]]:
        """The dates the sources hold."""
        raise NotImplementedError


@dataclass(slots=True)
class _Occurrence:
    unit: Unit
    fact: Fact
    written: list[Written]
    #: the text of the unit's block (a list item with its sub-items)
    block: str = ""
    #: the answer's amounts stated before this one, in order
    before: tuple[float, ...] = ()

    @property
    def framed(self) -> bool:
        return framed(self.unit)


def check(read_units: list[Unit], context: Context, max_claims: int = 500) -> tuple[list[Fact], list[Finding]]:
    """The answer's claims (each once, in order) and the findings against them, the answer as
    ``read`` gives it. A claim is grounded when one of its occurrences is (an amount the answer
    derives once may be restated)."""
    claims: list[Fact] = []
    parsed: list[tuple[Unit, list[Fact], bool, list[Written]]] = []
    seen: set[tuple[str, Any]] = set()
    has_id = False
    for unit in read_units:
        text = unit.text
        unit_facts = []
        minor = []
        for f in unit.facts:
            kind = f.kind
            if kind == "number":
                if f.minor:
                    minor.append(f)
                    continue
                if f.unit is None and (_range_end(text, f) or _label_number(text, f)):
                    continue
            elif kind == "identifier":
                if compound_word(f):
                    continue
                has_id = True
            unit_facts.append(f)
        if minor:
            unit_facts += counts(text, [f for f in minor if not (_range_end(text, f) or _label_number(text, f))])
        written = written_expressions(text, unit_facts) if "=" in text else []
        parsed.append((unit, unit_facts, False, written))
        for f in unit_facts:
            key = f.key
            if key not in seen:
                seen.add(key)
                claims.append(f)
        if len(claims) > max_claims:
            break
    claims = claims[:max_claims]

    # 1. literal support: most claims restate a value (and most answers need nothing more)
    unsupported: set[tuple[str, Any]] = set()
    answer_amounts: set[float] = set()
    answer_numbers: set[float] = set()
    literal = context.literal
    for fact in claims:
        if literal(fact, False) or (fact.kind == "money" and context.supports(fact, False)):
            if fact.kind == "money":
                answer_amounts.add(round(abs(fact.value), 2))
            elif fact.kind == "number" and fact.unit is None:
                answer_numbers.add(fact.value)
        elif context.kind_known(fact):
            unsupported.add(fact.key)
    anchoring = _may_anchor(parsed) if has_id else []
    occurrences: dict[tuple[str, Any], list[_Occurrence]] = {}
    if unsupported or anchoring:
        checked = {f.key for f in claims}
        blocks: dict[int, list[str]] = {}
        for unit, _, _, _ in parsed:
            blocks.setdefault(unit.block, []).append(unit.text)
        stated: list[float] = []
        for unit, unit_facts, _, written in parsed:
            for fact in unit_facts:
                if fact.key in checked:
                    occurrences.setdefault(fact.key, []).append(_Occurrence(
                        unit, fact, written, "\n".join(blocks[unit.block]), tuple(stated)))
                if fact.kind == "money":
                    stated.append(round(abs(fact.value), 2))
    pending = {key: occurrences[key] for key in occurrences if key in unsupported}
    findings: list[Finding] = []
    anchored = _anchor(anchoring, context, occurrences) if anchoring else []
    for finding in anchored:
        pending.pop(finding.fact.key, None)
        findings.append(finding)
    wrong_arithmetic: set[tuple[str, Any]] = set()
    if pending:
        context.add_amounts(answer_amounts)
        # 2. what the answer derives: written arithmetic, visible sums of its own amounts, framed
        # totals; each amount derived may be an operand of the next
        for _ in range(_DERIVED_ROUNDS):
            grounded = [key for key, found in pending.items()
                        if _derived(found, context, answer_amounts, answer_numbers, wrong_arithmetic)]
            if not grounded:
                break
            new_amounts = []
            for key in grounded:
                fact = pending.pop(key)[0].fact
                if fact.kind == "money":
                    new_amounts.append(round(abs(fact.value), 2))
            answer_amounts.update(new_amounts)
            context.add_amounts(new_amounts)
    for key, found in pending.items():
        first = found[0]
        if key not in wrong_arithmetic:
            findings.append(Finding(first.fact, first.unit.text, "unsupported"))
            continue
        wrong = next(w for o in found for w in o.written if w.fact.key == key and not holds(w))
        unit = next(o.unit for o in found if any(w is wrong for w in o.written))
        suspects = tuple(f.text for f in facts_of(unit.text) if f.kind == "money" and f.key != key
                         and any(abs(abs(f.value) - n) < 0.005 for n in wrong.operands)
                         and not context.supports(f, False))
        findings.append(Finding(first.fact, unit.text, "arithmetic", operands=suspects))
    return claims, findings


def _derived(found: list[_Occurrence], context: Context, answer_amounts: set[float], answer_numbers: set[float],
             wrong_arithmetic: set[tuple[str, Any]]) -> bool:
    """One occurrence of the claim grounds it as derived."""
    fact = found[0].fact
    if isinstance(fact.value, float) and not math.isfinite(fact.value):
        return False
    for occurrence in found:
        mine = [w for w in occurrence.written if w.fact.key == fact.key]
        if mine:
            if all(holds(w) for w in mine):
                return True
            wrong_arithmetic.add(fact.key)
            continue
        if fact.kind == "money":
            value = round(abs(fact.value), 2)
            if _visible(value, answer_amounts):
                return True
            if _entity_sum(value, occurrence, context):
                return True
            if occurrence.framed and (
                    context.supports(fact, True) or _running_total(value, occurrence, context)):
                return True
            if _DIFFERENCE.search(occurrence.unit.text) and _difference_of(value, answer_amounts, context):
                return True
        elif fact.kind == "number" and fact.unit is None:
            if int(fact.value) == fact.value and int(fact.value) in context.list_lengths():
                return True
            if occurrence.framed and _product_or_sum(fact.value, answer_numbers):
                return True
        elif fact.kind == "number" and fact.unit == "duration" and "day" in fact.text.lower():
            if _days_between(int(fact.value), context.source_dates()):
                return True
        elif fact.kind == "date" and _NEXT_OR_PREVIOUS_DAY.search(occurrence.unit.text):
            dates = context.source_dates()
            if any(_shifted(reading, step) in dates or (None, *_shifted(reading, step)[1:]) in dates
                   for reading in fact.alternatives or (fact.value,) for step in (-1, 1)):
                return True
    return False


_SPELLED = {"both": 2, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
            "ten": 10, "twice": 2, "double": 2, "triple": 3}
_SMALL_NUMBER = re.compile(r"(?<![\w.,$€£#:/-])(\d{1,2})(?![\d.,:/%-]\d)|\b(" + "|".join(_SPELLED) + r")\b", re.I)


def stated_counts(text: str) -> set[int]:
    """The small counts an answer states, in digits or words ("3 passengers", "both flights"):
    what its totals may multiply by."""
    out = set()
    for match in _SMALL_NUMBER.finditer(text):
        n = int(match[1]) if match[1] else _SPELLED[match[2].lower()]
        if 2 <= n <= 10:
            out.add(n)
    return out


#: "the difference of $2,571": one amount the answer states, taken from one a source states
_DIFFERENCE = re.compile(r"\b(?:difference|minus)\b", re.I)


def _difference_of(value: float, amounts: set[float], context: Context) -> bool:
    for stated in amounts:
        for other in (round(value + stated, 2), round(stated - value, 2)):
            if other > 0 and context.supports(Fact("money", other, f"{other}", decimals=2), False):
                return True
    return False


def _visible(value: float, amounts: set[float]) -> bool:
    """A sum or difference of two of the answer's own amounts, or a count times one: arithmetic a
    reader sees on the page."""
    if len(amounts) < 1:
        return False
    for a in amounts:
        if round(value - a, 2) in amounts or round(a - value, 2) in amounts:
            return True
        for k in range(2, 11):
            if abs(a * k - value) < 0.005:
                return True
    return False


def _product_or_sum(value: float, numbers: set[float]) -> bool:
    small = [n for n in numbers if 0 < n <= 100]
    return any(abs(a * b - value) < 1e-9 or abs(a + b - value) < 1e-9 for a in small for b in small)


def _running_total(value: float, occurrence: _Occurrence, context: Context) -> bool:
    """A total of amounts the answer listed before it (a run of them, in order), perhaps with one
    or two amounts of the sources beside them ("total of all your flights")."""
    before = occurrence.before
    for start in range(len(before)):
        total = before[start]
        for end in range(start + 1, len(before)):
            total = round(total + before[end], 2)
            rest = round(value - total, 2)
            if abs(rest) < 0.005 or (rest > 0 and context.supports(Fact("money", rest, f"{rest}"), True)):
                return True
    return False


def _entity_sum(value: float, occurrence: _Occurrence, context: Context) -> bool:
    """The block names several entities (or, framed, one): one value of each, added up (a fare of
    two flights), or that times a count."""
    named = list(dict.fromkeys(
        f.value.lstrip("#") for f in facts_of(occurrence.block) if f.kind == "identifier"))
    if not named:
        return False
    index = context.records(set(named))
    entities = [key for key in named if key in index.by_id][:_MAX_SUMMED_ENTITIES]
    if not entities or (len(entities) < 2 and not occurrence.framed):
        return False
    sums = {0.0}
    for key in entities:
        values = sorted({n for record in index.by_id[key] for n in record.numbers if n > 0})[:_MAX_ENTITY_VALUES]
        if not values:
            return False
        sums = {round(a + b, 2) for a in sums for b in values}
        if len(sums) > _MAX_COMBINATIONS:
            return False
    return any(abs(total * k - value) < 0.005 for total in sums for k in range(1, 11))


def _shifted(reading: tuple[int | None, int, int], days: int) -> tuple[int | None, int, int]:
    year, month, day = reading
    try:
        moved = datetime.date(year or 2000, month, day) + datetime.timedelta(days=days)
    except ValueError:
        return reading
    return (year and moved.year, moved.month, moved.day)


def _days_between(days: int, dates: set[tuple[int | None, int, int]]) -> bool:
    known = []
    for year, month, day in dates:
        if year is None:
            continue
        try:
            known.append(datetime.date(year, month, day).toordinal())
        except ValueError:
            continue
    ordinals = set(known)
    return any(o + days in ordinals for o in ordinals)


_Parsed = tuple[Unit, list[Fact], bool, list["Written"]]


def _may_anchor(parsed: list[_Parsed]) -> list[list[_Parsed]]:
    """The blocks entity anchoring looks at: each names exactly one id, and states an amount, a
    date or a time (the records are made only when one does)."""
    if len(parsed) == 1:  # most answers: one sentence
        facts = parsed[0][1]
        return [parsed] if (len({f.value.lstrip("#") for f in facts if f.kind == "identifier"}) == 1
                            and any(f.kind in _ANCHORED for f in facts)) else []
    blocks: dict[int, list[_Parsed]] = {}
    for entry in parsed:
        blocks.setdefault(entry[0].block, []).append(entry)
    return [b for b in blocks.values()
            if any(f.kind in _ANCHORED for _, fs, _, _ in b for f in fs)
            and len({f.value.lstrip("#") for _, fs, _, _ in b for f in fs if f.kind == "identifier"}) == 1]


def _anchor(candidates: list[list[_Parsed]], context: Context,
            occurrences: dict[tuple[str, Any], list[_Occurrence]]) -> list[Finding]:
    """Entity anchoring: in a block naming exactly one entity, its amounts, dates and times are
    that entity's (unless framed as derived, or the user's own values): a value its records do
    not hold, where they hold values of that kind, is the wrong entity's or none at all."""
    index = context.records({f.value.lstrip("#") for b in candidates for _, fs, _, _ in b for f in fs
                             if f.kind == "identifier"})
    if not index.by_id:
        return []
    user: list[Fact] | None = None
    findings: list[Finding] = []
    seen: set[tuple[str, Any]] = set()
    for block in candidates:
        named = {f.value.lstrip("#") for _, fs, _, _ in block for f in fs if f.kind == "identifier"}
        entities = [key for key in named if key in index.by_id]
        if len(entities) != 1:
            continue
        merged = index.by_id[entities[0]]
        for unit, unit_facts, _, written in block:
            if framed(unit):
                continue
            operands = {round(n, 2) for w in written for n in w.operands} | {round(w.value, 2) for w in written}
            for fact in unit_facts:
                if fact.kind not in _ANCHORED or fact.key in seen or fact.key not in occurrences:
                    continue
                if fact.kind == "money" and round(abs(fact.value), 2) in operands:
                    continue
                holders = [r for r in merged if fact.kind in r.kinds]
                if not holders or any(r.holds(fact) for r in holders):
                    continue
                if user is None:
                    user = context.user_facts()
                if any(_same_value(fact, other) for other in user):
                    continue  # the user's own value (a requested date, a budget)
                seen.add(fact.key)
                findings.append(Finding(fact, unit.text, "entity", entity=merged[0].key, record=merged[0].shown))
    return findings


def _same_value(fact: Fact, other: Fact) -> bool:
    if fact.kind != other.kind and not (fact.kind in ("money", "number") and other.kind in ("money", "number")):
        return False
    if fact.kind in ("money", "number"):
        return isinstance(other.value, float) and abs(abs(other.value) - abs(fact.value)) < 0.005
    if fact.kind == "date":
        return any((m, d) == (om, od) for _, m, d in (fact.alternatives or (fact.value,))
                   for _, om, od in (other.alternatives or (other.value,)))
    if fact.kind == "time":
        return other.value % 720 == fact.value % 720
    return bool(fact.value == other.value)


def history(trajectory: Any) -> Iterator[Any]:
    """Each message the run's model requests carry, once (every request repeats the history
    before it, as the same message objects)."""
    seen: set[int] = set()
    for llm in trajectory.llm_calls:
        for message in llm.input_messages:
            if id(message) not in seen:
                seen.add(id(message))
                yield message


def iter_user_texts(trajectory: Any) -> Iterator[str]:
    """The user's messages of the conversation (and the run's input)."""
    if trajectory.input:
        yield trajectory.input
    for message in history(trajectory):
        if message.role == "user" and message.content:
            yield message.content


def iter_assistant_texts(trajectory: Any) -> Iterator[str]:
    """The agent's earlier answers that the model requests carry."""
    for message in history(trajectory):
        if message.role in ("assistant", "model") and message.content:
            yield message.content
