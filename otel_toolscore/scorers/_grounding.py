"""What supports a fact an answer states: the run's sources (docs/scorers.md, tool_result_verification, "Facts and their support").

Sources are every tool result of the conversation up to the answer (this run's and earlier
turns', as the model input history carries them) with the query each answered result answers
(its call's arguments), every user message and the system instructions. Earlier answers of the
assistant, and arguments of failed calls or of tools that return nothing, are not sources: they
are the agent's own words.

A fact is supported when, read as leniently as a careful person would read it, something in
the sources says it (precision first: a flag pages a person):
* the same fact, normalised (``_facts.FactIndex``: numbers as numbers, dates in any format,
  times, units converted, roundings);
* a number without its sign ("refunded 114" for ``-114``);
* a number that is part of an identifier or reference (``7091239`` in ``gift_card_7091239``,
  "ending in 1784" for ``…1591784``, ``#1042`` for ``1042``);
* a total or difference of two amounts of the conversation's results, or of three of the run's
  own, a count times an amount, or the total of one field over a list (a fare's flight prices);
* a date one day after a source date, when a source time is marked as the next day ("+1").

The check is claim-driven (``ClaimSources``): an answer states a handful of facts, nearly all
restated from the run's own results, so each is looked up first among those results' facts
(their leaves walked once, for the salient values too), and the whole sources (``Sources``:
every text and result of the conversation, indexed) are built only for a fact not found there.
tests/test_claim_driven_grounding.py holds the two to the same verdicts and scores.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from itertools import repeat
from typing import Any

from otel_toolscore.scorers._facts import (
    MAX_TEXT,
    MINOR_INT_LIMIT,
    Fact,
    FactIndex,
    Kind,
    facts_of,
    has_kind_in,
    kinds_of,
    number_fact,
)
from otel_toolscore.trajectory import Message, ToolCall, ToolCallRequest, Trajectory

#: values of tool results put into the index; a run with more has its hallucination check
#: skipped (a fact could hide in what was not indexed)
MAX_GROUNDING_VALUES = 50_000
#: amounts combined into totals (pairs and triples), of the run's own and of earlier turns' each:
#: the first ones are kept (``amounts_cut`` says when more were given)
_MAX_OPERANDS = 150
#: counts a price is multiplied by ("3 passengers × $120")
_MAX_COUNT = 10
_NUMERIC = frozenset({"number", "money", "percentage"})
_CURRENCY_UNITS = ("$", "€", "£", "¥", "₹", "us$", "usd", "eur", "gbp", "dollars", "dollar", "euros", "euro")
#: units an amount written in text may have (none, or a currency)
_AMOUNT_UNITS = frozenset((None, *_CURRENCY_UNITS))
#: what a JSON number leaf adds to the result kinds
_NUMBER_KIND: Kind = ("number", None)
_DIGIT_RUN = re.compile(r"\d{3,}")
#: keys whose numbers are counts, not amounts: they are never added into a total
_COUNT_KEY = re.compile(
    r"seat|count|quantity|qty|(?:^|_)num(?:ber)?s?(?:_|$)|number_of|passenger|people|guest|night|day|index|(?:^|_)id$",
    re.I,
)
#: how deep result leaves are read (the root is at depth 0; a string holding JSON is one level
#: above what it holds): one limit for the sources and the salient values, which share walks
LEAF_DEPTH = 50
_NEXT_DAY = re.compile(r"\d{1,2}:\d{2}(?::\d{2})?\s?\+1\b")


class Sources:
    """The run's sources, indexed for ``supports``."""

    def __init__(self) -> None:
        #: the index of the sources' facts (``index``: with every text added so far)
        self._index = FactIndex()
        #: texts added and not yet given to the index (with their facts when known): an answer
        #: that states no checkable fact never asks the index, so its texts never go there
        self._queued: list[tuple[str, tuple[Fact, ...] | None]] = []
        #: texts added that are longer than what is examined (``FactIndex.texts_cut``)
        self._texts_cut = 0
        #: digit runs (3+ digits) found anywhere in the sources, ids included (of the texts
        #: in ``_unscanned`` once ``_scan`` read them)
        self._digit_runs: set[str] = set()
        #: texts not yet read for digit runs and next-day times: most runs never ask
        self._unscanned: list[str] = []
        #: amounts (non-count numbers) of the run's own tool results, and of earlier turns'
        self._own_amounts: set[float] = set()
        self._amounts: set[float] = set()
        self._combined: set[float] | None = None
        self._own_combined: set[float] | None = None
        self._results_combined: set[float] | None = None
        #: amounts beside the results' that totals may use (``add_extra_amounts``), and those of
        #: them that the answer states
        self.extra_amounts: set[float] = set()
        self.stated_amounts: set[float] = set()
        #: the counts the answer states ("for 3 passengers"): what a sum may be multiplied by
        self.multipliers: set[int] = set()
        self._budget = MAX_GROUNDING_VALUES
        #: more amounts than are combined into totals were given (``_MAX_OPERANDS`` each)
        self.amounts_cut = False
        #: a time in the sources is marked as the next day ("01:00:00+1": an overnight arrival)
        self._overnight = False
        #: False when more was given than is indexed: the hallucination check is then skipped
        self.complete = True
        #: kinds of the facts of the tool results (this run's and earlier turns'), for "facts of
        #: that kind exist" (the only question asked of them, so only the kinds are kept)
        self.result_kinds: set[Kind] = set()
        #: kinds of the facts of this run's own tool results
        self.own_kinds: set[Kind] = set()
        #: texts added: a run repeats its history in every model request and a result's raw
        #: text beside its value, so most texts come again; each is indexed once
        self._texts: set[str] = set()
        #: number leaves indexed (indexing one again adds nothing)
        self._numbers: set[float] = set()
        #: ``verdict`` of each fact asked about
        self._verdicts: dict[Fact, tuple[bool, bool]] = {}
        #: results added whole, by ``_shape``: (the value, own, leaves taken, the amounts
        #: ``_add_amounts`` was given, in order). A run's own results come again in the history of
        #: its later model requests, and adding one again changes only the budget and amounts.
        self._added: dict[Any, list[tuple[Any, bool, int, list[float]]]] = {}
        #: the leaves of the result ``_add_leaves`` walked last, when it walked all of them
        self._walked: list[Leaf] | None = None
        #: the leaves of each of the run's own results (``of``), None where not walked whole
        #: here: what its salient values are read from, without a walk of their own
        self.own_leaves: list[list[Leaf] | None] = []

    @classmethod
    def of(cls, trajectory: Trajectory, calls: Iterable[ToolCall], results: Iterable[Any],
           answered: Iterable[bool] = (), walks: dict[int, Walk] | None = None) -> Sources:
        """Sources of a run: ``calls`` are the run's own calls, ``results`` their values as read
        (``structured_result``), ``answered`` whether each returned a non-empty, non-error result
        (``source_items`` says what is read, and why); ``walks``: by ``id``, ``walk`` of the
        results (own and carried by the history) that were walked whole already (``ClaimSources``)."""
        sources = cls()
        walks = walks or {}
        for text, value, own in source_items(trajectory, calls, results, answered):
            if text is not None:
                sources.add_text(text)
            elif own:
                sources.own_leaves.append(sources.add_result(value, own=True, walked=walks.get(id(value))))
            else:
                sources.add_result(value, own=False, walked=walks.get(id(value)))
        sources.complete = sources.complete and not sources._texts_cut
        return sources

    def add_text(self, text: str | None, facts: tuple[Fact, ...] | None = None) -> None:
        """A source text (``facts``: its facts, when already known). Its facts are indexed when
        a look-up first needs them: the answer states a few facts, and most are found in the
        first sources asked (``FactIndex.contains``), so most texts are never read for facts."""
        if not text or text in self._texts:
            return
        self._texts.add(text)
        self._queued.append((text, facts))
        if len(text) > MAX_TEXT:
            self._texts_cut += 1
        self._unscanned.append(text)

    @property
    def index(self) -> FactIndex:
        """The sources' facts, every text added so far among them (indexed lazily, ``add_text``)."""
        if self._queued:
            queued, self._queued = self._queued, []
            # ``add_text`` gives each text once, and never an empty one
            self._index.add_new_texts_lazily(queued)
        return self._index

    def _scan(self) -> None:
        """Read the texts added since the last scan for digit runs and next-day times."""
        texts, self._unscanned = self._unscanned, []
        for text in texts:
            examined = text if len(text) <= MAX_TEXT else text[:MAX_TEXT]
            self._digit_runs.update(_DIGIT_RUN.findall(examined))
            if not self._overnight and "+1" in examined and _NEXT_DAY.search(examined):
                self._overnight = True

    def add_result(self, value: Any, *, own: bool, walked: Walk | None = None) -> list[Leaf] | None:
        """Index a result's leaves; they are returned when they were all walked now. ``walked``:
        ``walk`` of the whole value, when it was walked already."""
        shape = _shape(value)
        earlier = self._added.get(shape, ()) if shape is not None else ()
        for known, known_own, taken, known_amounts in earlier:
            # The same value added whole before, as the run's own when this one is: every text,
            # number and kind of it is in already; only the budget and the amounts change.
            if (known_own or not own) and taken <= self._budget and _same(known, value):
                self._budget -= taken
                self._add_amounts(known_amounts, own)
                return None
        given: list[float] = []
        taken_now = self._add_leaves(value, own, given, walked)
        if taken_now is not None and shape is not None:
            self._added.setdefault(shape, []).append((value, own, taken_now, given))
        leaves, self._walked = self._walked, None
        return leaves if taken_now is not None else None

    def _add_leaves(self, value: Any, own: bool, given: list[float] | None = None,
                    walked: Walk | None = None) -> int | None:
        """``add_result``; how many leaves it took, or None when the budget ran out. ``given``:
        where the amounts it added are listed, in order."""
        numbers: list[float] = []
        #: the amounts met, in order (``_add_amounts`` keeps the first ones)
        found: list[float] = []
        has_number = False
        texts = self._texts
        result_kinds, own_kinds = self.result_kinds, self.own_kinds
        # one leaf past the budget says that it ran out: the leaves before it are still taken
        limit = max(self._budget, 0) + 1
        # a whole walk with fewer leaves than the limit is what a walk to the limit gives
        leaves, totals = walked if walked is not None and len(walked[0]) < limit else walk(value, limit)
        ran_out = len(leaves) >= limit
        self._walked = None if ran_out else leaves
        if ran_out:
            leaves = leaves[: limit - 1]
        taken = len(leaves)
        self._budget -= taken
        for key, leaf in leaves:
            if key is not None and key not in texts:
                self.add_text(key)  # lenient: a date or a name can be a key
            if isinstance(leaf, str):
                facts, kinds, amounts = _short_leaf(leaf) if len(leaf) <= _MAX_CACHED_LEAF else _leaf_of(leaf)
                if leaf not in texts:
                    self.add_text(leaf, facts)
                if kinds:
                    result_kinds.update(kinds)
                    if own:
                        own_kinds.update(kinds)
                if amounts:
                    found.extend(amounts)
                continue
            number = float(leaf)
            if number not in self._numbers:
                self._numbers.add(number)
                numbers.append(number)
                if number.is_integer():
                    self._digit_runs.add(str(int(abs(number))))
            has_number = True
            if not _is_count(key, number):
                found.append(number)
        if has_number:
            result_kinds.add(_NUMBER_KIND)
            if own:
                own_kinds.add(_NUMBER_KIND)
        self._defer_numbers(numbers)
        if not ran_out:
            # a list's column totals (``walk``: none in a tuple or a string) first: a reservation's
            # fare (its flights' prices added up) is kept when a long result has more amounts than
            # are combined
            found[:0] = totals
        self._add_amounts(found, own)
        if given is not None:
            given.extend(found)
        if ran_out:
            self.complete = False
            return None
        return taken

    def _defer_numbers(self, numbers: list[float]) -> None:
        if numbers:
            self._index.defer(map(_number_fact, numbers))  # looked up in any order: no need to flush the texts

    def _add_amounts(self, values: list[float], own: bool) -> None:
        """Amounts for totals, in the order given: the first ``_MAX_OPERANDS`` distinct ones."""
        if not values:
            return
        amounts = self._own_amounts if own else self._amounts
        for value in values:
            if len(amounts) >= _MAX_OPERANDS:
                self.amounts_cut = True
            else:
                amounts.add(round(abs(float(value)), 2))
        self._combined = self._own_combined = self._results_combined = None

    # -- support ---------------------------------------------------------------------------

    def supports(self, fact: Fact, derived: bool = False) -> bool:
        """The sources say the fact (``derived``: or it is a total or difference of their amounts,
        for an amount the answer frames as derived)."""
        if self.index.contains(fact):
            return True
        if fact.kind in _NUMERIC or fact.kind == "year":
            return self._supports_number(fact, derived)
        if fact.kind == "identifier":
            digits = fact.value.lstrip("#")
            return digits.isdigit() and self._in_digit_runs(digits)
        if fact.kind == "date" and self._is_overnight():
            return any(self.index.contains(_with_value(fact, reading)) for reading in _days_before(fact))
        return False

    def _supports_number(self, fact: Fact, derived: bool) -> bool:
        value = fact.value
        if not isinstance(value, float) or not math.isfinite(value):
            return False
        # a refund written as 114 for a payment of -114, or the other way round
        if value != 0 and fact.unit in (None, *_CURRENCY_UNITS) and self.index.contains(_with_value(fact, -value)):
            return True
        magnitude = abs(value)
        # a number that may be (the end of) a reference ("ending in 2002", "order 1042"): read both ways
        if fact.kind in ("number", "year") and magnitude.is_integer() and self._in_digit_runs(str(int(magnitude))):
            return True
        return derived and fact.kind != "percentage" and self._is_total(round(magnitude, 2))

    def _is_overnight(self) -> bool:
        """A time in the sources is marked as the next day."""
        self._scan()
        return self._overnight

    def _in_digit_runs(self, digits: str) -> bool:
        """A number written as (the end of) a longer reference: an id, a card, an order."""
        if len(digits) < 3:
            return False
        self._scan()
        return digits in self._digit_runs or any(run.endswith(digits) for run in self._digit_runs)

    def _is_total(self, value: float) -> bool:
        """A sum or difference of two amounts of the conversation, a count times one of them; or,
        of the run's own amounts (its results', the user's and the instructions' money, the
        answer's grounded amounts: ``extra_amounts``), a count the answer states times a sum of
        two, or a sum of two and one the answer states: a total is computed from what the run
        found, perhaps with one earlier figure, and shows what it builds on."""
        own = self._own_amounts | self.extra_amounts if self.extra_amounts else self._own_amounts
        if not own and not self._amounts:
            return False
        if value in self._pairs():
            return True
        for k in range(2, _MAX_COUNT + 1):
            part = round(value / k, 2)
            if part in self._own_amounts or part in self._amounts or (
                    k in self.multipliers and part in self.extra_amounts):
                return True
        own_pairs = self._own_pairs()
        if any(round(value / k, 2) in own_pairs for k in self.multipliers if k > 1):
            return True
        if any(round(value - c, 2) in own_pairs or round(value + c, 2) in own_pairs
               or round(c - value, 2) in own_pairs for c in self.stated_amounts):
            return True
        # three of the run's own results' amounts (a fare of three flights)
        results_pairs = self._results_pairs()
        return any(round(value - c, 2) in results_pairs or round(value + c, 2) in results_pairs
                   or round(c - value, 2) in results_pairs for c in self._own_amounts)

    def _results_pairs(self) -> set[float]:
        """Sums and differences of two amounts of the run's own results."""
        if self._results_combined is None:
            self._results_combined = _pairs_of(self._own_amounts)
        return self._results_combined

    def _own_pairs(self) -> set[float]:
        """Sums and differences of two of the run's own amounts and the extra ones."""
        if self._own_combined is None:
            self._own_combined = _pairs_of(self._own_amounts | self.extra_amounts)
        return self._own_combined

    def add_extra_amounts(self, values: Iterable[float], *, stated: bool = False) -> None:
        """Amounts that may be combined with the results' into a total: the user's and the
        instructions' money, the answer's own grounded amounts (``stated``)."""
        values = {round(abs(float(v)), 2) for v in values if math.isfinite(v)}
        if stated:
            self.stated_amounts |= values
        new = values - self.extra_amounts
        if new:
            self.extra_amounts |= new
            self._combined = self._own_combined = self._results_combined = None

    def _pairs(self) -> set[float]:
        """Sums and differences of two amounts of the conversation's results."""
        if self._combined is None:
            self._combined = _pairs_of(self._own_amounts | self._amounts)
        return self._combined

    def verdict(self, fact: Fact) -> tuple[bool, bool]:
        """(nothing supports the fact though the results hold facts of its kind, and no result of
        the run's own calls holds its kind). Kept per fact: with ``cross_turn`` each call's
        response repeats the later answers' facts, and the sources are the same for all."""
        known = self._verdicts.get(fact)
        if known is None:
            ungrounded = self.has_kind(fact) and not self.supports(fact)
            known = self._verdicts[fact] = (ungrounded, ungrounded and not self.has_kind(fact, own=True))
        return known

    def has_kind(self, fact: Fact, *, own: bool = False) -> bool:
        """Facts of that kind exist in the tool results the run was given (``own``: in its own
        calls' results)."""
        return same_kind(self.own_kinds if own else self.result_kinds, fact)


