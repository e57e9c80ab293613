"""The fact patterns of ``scorers._facts`` (and ``tool_results``' separators) that are written
for a fast search, in their plain form: a look-behind first, the units as one alternation. Kept
as the oracle the fast forms must agree with, match for match and group for group."""

from __future__ import annotations

import re
from typing import Any

from otel_toolscore.scorers._facts import _CURRENCY_CODES, _NUM, _PIPELINE, _SCALE, _UNITS, MAX_TEXT, Fact

_NUM_START = r"(?<![\w.,/])"  # not inside a word, a decimal, a list like 1,2 or a path
_UNIT_ALT = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))

NUMBER_RE = re.compile(
    rf"{_NUM_START}(?P<num>{_NUM}){_SCALE}"
    rf"(?:\s?(?P<unit>°\s?[fc]\b|º\s?[fc]\b|(?:{_UNIT_ALT})(?![\w/])|[fc](?![\w]))"
    rf"(?:\s(?P<scale2>fahrenheit|celsius)\b)?)?",
    re.I,
)
PERCENT_RE = re.compile(rf"{_NUM_START}(?P<num>{_NUM})\s?(?:%|percent\b|per\s?cent\b|pct\b)", re.I)
MONEY_SUFFIX_RE = re.compile(
    rf"{_NUM_START}(?P<num>{_NUM}){_SCALE}\s?(?P<cur>{_CURRENCY_CODES}|dollars?|euros?|cents?|bucks)\b",
    re.I,
)
MONEY_PREFIX_RE = re.compile(rf"(?P<cur>US\$|C\$|A\$|\$|€|£|¥|₹)\s?(?P<num>{_NUM}){_SCALE}", re.I)
CLOCK_RE = re.compile(
    r"(?<![\d:.])(?P<h>\d{1,2}):(?P<m>\d{2})(?::\d{2}(?:\.\d+)?)?"
    r"(?:\s?(?P<ap>[ap])\.?\s?m\b\.?)?(?![\d:])",
    re.I,
)
IDENT_CODE_RE = re.compile(r"(?<![\w#-])(?:[A-Z][A-Z0-9]*\d|\d[A-Z0-9]*[A-Z]|#[A-Z0-9]+)[A-Z0-9]*(?![\w-])")
SEPARATORS = re.compile(r"[\s_\-–—,;:!?()\[\]{}\"'`“”‘’*|/\\<>=+~^]+|\.(?=\s|$)")
#: ``_facts._AMPM_GUARD``: a text holds a match of it exactly when it holds one of this
AMPM_GUARD = re.compile(r"\d.?[aApP]\.?.?[mM]", re.S)


def every_pattern(text: str) -> tuple[Fact, ...]:
    """``_facts.extract_facts`` as it was first written: every pattern of the pipeline in turn,
    none skipped (no triggers, no guards), each match a fact or left, what it took blanked by
    ``sub`` for the patterns after it."""
    facts: list[Fact] = []
    text = text[:MAX_TEXT].replace("’", "'")
    for pattern, make, *_ in _PIPELINE:
        def replace(match: re.Match[str], make: Any = make) -> str:
            made = make(match)
            if made is None:
                return match.group(0)
            facts.append(made)
            return " " * len(match.group(0))

        text = pattern.sub(replace, text)
    return tuple(facts)
