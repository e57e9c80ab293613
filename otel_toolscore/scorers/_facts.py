"""Specific facts in free text, normalised so that the same fact matches however it is written.

A *fact* is something an answer can get wrong in a checkable way: a number (with its unit's
dimension), money, a percentage, a date, a time, an identifier, an email or a URL. Extraction
runs the patterns from the most specific (URLs, emails, dates) to the least (bare numbers) and
blanks what each one took, so the digits of a date or an order id never reappear as numbers.

Normalisation: case-folded; thousands separators and currency symbols dropped from values;
``72``, ``72.0``, ``72°F`` and ``72 degrees`` are all the number 72 (the unit's dimension is
kept apart, for "is this the same kind of fact"); dates become (year, month, day) with the year
optional; times become minutes after midnight.
"""

from __future__ import annotations

import bisect
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

#: a bare integer this small is usually a count or an ordinal, not a claim worth checking
MINOR_INT_LIMIT = 10
#: characters of one text that are examined (a 10 MB tool result is read in its first part)
MAX_TEXT = _MAX_TEXT = 200_000
#: longer texts are not kept in ``extract_facts``' cache: they rarely repeat, and the cache
#: would keep megabytes of text alive long after their run was scored
_MAX_CACHED_TEXT = 4_096


# Not frozen (a frozen one costs three times as much to build, and a run builds dozens), but
# hashable by value like one, and never changed: facts are cached and shared between runs.
@dataclass(slots=True, unsafe_hash=True)
class Fact:
    kind: str  # number, year, money, percentage, date, time, identifier, email, url
    #: float for number/year/money/percentage; (y|None, m, d) for date; minutes for time;
    #: case-folded text otherwise
    value: Any
    text: str
    #: numbers: the unit's dimension (temperature, length, …) or None; money: currency or None
    unit: str | None = None
    #: numbers: digits after the decimal point as written (for "68" vs 68.4)
    decimals: int = 0
    #: times: written without am/pm and ≤ 12 h, so "2:30" may mean 14:30
    ambiguous: bool = False
    #: ambiguous numeric dates (03/04/2025): every reading
    alternatives: tuple[Any, ...] = field(default=())
    #: small bare integers: used for "was the value used", ignored as hallucination evidence
    minor: bool = False

    @property
    def key(self) -> tuple[str, Any]:
        return (self.kind, self.value)


# --- patterns ------------------------------------------------------------------------------

_NUM = r"[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
# A number not inside a word, a decimal, a list like 1,2 or a path, ``(?<![\w.,/])(?P<num>_NUM)``,
# written to begin with a character class: a pattern that begins so is searched for in C, position
# to position, where one that begins with a look-behind is tried at every position. The
# look-behind moves after the first character (which it then spans), and ``_NUM`` is split on
# that character: a sign, then digits, or a digit, then the rest.
_LEAD_NUM = (
    r"(?P<num>[-+−\d](?<![\w.,/][-+−\d])"
    r"(?:(?<=[-+−])(?:\d{1,3}(?:,\d{3})+|\d+)|(?<=\d)(?:\d{0,2}(?:,\d{3})+|\d*))(?:\.\d+)?)"
)
_SCALE = r"(?:\s?(?P<scale>thousand|million|billion|trillion|bn|mn)\b)?"

_MONTHS = {
    "january": 1,
    "jan": 1,
    "february": 2,
    "feb": 2,
    "march": 3,
    "mar": 3,
    "april": 4,
    "apr": 4,
    "may": 5,
    "june": 6,
    "jun": 6,
    "july": 7,
    "jul": 7,
    "august": 8,
    "aug": 8,
    "september": 9,
    "sep": 9,
    "sept": 9,
    "october": 10,
    "oct": 10,
    "november": 11,
    "nov": 11,
    "december": 12,
    "dec": 12,
}
_MONTH = "(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"