#: what ``source_items`` gives: (a source text, None, False) or (None, a result value, own)
SourceItem = tuple[str | None, Any, bool]


def source_items(trajectory: Trajectory, calls: Iterable[ToolCall], results: Iterable[Any],
                 answered: Iterable[bool] = ()) -> Iterator[SourceItem]:
    """What the run's sources are, in the order ``Sources.of`` adds them: the user input and the
    system instructions; each own call's result, raw result and error text, and the arguments of
    one that was answered (the query its result answers: a search for 2024-05-24 returns that
    day's flights; a failed call's arguments, or a ``think`` tool's, are only the agent's own
    words); then the history the model requests carry, each message once. Empty texts are left out.
    ``ClaimSources._tally`` measures the same in a loop of its own (tests/test_claim_driven_grounding.py
    holds the two to the same caps): what is read here is read there too."""
    for text in (trajectory.input, trajectory.system_instructions):
        if text:
            yield text, None, False
    for call, value, ok in zip(calls, results, answered or repeat(False)):
        yield None, value, True
        for text in (call.result_raw, call.error, (call.arguments_raw or _json(call.arguments)) if ok else None):
            if text:
                yield text, None, False
    for message, requests in _history(trajectory):
        if message.role in ("user", "system", "developer", "tool") and message.content:
            yield message.content, None, False
        for part in message.tool_results:
            yield None, part.content, False
            if part.content_raw:
                yield part.content_raw, None, False
            if part.tool_call_id in requests and not part.is_error and _answered(part.content):
                request = requests[part.tool_call_id]
                text = request.arguments_raw or _json(request.arguments)
                if text:
                    yield text, None, False


