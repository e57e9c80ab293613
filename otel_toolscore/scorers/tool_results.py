"""``tool_result_verification``: what did the agent do with each tool result? (docs/scorers.md,
tool_result_verification)

Per call, the result is read (missing, error, malformed, empty, or values) and compared with the
agent's response: the final answer, plus with ``cross_turn`` the assistant messages written
after the call. Issues and weights: docs/scorers.md, tool_result_verification (high 0.6, medium 0.3, low 0.1).

How the comparison works:

* *Salient values* of a result are its scalar leaves: numbers and strings (booleans and nulls
  are not); a string leaf also brings the facts inside it (``"68°F"`` is the number 68), a long
  string is split into sentences, each its own value, and a string that holds JSON is read as
  JSON. Keys never count as use: ``{"temperature": "68°F"}`` is not used by "I checked the
  temperature".
* A value is *used* when its normalised text appears in the response (case-folded, whitespace
  and punctuation collapsed, ``not_found`` = "not found"), when one of its facts appears (numbers
  as numbers: ``72``, ``72.0``, ``72°F``, "72 degrees"; ``$1234.5`` = ``1,234.50``; a rounded
  "68" uses 68.4), or, for a sentence, when most (60 %) of its content words appear.
* *Hallucination*: the response's facts (see ``_facts``) that appear in no tool result, no user
  input and no system instruction are ungrounded. A call's hallucination score is the number of
  ungrounded facts of a kind its own result has (result ``72°F`` and an invented ``55°F``) over
  all facts in the response; bare integers up to 10 are counts, not evidence. The kind condition
  is per call, so an invented temperature is not blamed on a calendar call.
* *Contradiction*: a failed / not-found result while the response claims success and admits no
  failure ("I've sent the email"), or an explicit success result (``status: ok``, ``sent:
  true``) while the response only reports failure. An empty result only contradicts a response
  that claims to have found something (an action tool returning nothing is normal). Agreement
  (``not_found`` and "was not found") is not a contradiction.

Decisions of this implementation (docs/scorers.md, tool_result_verification, states their result):

* A failed call is not also ``unused_result`` or ``incomplete_integration``: its error text need
  not be quoted. It counts as *integrated* when the response admits the failure.
* ``integrated`` = the response reflects the result: a used value (results with values), an
  admitted failure (errors), no contradiction (empty results); never for a missing result.
* Without any response text (no final output recorded), the response checks are not run and
  ``details.response_available`` is false.
* No tool calls → value 1.0, label ``no_tool_calls`` (as tool_call_validation).
* Label ``pass`` when no call has a high or critical issue, else ``fail``. ``summary.valid_calls``
  counts those calls.
* Bounded work on huge input: a result value and the response are examined in their first
  200,000 characters, at most 200 distinct values of a result and 500 facts of the response are
  compared, and at most 50,000 result values are indexed for grounding; a run beyond that (or
  with a grounding text over 200,000 characters) has its hallucination check skipped, since an
  unindexed part could hold the fact. Every cap reached is listed in ``details.limits`` and
  mentioned in the explanation.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from otel_toolscore.conventions.parsing import nested_deeper_than
from otel_toolscore.scorers import _answer
from otel_toolscore.scorers._answer import Finding
from otel_toolscore.scorers._common import clip, is_text_or_none, small_json, step_positions
from otel_toolscore.scorers._facts import (
    MAX_TEXT,
    Fact,
    FactIndex,
    Kind,
    facts_of,
    kinds_of,
    number_fact,
    unique_facts,
)
from otel_toolscore.scorers._grounding import LEAF_DEPTH, MAX_GROUNDING_VALUES, ClaimSources, Leaf, same_kind
from otel_toolscore.scorers._grounding import finite as _finite
from otel_toolscore.scorers.base import (
    LABEL_FAIL,
    LABEL_NO_TOOL_CALLS,
    LABEL_PASS,
    BuildInputs,
    Score,
    Scorer,
    ScorerConfigError,
    mean2,
    penalised_score,
)
from otel_toolscore.scorers.results import CallResult, Issue, json_view
from otel_toolscore.trajectory import LLMCall, ToolCall, Trajectory

SEVERITY_WEIGHTS: dict[str, float] = {"critical": 1.0, "high": 0.6, "medium": 0.3, "low": 0.1}

_MAX_SALIENT = 200
_MAX_PARSE = 200_000
#: characters of one result value or of the response that are compared (10 MB texts are
#: examined in their first part, and ``details.limits`` says so)
_MAX_EXAMINED = MAX_TEXT
#: response facts checked for grounding (each is looked up in every source text)
_MAX_CLAIMS = 500
#: leaves this long are not cached as salient values (``_salient_of_short``): a cache must not
#: keep megabytes of one run's text alive
_MAX_CACHED_PHRASE = 4_096
_SHORT_WORDS = 6
_SHORT_CHARS = 80
_TOKEN_OVERLAP = 0.6
_MIN_FUZZY_TOKENS = 3

# --- text normalisation ---------------------------------------------------------------------

_SEPARATOR_CHARS = r"\s_\-–—,;:!?()\[\]{}\"'`“”‘’*|/\\<>=+~^"
# A run of separators, or a full stop that ends a sentence (``[SEP]+|\.(?=\s|$)``), written to
# begin with one character class so that it is searched for in C: the first character decides.
_SEPARATORS = re.compile(rf"[{_SEPARATOR_CHARS}.](?:(?<=\.)(?=\s|$)|(?<!\.)[{_SEPARATOR_CHARS}]*)")
_TOKEN = re.compile(r"[a-z0-9°%$€£]+")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
_STOPWORDS = frozenset(
    "the and for are but not you your with this that from have has had was were will would "
    "can could should its it's their there they them then than into onto over under about "
    "also been being which what when where who whom how all any some such only very more most "
    "other our out own same too just may might must shall does did doing done per via".split()
)


def norm_phrase(text: str) -> str:
    """Case-folded, punctuation and whitespace collapsed, padded with spaces so that ``in``
    checks match whole words only. Not cached: the short values that recur are cached whole
    (``_salient_of_short``), and a cache of the rest was hit for 1% of the texts of the real
    conversations and none of distinct synthetic runs, while it kept up to 8,192 texts alive."""
    collapsed = _SEPARATORS.sub(" ", text.casefold().replace("’", "'")).strip()
    return f" {collapsed} " if collapsed else ""


def _examined(text: str, what: str, limits: list[str] | None) -> str:
    """The first ``_MAX_EXAMINED`` characters of a text; a cut is noted in ``limits``."""
    if len(text) <= _MAX_EXAMINED:
        return text
    if limits is not None:
        limits.append(f"{what}: only the first {_MAX_EXAMINED:,} of {len(text):,} characters were examined")
    return text[:_MAX_EXAMINED]


def content_tokens(normalised: str) -> frozenset[str]:
    return frozenset(
        token
        for token in _TOKEN.findall(normalised)
        if (len(token) >= 3 or token.isdigit()) and token not in _STOPWORDS
    )


# --- response claims -------------------------------------------------------------------------

_DONE = (
    r"(?:sent|created|booked|scheduled|updated|deleted|removed|saved|placed|submitted|"
    r"completed|processed|added|cancell?ed|transferred|paid|ordered|reserved|registered|posted|"
    r"uploaded|published|delivered|confirmed|executed|logged|found|retrieved|fetched|finished)"
)
# Both are asked only "is there a match" (never where or which), so each is written for a fast
# scan: every alternative behind one ``\b`` and grouped by its first letters (a search tries
# every alternative at every position). "successfully" stands alone: a claim that contains it
# ("sent successfully", "has been successfully booked") is found by the word itself.
# tests/support/claims_oracle.py keeps the plain forms these must agree with.
_SUCCESS_RE = re.compile(
    rf"\b(?:success(?:ful(?:ly)?)?\b|succeeded\b|all set\b"
    rf"|(?:i|we)(?:'ve|\s+have)?\s+(?:just\s+|now\s+|already\s+)?{_DONE}\b"
    rf"|ha(?:s|ve|d)\s+been\s+{_DONE}\b"
    rf"|(?:was|were|is|are)\s+{_DONE}\b)",
    re.I,
)
_FAILED = rf"\s+(?:\w+\s+){{0,2}}?(?:{_DONE}|successful(?:ly)?|able|possible|work)\b"
_FAILURE_RE = re.compile(
    rf"\b(?:n(?:ot|ever){_FAILED}"
    r"|no(?:t\s+(?:be\s+|been\s+)?found\b|\s+(?:results?|matches|records?|data|information|entries|such)\b"
    r"|\s+(?:\w+\s+){1,3}?(?:was|were|could\s+be|has\s+been|have\s+been)\s+(?:found|located|retrieved)\b)"
    r"|c(?:ould\s*not|ouldn't|an\s*not|annot|an't)\b"
    r"|un(?:able|successful(?:ly)?|fortunately)\b"
    r"|fa(?:iled|ils?|ilure)\b"
    r"|w(?:asn't|eren't) able\b"
    r"|(?:an|the)\s+error\b|error\s+occurred\b"
    r"|d(?:oes\s*not|oesn't|o\s*not|on't|id\s*not|idn't)\s+exist\b)"
    rf"|n't{_FAILED}",
    re.I,
)
_FOUND_RE = re.compile(
    r"\b(?:i|we)(?:'ve|\s+have)?\s+found\b|\bhere\s+(?:is|are)\b|\bthere\s+(?:is|are)\s+\d+"
    r"|\bfound\s+\d+|\bresults?\s+(?:show|include)\b",
    re.I,
)

# Every match of ``_SUCCESS_RE`` holds "succe", "set" (of "all set") or one of the ``_DONE``
# words (up to its optional letter: "cancel" of "cancell?ed"), so a text without any of them,
# lower-cased, is not searched: most answers report findings, not actions. The characters that
# re.I matches to an ASCII letter but ``lower`` does not turn into one (dotted and dotless i,
# long s, the Kelvin sign) send a text to the search whatever it holds.
_SUCCESS_WORDS = ("succe", "set", *(w[: w.index("?") - 1] if "?" in w else w for w in _DONE[3:-1].split("|")))
_ODD_CASE = ("\u0130", "\u0131", "\u017f", "\u212a")


def _may_claim_success(text: str) -> bool:
    if not text.isascii() and any(map(text.__contains__, _ODD_CASE)):
        return True
    return any(map(text.lower().__contains__, _SUCCESS_WORDS))


# --- result reading ---------------------------------------------------------------------------

_ERROR_STATUSES = frozenset({"error", "failed", "failure"})
# \A: used with match(); anchored, a search() cannot retry the \s* run from every position
_ERROR_TEXT = re.compile(r"\A\s*(?:error|exception|failed|failure)\b\s*[:\-–]", re.I)
_NOT_FOUND_STATUSES = frozenset(
    {"not_found", "not found", "notfound", "missing", "no_results", "no results", "empty", "none"}
)
_SUCCESS_STATUSES = frozenset(
    {
        "success",
        "succeeded",
        "ok",
        "sent",
        "done",
        "completed",
        "created",
        "delivered",
        "scheduled",
        "booked",
        "confirmed",
    }
)
_SUCCESS_FLAGS = ("success", "ok", "sent", "delivered", "created", "completed")
_NOT_FOUND_TEXT = re.compile(
    r"\b(?:not found|no (?:results?|matches|records?|data)(?: found)?|does(?: not|n't) exist"
    r"|nothing found|404)\b",
    re.I,
)
_JSON_SHAPED = re.compile(r"^\s*(?:\{\s*[\"}]|\[\s*[\[{\"\]\d-]|\[\s*(?:true|false|null)\b)")
_REPR_SHAPED = re.compile(r"^\s*[\[{(]\s*['\"]")


def _has_result(call: ToolCall) -> bool:
    return call.has_result or call.result is not None or bool(call.result_raw)


def structured_result(call: ToolCall) -> tuple[Any, bool]:
    """The result as a value, and whether it was JSON-shaped text that could not be read.

    Readers usually parse results already; a string that still looks like JSON or a Python
    repr is tried here too, so its keys are never mistaken for used values.
    """
    value = call.result
    if value is None and call.result_raw is not None and not call.has_result:
        value = call.result_raw
    if not isinstance(value, str):
        return value, False
    text = value.strip()
    json_shaped = bool(_JSON_SHAPED.match(text))
    if not (json_shaped or _REPR_SHAPED.match(text)) or len(text) > _MAX_PARSE:
        return value, False
    parsed = _parse(text)
    if parsed is not None:
        return parsed, False
    return value, json_shaped


def _parse(text: str) -> Any:
    """JSON or a Python repr; None when neither, or when nested too deep to handle."""
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        try:
            parsed = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
        if not isinstance(parsed, (dict, list, tuple)):
            return None
    return None if nested_deeper_than(parsed) else parsed


def is_empty(value: Any) -> bool:
    return (
        value is None
        or value == {}
        or value == []
        or (isinstance(value, str) and not value.strip())
    )


def error_of(call: ToolCall, value: Any) -> str | None:
    """Why the tool failed: ``call.error``, or an error payload (``status: error``, a truthy
    ``error``, MCP's ``isError``). Error-looking text alone is not enough."""
    if call.error is not None:
        return call.error or "error"
    if isinstance(value, dict):
        error = value.get("error")
        if error not in (None, False, "", 0, {}, []):
            if error is True:
                return str(value.get("message") or "error")
            return error if isinstance(error, str) else json.dumps(error, default=str)
        status = value.get("status")
        if isinstance(status, str) and status.strip().lower() in _ERROR_STATUSES:
            return str(value.get("message") or status)
        if value.get("isError") is True or value.get("is_error") is True:
            return "error"
    return None


def reports_failure(value: Any) -> bool:
    """A text result that opens with a failure (``Error: payment method not found``): not an
    ``error_result`` on its own (the tool ran and answered), but an explicit outcome that an
    answer claiming success contradicts."""
    return isinstance(value, str) and bool(_ERROR_TEXT.match(value))


def reports_not_found(value: Any) -> bool:
    if isinstance(value, dict):
        status = value.get("status")
        if isinstance(status, str) and status.strip().lower() in _NOT_FOUND_STATUSES:
            return True
        if value.get("found") is False or value.get("exists") is False:
            return True
        return bool(value) and all(is_empty(v) for v in value.values())
    if isinstance(value, str) and len(value) <= 300:
        return bool(_NOT_FOUND_TEXT.search(value))
    return False


def reports_success(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    status = value.get("status")
    if isinstance(status, str) and status.strip().lower() in _SUCCESS_STATUSES:
        return True
    for flag in _SUCCESS_FLAGS:
        if value.get(flag) is True:
            return True
    return False


# --- salient values -------------------------------------------------------------------------


@dataclass(slots=True)  # not frozen: a frozen one costs several times as much to build, dozens per run
class Salient:
    """One value of a result that the response could use."""

    text: str
    phrase: str  # normalised and padded; "" when only facts/tokens can match
    tokens: frozenset[str]  # content words for fuzzy matching (empty: exact phrase only)
    facts: tuple[Fact, ...]
    #: what two values must share to count once (``salient_values``), and the kinds of the
    #: facts: worked out once per value, which is cached and met again in every run
    key: Any = field(default=None, compare=False, repr=False)
    kinds: frozenset[Kind] = field(default=frozenset(), compare=False, repr=False)

    @classmethod
    def of(cls, text: str, phrase: str, tokens: frozenset[str], facts: tuple[Fact, ...]) -> Salient:
        # no tokens are keyed as None, not as the empty set: a key of strings, numbers and None
        # only is left untracked by the garbage collector (the values are cached across runs)
        return cls(text, phrase, tokens, facts, (phrase, tokens or None, tuple(f.key for f in facts)),
                   kinds_of(facts))


def _leaves(value: Any) -> Iterator[Any]:
    """Scalar leaves (values only, never keys), depth-first in document order: the leaves of
    ``_grounding.walk``, lazily (a result with a million values is read only as far as its
    salient values are taken). One generator with a stack of iterators: a leaf is not passed up
    through a generator per level."""
    stack: list[tuple[Iterator[Any], int]] = [(iter((value,)), 0)]
    while stack:
        items, depth = stack[-1]  # the nodes at ``depth``, where the walk is in them
        for item in items:
            if isinstance(item, dict):
                if depth < LEAF_DEPTH:
                    stack.append((iter(item.values()), depth + 1))
                    break
            elif isinstance(item, (list, tuple)):
                if depth < LEAF_DEPTH:
                    stack.append((iter(item), depth + 1))
                    break
            elif isinstance(item, str):
                text = item.strip()
                if text[:1] in ("{", "[") and len(text) <= MAX_TEXT:
                    try:
                        inner = json.loads(text)
                    except (ValueError, RecursionError):
                        inner = None
                    if isinstance(inner, (dict, list)):
                        if depth < LEAF_DEPTH:
                            stack.append((iter((inner,)), depth + 1))
                            break
                        continue
                yield item
            elif isinstance(item, (int, float)) and not isinstance(item, bool) and _finite(item):
                yield item
        else:
            stack.pop()


def salient_values(value: Any, limits: list[str] | None = None, what: str = "result",
                   leaves: list[Leaf] | None = None) -> list[Salient]:
    """The result's salient values, at most ``_MAX_SALIENT``; each leaf is read lazily, so a
    result with a million sentences costs only the ones taken. Cuts are noted in ``limits``.
    ``leaves``: all of the value's leaves, as the sources walked them (``ClaimSources.own_leaves``)."""
    found: dict[Any, Salient] = {}
    for leaf in _leaves(value) if leaves is None else [leaf for _, leaf in leaves]:
        # ``_salient_of_leaf``, with a short string and a number (all but a few leaves) looked
        # up here; a float zero is not (``_salient_of_leaf`` says why)
        items = (_salient_of_short(leaf) if type(leaf) is str and len(leaf) <= _MAX_CACHED_PHRASE
                 else _salient_of_number(leaf) if type(leaf) is int or (type(leaf) is float and leaf)
                 else _salient_of_leaf(leaf, limits, what))
        for item in items:
            found.setdefault(item.key, item)
            if len(found) >= _MAX_SALIENT:
                if limits is not None:
                    limits.append(f"{what}: only the first {_MAX_SALIENT} distinct values were compared")
                return list(found.values())
    return list(found.values())


def _salient_of_leaf(leaf: Any, limits: list[str] | None = None, what: str = "result") -> Iterable[Salient]:
    # Short values recur (a status, a city, a fare class, a price), in a run's results and
    # across runs; they are never cut, so nothing is noted in ``limits``. Salient values are
    # never changed.
    if isinstance(leaf, str):
        if len(leaf) <= _MAX_CACHED_PHRASE:
            return _salient_of_short(leaf)
        return _salient_of_value(leaf, limits, what)
    # a float zero is not cached: -0.0 would be answered as 0.0, which is written otherwise
    return _salient_of_number(leaf) if leaf or isinstance(leaf, int) else _salient_of_value(leaf)


#: "no words to match loosely", one set for all the cached values (each ``frozenset()`` is a new
#: object, which the garbage collector walks at each full collection of the app's heap)
_NO_TOKENS: frozenset[str] = frozenset()


@lru_cache(maxsize=8192)
def _salient_of_short(leaf: str) -> tuple[Salient, ...]:
    return tuple(_salient_of_value(leaf))


#: typed: 65 and 65.0 are written differently ("65", "65.0")
@lru_cache(maxsize=4096, typed=True)
def _salient_of_number(leaf: float) -> tuple[Salient, ...]:
    return tuple(_salient_of_value(leaf))


def _salient_of_value(leaf: Any, limits: list[str] | None = None, what: str = "result") -> Iterator[Salient]:
    if not isinstance(leaf, str):
        fact = number_fact(float(leaf))
        yield Salient.of(str(leaf), norm_phrase(str(leaf)), _NO_TOKENS, (fact,))
        return
    text = _examined(leaf, what, limits).strip()
    if not any(ch.isalnum() for ch in text):
        return
    short = len(text) <= _SHORT_CHARS and len(text.split()) <= _SHORT_WORDS
    segments = [text] if short else (s.strip() for s in _SENTENCE_SPLIT.split(text))
    for segment in segments:
        if not any(ch.isalnum() for ch in segment):
            continue
        phrase = norm_phrase(segment)
        tokens = content_tokens(phrase)
        # word overlap only for values with enough words: "partly cloudy" must match exactly,
        # or "partly sunny" would count as using it
        fuzzy = tokens if len(tokens) >= _MIN_FUZZY_TOKENS else _NO_TOKENS
        yield Salient.of(segment, phrase, fuzzy, facts_of(segment))


# --- the response -----------------------------------------------------------------------------


class Response:
    """The text a call's result is compared with. What only some checks ask (the claim
    patterns, the content words, the index of its facts) is worked out when first asked: most
    answers never need the failure pattern, nor the words of a result worth fuzzy matching."""

    __slots__ = ("text", "phrase", "facts", "claims", "ungrounded", "orphans", "findings", "units", "_sentences",
                 "_tokens", "_index", "_may_succeed", "_success", "_failure", "_found")

    def __init__(self, text: str, phrase: str, facts: tuple[Fact, ...], claims: tuple[Fact, ...]) -> None:
        self.text = text
        self.phrase = phrase
        self.facts = facts  # unique, including minor numbers
        #: the facts it states that could be wrong in a checkable way (small counts are not)
        self.claims = claims
        #: claims nothing in the run's sources supports, of a kind the run's results hold (``ground``)
        self.ungrounded: list[Fact] = []
        #: ungrounded facts of a kind no result of the run's own calls holds (``ground``)
        self.orphans: list[Fact] = []
        #: the claims nothing supports, with their evidence (``ground``)
        self.findings: list[Finding] = []
        #: its sentences, list items and rows (``_answer.read``)
        self.units: list[_answer.Unit] = []
        self._sentences: list[str] | None = None
        self._tokens: frozenset[str] | None = None
        self._index: FactIndex | None = None
        self._may_succeed: bool | None = None
        self._success: bool | None = None
        self._failure: bool | None = None
        self._found: bool | None = None

    @classmethod
    def of(cls, text: str, limits: list[str] | None = None) -> Response:
        text = _examined(text, "response", limits)
        units = _answer.read(text)
        facts = tuple(unique_facts(units[0].facts if len(units) == 1 else (f for unit in units for f in unit.facts)))
        claims = [fact for fact in facts if not fact.minor]
        if len(claims) > _MAX_CLAIMS:
            # each claim is looked up in the sources: the first ones stand for the rest
            if limits is not None:
                limits.append(f"response: only the first {_MAX_CLAIMS} of its {len(claims)} facts were checked "
                              "for grounding")
            claims = claims[:_MAX_CLAIMS]
        response = cls(text, norm_phrase(text), facts, tuple(claims))
        response.units = units
        return response

    @property
    def tokens(self) -> frozenset[str]:
        if self._tokens is None:
            self._tokens = content_tokens(self.phrase)
        return self._tokens

    @property
    def index(self) -> FactIndex:
        if self._index is None:
            self._index = FactIndex(self.facts)
        return self._index

    @property
    def may_claim_success(self) -> bool:
        """False only when ``claims_success`` is (a cheap look at its words)."""
        if self._may_succeed is None:
            self._may_succeed = _may_claim_success(self.text)
        return self._may_succeed

    @property
    def claims_success(self) -> bool:
        if self._success is None:
            self._success = self.may_claim_success and _SUCCESS_RE.search(self.text) is not None
        return self._success

    @property
    def claims_failure(self) -> bool:
        if self._failure is None:
            self._failure = _FAILURE_RE.search(self.text) is not None
        return self._failure

    @property
    def claims_found(self) -> bool:
        if self._found is None:
            self._found = _FOUND_RE.search(self.text) is not None
        return self._found

    def ground(self, sources: ClaimSources | None, trajectory: Trajectory, limits: list[str] | None = None) -> None:
        """Find the claims nothing supports, each read in its sentence or list item (``_answer``);
        ``sources`` None: the check is skipped."""
        if sources is None:
            return
        context = _Conversation(sources, trajectory, self.text)
        claims, findings = _answer.check(self.units, context, _MAX_CLAIMS)
        self.claims = tuple(claims)
        self.findings = findings
        self.ungrounded = [finding.fact for finding in findings]
        # of a kind no result of the run's own calls holds (restated from earlier turns): the last
        # call's, for the per-call figures
        self.orphans = [fact for fact in self.ungrounded if not sources.sources.has_kind(fact, own=True)]

    @property
    def available(self) -> bool:
        return bool(self.phrase)

    def uses(self, value: Salient) -> bool:
        if value.phrase and value.phrase in self.phrase:
            return True
        if any(self.index.contains(fact, rounded_here=True) for fact in value.facts):
            return True
        if value.tokens:
            return len(value.tokens & self.tokens) / len(value.tokens) >= _TOKEN_OVERLAP
        return False

    def sentences(self) -> list[str]:
        if self._sentences is None:
            self._sentences = [s.strip() for s in _SENTENCE_SPLIT.split(self.text) if s and s.strip()]
        return self._sentences

    def sentence_of(self, fact: Fact) -> str:
        """The sentence that states the fact (the whole response when none holds it as written)."""
        needle = fact.text.casefold()
        return next((s for s in self.sentences() if needle in s.casefold()), self.text)

    def success_sentence(self) -> str:
        return next((s for s in self.sentences() if _SUCCESS_RE.search(s)), self.text)

    def failure_sentence(self) -> str:
        return next((s for s in self.sentences() if _FAILURE_RE.search(s)), self.text)


def _result_values(trajectory: Trajectory) -> Iterator[Any]:
    """Every tool result of the conversation as a value: the run's own calls' and those the model
    requests carry."""
    for call in trajectory.tool_calls:
        yield structured_result(call)[0]
    for message in _answer.history(trajectory):
        for part in message.tool_results:
            value = part.content
            if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
                value = _parse(value) if len(value) <= _MAX_PARSE else None
            yield value


class _Conversation(_answer.Context):
    """What ``_answer.check`` asks of the run, each answered when first asked: most answers only
    ask ``supports`` of facts the run's own results state."""

    __slots__ = ("_sources", "_trajectory", "_text", "_user", "_instructions", "_multipliers", "_asked_kinds",
                 "_lengths", "_earlier", "literal")

    def __init__(self, sources: ClaimSources, trajectory: Trajectory, text: str) -> None:
        self._sources = sources
        self.literal = sources.supports
        self._trajectory = trajectory
        self._text = text
        self._user: list[Fact] | None = None
        self._instructions: tuple[Fact, ...] | None = None
        self._multipliers: set[int] | None = None
        self._asked_kinds: set[Kind] | None = None
        self._lengths: set[int] | None = None
        self._earlier: set[float] | None = None

    def supports(self, fact: Fact, derived: bool) -> bool:
        if self._sources.supports(fact, derived):
            return True
        if fact.kind != "money":
            return False
        # an amount the agent worked out in an earlier answer may be restated (docs/scorers.md)
        if self._earlier is None:
            self._earlier = {round(abs(f.value), 2) for text in _answer.iter_assistant_texts(self._trajectory)
                             for f in facts_of(text) if f.kind == "money"}
        return round(abs(fact.value), 2) in self._earlier

    def user_facts(self) -> list[Fact]:
        if self._user is None:
            self._user = [f for text in _answer.iter_user_texts(self._trajectory) for f in facts_of(text)]
        return self._user

    def _instruction_facts(self) -> tuple[Fact, ...]:
        if self._instructions is None:
            system = self._trajectory.system_instructions
            self._instructions = facts_of(system) if system else ()
        return self._instructions

    def add_amounts(self, values: Iterable[float]) -> None:
        if self._multipliers is None:
            self._multipliers = _answer.stated_counts(self._text)
            money = [f.value for f in (*self.user_facts(), *self._instruction_facts()) if f.kind == "money"]
            self._sources.add_extra_amounts(money)
        self._sources.add_extra_amounts(values, stated=True, multipliers=self._multipliers)

    def kind_known(self, fact: Fact) -> bool:
        if self._sources.has_kind(fact):
            return True
        if self._asked_kinds is None:
            self._asked_kinds = set(kinds_of([*self.user_facts(), *self._instruction_facts()]))
        return same_kind(self._asked_kinds, fact)

    def list_lengths(self) -> set[int]:
        if self._lengths is None:
            self._lengths = _list_lengths(_result_values(self._trajectory))
        return self._lengths

    def records(self, wanted: set[str]) -> _answer.Records:
        return _answer.Records(_result_values(self._trajectory), wanted)

    def source_dates(self) -> set[tuple[int | None, int, int]]:
        return self._sources.dates()


def _list_lengths(values: Iterable[Any]) -> set[int]:
    """The lengths of the lists the values hold, at any depth (what an answer's count may count)."""
    lengths: set[int] = set()
    stack = [(value, 0) for value in values]
    while stack:
        value, depth = stack.pop()
        if depth > LEAF_DEPTH:
            continue
        if isinstance(value, list):
            lengths.add(len(value))
            stack.extend((item, depth + 1) for item in value[:1000])
        elif isinstance(value, dict):
            stack.extend((item, depth + 1) for item in value.values())
    return lengths


def final_response(trajectory: Trajectory, llms: list[LLMCall]) -> str:
    """The agent's final answer; the last LLM text when the run recorded none."""
    if trajectory.output and trajectory.output.strip():
        return trajectory.output
    for llm in reversed(llms):
        text = llm.output_text
        if text and text.strip():
            return text
    return ""


# --- the scorer ---------------------------------------------------------------------------------


#: the constructor's options
_OPTIONS = ("cross_turn", "hallucination_threshold", "no_output_tools", "handoff_tools")


class ToolResultVerification(Scorer):
    """Checks each tool result against the response; see the module docstring."""

    name = "tool_result_verification"
    kind = "code"

    def __init__(
        self,
        *,
        cross_turn: bool = False,
        hallucination_threshold: float = 0.3,
        no_output_tools: Iterable[str] = (),
        handoff_tools: Iterable[str] = (),
    ) -> None:
        if not 0.0 <= float(hallucination_threshold) <= 1.0:
            raise ScorerConfigError("hallucination_threshold must be within [0, 1]")
        for option, names in (("no_output_tools", no_output_tools), ("handoff_tools", handoff_tools)):
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise ScorerConfigError(f"{option} must be a list of tool names")
        self.cross_turn = bool(cross_turn)
        self.hallucination_threshold = float(hallucination_threshold)
        self.no_output_tools = frozenset(no_output_tools)
        self.handoff_tools = frozenset(handoff_tools)

    @classmethod
    def for_default_set(cls, options: dict[str, Any], inputs: BuildInputs) -> ToolResultVerification:
        # the default set takes the options this scorer knows and leaves any others
        return cls(**{k: v for k, v in options.items() if k in _OPTIONS})

    def _score(self, trajectory: Trajectory) -> Score:
        calls, call_positions, llms, llm_positions = step_positions(trajectory)
        final = final_response(trajectory, llms)
        if not calls:
            return self._score_without_calls(trajectory, final)
        results = [structured_result(call) for call in calls]
        values = [value for value, _ in results]
        errors = [error_of(call, value) for call, value in zip(calls, values)]
        answered = [not malformed and error is None and not is_empty(value) and not reports_failure(value)
                    for (value, malformed), error in zip(results, errors)]
        sources = ClaimSources.of(trajectory, calls, values, answered)
        outcomes = _Outcomes(calls, values, errors)
        responses: dict[str, Response] = {}
        reports = []
        #: where a cap on what is examined was reached (10 MB results, huge answers)
        limits: list[str] = []
        if not sources.complete:
            limits.append(
                "hallucination check skipped: the run's tool results and inputs are larger than what is indexed "
                f"({MAX_GROUNDING_VALUES:,} values, {MAX_TEXT:,} characters per text)"
            )
        if sources.amounts_cut:
            limits.append("totals: only the first amounts of the results were combined into sums and differences")
        last_llm = max(llm_positions, default=-1)
        for i, (call, position) in enumerate(zip(calls, call_positions, strict=True)):
            text = self._response_text(final, llms, llm_positions, position)
            response = responses.get(text)
            if response is None:
                response = responses[text] = Response.of(text, limits)
                response.ground(sources if sources.complete else None, trajectory, limits)
            # no later model request could carry the result of a call that ends the run
            ends_run = (bool(llms) and position > last_llm) or call.name in self.handoff_tools
            # a fact of a kind no call of this run returned (restated from an earlier turn's
            # results) is still flagged: on the last call before the answer
            orphans = i == len(calls) - 1
            leaves = sources.own_leaves[i] if i < len(sources.own_leaves) else None
            reports.append(self._check_call(call, results[i], errors[i], response, outcomes, i, ends_run, limits,
                                            orphans, leaves))
        findings = [f for r in responses.values() for f in r.findings]
        if len(responses) > 1:
            findings = list({f.fact.key: f for f in findings}.values())
        # the run-level issues are carried by a call, for outputs that read issues per call: a
        # contradiction by the call it speaks about, a made-up fact by the last call whose result
        # holds facts of its kind (else the run's last call)
        carried: dict[int, list[Issue]] = {}
        for finding in findings:
            at = next((j for j in range(len(reports) - 1, -1, -1)
                       if finding.fact.text in reports[j].ungrounded_facts), len(reports) - 1)
            carried.setdefault(at, []).append(_hallucination_issue(finding))
        for at, issues in carried.items():
            reports[at] = replace(reports[at], issues=(*reports[at].issues, *issues))
        return self._summarise(
            reports, any(r.available for r in responses.values()), list(dict.fromkeys(limits)),
            [finding.fact for finding in findings],
            facts_checked=max((len(r.claims) for r in responses.values()), default=0),
        )

    def _score_without_calls(self, trajectory: Trajectory, final: str) -> Score:
        """A run that made no call of its own: its answer is checked against the conversation (the
        earlier turns' results, the user's messages, the instructions)."""
        limits: list[str] = []
        if not final.strip():
            return Score.of_code(
                name=self.name, value=None, label=LABEL_NO_ANSWER,
                explanation="The run made no tool call and recorded no answer: nothing to verify.",
                details={"tool_calls": [], "summary": _summary([]), "response_available": False, "issues": [],
                         "facts_checked": 0, "ungrounded_facts": []},
                call_results=())
        sources = ClaimSources.of(trajectory, [], [], [])
        response = Response.of(final, limits)
        response.ground(sources if sources.complete else None, trajectory, limits)
        issues = [_hallucination_issue(finding) for finding in response.findings]
        details: dict[str, Any] = {
            "tool_calls": [], "summary": _summary([]), "response_available": True,
            "issues": [issue.to_dict() for issue in issues], "facts_checked": len(response.claims),
            "ungrounded_facts": [finding.fact.text for finding in response.findings],
        }
        if not sources.complete:
            limits.append(
                "hallucination check skipped: the run's tool results and inputs are larger than what is indexed "
                f"({MAX_GROUNDING_VALUES:,} values, {MAX_TEXT:,} characters per text)")
        if limits:
            details["limits"] = list(dict.fromkeys(limits))
        if not response.claims:
            return Score.of_code(
                name=self.name, value=1.0, label=LABEL_NO_TOOL_CALLS,
                explanation="No tool calls, and the answer states no fact to check.",
                details=details, call_results=())
        if not issues:
            explanation = (f"No tool calls; the answer's {len(response.claims)} fact(s) are supported by the "
                           "conversation.")
        else:
            lead = _evidence_lead_of(issues[0])
            explanation = f"{lead} No tool calls; {len(issues)} fact(s) of the answer are unsupported."
        return Score.of_code(
            name=self.name, value=round(max(0.0, 1.0 - _RUN_ISSUE_WEIGHT * len(issues)), 2),
            label=LABEL_FAIL if issues else LABEL_PASS, explanation=explanation, details=details,
            call_results=())

    def _details_are_json(self, result: Score) -> bool:
        # This class's own details (a subclass may write others): counts, scores (rounded
        # ratios of counts: never NaN), flags and messages it made; from the trajectory only
        # each call's id and name, the issues' ``actual`` values and evidence (text it clipped,
        # counts, ``small_json`` of an empty result) and the facts' text: JSON when those are.
        if type(self) is not ToolResultVerification or result.call_results is None:
            return False
        for report in result.call_results:
            if not (is_text_or_none(report.call_id) and is_text_or_none(report.name)):
                return False
            for issue in report.issues:
                if not (_plain(issue.actual) and _plain(issue.expected)
                        and (issue.evidence is None or all(type(v) is str for v in issue.evidence.values()))):
                    return False
            if isinstance(report, VerifiedCall) and not all(type(f) is str for f in report.ungrounded_facts):
                return False
        return all(type(f) is str for f in result.details.get("ungrounded_facts", ()))

    def _response_text(
        self, final: str, llms: list[LLMCall], llm_positions: list[int], position: int
    ) -> str:
        if not self.cross_turn:
            return final
        texts: list[str] = []
        for llm, llm_position in zip(llms, llm_positions, strict=True):
            if llm_position > position:
                texts.extend(
                    m.content
                    for m in llm.output_messages
                    if m.content and m.role in ("assistant", "model")
                )
        texts.append(final)
        return "\n".join(dict.fromkeys(t for t in texts if t and t.strip()))

    # one call ---------------------------------------------------------------------------------

    def _check_call(
        self, call: ToolCall, result: tuple[Any, bool], error: str | None, response: Response, outcomes: _Outcomes,
        i: int, ends_run: bool, limits: list[str] | None = None, orphans: bool = False,
        leaves: list[Leaf] | None = None,
    ) -> VerifiedCall:
        """``error``: ``error_of(call, value)``, which the run worked out for every call; ``leaves``:
        the value's leaves when the sources walked them all."""
        issues: list[Issue] = []
        what = f"result of call {call.id or call.name or '?'}"
        value, malformed = result
        has_result = _has_result(call)
        no_output = call.name in self.no_output_tools
        salient: list[Salient] = []
        if error is not None:
            issues.append(
                Issue("error_result", "high", f"the tool failed: {clip(error)}", actual=clip(error))
            )
        elif not has_result:
            if not (ends_run or no_output):
                issues.append(Issue("missing_result", "medium", "no result was recorded for the call"))
        elif malformed:
            issues.append(
                Issue(
                    "malformed_result",
                    "high",
                    "the result looks like JSON but cannot be parsed (truncated?)",
                    actual=clip(call.result_raw or str(value)),
                )
            )
        elif is_empty(value):
            if not no_output:
                issues.append(
                    Issue("empty_result", "low", "the tool returned an empty result", actual=small_json(value))
                )
        else:
            salient = salient_values(value, limits, what, leaves)

        # only "does the result hold facts of this kind" is asked of the result's facts, and
        # only of a response with ungrounded facts (the salient values' kinds are added then)
        result_kinds: set[Kind] = set()
        if isinstance(value, str) and malformed:
            result_kinds.update(kinds_of(facts_of(_examined(value, what, limits))))
        hallucination_score = 0.0
        ungrounded: list[Fact] = []
        integrated = False
        if response.available and (has_result or error is not None):
            if response.ungrounded:
                for item in salient:
                    result_kinds.update(item.kinds)
                ungrounded = [fact for fact in response.ungrounded
                              if _same_kind(result_kinds, fact) or (orphans and fact in response.orphans)]
            hallucination_score = round(len(ungrounded) / len(response.claims), 2) if response.claims else 0.0
            contradiction = _contradiction(call, value, error, response, outcomes, i)
            if contradiction:
                issues.append(contradiction)
            if not no_output:
                used = _used(response, salient)
                issues.extend(_integration_issues(used, len(salient)))
            else:
                used = 0
            if error is not None:
                integrated = response.claims_failure and not contradiction
            elif salient:
                integrated = used > 0 and not contradiction
            else:
                integrated = has_result and not contradiction
        hallucinated = hallucination_score > self.hallucination_threshold
        # a contradiction is a run-level issue (the run's score pays for it), carried by its call
        score = 1.0
        if issues:
            own = [issue.severity for issue in issues if issue.type not in RUN_ISSUES]
            score = penalised_score(own, SEVERITY_WEIGHTS) if own else 1.0
        return VerifiedCall(
            index=i, call_id=call.id, name=call.name, span_id=call.span_id, score=score, issues=tuple(issues),
            hallucinated=hallucinated, hallucination_score=hallucination_score, integrated=integrated,
            ungrounded_facts=tuple(fact.text for fact in ungrounded),
        )

    # trajectory -------------------------------------------------------------------------------

    def _summarise(self, reports: list[VerifiedCall], response_available: bool,
                   limits: list[str] | None = None, ungrounded: list[Fact] | None = None,
                   facts_checked: int = 0) -> Score:
        summary = _summary(reports)
        run_issues = [issue for report in reports for issue in report.issues if issue.type in RUN_ISSUES]
        passed = summary["valid_calls"] == summary["total_calls"] and not run_issues
        counts = summary["issue_counts"]
        if counts:
            listed = ", ".join(f"{kind} ×{n}" for kind, n in sorted(counts.items()))
            explanation = f"{len(reports)} tool result(s) checked against the response: {listed}."
        else:
            explanation = (
                f"All {len(reports)} tool result(s) are reflected in the response "
                "with no unsupported facts."
            )
        # What a person paged checks first, ahead of the counts (explanations are cut at a cap).
        lead = _evidence_lead(reports)
        if lead:
            explanation = f"{lead} {explanation}"
        if not response_available:
            explanation += " No response text was recorded, so only the results were checked."
        details: dict[str, Any] = {
            "tool_calls": json_view(reports),
            "summary": summary,
            "response_available": response_available,
            "ungrounded_facts": [fact.text for fact in ungrounded or []],
            "facts_checked": facts_checked,
            "issues": [issue.to_dict() for issue in run_issues],
        }
        value = summary["average_score"]
        if run_issues:
            value = round(max(0.0, value - _RUN_ISSUE_WEIGHT * len(run_issues)), 2)
        if limits:
            explanation += " Large inputs were examined in part (details.limits)."
            details["limits"] = limits
        return Score.of_code(
            name=self.name,
            value=value,
            label=LABEL_PASS if passed else LABEL_FAIL,
            explanation=explanation,
            details=details,
            call_results=tuple(reports),
        )


@dataclass(slots=True)
class VerifiedCall(CallResult):
    """One call's result as tool_result_verification checked it against the response."""

    score: float = 1.0
    #: the share of the response's facts that nothing supports exceeds the threshold
    hallucinated: bool = False
    hallucination_score: float = 0.0
    #: the response uses the result (or reports the failure, for an error)
    integrated: bool = False
    ungrounded_facts: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.call_id,
            "name": self.name,
            "score": self.score,
            "hallucinated": self.hallucinated,
            "hallucination_score": self.hallucination_score,
            "integrated": self.integrated,
            "ungrounded_facts": list(self.ungrounded_facts),
            "issues": [issue.to_dict() for issue in self.issues],
        }


#: characters of the flagged sentence in the explanation: the lead must fit the attribute cap
#: (``explanation_max_chars``, 256 by default) with the fact and the words around it
_LEAD_SENTENCE = 150


#: issues about the run's answer as a whole: each takes this off the run's score
RUN_ISSUES = frozenset({"hallucinated_content", "contradicts_response"})
_RUN_ISSUE_WEIGHT = SEVERITY_WEIGHTS["high"]
LABEL_NO_ANSWER = "no_answer"
_KIND_NAMES = {"money": "amount", "number": "quantity", "year": "date", "percentage": "quantity"}


def _hallucination_issue(finding: Finding) -> Issue:
    """A claim nothing supports, as the issue a person paged reads: the fact, its sentence, and
    for a wrong entity's value the record it was held against."""
    fact = finding.fact
    sentence = clip(finding.sentence, _LEAD_SENTENCE)
    if finding.reason == "arithmetic":
        message = f"the arithmetic written does not give {fact.text}: '{sentence}'"
        if finding.operands:
            message += f" ({', '.join(finding.operands)}: no source states it)"
    elif finding.reason == "entity":
        message = f"{fact.text} is not what the results hold for {finding.entity}: '{sentence}'"
    else:
        message = f"the response states {fact.text}; no tool result, user message or instruction supports it: '{sentence}'"
    evidence = {"fact": fact.text, "sentence": clip(finding.sentence, 300),
                "kind": _KIND_NAMES.get(fact.kind, fact.kind), "reason": finding.reason}
    if finding.entity is not None:
        evidence["entity"] = finding.entity
        evidence["record"] = clip(json.dumps(finding.record, default=str), 300)
    return Issue("hallucinated_content", "high", message, actual=[fact.text, *finding.operands], evidence=evidence)


def _evidence_lead_of(issue: Issue) -> str:
    evidence = issue.evidence or {}
    return f"States {evidence.get('fact')}, which no tool result supports: '{clip(evidence.get('sentence', ''), _LEAD_SENTENCE)}'."


def _evidence_lead(reports: list[VerifiedCall]) -> str | None:
    """The first flag as a person reads it: the fact or claim, and the sentence that states it."""
    for report in reports:
        for issue in report.issues:
            evidence = issue.evidence or {}
            sentence = evidence.get("sentence")
            if issue.type == "hallucinated_content" and sentence:
                return f"States {evidence['fact']}, which no tool result supports: '{clip(sentence, _LEAD_SENTENCE)}'."
            if issue.type == "contradicts_response" and sentence:
                claim = (issue.message or "").split(":", 1)[0]
                return (f"{claim[:1].upper()}{claim[1:]}: '{clip(sentence, _LEAD_SENTENCE)}' "
                        f"({report.name} returned {clip(str(evidence.get('result')), 60)}).")
    return None


_same_kind = same_kind


_NEGATIVE_STATES = frozenset(
    {"cancelled", "canceled", "failed", "failure", "error", "declined", "rejected", "denied", "expired", "voided"}
)
_STATE_KEYS = ("status", "state")


class _Outcomes:
    """How each of the run's calls turned out, for "was this failure superseded". Asked only
    when a response claims an outcome, so worked out when first asked."""

    def __init__(self, calls: list[ToolCall], values: list[Any], errors: list[str | None]) -> None:
        self.calls = calls
        self.names = [call.name for call in calls]
        self._values = values
        self._errors = errors
        self._failed: list[bool] | None = None
        self._last_stateful: int | None = None

    @property
    def failed(self) -> list[bool]:
        if self._failed is None:
            self._failed = [error is not None or reports_not_found(value) or reports_failure(value)
                            for value, error in zip(self._values, self._errors)]
        return self._failed

    @property
    def last_stateful(self) -> int:
        """The last call whose result reports a state: the state the answer describes."""
        if self._last_stateful is None:
            self._last_stateful = max((i for i, v in enumerate(self._values) if _state_of(v) is not None), default=-1)
        return self._last_stateful

    def retried_ok(self, i: int) -> bool:
        """A later call of the same tool succeeded: the answer reports the retry."""
        return any(self.names[j] == self.names[i] and not self.failed[j] for j in range(i + 1, len(self.names)))

    def later_failed(self, i: int) -> bool:
        return any(self.names[j] == self.names[i] and self.failed[j] for j in range(i + 1, len(self.names)))


def _state_of(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    for key in _STATE_KEYS:
        state = value.get(key)
        if isinstance(state, str) and state.strip():
            return state.strip().lower()
    return None


def _contradiction(
    call: ToolCall, value: Any, error: str | None, response: Response, outcomes: _Outcomes, i: int
) -> Issue | None:
    """Claim by claim (docs/scorers.md, contradictions): each sentence that claims an action
    succeeded (or failed) is held against the calls it speaks about only, by the action's verb,
    the ids it names, or, for a claim naming neither, the run's last action. Explicit outcomes only:
    an empty result alone never contradicts. The result is asked first (after a cheap look at the
    response's words): the sentences are read only for a result that could contradict them."""
    # ``outcomes.failed``: the error, "nothing found" or a failure report (worked out once per run)
    if (response.may_claim_success and (outcomes.failed[i] or _state_of(value) in _NEGATIVE_STATES)
            and response.claims_success and not outcomes.retried_ok(i)):
        state = _state_of(value)
        sentence = next((s for s in response.sentences() if _SUCCESS_RE.search(s) and not _FAILURE_RE.search(s)
                         and _speaks_about(s, call, i, outcomes)), None)
        if sentence is not None:
            if error is not None:
                return _contradicts("the tool failed but the response claims success", sentence, error)
            if reports_not_found(value):
                return _contradicts("the result reports nothing found but the response claims success", sentence,
                                    _shown(value))
            if reports_failure(value):
                return _contradicts("the tool reported a failure but the response claims success", sentence,
                                    _shown(value))
            if state in _NEGATIVE_STATES and i == outcomes.last_stateful and not _mentions(response, state):
                return _contradicts(f"the result says {state!r} but the response claims success", sentence,
                                    _shown(value))
    if error is None and reports_success(value) and response.claims_failure and not outcomes.later_failed(i):
        sentence = next((s for s in response.sentences() if _FAILURE_RE.search(s) and not _SUCCESS_RE.search(s)
                         and not _POLICY_REFUSAL.search(s) and _speaks_about(s, call, i, outcomes)), None)
        if sentence is not None:
            return _contradicts("the tool succeeded but the response says it failed", sentence, _shown(value))
    # a look-up that failed explicitly, and an answer presenting what it found ("Here is the report")
    if (error is not None and _is_lookup(call.name) and response.claims_found
            or (error is None and _is_lookup(call.name) and (reports_failure(value) or _explicitly_not_found(value))
                and response.claims_found)) and not outcomes.retried_ok(i):
        sentence = next((s for s in response.sentences() if _FOUND_RE.search(s) and not _FAILURE_RE.search(s)
                         and _found_about(s, call, i, outcomes)), None)
        if sentence is not None:
            return _contradicts("the look-up failed but the response presents what it found", sentence,
                                error if error is not None else _shown(value))
    return None


@lru_cache(maxsize=1024)
def _is_lookup(name: str | None) -> bool:
    words = _tool_words(name)
    return bool(words) and words[0] in _LOOKUP_VERBS


def _explicitly_not_found(value: Any) -> bool:
    """A result that says nothing was found (a status, ``found: false``, "not found" text), not one
    that is merely empty."""
    if isinstance(value, dict):
        status = value.get("status")
        return (isinstance(status, str) and status.strip().lower() in _NOT_FOUND_STATUSES) or \
            value.get("found") is False or value.get("exists") is False
    return isinstance(value, str) and len(value) <= 300 and bool(_NOT_FOUND_TEXT.search(value))


def _found_about(sentence: str, call: ToolCall, i: int, outcomes: _Outcomes) -> bool:
    """A claim of having found something is about this look-up: it names the call's ids or what it
    looks up, or, naming no call's, it follows the run's last look-up."""
    folded = sentence.casefold()
    if any(token in folded for token in _call_ids(call)) or _noun_matches(sentence, call.name):
        return True
    if any(any(token in folded for token in _call_ids(other)) or _noun_matches(sentence, other.name)
           for j, other in enumerate(outcomes.calls) if j != i):
        return False
    lookups = [j for j, name in enumerate(outcomes.names) if _is_lookup(name)]
    return bool(lookups) and lookups[-1] == i


#: "I can't cancel this booking because the policy ...": a refusal, not a claim about a tool
_POLICY_REFUSAL = re.compile(r"\b(?:polic(?:y|ies)|eligib\w*|allowed|permitted|rules?|not able to offer)\b", re.I)
#: first words of look-up tools, and the words a claim of having looked something up uses
_LOOKUP_VERBS = frozenset({"get", "search", "find", "lookup", "look", "list", "fetch", "check", "query", "read",
                           "retrieve", "show", "describe", "view"})
_LOOKUP_WORDS = frozenset({"found", "find", "located", "locate", "retrieved", "looked", "checked", "see", "pulled"})
_IRREGULAR = {"sent": "send", "paid": "pay", "found": "find", "made": "make", "bought": "buy", "got": "get",
              "put": "put", "set": "set", "built": "build", "kept": "keep", "held": "hold", "sold": "sell",
              "left": "leave", "gave": "give", "given": "give", "taken": "take", "took": "take", "done": "do"}
_GENERIC_SUCCESS = re.compile(r"\b(?:success(?:ful(?:ly)?)?|succeeded|all set|completed|processed|done|executed|"
                              r"finished)\b", re.I)
_WORD = re.compile(r"[A-Za-z][A-Za-z']+")
#: words of tool names that say nothing of what a tool acts on
_GENERIC_TOOL_WORDS = frozenset({"details", "detail", "info", "information", "data", "user", "users", "customer",
                                 "customers", "item", "items", "record", "records", "request", "by", "for", "from",
                                 "with", "all", "list", "tool", "function", "api", "status", "result", "results"})


def _tool_words(name: str | None) -> list[str]:
    return [w.lower() for w in re.split(r"[_\-.\s]+|(?<=[a-z])(?=[A-Z])", name or "") if w]


def _base(word: str) -> str:
    word = word.lower()
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    for suffix in ("elled", "ed", "ing", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] if suffix != "elled" else word[:-5] + "el"
    return word


def _verb_matches(sentence: str, name: str | None) -> bool:
    words = _tool_words(name)
    if not words:
        return False
    verb = words[0]
    said = [w.lower() for w in _WORD.findall(sentence)]
    if verb in _LOOKUP_VERBS:
        return any(w in _LOOKUP_WORDS for w in said)
    stems = {_base(w) for w in said} | set(said)
    return any(len(verb) >= 3 and (stem.startswith(verb[:4]) or verb.startswith(stem)) and len(stem) >= 3
               for stem in stems)


def _noun_matches(sentence: str, name: str | None) -> bool:
    """The claim names what the tool acts on ("your booking" for ``get_booking``)."""
    nouns = {_base(w) for w in _tool_words(name)[1:] if len(w) >= 4 and w not in _GENERIC_TOOL_WORDS}
    return bool(nouns) and any(_base(w) in nouns for w in _WORD.findall(sentence))


def _speaks_about(sentence: str, call: ToolCall, i: int, outcomes: _Outcomes) -> bool:
    """The claim is about this call: its action's verb, an id of its arguments, what it acts on
    (when the claim's verb is no other call's), or (a claim naming none of these) the run's last
    action."""
    folded = sentence.casefold()
    ids = _call_ids(call)
    if ids and any(token in folded for token in ids):
        return True
    if _verb_matches(sentence, call.name):
        # the same action done twice (a look-up by e-mail, then by name): a claim that names the
        # ids of another of those calls speaks about that one
        return not any(_verb_matches(sentence, other.name) and any(token in folded for token in _call_ids(other))
                       for j, other in enumerate(outcomes.calls) if j != i)
    other_verb = any(_verb_matches(sentence, name) for j, name in enumerate(outcomes.names) if j != i)
    if not other_verb and _noun_matches(sentence, call.name):
        return True
    if not _GENERIC_SUCCESS.search(sentence) and not _FAILURE_RE.search(sentence):
        return False
    # a claim that names no action of the run and no id: the last action it made
    if other_verb or any(_noun_matches(sentence, name) for name in outcomes.names):
        return False
    actions = [j for j, name in enumerate(outcomes.names) if _tool_words(name)[:1] and
               _tool_words(name)[0] not in _LOOKUP_VERBS]
    return bool(actions) and actions[-1] == i


def _call_ids(call: ToolCall) -> list[str]:
    """The values of the call's arguments and the top of its result that look like ids or
    addresses (what a claim may name it by)."""
    out = []
    arguments = call.arguments if isinstance(call.arguments, dict) else {}
    result = structured_result(call)[0]
    values = [*arguments.values(), *(result.values() if isinstance(result, dict) else ())]
    for value in values:
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            text = str(value).casefold()
            if 4 <= len(text) <= 64 and " " not in text and (any(ch.isdigit() for ch in text) or "@" in text):
                out.append(text)
    return out


def _mentions(response: Response, state: str) -> bool:
    """The response speaks of that state itself ("cancelled": "the cancellation is complete")."""
    stem = state[: max(4, len(state) - 3)]
    return any(token.startswith(stem) for token in response.phrase.split())


def _contradicts(message: str, sentence: str, result: str) -> Issue:
    message = f"{message}: '{clip(sentence, _LEAD_SENTENCE)}'"
    return Issue("contradicts_response", "high", message, actual=result,
                 evidence={"sentence": clip(sentence, 300), "result": clip(result), "kind": "claim"})


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else str(small_json(value))


def _used(response: Response, salient: list[Salient]) -> int:
    """How many of the values the response uses, counted only as far as ``_integration_issues``
    and ``integrated`` tell counts apart: once one value in two is used (and at least one),
    neither an issue nor its message depends on how many more are, so the rest are not compared."""
    enough = max(1, (len(salient) + 1) // 2)  # the least ``used`` with 2 * used >= total, at least 1
    used = 0
    for item in salient:
        if response.uses(item):
            used += 1
            if used >= enough:
                break
    return used


def _integration_issues(used: int, total: int) -> list[Issue]:
    if total == 0:
        return []
    if used == 0:
        return [
            Issue(
                "unused_result",
                "medium",
                f"none of the result's {total} value(s) appears in the response",
                expected=total,
                actual=0,
            )
        ]
    if total >= 3 and used < total / 2:
        return [
            Issue(
                "incomplete_integration",
                "low",
                f"the response uses {used} of the result's {total} values",
                expected=total,
                actual=used,
            )
        ]
    return []


def _plain(value: Any) -> bool:
    """An issue's value that is JSON as it is: None, exact text, an int (a bool too) or a list of texts."""
    kind = type(value)
    return value is None or kind is str or kind is int or kind is bool or (
        kind is list and all(type(x) is str for x in value))


def _summary(reports: list[VerifiedCall]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    valid = hallucinated = integrated = 0
    for report in reports:
        for issue in report.issues:
            counts[issue.type] = counts.get(issue.type, 0) + 1
        if not report.blocking:
            valid += 1
        if report.hallucinated:
            hallucinated += 1
        if report.integrated:
            integrated += 1
    return {
        "total_calls": len(reports),
        "valid_calls": valid,
        "hallucinated_calls": hallucinated,
        "integrated_calls": integrated,
        "average_score": mean2([r.score for r in reports]) if reports else 1.0,
        "issues": sum(counts.values()),
        "issue_counts": counts,
    }