_URL_RE = re.compile(r"\b(?:https?://|www\.)[^\s<>\"'`]+", re.I)
_EMAIL_RE = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.I)
_UUID_RE = re.compile(
    r"(?<![\w-])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![\w-])", re.I
)
_ISO_DATE_RE = re.compile(r"(?<![\w.])(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})(?!\d)")
_TEXT_DATE_MD_RE = re.compile(
    rf"\b{_MONTH}\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(?P<y>\d{{4}})\b)?", re.I
)
_TEXT_DATE_DM_RE = re.compile(
    rf"\b(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?![a-z])(?:,?\s+(?P<y>\d{{4}})\b)?",
    re.I,
)
_SLASH_DATE_RE = re.compile(r"(?<![\w./])(?P<a>\d{1,2})/(?P<b>\d{1,2})/(?P<y>\d{4}|\d{2})(?![\w/])")
_CLOCK_RE = re.compile(  # (?<![\d:.])(?P<h>\d{1,2}), begun as _LEAD_NUM is
    r"(?P<h>\d(?<![\d:.]\d)\d?):(?P<m>\d{2})(?::\d{2}(?:\.\d+)?)?"
    r"(?:\s?(?P<ap>[ap])\.?\s?m\b\.?)?(?![\d:])",
    re.I,
)
_HOUR_AMPM_RE = re.compile(r"(?<![\w.:])(?P<h>\d{1,2})\s?(?P<ap>[ap])\.?\s?m\b\.?", re.I)
# (?P<cur>US\$|C\$|A\$|\$|€|£|¥|₹), begun with its first character as a case-sensitive class (no
# character but these is matched by them under re.I), then the rest of each spelling
_MONEY_PREFIX_RE = re.compile(
    r"(?P<cur>(?-i:[uUcCaA$€£¥₹])(?:(?<=[uU])S\$|(?<=[cCaA])\$|(?<=[$€£¥₹])))"
    rf"\s?(?P<num>{_NUM}){_SCALE}",
    re.I,
)
_CURRENCY_CODES = "usd|eur|gbp|jpy|inr|cad|aud|chf|cny|sek|nok|dkk"
_MONEY_CODE_RE = re.compile(rf"\b(?P<cur>{_CURRENCY_CODES})\s?(?P<num>{_NUM}){_SCALE}", re.I)
_MONEY_SUFFIX_RE = re.compile(
    rf"{_LEAD_NUM}{_SCALE}\s?(?P<cur>{_CURRENCY_CODES}|dollars?|euros?|cents?|bucks)\b",
    re.I,
)
_PERCENT_RE = re.compile(rf"{_LEAD_NUM}\s?(?:%|percent\b|per\s?cent\b|pct\b)", re.I)
_IDENT_SEP_RE = re.compile(
    r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[a-z])[a-z0-9]+(?:[-_][a-z0-9]+)+(?![\w-])", re.I
)
_IDENT_HASH_RE = re.compile(r"(?<![\w#])#\d{3,}\b")
_HEX_RE = re.compile(r"(?<![\w-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}(?![\w-])", re.I)
# A code of capitals and digits mixed in any order (a booking reference ``8C8K4E``, an order id
# ``W8855135`` or ``#W8855135``, a flight ``HAT018``): five characters or more, at least one of
# each. Begun with a character class (searched in C), its start looked behind for.
_IDENT_CODE_RE = re.compile(r"[#A-Z\d](?<![\w#-][#A-Z\d])(?:(?<=[A-Z])[A-Z0-9]*\d|(?<=\d)[A-Z0-9]*[A-Z]|(?<=#)[A-Z0-9]+)"
                            r"[A-Z0-9]*(?![\w-])")

# unit → dimension; longest spellings first so "km/h" wins over "km" and "m"
_UNITS: dict[str, str] = {}
for _dimension, _spellings in {
    "temperature": "°f °c ºf ºc ° º degrees degree deg fahrenheit celsius",
    "speed": "km/h mph kph kmh m/s knots knot",
    "length": "kilometers kilometres kilometer kilometre km miles mile mi meters metres meter "
    "metre cm mm ft feet foot yards yard yd inches inch",
    "mass": "kilograms kilogram kg grams gram mg g pounds pound lbs lb ounces ounce oz tonnes "
    "tonne tons ton",
    "duration": "milliseconds millisecond ms seconds second secs sec s minutes minute mins min "
    "hours hour hrs hr h days day weeks week months month years year yrs",
    "data": "bytes byte kib mib gib tib kb mb gb tb pb",
}.items():
    for _spelling in _spellings.split():
        _UNITS[_spelling] = _dimension


def _by_first_letter(words: list[str]) -> str:
    """An alternation of ``words`` (in priority order) grouped by their first character, each
    group in the same order: ``km|kg|m`` as ``k(?:m|g)|m``. It matches what the plain one does,
    as the plain one would (no two groups can match the same character, even under re.I), but a
    failing search tries one alternative per first character, not one per word: most numbers
    have no unit after them."""
    groups: dict[str, list[str]] = {}
    for word in words:
        groups.setdefault(word[0], []).append(word[1:])
    return "|".join(
        re.escape(first) + (f"(?:{'|'.join(re.escape(rest) for rest in rests)})" if rests != [""] else "")
        for first, rests in groups.items()
    )


_UNIT_ALT = _by_first_letter(sorted(_UNITS, key=len, reverse=True))
# (?=[°ºa-z]): every unit starts with one of these (under re.I, with whatever re.I matches to a
# letter), so a number followed by anything else skips the unit alternation at once
_NUMBER_RE = re.compile(
    rf"{_LEAD_NUM}{_SCALE}"
    rf"(?:\s?(?=[°ºa-z])(?P<unit>°\s?[fc]\b|º\s?[fc]\b|(?:{_UNIT_ALT})(?![\w/])|[fc](?![\w]))"
    rf"(?:\s(?P<scale2>fahrenheit|celsius)\b)?)?",
    re.I,
)
_SCALES = {"thousand": 1e3, "million": 1e6, "mn": 1e6, "billion": 1e9, "bn": 1e9, "trillion": 1e12}


# --- extraction ----------------------------------------------------------------------------


def _to_number(text: str) -> float:
    return float(text.replace(",", "").replace("−", "-"))


def _decimals(text: str) -> int:
    return len(text.split(".", 1)[1]) if "." in text else 0


def _scaled(value: float, scale: str | None) -> float:
    return value * _SCALES[scale.lower()] if scale else value


def _valid_date(y: int | None, m: int, d: int) -> bool:
    return 1 <= m <= 12 and 1 <= d <= 31 and (y is None or 1000 <= y <= 9999)


