"""The response-claim patterns of ``scorers.tool_results`` in their plain form (one alternative
per phrase, each behind its own ``\\b``), kept as the oracle the fast forms must agree with:
tool_results asks them only whether a text matches."""

from __future__ import annotations

import re

from otel_toolscore.scorers.tool_results import _DONE

SUCCESS_RE = re.compile(
    rf"\bsuccess(?:ful(?:ly)?)?\b|\bsucceeded\b"
    rf"|\b(?:i|we)(?:'ve|\s+have)?\s+(?:just\s+|now\s+|already\s+|successfully\s+)?{_DONE}\b"
    rf"|\b(?:has|have|had)\s+been\s+(?:successfully\s+)?{_DONE}\b"
    rf"|\b(?:was|were|is|are)\s+(?:successfully\s+)?{_DONE}\b"
    rf"|\b{_DONE}\s+successfully\b|\ball set\b",
    re.I,
)
FAILURE_RE = re.compile(
    rf"(?:\bnot|n't|\bnever)\s+(?:\w+\s+){{0,2}}?(?:{_DONE}|successful(?:ly)?|able|possible|work)\b"
    r"|\b(?:could\s*not|couldn't|can\s*not|cannot|can't|unable|unsuccessful(?:ly)?|failed|fails?"
    r"|failure|unfortunately|wasn't able|weren't able)\b"
    r"|\b(?:an|the)\s+error\b|\berror\s+occurred\b|\bnot\s+(?:be\s+|been\s+)?found\b"
    r"|\bno\s+(?:results?|matches|records?|data|information|entries|such)\b"
    r"|\bno\s+(?:\w+\s+){1,3}?(?:was|were|could\s+be|has\s+been|have\s+been)\s+(?:found|located|retrieved)\b"
    r"|\b(?:does\s*not|doesn't|do\s*not|don't|did\s*not|didn't)\s+exist\b",
    re.I,
)