def _history(trajectory: Trajectory) -> Iterator[tuple[Message, dict[str, ToolCallRequest]]]:
    """Each message the model requests carry, once (every request repeats the history before it,
    as the same message objects), with the request of each tool call id met so far in its model
    request (a request's arguments are written out only for a result that is read with them).
    The dict grows as the walk goes on: read it when the message is given."""
    seen: set[int] = set()
    for llm in trajectory.llm_calls:
        requests: dict[str, ToolCallRequest] = {}
        for message in llm.input_messages:
            for request in message.tool_calls:
                if request.id:
                    requests[request.id] = request
            if id(message) in seen:
                continue
            seen.add(id(message))
            yield message, requests


class ClaimSources:
    """The run's sources as the answer's claims need them (claim-driven). Most answers state a
    handful of facts, each taken from a result of the run's own calls: each claim is looked up
    first among the facts of those results' leaves (walked once, for the salient values too),
    and the whole ``Sources`` (every text and result of the conversation, indexed) is built only
    for a claim not found there. ``FactIndex.contains`` is monotone and the whole sources hold
    every fact of the own results' leaves, so a claim found among them is supported there too.

    The flags (``complete``, ``amounts_cut``) are read from a tally of the sources (leaves and
    amounts counted, text lengths checked) when it shows no cap can be reached; otherwise the
    whole sources are built at once and give them."""

    def __init__(self, trajectory: Trajectory, calls: list[ToolCall], results: list[Any], answered: list[bool]) -> None:
        self._run = (trajectory, calls, results, answered)
        self._sources: Sources | None = None
        #: the facts of the own results' leaves (None: not tallied, ``sources`` decides), each
        #: one's (kind, value, a number's unit) for a claim stated as it is, and their index
        #: (made for the first claim not stated as it is)
        self._own_facts: list[Fact] | None = None
        self._quick_keys: set[tuple[str, Any, str | None]] = set()
        self._quick: FactIndex | None = None
        self._verdicts: dict[Fact, tuple[bool, bool]] = {}
        #: ``supports`` of each fact asked about, without and with arithmetic
        self._supported: dict[Fact, bool] = {}
        self._supported_derived: dict[Fact, bool] = {}
        self.complete = True
        self.amounts_cut = False
        self.own_leaves: list[list[Leaf] | None] = []
        #: by ``id``, ``walk`` of each result the tally walked whole (own ones and those the history
        #: carries): the whole sources take them instead of walking those results again
        self._walks: dict[int, Walk] | None = None

    @classmethod
    def of(cls, trajectory: Trajectory, calls: Iterable[ToolCall], results: Iterable[Any],
           answered: Iterable[bool] = ()) -> ClaimSources:
        """As ``Sources.of``."""
        claim_sources = cls(trajectory, list(calls), list(results), list(answered))
        if not claim_sources._tally():
            sources = claim_sources.sources
            claim_sources.complete, claim_sources.amounts_cut = sources.complete, sources.amounts_cut
            claim_sources.own_leaves = sources.own_leaves
        return claim_sources

    @property
    def sources(self) -> Sources:
        """The whole sources, built when first asked."""
        if self._sources is None:
            self._sources = Sources.of(*self._run, walks=self._walks)
        return self._sources

    def _tally(self) -> bool:
        """Walk the own results (their leaves and facts kept) and count what the caps count;
        False when a cap may be reached (the whole sources then say what is cut).

        What ``source_items`` gives is read here in one loop of its own, in another order (each
        cap is a total, and a total does not depend on the order it is counted in): the texts
        are only measured, and the results the history carries are the own ones, as the same
        objects (known by identity, counted again without a walk) or equal ones (``_same``)."""
        trajectory, calls, results, answered = self._run
        for text in (trajectory.input, trajectory.system_instructions):
            if text and len(text) > MAX_TEXT:
                return False
        budget = MAX_GROUNDING_VALUES
        own_amounts = earlier_amounts = 0  # amounts given for totals (``_MAX_OPERANDS`` each)
        facts: list[Fact] = []
        own_leaves: list[list[Leaf] | None] = []
        walks: dict[int, Walk] = {}
        #: the own results tallied, by identity and by ``_shape``: (the value, its leaves, its
        #: amounts). The history repeats them (``Sources.add_result``): the same leaves count the same again.
        by_id: dict[int, tuple[int, int]] = {}
        tallied: dict[Any, list[tuple[Any, int, int]]] = {}
        for call, value, ok in zip(calls, results, answered or repeat(False)):
            for text in (call.result_raw, call.error):
                if text and len(text) > MAX_TEXT:
                    return False
            if ok:
                text = call.arguments_raw or _json(call.arguments)
                if len(text) > MAX_TEXT:
                    return False
            walked, given = self._tally_result(value, budget, facts)
            if walked is None:
                return False
            leaves = walked[0]
            budget -= len(leaves)
            own_amounts += given
            if budget < 0 or own_amounts > _MAX_OPERANDS:
                return False
            own_leaves.append(leaves)
            walks[id(value)] = walked
            by_id[id(value)] = (len(leaves), given)
            shape = _shape(value)
            if shape is not None:
                tallied.setdefault(shape, []).append((value, len(leaves), given))
        seen: set[int] = set()
        #: a request whose arguments were not recorded as text met (``_written_arguments_fit``)
        unwritten = False
        for llm in trajectory.llm_calls:
            for message in llm.input_messages:
                if id(message) in seen:
                    continue
                seen.add(id(message))
                # Each request is met here once, in the first model request that carries it. Its
                # arguments text is measured whether or not a result reads it (``source_items``
                # takes it only then): a long one only sends the run to the whole sources.
                for request in message.tool_calls:
                    raw = request.arguments_raw
                    if raw:
                        if len(raw) > MAX_TEXT:
                            return False
                    elif request.id:
                        unwritten = True
                content = message.content
                if content and len(content) > MAX_TEXT and message.role in ("user", "system", "developer", "tool"):
                    return False
                for part in message.tool_results:
                    value = part.content
                    known = by_id.get(id(value))
                    if known is None:
                        entries = tallied.get(_shape(value), ())
                        entry = next((entry for entry in entries if _same(entry[0], value)), None)
                        if entry is not None:
                            known = entry[1], entry[2]
                    if known is not None:
                        taken, given = known
                    else:
                        walked, given = self._tally_result(value, budget, None)
                        if walked is None:
                            return False
                        taken = len(walked[0])
                        walks[id(value)] = walked
                    budget -= taken
                    earlier_amounts += given
                    if budget < 0 or earlier_amounts > _MAX_OPERANDS:
                        return False
                    if part.content_raw and len(part.content_raw) > MAX_TEXT:
                        return False
        if unwritten and not _written_arguments_fit(trajectory):
            return False
        self.own_leaves = own_leaves
        self._walks = walks
        self._own_facts = facts
        self._quick_keys = {(f.kind, f.value, f.unit if f.kind == "number" else None) for f in facts}
        return True

    @staticmethod
    def _tally_result(value: Any, budget: int, facts: list[Fact] | None) -> tuple[Walk | None, int]:
        """A result's ``walk``, whole (None: a cap may be reached), and the amounts it gives for
        totals; ``facts``: where an own result's facts go."""
        walked = leaves, totals = walk(value, budget + 1)
        if len(leaves) > budget:
            return None, 0
        given = len(totals)
        for key, leaf in leaves:
            if key is not None and len(key) > MAX_TEXT:
                return None, 0
            if isinstance(leaf, str):
                leaf_facts, _, leaf_amounts = _short_leaf(leaf) if len(leaf) <= _MAX_CACHED_LEAF else _leaf_of(leaf)
                if len(leaf) > MAX_TEXT:
                    return None, 0
                given += len(leaf_amounts)
                if facts is not None:
                    facts.extend(leaf_facts)
                continue
            number = float(leaf)
            if not _is_count(key, number):
                given += 1
            if facts is not None:
                facts.append(_number_fact(number))
        return walked, given

    def verdict(self, fact: Fact) -> tuple[bool, bool]:
        """``Sources.verdict``: a claim found among the own results' facts is supported."""
        known = self._verdicts.get(fact)
        if known is None:
            known = ((False, False) if self._own_facts is not None and (self._stated(fact) or self._in_own(fact))
                     else self.sources.verdict(fact))
            self._verdicts[fact] = known
        return known

    def supports(self, fact: Fact, derived: bool = False) -> bool:
        """A source says the fact (``derived``: or it is a total of their amounts), whatever kinds
        the results hold."""
        cache = self._supported_derived if derived else self._supported
        known = cache.get(fact)
        if known is None:
            known = cache[fact] = (
                (self._own_facts is not None and (self._stated(fact) or self._in_own(fact)))
                or self.sources.supports(fact, derived))
        return known

    def dates(self) -> set[tuple[int | None, int, int]]:
        """Every date the sources hold (all indexed: asked only for a claim that needs it)."""
        index = self.sources.index
        _ = index.kinds  # indexes what was deferred
        return index.dates

    def supports_literal(self, fact: Fact) -> bool:
        return self.supports(fact, False)

    def has_kind(self, fact: Fact) -> bool:
        """The tool results of the conversation hold facts of the fact's kind."""
        return self.sources.has_kind(fact)

    def add_extra_amounts(self, values: Iterable[float], *, stated: bool = False,
                          multipliers: Iterable[int] = ()) -> None:
        """``Sources.add_extra_amounts`` (the whole sources: a derived amount is looked for there)."""
        self.sources.add_extra_amounts(values, stated=stated)
        self.sources.multipliers.update(multipliers)
        self._supported_derived = {}  # more operands: a derived "no" may turn "yes"

    def _in_own(self, fact: Fact) -> bool:
        """The own results' facts support the fact, as the whole sources' index would."""
        if self._quick is None:
            self._quick = FactIndex(self._own_facts or ())
        return self._quick.contains(fact)

    def _stated(self, fact: Fact) -> bool:
        """An own result states the fact as it is (most claims restate a value): what
        ``FactIndex.contains`` finds first, without indexing. A number with a unit needs a source
        number of its dimension or a bare one; an amount, a year or a percentage any number of
        that value but one measured in a unit (``FactIndex._same_dimension``)."""
        kind, value, keys = fact.kind, fact.value, self._quick_keys
        if kind == "number":
            return (kind, value, fact.unit) in keys or (fact.unit is not None and (kind, value, None) in keys)
        if kind in _NUMERIC:  # money, percentage (``_NUMERIC``) or a year, against bare numbers
            return (kind, value, None) in keys or ("number", value, None) in keys
        if kind == "year":
            return (kind, value, None) in keys or ("number", value, None) in keys
        return (kind, value, None) in keys