def _year(text: str | None) -> int | None:
    if not text:
        return None
    y = int(text)
    return y + 2000 if y < 100 else y


def _url(match: re.Match[str]) -> Fact:
    raw = match.group(0).rstrip(".,;:!?)]}'\"")
    value = raw.casefold()
    value = value.removeprefix("https://") if value.startswith("https://") else value.removeprefix("http://")
    value = value.removeprefix("www.").rstrip("/")
    return Fact("url", value, raw)


def _email(match: re.Match[str]) -> Fact:
    return Fact("email", match.group(0).casefold(), match.group(0))


_COMPOUND_RE = re.compile(r"\d{1,4}-[a-z]+", re.I)


def _identifier(match: re.Match[str]) -> Fact | None:
    text = match.group(0)
    if _COMPOUND_RE.fullmatch(text):
        return None  # "24-hour", "3-day", "5-star": a number made an adjective, read as the number
    return Fact("identifier", match.group(0).casefold(), match.group(0))


def _code(match: re.Match[str]) -> Fact | None:
    raw = match.group(0)
    body = raw.lstrip("#")
    if len(body) < 5 or body.isdigit() or body.isalpha():
        return None
    return Fact("identifier", body.casefold(), raw)


def _iso_date(match: re.Match[str]) -> Fact | None:
    y, m, d = int(match["y"]), int(match["m"]), int(match["d"])
    return Fact("date", (y, m, d), match.group(0)) if _valid_date(y, m, d) else None


def _text_date(match: re.Match[str]) -> Fact | None:
    if not match["month"][0].isupper():
        return None  # "may 5", "mar 3": verbs far more often than lower-case month names
    m = _MONTHS[match["month"].casefold()]
    d = int(match["d"])
    y = _year(match["y"])
    return Fact("date", (y, m, d), match.group(0).strip()) if _valid_date(y, m, d) else None


def _slash_date(match: re.Match[str]) -> Fact | None:
    a, b, y = int(match["a"]), int(match["b"]), _year(match["y"])
    readings = tuple(
        dict.fromkeys(r for r in ((y, a, b), (y, b, a)) if _valid_date(r[0], r[1], r[2]))
    )
    if not readings:
        return None
    return Fact("date", readings[0], match.group(0), alternatives=readings)


def _clock(match: re.Match[str]) -> Fact | None:
    h, m, ap = int(match["h"]), int(match["m"]), match["ap"]
    if m > 59 or h > 23 or (ap and not 1 <= h <= 12):
        return None
    if ap:
        h = h % 12 + (12 if ap.lower() == "p" else 0)
    return Fact("time", h * 60 + m, match.group(0).strip(), ambiguous=not ap and h <= 12)


def _hour_ampm(match: re.Match[str]) -> Fact | None:
    h = int(match["h"])
    if not 1 <= h <= 12:
        return None
    h = h % 12 + (12 if match["ap"].lower() == "p" else 0)
    return Fact("time", h * 60, match.group(0).strip())


def _money(match: re.Match[str]) -> Fact:
    currency = match["cur"].casefold()
    value = _scaled(_to_number(match["num"]), match["scale"])
    if currency.startswith("cent"):
        value /= 100
    return Fact(
        "money", value, match.group(0).strip(), unit=currency, decimals=_decimals(match["num"])
    )


def _percent(match: re.Match[str]) -> Fact:
    return Fact(
        "percentage",
        _to_number(match["num"]),
        match.group(0).strip(),
        decimals=_decimals(match["num"]),
    )


def _number(match: re.Match[str]) -> Fact:
    raw_num = match["num"]
    value = _scaled(_to_number(raw_num), match["scale"])
    unit_text = match["unit"]
    dimension = None
    if unit_text:
        unit_key = "".join(unit_text.casefold().split())  # "° F" is "°f" (str.split: the whitespace \s is)
        dimension = _UNITS.get(unit_key) or ("temperature" if unit_key in ("f", "c") else None)
    text = match.group(0).strip()
    plain = dimension is None and not match["scale"]
    integer = plain and "." not in raw_num and "," not in raw_num
    if integer and 1900 <= value <= 2100 and raw_num.isdigit():
        return Fact("year", value, text)
    minor = integer and abs(value) <= MINOR_INT_LIMIT
    return Fact("number", value, text, unit=dimension, decimals=_decimals(raw_num), minor=minor)


# What any match of a pattern must contain: a digit, one of some literal substrings, one of
# some substrings of the case-folded text (for the re.I patterns: every character that re.I
# matches to one of these letters case-folds to that letter; "i" does not qualify, hence "nr"
# for "inr"). A text without them skips the pattern: most texts have no URL, e-mail, slash,
# currency or month name, and short words have no digit. Blanking a match only removes
# characters, so checking the original text once is enough.
_MONTH_PREFIXES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_CURRENCY_CODE_PARTS = ("usd", "eur", "gbp", "jpy", "nr", "cad", "aud", "chf", "cny", "sek", "nok", "dkk")
_NO_NEED: tuple[str, ...] = ()

# A guard is a run of characters every match holds, as a pattern that starts with a character
# class or a literal (so that its search skips ahead in C instead of trying every position):
# blanking turns characters into spaces and creates none, so a match in the blanked text holds
# the same run in the original, and one search of the original decides. Where a match may have
# a space, the guard has any character (that space may be a blanked one); a guard never spans
# a run of spaces.
_UUID_GUARD = re.compile(r"[0-9a-fA-F]{8}-")
_ISO_DATE_GUARD = re.compile(r"\d{4}-\d")
_SLASH_DATE_GUARD = re.compile(r"\d/\d")
_CLOCK_GUARD = re.compile(r"\d:\d\d")
_HASH_GUARD = re.compile(r"#\d{3}")
_HEX_GUARD = re.compile(r"[0-9a-fA-F]{7}")
# "5pm", "5 p.m.": a, p and m have no other spelling under re.I. ``\d.?[aApP]\.?.?[mM]``, begun at
# the letter, its digit looked behind for: the plain form is tried at every digit, backtracking its
# ``.?`` each time; this one fails at most letters in one look behind (half the time on an answer)
_AMPM_GUARD = re.compile(r"[aApP](?:(?<=\d[aApP])|(?<=\d.[aApP]))\.?.?[mM]", re.S)
_SEP_GUARD = re.compile(r"[-_]\w")
_CODE_GUARD = re.compile(r"[A-Z]\d|\d[A-Z]")


# (pattern, fact maker, needs a digit, needs one of these substrings, needs one of these in
# the case-folded text, a guard the text must hold or None)
_PIPELINE: tuple[
    tuple[re.Pattern[str], Any, bool, tuple[str, ...], tuple[str, ...], re.Pattern[str] | None], ...
] = (
    (_URL_RE, _url, False, ("://",), ("www.",), None),
    (_EMAIL_RE, _email, False, ("@",), _NO_NEED, None),
    (_UUID_RE, _identifier, False, ("-",), _NO_NEED, _UUID_GUARD),
    (_ISO_DATE_RE, _iso_date, True, ("-",), _NO_NEED, _ISO_DATE_GUARD),
    (_TEXT_DATE_MD_RE, _text_date, True, _NO_NEED, _MONTH_PREFIXES, None),
    (_TEXT_DATE_DM_RE, _text_date, True, _NO_NEED, _MONTH_PREFIXES, None),
    (_SLASH_DATE_RE, _slash_date, True, ("/",), _NO_NEED, _SLASH_DATE_GUARD),
    (_CLOCK_RE, _clock, True, (":",), _NO_NEED, _CLOCK_GUARD),
    (_HOUR_AMPM_RE, _hour_ampm, True, _NO_NEED, _NO_NEED, _AMPM_GUARD),
    (_MONEY_PREFIX_RE, _money, True, ("$", "€", "£", "¥", "₹"), _NO_NEED, None),
    (_MONEY_CODE_RE, _money, True, _NO_NEED, _CURRENCY_CODE_PARTS, None),
    (_MONEY_SUFFIX_RE, _money, True, _NO_NEED, (*_CURRENCY_CODE_PARTS, "dollar", "euro", "cent", "buck"), None),
    (_PERCENT_RE, _percent, True, ("%",), ("cent", "pct"), None),
    (_IDENT_SEP_RE, _identifier, True, ("-", "_"), _NO_NEED, _SEP_GUARD),
    (_IDENT_CODE_RE, _code, True, _NO_NEED, _NO_NEED, _CODE_GUARD),
    (_IDENT_HASH_RE, _identifier, True, ("#",), _NO_NEED, _HASH_GUARD),
    (_HEX_RE, _identifier, True, _NO_NEED, _NO_NEED, _HEX_GUARD),
    (_NUMBER_RE, _number, True, _NO_NEED, _NO_NEED, None),
)
#: what the patterns' ``\d`` matches (any Unicode decimal digit)
_DIGIT_RE = re.compile(r"\d")


# Which patterns a short text can match is decided from one set of "triggers" (the characters
# and substrings the table above asks for) instead of a check per pattern: each trigger looked
# for once with ``in`` (a search in C; the case-folded text for the substrings of re.I patterns),
# then the plan for that set of triggers, kept once made (texts share few distinct sets).
_Plan = tuple[tuple[re.Pattern[str], Any, re.Pattern[str] | None], ...]


def _trigger_tables() -> tuple[dict[str, int], dict[str, int], int, tuple[int, ...]]:
    """(bit of each character or substring of the original text, bit of each substring of the
    case-folded text, the has-a-digit bit, each pattern's trigger bits)."""
    bits_original: dict[str, int] = {}
    bits_folded: dict[str, int] = {}
    for _, _, _, literal, in_folded, _ in _PIPELINE:
        for needle in literal:
            bits_original.setdefault(needle, 1 << (len(bits_original) + len(bits_folded)))
        for needle in in_folded:
            bits_folded.setdefault(needle, 1 << (len(bits_original) + len(bits_folded)))
    digit = 1 << (len(bits_original) + len(bits_folded))
    masks = tuple(
        sum(bits_original[n] for n in set(literal)) | sum(bits_folded[n] for n in set(in_folded))
        for _, _, _, literal, in_folded, _ in _PIPELINE
    )
    return bits_original, bits_folded, digit, masks