def _written_arguments_fit(trajectory: Trajectory) -> bool:
    """The arguments that ``source_items`` writes out as JSON (of a request recorded without its
    text, read with the answered result of a model request that carries it) fit in ``MAX_TEXT``."""
    for message, requests in _history(trajectory):
        for part in message.tool_results:
            paired = requests.get(part.tool_call_id) if part.tool_call_id else None
            if (paired is not None and not paired.arguments_raw and not part.is_error
                    and _answered(part.content) and len(_json(paired.arguments)) > MAX_TEXT):
                return False
    return True


def same_kind(kinds: set[Kind] | frozenset[Kind], fact: Fact) -> bool:
    """Facts of the fact's kind are among ``kinds`` (``FactIndex.kinds``, ``kinds_of``). An amount
    is comparable with any plain number: results carry prices as bare JSON numbers
    (``{"price_eur": 120}``). A reference number ("gift card 7091239", "#1042") is comparable
    with identifiers and with numbers alike."""
    if fact.kind == "money" or (fact.kind == "identifier" and fact.value.startswith("#")):
        if any(kind == "number" for kind, _ in kinds):
            return True
    if (fact.kind == "number" and fact.unit is None and fact.decimals == 0 and abs(fact.value) >= 1000
            and ("identifier", None) in kinds):
        return True
    return has_kind_in(kinds, fact)