_BITS_ORIGINAL, _BITS_FOLDED, _DIGIT_BIT, _MASKS = _trigger_tables()
#: (character, bit): each looked for with ``in`` (a search in C), not by walking the text's characters
_TRIGGER_CHARS = tuple((n, bit) for n, bit in _BITS_ORIGINAL.items() if len(n) == 1)
_LONG_TRIGGERS = tuple((n, bit) for n, bit in _BITS_ORIGINAL.items() if len(n) > 1)  # "://"
#: (substring of the case-folded text, bit), each looked for with ``in``
_FOLDED_TRIGGERS = tuple(_BITS_FOLDED.items())
_PLANS: dict[int, _Plan] = {}
#: texts up to this long are checked by trigger set; longer ones pattern by pattern, where each
#: check stops at its first hit (a long text can hold thousands of trigger substrings)
_TRIGGER_TEXT = 4_096


#: the triggers of the patterns that need no digit (URLs, e-mails, UUIDs), in the original text
#: and in the case-folded one: a text without a digit can match no other pattern, so it is
#: looked at for these only (most short values, names and descriptions have no digit)
_UNDIGITED_ORIGINAL = tuple(dict.fromkeys(
    (needle, _BITS_ORIGINAL[needle]) for _, _, needs_digit, literal, _, _ in _PIPELINE if not needs_digit
    for needle in literal))
_UNDIGITED_FOLDED = tuple(dict.fromkeys(
    (needle, _BITS_FOLDED[needle]) for _, _, needs_digit, _, in_folded, _ in _PIPELINE if not needs_digit
    for needle in in_folded))


def _present(needles: Iterable[tuple[str, int]], text: str) -> int:
    """The bits of the needles found in ``text``."""
    present = 0
    for needle, bit in needles:
        if needle in text:
            present |= bit
    return present


def _triggers(original: str) -> int:
    if _DIGIT_RE.search(original) is None:
        return _present(_UNDIGITED_ORIGINAL, original) | _present(_UNDIGITED_FOLDED, original.casefold())
    return (_DIGIT_BIT | _present(_TRIGGER_CHARS, original) | _present(_LONG_TRIGGERS, original)
            | _present(_FOLDED_TRIGGERS, original.casefold()))


def _plan(present: int) -> _Plan:
    plan = _PLANS.get(present)
    if plan is None:
        plan = tuple(
            (pattern, make, guard)
            for (pattern, make, needs_digit, _, _, guard), mask in zip(_PIPELINE, _MASKS)
            if (present & _DIGIT_BIT or not needs_digit) and (not mask or present & mask)
        )
        if len(_PLANS) < 4096:  # there are far fewer distinct trigger sets; a bound all the same
            _PLANS[present] = plan
    return plan


def _plan_checked_one_by_one(original: str) -> _Plan:
    has_digit = _DIGIT_RE.search(original) is not None
    folded: str | None = None
    plan = []
    for pattern, make, needs_digit, literal, in_folded, guard in _PIPELINE:
        if needs_digit and not has_digit:
            continue
        if in_folded:
            if folded is None:
                folded = original.casefold()
            if not (any(map(original.__contains__, literal)) or any(map(folded.__contains__, in_folded))):
                continue
        elif literal and not any(map(original.__contains__, literal)):
            continue
        plan.append((pattern, make, guard))
    return tuple(plan)


# 1,024 entries, not more: its hits come within a run (a leaf read as a leaf, then as a salient
# value; a message met again in each later request), and a cache of 1,024 made every hit that one
# of 4,096 made on the real conversations and on distinct synthetic runs, while the larger one held
# 4,096 texts' facts alive on the app's heap, where each full collection walks them.
@lru_cache(maxsize=1024)
def extract_facts(text: str) -> tuple[Fact, ...]:
    """Every fact in the text, in pattern order (not text order)."""
    if not text:
        return ()
    original = text[:_MAX_TEXT].replace("’", "'")
    plan = _plan(_triggers(original)) if len(original) <= _TRIGGER_TEXT else _plan_checked_one_by_one(original)
    facts: list[Fact] = []
    append = facts.append
    text = original
    last = len(plan) - 1
    for n, (pattern, make, guard) in enumerate(plan):
        if guard is not None and guard.search(original) is None:
            continue
        if n == last:
            # what the last pattern takes is blanked for no later one: its matches are only read
            for match in pattern.finditer(text):
                made = _made(make, match)
                if made is not None:
                    append(made)
            break
        text = pattern.sub(_taker(make, append), text)
    return tuple(facts)


def _taker(make: Callable[[re.Match[str]], Fact | None], append: Callable[[Fact], None],
           ) -> Callable[[re.Match[str]], str]:
    """The replacement of one pattern's ``sub``: each match ``make`` reads as a fact is kept
    and blanked (later patterns do not read its digits again); any other is left as it is."""
    def take(match: re.Match[str]) -> str:
        made = _made(make, match)
        if made is None:
            return match.group(0)  # not a fact after all; leave it for later patterns
        append(made)
        return " " * (match.end() - match.start())
    return take


#: what each maker made of a match, by the maker's id, the match's text and groups (all a maker
#: reads): the same amounts, temperatures, times and ids recur across the texts of a run and across
#: runs, and a fact costs several times its look-up to make. Emptied when full: a bound, not an
#: LRU; a long match (a URL) is made afresh, so the entries hold no more than a few MB. The
#: maker's id, not the maker: a key of ints, strings and None only is left untracked by the
#: garbage collector, which otherwise walks every key at each full collection of the app's heap
#: (the makers are the module's own functions, alive as long as it is, so their ids never recur).
_MADE: dict[tuple[int, str, tuple[str | None, ...]], Fact | None] = {}
_MADE_ENTRIES = 16_384
_MADE_MATCH = 64
_UNMADE = object()


def _made(make: Callable[[re.Match[str]], Fact | None], match: re.Match[str]) -> Fact | None:
    if match.end() - match.start() > _MADE_MATCH:
        return make(match)
    key = (id(make), match.group(0), match.groups())
    made = _MADE.get(key, _UNMADE)
    if made is _UNMADE:
        made = make(match)
        if len(_MADE) >= _MADE_ENTRIES:
            _MADE.clear()
        _MADE[key] = made
    return made  # type: ignore[return-value]


#: facts of the last few long texts, by their examined part (a huge result is read as a
#: value and as raw text in the same scoring): a few entries, so at most a few MB are kept
_LONG: OrderedDict[str, tuple[Fact, ...]] = OrderedDict()
_LONG_ENTRIES = 4
_long_lock = threading.Lock()


def facts_of(text: str) -> tuple[Fact, ...]:
    """``extract_facts``, with long texts (which rarely repeat across runs, and which the big
    cache would keep alive) in a small cache of their own, keyed by the part examined."""
    if len(text) <= _MAX_CACHED_TEXT:
        return extract_facts(text)
    key = text[:_MAX_TEXT]
    with _long_lock:
        hit = _LONG.get(key)
    if hit is None:
        hit = extract_facts.__wrapped__(key)  # type: ignore[attr-defined]
        with _long_lock:
            _LONG[key] = hit
            while len(_LONG) > _LONG_ENTRIES:
                _LONG.popitem(last=False)
    return hit


def number_fact(value: float) -> Fact:
    """A JSON number leaf as a fact (no unit, as precise as it is)."""
    text = repr(value)
    decimals = 0 if float(value).is_integer() else len(text.split(".", 1)[-1])
    return Fact(
        "number",
        float(value),
        text,
        decimals=decimals,
        minor=float(value).is_integer() and abs(value) <= MINOR_INT_LIMIT,
    )


# --- matching --------------------------------------------------------------------------------

# Unit conversions an answer commonly adds (°F↔°C, mi↔km, mph↔km/h, lb↔kg), by dimension.
_CONVERSIONS: dict[str, tuple[Any, ...]] = {
    "temperature": (lambda f: (f - 32) * 5 / 9, lambda c: c * 9 / 5 + 32),
    "length": (lambda mi: mi * 1.609344, lambda km: km / 1.609344),
    "speed": (lambda mph: mph * 1.609344, lambda kmh: kmh / 1.609344),
    "mass": (lambda lb: lb * 0.45359237, lambda kg: kg / 0.45359237),
}

_NUMERIC_KINDS = frozenset({"number", "year", "money", "percentage"})
#: kinds whose value is (case-folded) text of the text the fact was found in
_TEXT_KINDS = frozenset({"identifier", "email", "url"})