def _pairs_of(amounts: set[float]) -> set[float]:
    """Every sum and difference (larger minus smaller) of two of the amounts, rounded to cents."""
    ordered = sorted(amounts)
    return {round(x, 2) for i, a in enumerate(ordered) for b in ordered[i:] for x in (a + b, b - a)}


def _days_before(fact: Fact) -> list[Any]:
    out = []
    for year, month, day in fact.alternatives or (fact.value,):
        try:
            before = datetime.date(year or 2000, month, day) - datetime.timedelta(days=1)
        except ValueError:
            continue
        out.append((year and before.year, before.month, before.day))
    return out


def _json(value: Any) -> str:
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):
        return ""


def _shape(value: Any) -> Any:
    """What two results must share to be the same (a cheap key; ``_same`` decides)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return (len(value), *value)
    if isinstance(value, list):
        return (list, len(value))
    return None


def _same(known: Any, value: Any) -> bool:
    """The two values have the same leaves, in the same order, of the same types: ``==`` alone
    takes 1 for True or 1.0 and ignores the order of keys; their reprs tell those apart (as the
    JSON texts would, at half the cost). A "no" only costs a walk: adding a value again that
    was not taken for the same adds what was added already."""
    if known is value:
        return True
    if known != value:
        return False
    if isinstance(value, str):
        return True
    try:
        return repr(known) == repr(value)
    except (RecursionError, ValueError):  # too deep, or an int too long for its repr
        return False


def _answered(value: Any) -> bool:
    if value is None or value == {} or value == [] or (isinstance(value, str) and not value.strip()):
        return False
    return not (isinstance(value, str) and value.lstrip()[:6].lower() == "error:")


def _with_value(fact: Fact, value: Any) -> Fact:
    return Fact(fact.kind, value, fact.text, unit=fact.unit, decimals=fact.decimals)


def _is_count(key: str | None, value: float) -> bool:
    if isinstance(value, float) and not value.is_integer():
        return False
    return abs(value) <= MINOR_INT_LIMIT or (key is not None and _count_key(key))


@lru_cache(maxsize=4096)
def _count_key(key: str) -> bool:
    """The key names a count (``_COUNT_KEY``); results repeat their keys in every record and run."""
    return _COUNT_KEY.search(key) is not None


#: a leaf's facts, their kinds and the amounts written in it, for leaves up to this long (the
#: same short values recur in every request's history and across runs); longer ones are not
#: cached here (``facts_of`` keeps a few of its own)
_MAX_CACHED_LEAF = 4_096


_cached_number_fact = lru_cache(maxsize=8192)(number_fact)


def _number_fact(value: float) -> Fact:
    """``number_fact``, cached: a result's numbers recur (prices, counts, codes). A zero is made
    afresh: -0.0 would be answered as 0.0, which is written otherwise."""
    return _cached_number_fact(value) if value else number_fact(value)


def _leaf_of(leaf: str) -> tuple[tuple[Fact, ...], frozenset[Kind], tuple[float, ...]]:
    """A string leaf's facts, their kinds, and the amounts written in it ("total price is 375"
    adds up like a JSON number)."""
    facts = facts_of(leaf) if leaf else ()
    # money written in the text, or a number standing on its own ("total price is 375"): a number
    # inside a token or a name ("13-inch", "Suite 501", "iPhone 15") is part of it, not an amount
    amounts = tuple(fact.value for fact in facts if not fact.minor and (
        (fact.kind == "money" and fact.unit in _AMOUNT_UNITS)
        or (fact.kind == "number" and fact.unit is None and _standalone(leaf, fact.text))))
    return facts, kinds_of(facts), amounts


_short_leaf = lru_cache(maxsize=8192)(_leaf_of)


def _standalone(text: str, number: str) -> bool:
    """The number stands as a word of its own: not hyphen-joined ("13-inch"), not after a
    capitalised word that names it ("Suite 501"), not followed by letters."""
    at = text.find(number)
    if at < 0:
        return False
    end = at + len(number)
    if end < len(text) and (text[end] == "-" or text[end].isalpha()):
        return False
    before = text[max(0, at - 30):at]
    if before.endswith("-") and len(before) > 1 and before[-2].isalnum():
        return False
    words = before.split()
    return not (before.endswith(" ") and words and words[-1][:1].isupper())


#: what a string that holds JSON starts with, once stripped (``walk`` reads it as JSON)
_JSON_OPENERS = ("{", "[")
#: what ``walk`` gives: (the key the leaf sits under, the string or finite number as written)
Leaf = tuple[str | None, str | int | float]
#: what ``walk`` gives: the leaves and the column totals
Walk = tuple[list[Leaf], list[float]]


def walk(value: Any, limit: int) -> Walk:
    """The first ``limit`` (key, leaf) pairs for string and finite-number leaves, depth-first; a
    string that holds JSON is read as JSON (only as far as the leaves taken reach). With them,
    in one pass, the column totals (``_column_totals``) of the lists met, inner lists first;
    complete only when fewer than ``limit`` leaves were taken."""
    out: list[Leaf] = []
    totals: list[float] = []
    _collect(value, None, 0, out, limit, totals)
    return out, totals


def _collect(value: Any, key: str | None, depth: int, out: list[Leaf], limit: int, totals: list[float] | None) -> None:
    """``walk``; ``totals`` None inside what has no column totals (tuples, JSON inside strings)."""
    if depth > LEAF_DEPTH or len(out) >= limit:
        return
    if isinstance(value, dict):
        for k, item in value.items():
            # a string that cannot hold JSON is taken here, without a call of its own (most are)
            kind = type(item)
            if kind is str and depth < LEAF_DEPTH and len(out) < limit:
                first = item[:1]
                if first not in _JSON_OPENERS and not first.isspace():
                    out.append((str(k), item))
                    continue
            elif (kind is int or kind is float) and depth < LEAF_DEPTH and len(out) < limit:
                # a number is taken here too (what the call below does with it), the rest of the leaves
                if finite(item):
                    out.append((str(k), item))
                continue
            _collect(item, str(k), depth + 1, out, limit, totals)
    elif isinstance(value, list):
        for item in value:
            _collect(item, key, depth + 1, out, limit, totals)
        if totals is not None and len(value) > 1:  # a total needs two records
            _column_totals(value, totals)
    elif isinstance(value, tuple):
        for item in value:
            _collect(item, key, depth + 1, out, limit, None)
    elif isinstance(value, str):
        text = value.strip()
        if text[:1] in _JSON_OPENERS and len(text) <= MAX_TEXT:
            try:
                inner = json.loads(text)
            except (ValueError, RecursionError):
                inner = None
            if isinstance(inner, (dict, list)):
                _collect(inner, key, depth + 1, out, limit, None)
                return
        out.append((key, value))
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and finite(value):
        out.append((key, value))


def _column_totals(records: list[Any], totals: list[float]) -> None:
    """The total of each numeric field over a list of records (the price of every flight of a
    reservation adds up to its fare): one amount per field with two numbers or more."""
    columns: dict[str, list[float]] = {}
    for item in records:
        if isinstance(item, dict):
            for key, leaf in item.items():
                if isinstance(leaf, (int, float)) and not isinstance(leaf, bool) and finite(leaf):
                    columns.setdefault(str(key), []).append(float(leaf))
    for key, numbers in columns.items():
        if len(numbers) >= 2 and not _count_key(key):
            totals.append(sum(numbers))


def finite(value: int | float) -> bool:
    """A number a float can hold: JSON allows integers of any size (``10**400`` overflows)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