class FactIndex:
    """Facts of some texts, indexed for "does this fact appear there" (normalised)."""

    def __init__(self, facts: Iterable[Fact] = (), texts: Iterable[str] = ()) -> None:
        self.numbers: set[float] = set()
        #: value → the dimensions it was written with (a number's unit, or its kind: money, a
        #: year; None for a bare number), so that "55 year old" does not ground "55°F"
        self._dimensions: dict[float, set[str | None]] = {}
        #: finite numbers in order, for "a number here rounds to the fact" (None: to be rebuilt)
        self._sorted: list[float] | None = None
        #: decimals as written → the values written with that many
        self._by_decimals: dict[int, set[float]] = {}
        self.percentages: set[float] = set()
        self.dates: set[tuple[int | None, int, int]] = set()
        self.month_days: set[tuple[int, int]] = set()
        self.years: set[int] = set()
        self.times: set[int] = set()
        self.times_mod12: set[int] = set()
        self.ambiguous_times_mod12: set[int] = set()
        self.strings: set[str] = set()
        self._kinds: set[Kind] = set()
        #: the texts added, in their examined part, and (``_in_blob``) as many of them case-folded
        self._blob_texts: list[str] = []
        self._blob_parts: list[str] = []
        self._texts: set[str] = set()
        self._cut = 0  # texts added that were longer than what is examined
        #: what was added to be indexed when first needed (``defer``, ``add_text(lazily=True)``):
        #: facts already extracted, then texts still to extract. ``contains`` is monotone (more
        #: facts never turn a yes into a no), so it asks the facts indexed so far first and
        #: indexes the rest only on a no: most facts an answer states are found in the first few.
        self._pending_facts: list[Iterable[Fact]] = []
        self._pending_texts: list[str] = []
        self.add(facts)
        for text in texts:
            self.add_text(text)

    def add_text(self, text: str, *, lazily: bool = False, facts: tuple[Fact, ...] | None = None) -> None:
        """Index the text's facts (``facts``: ``facts_of(text)``, already known), or with
        ``lazily`` when a look-up first needs them (its blob, where ids and addresses are found,
        is kept now)."""
        # A text added again adds nothing (the same facts, the same blob); runs repeat their
        # history in every model request, so this is the common case.
        if text and text not in self._texts:
            self._texts.add(text)
            if len(text) > _MAX_TEXT:
                self._cut += 1
            if not lazily:
                self.add(facts_of(text) if facts is None else facts)
            elif facts is None:
                self._pending_texts.append(text)
            elif facts:
                self._pending_facts.append(facts)
            # only the part the facts came from: substring look-ups stay bounded per text
            self._blob_texts.append(text[:_MAX_TEXT])

    def add_new_texts_lazily(self, queued: list[tuple[str, tuple[Fact, ...] | None]]) -> None:
        """``add_text(text, lazily=True, facts=facts)`` of each (text, facts), in one loop: for
        texts the caller knows were never added here and are not empty (``Sources`` gives each of
        its texts once, and only its texts), dozens per run."""
        texts, pending_facts, pending_texts, blob = (
            self._texts, self._pending_facts, self._pending_texts, self._blob_texts)
        for text, facts in queued:
            texts.add(text)
            if len(text) > _MAX_TEXT:
                self._cut += 1
                blob.append(text[:_MAX_TEXT])
            else:
                blob.append(text)
            if facts is None:
                pending_texts.append(text)
            elif facts:
                pending_facts.append(facts)

    def defer(self, facts: Iterable[Fact]) -> None:
        """``add`` when a look-up first needs them."""
        self._pending_facts.append(facts)

    def _index_pending(self) -> bool:
        """Index the next group of what was deferred (facts before texts); False when none is left."""
        if self._pending_facts:
            pending, self._pending_facts = self._pending_facts, []
            for facts in pending:
                self.add(facts)
            return True
        if self._pending_texts:
            texts, self._pending_texts = self._pending_texts, []
            for text in texts:
                self.add(facts_of(text))
            return True
        return False

    @property
    def kinds(self) -> set[Kind]:
        """Kinds of the facts here (``kind_of``)."""
        while self._index_pending():
            pass
        return self._kinds

    @property
    def texts_cut(self) -> int:
        """How many added texts were longer than ``MAX_TEXT`` (examined in their first part)."""
        return self._cut

    def add(self, facts: Iterable[Fact]) -> None:
        # every fact of a run's results passes here: the sets are looked up once per call, and a
        # value's set of dimensions is made only for a new value
        kinds, numbers, dimensions, by_decimals = self._kinds, self.numbers, self._dimensions, self._by_decimals
        for fact in facts:
            kind, value = fact.kind, fact.value
            if kind in _NUMERIC_KINDS:
                unit = fact.unit if kind == "number" else None
                kinds.add((kind, unit))
                if value not in numbers:
                    numbers.add(value)
                    self._sorted = None
                written = dimensions.get(value)
                if written is None:
                    written = dimensions[value] = set()
                # what the number measures, as far as its text says: its unit, or its kind (money,
                # a year, a percentage); None for a bare number
                written.add(unit if kind == "number" else kind)
                same_decimals = by_decimals.get(fact.decimals)
                if same_decimals is None:
                    same_decimals = by_decimals[fact.decimals] = set()
                same_decimals.add(value)
                if kind == "percentage":
                    self.percentages.add(value)
                continue
            kinds.add((kind, None))
            if kind == "date":
                for y, m, d in fact.alternatives or (value,):
                    self.dates.add((y, m, d))
                    self.month_days.add((m, d))
                    if y is not None:
                        self.years.add(y)
            elif kind == "time":
                self.times.add(value)
                self.times_mod12.add(value % 720)
                if fact.ambiguous:
                    self.ambiguous_times_mod12.add(value % 720)
            else:
                self.strings.add(value)

    def contains(self, fact: Fact, *, rounded_here: bool = False) -> bool:
        """Does the fact appear here? Numbers match as numbers; a number written here may be a
        rounding of the fact's (``rounded_here``: "68" here uses the fact 68.4) or, by default,
        the fact may be a rounding of a number here ("about 68" grounded by 68.4)."""
        if fact.kind in _TEXT_KINDS:
            # the facts first, then the blob (its case-folded texts are made when first searched):
            # a text's ids, e-mails and URLs are parts of its blob, so its facts add none to it
            if fact.value in self.strings:
                return True
            if self._pending_facts:
                self._index_pending()  # the facts given, not the texts still to extract
                if fact.value in self.strings:
                    return True
            return self._in_blob(fact.value)
        if self._contains(fact, rounded_here):
            return True
        while self._index_pending():
            if self._contains(fact, rounded_here):
                return True
        return False

    def _contains(self, fact: Fact, rounded_here: bool) -> bool:
        """``contains`` over what is indexed so far."""
        kind = fact.kind
        if kind in _NUMERIC_KINDS:
            if rounded_here:
                return (
                    fact.value in self.numbers
                    or any(round(fact.value, decimals) in values for decimals, values in self._by_decimals.items())
                    # a fraction shown as a percentage: 0.15 → "15%"
                    or round(fact.value * 100, 6) in self.percentages
                )
            return self._has_number(fact)
        if kind == "date":
            return any(self._has_date(reading) for reading in fact.alternatives or (fact.value,))
        if kind == "time":
            mod = fact.value % 720
            return (
                fact.value in self.times
                or (fact.ambiguous and mod in self.times_mod12)
                or mod in self.ambiguous_times_mod12
            )
        return fact.value in self.strings or self._in_blob(fact.value)

    def _in_blob(self, value: str) -> bool:
        """An id or address inside a longer token of a source (a URL path, a sentence) counts."""
        if len(self._blob_parts) < len(self._blob_texts):
            self._blob_parts.extend(text.casefold() for text in self._blob_texts[len(self._blob_parts):])
        return any(value in part for part in self._blob_parts)

    def _same_dimension(self, value: float, dimension: str | None) -> bool:
        """A source number can be the fact's unless both were written with units of different
        dimensions (a bare number on either side matches: "72" = "72°F")."""
        if dimension is None:
            return True
        dimensions = self._dimensions.get(value, ())
        return None in dimensions or dimension in dimensions

    def _has_number(self, fact: Fact) -> bool:
        value = fact.value
        # a number written with a unit is supported only by sources of its dimension, or bare ones
        dimension = fact.unit if fact.kind == "number" else None
        if value in self.numbers and self._same_dimension(value, dimension):
            return True
        if fact.kind == "year" and int(value) in self.years:
            return True
        if fact.kind == "percentage" and round(value / 100, 6) in self.numbers:
            return True
        if not math.isfinite(value):
            return False
        # "about 68" for 68.4: a source value rounded to the precision the text uses; an
        # answer that adds "(20°C)" to a 68°F result converted it, it did not invent it.
        # Only sources within half a unit of the last written digit can round to the value: they
        # are found by bisection, so a run with 100,000 numbers is not scanned once per fact.
        decimals = fact.decimals
        half = 0.5 * 10.0**-decimals

        def rounded(source: float) -> bool:
            return round(source, decimals) == value and self._same_dimension(source, dimension)

        if self._any_within(value - half, value + half, rounded):
            return True
        conversions = _CONVERSIONS.get(dimension or "", ())
        for i, convert in enumerate(conversions):
            inverse = conversions[1 - i]  # every conversion is increasing, with its inverse beside it

            def converted(source: float, convert: Callable[[float], float] = convert) -> bool:
                return round(convert(source), decimals) == value and self._same_dimension(source, dimension)

            if self._any_within(inverse(value - half), inverse(value + half), converted):
                return True
        return False

    def _any_within(self, lo: float, hi: float, test: Callable[[float], bool]) -> bool:
        """Does a finite number in [lo, hi] (widened for float error) pass ``test``?"""
        if self._sorted is None:
            self._sorted = sorted(n for n in self.numbers if math.isfinite(n))
        numbers = self._sorted
        slack = (abs(lo) + abs(hi)) * 1e-12 + 1e-12
        start = bisect.bisect_left(numbers, lo - slack)
        end = bisect.bisect_right(numbers, hi + slack)
        return any(test(numbers[i]) for i in range(start, end))

    def _has_date(self, reading: tuple[int | None, int, int]) -> bool:
        y, m, d = reading
        if y is None:
            return (m, d) in self.month_days
        return reading in self.dates or (None, m, d) in self.dates

    def has_kind_for(self, fact: Fact) -> bool:
        """Is there a fact of the same kind here (``has_kind_in`` of this index's kinds)?"""
        return has_kind_in(self.kinds, fact)


#: what ``FactIndex.kinds`` holds for a fact: its kind, and a number's dimension
Kind = tuple[str, str | None]


def kind_of(fact: Fact) -> Kind:
    return (fact.kind, fact.unit if fact.kind == "number" else None)


def kinds_of(facts: Iterable[Fact]) -> frozenset[Kind]:
    """The kinds of the facts, one shared set per distinct set of kinds: the scorers' caches keep
    a set for every value they keep, texts have few distinct sets, and every set is an object
    the garbage collector walks at each full collection of the app's heap."""
    kinds = frozenset(kind_of(fact) for fact in facts)
    shared = _KINDS.get(kinds)
    if shared is None:
        if len(_KINDS) >= _KINDS_ENTRIES:  # far fewer distinct sets in practice; a bound all the same
            return kinds
        shared = _KINDS[kinds] = kinds
    return shared


_KINDS: dict[frozenset[Kind], frozenset[Kind]] = {}
_KINDS_ENTRIES = 4096


def has_kind_in(kinds: set[Kind] | frozenset[Kind], fact: Fact) -> bool:
    """Is there a fact of the same kind among ``kinds`` (the condition for calling a fact invented)?

    Numbers are the same kind when their dimensions agree or either has no unit; a year
    is comparable with dates and years.
    """
    if fact.kind == "number":
        if fact.unit is None:
            return any(kind == "number" for kind, _ in kinds)
        return ("number", fact.unit) in kinds or ("number", None) in kinds
    if fact.kind == "year":
        return ("year", None) in kinds or ("date", None) in kinds
    return (fact.kind, None) in kinds


def unique_facts(facts: Iterable[Fact]) -> list[Fact]:
    """Facts without repeats of the same (kind, value), first spelling kept."""
    seen: dict[tuple[str, Any], Fact] = {}
    for fact in facts:
        seen.setdefault(fact.key, fact)
    return list(seen.values())
