"""Secrets and personal data out of everything that leaves the process: one redactor for judge
requests, explanations (span attributes, events, evaluation spans), the CLI's table, JSON lines
and JUnit XML, and our own log lines.

Redaction happens on the way out, never on what the scorers read: a scorer compares the run's
values as they are (booking codes, amounts, flight numbers), and only the text it emits passes
here. The shapes redacted, and why each rule has the form it has: docs/reliability.md, "Redaction".

Every rule is linear in the length of the text (tests/test_redaction.py checks each pattern's
structure): a repeat that may run long is either the last thing its pattern needs (nothing after
it can fail, so it is consumed once) or bounded, so no start position rescans the text.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from typing import Any

Redactor = Callable[[str], str]


def _mark(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _is_card(digits: str) -> bool:
    # Length and Luhn both: order numbers, timestamps and phone numbers mostly fail one of them.
    return 13 <= len(digits) <= 19 and luhn_ok(digits)


_GROUP = re.compile(r"\d+")


def _cards(match: re.Match[str]) -> str:
    """Every card number inside a run of digit groups (``1 4111 1111 1111 1111``, ``4111.1111…``,
    a stray digit glued to either end). The run is taken whole and searched here, so a digit
    before a card cannot make the pattern swallow it, fail Luhn and resume past the card. A run
    glued to a letter is part of a word (a hex trace id, a hash), not a card."""
    text = match.group(0)
    after = match.string[match.end():match.end() + 1]
    if after.isascii() and after.isalpha():
        return text
    groups = [(m.start(), m.end()) for m in _GROUP.finditer(text)]
    out: list[str] = []
    pos = i = 0
    while i < len(groups):
        found = _card_from(text, groups, i)
        if found is None:
            i += 1
            continue
        start, end, last = found
        out.append(text[pos:start])
        out.append(_mark("card_number"))
        pos, i = end, last + 1
    out.append(text[pos:])
    return "".join(out)


def _card_from(text: str, groups: list[tuple[int, int]], i: int) -> tuple[int, int, int] | None:
    """The longest card starting in group ``i``: consecutive whole groups of 3 digits or more
    (cards are printed 4-4-4-4, 4-6-5, …; a list of decimals "0.5 0.7 …" is not one), the first
    possibly without its first digit and the last without its last (a digit glued on). At most
    20 digits are looked at from each group, so a long run costs in proportion to its length."""
    ends: list[int] = []
    digits = 0
    for j in range(i, len(groups)):
        size = groups[j][1] - groups[j][0]
        if j > i and (size < 3 or groups[i][1] - groups[i][0] < 3):
            break
        digits += size
        if digits > 21:
            break
        ends.append(j)
    for j in reversed(ends):
        whole = "".join(text[s:e] for s, e in groups[i:j + 1])
        if len(whole) < 13:
            break
        # a glued digit only where the whole is too long for the usual 15- and 16-digit cards
        trims = ((0, 0), (1, 0), (0, 1), (1, 1)) if len(whole) >= 17 else ((0, 0),)
        for lead, trail in trims:
            if _is_card(whole[lead:len(whole) - trail]):
                return groups[i][0] + lead, groups[j][1] - trail, j
    return None


def _basic(match: re.Match[str]) -> str:
    """``Basic <base64 of user:password>``: redacted when the token decodes to ``x:y`` (prose like
    "basic authentication" does not decode so), or when it follows ``Authorization``."""
    prefix, token = match.group(1), match.group(2)
    if "uthorization" not in prefix.lower():
        try:
            decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
        except (binascii.Error, ValueError):
            return match.group(0)
        if b":" not in decoded:
            return match.group(0)
    return prefix + _mark("basic_auth")


def _aws_secret(match: re.Match[str]) -> str:
    """A bare 40-character AWS secret access key: base64 letters of both cases and a digit (a git
    commit id is lower-case hex, and stays)."""
    value = match.group(0)
    if re.search(r"[a-z]", value) and re.search(r"[A-Z]", value) and re.search(r"[0-9]", value):
        return _mark("aws_secret_key")
    return value


def _secret_value(match: re.Match[str]) -> str:
    return match.group(1) + _mark("secret")


# Words that follow "password is" in prose about passwords, not in a password.
_NOT_A_PASSWORD = (
    r"(?:required|invalid|incorrect|wrong|missing|empty|correct|valid|not|too|expired|reset|changed|"
    r"updated|set|the|a|an|being|now|strong|weak|case|saved|stored|hidden|redacted|needed|ok|fine)\b"
)
_SECRET_WORDS = (
    r"api[_\-]?key|apikey|access[_\-]?key|secret[_\-]?key|client[_\-]?secret|secret|access[_\-]?token|"
    r"auth[_\-]?token|refresh[_\-]?token|session[_\-]?token|token|password|passwd|passphrase|pwd|"
    r"account[_\-]?key|shared[_\-]?access[_\-]?key|private[_\-]?key"
)

# (pattern, replacement) in order. URL credentials go before emails: "user:pw@host.com" would
# otherwise be half-eaten by the email pattern and leave the password in clear. PEM keys go
# first: their body would otherwise be taken apart by the token rules and partly kept.
_RULES: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    # PEM private keys (RSA, EC, OPENSSH, ENCRYPTED, PKCS#8), header to footer; a key cut before
    # its footer is redacted to where its base64 ends. Newlines may be written \n (JSON text).
    (re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----[A-Za-z0-9+/=\s\\:,.]{0,20000}"
                r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----)?"), _mark("private_key")),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,31}://[^\s:/@]{1,256}:)([^\s@/]{1,256})(@)"),
     r"\1" + _mark("url_password") + r"\3"),
    (re.compile(r"(?i)\b(bearer\s{1,16})[A-Za-z0-9\-._~+/]{8,}=*"), r"\1" + _mark("bearer_token")),
    (re.compile(r"(?i)((?:authorization[\"']?\s{0,16}[:=]\s{0,16}[\"']?)?\bbasic\s{1,16})([A-Za-z0-9+/]{6,512}={0,2})"
                r"(?![A-Za-z0-9+/=])"), _basic),
    # OpenAI (sk-, sk-proj-), Anthropic (sk-ant-…) and the many services that copied the shape
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), _mark("api_key")),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), _mark("aws_access_key")),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"), _mark("github_token")),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"), _mark("google_api_key")),
    (re.compile(r"\bya29\.[A-Za-z0-9_\-]{20,}"), _mark("google_oauth_token")),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}"), _mark("api_key")),
    (re.compile(r"\bnpm_[A-Za-z0-9]{36,}"), _mark("api_key")),
    # Slack tokens of every kind (xoxb, xoxp, xoxe, xoxc, xapp), refresh tokens' "xoxe.xoxp-" too.
    (re.compile(r"\b(?:xox[a-z](?:\.xox[a-z])?|xapp)-[A-Za-z0-9\-]{10,}"), _mark("slack_token")),
    # Prefixed live/test keys (Stripe sk_live_/pk_test_/rk_live_, tok_live_… and the many
    # services that copied the shape), however short the rest, as long as it holds a digit:
    # identifiers like get_live_scores or run_test_case stay readable.
    (re.compile(r"\b[a-z]{2,8}_(?:live|test|prod)_(?=[A-Za-z0-9]{4})[A-Za-z]{0,256}\d[A-Za-z0-9]*"), _mark("api_key")),
    (re.compile(r"\bwhsec_[A-Za-z0-9]{16,}"), _mark("api_key")),
    # JWTs: base64url header and payload (both JSON objects, so "eyJ"), optional signature. The
    # header is bounded: "eyJ-eyJ-…" would otherwise be rescanned from every "eyJ".
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{6,2048}\.eyJ[A-Za-z0-9_\-]{6,}\.?[A-Za-z0-9_\-]*"), _mark("jwt")),
    (re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}"), _mark("gitlab_token")),
    # A value after a key that names a secret, in JSON, YAML, headers, connection strings or
    # query strings: "api_key": "…", token=…, X-Api-Key: …, AccountKey=…;, client_secret: '…'.
    # A quoted value is taken to its closing quote ("Tr0ub4dor&3zz" whole), an unquoted one to
    # the next space or separator; an escaped quote (\", JSON inside JSON) counts as a quote. A value
# an earlier rule redacted keeps its kind.
    (re.compile(r"(?i)((?:" + _SECRET_WORDS + r")\\?[\"']?[ \t]{0,16}[:=][ \t]{0,16}(?:\\?\")?)(?!\[REDACTED:)((?<=\")[^\"\\\n]{3,256}|"
                r"(?<!\")[^\s\"'\\,;&}\]<>]{6,256})"), _secret_value),
    (re.compile(r"(?i)((?:" + _SECRET_WORDS + r")\\?[\"']?[ \t]{0,16}[:=][ \t]{0,16}')(?!\[REDACTED:)([^'\\\n]{3,256})"), _secret_value),
    # A password in prose: "my password is X", "the passphrase was: 'X'", "pwd is X".
    (re.compile(r"(?i)\b((?:password|passphrase|passcode|passwd|pwd)\s{1,8}(?:is|was|=|:)\s{1,8}[:\"'“]?)"
                r"(?!" + _NOT_A_PASSWORD + r"|\[REDACTED:)([^\s\"'”]{1,256})"), _secret_value),
    (re.compile(r"\b[A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9.\-]{1,255}\.[A-Za-z]{2,63}\b"), _mark("email")),
    # Azure SAS signatures in URLs (sig=…), GCP/Azure storage keys after their names are above.
    (re.compile(r"(?i)([?&]sig=)[A-Za-z0-9%+/=]{16,}"), r"\1" + _mark("secret")),
    (re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"), _aws_secret),
    # Card numbers: a whole run of digit groups (single space, dash or dot between them), read
    # by _cards. Starting only where no digit or letter precedes (digits glued to letters are a
    # hex id, a trace id or a hash, not a card), each run is scanned once.
    (re.compile(r"(?<![\dA-Za-z])\d(?:[ .\-]?\d){12,}"), _cards),
]


# What every rule's match must contain, so that a text without any of it is left as it is and the
# rules need not run (most explanations and many tool results hold nothing secret-like; the
# pre-check costs a few percent of the rules). A rule added above needs its trigger here
# (tests/test_redaction.py checks them against each other). The case-insensitive rules are checked
# with the same flag, so the engine's case folding (e.g. "ſ" for "s") is the same on both sides.
_TRIGGERS = re.compile(
    r"@|-----BEGIN "
    r"|sk-|A[KS]IA|gh[pousr]_|github_pat_|AIza|ya29\.|hf_|npm_|xox|xapp-|_(?:live|test|prod)_|whsec_|\.eyJ|glpat-"
    r"|\d(?:[ .\-]?\d){12}"  # card numbers: 13 digits at least
    r"|(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}"  # bare AWS secret keys
)
_CASELESS = re.compile(r"(?i)bearer|basic\s|[?&]sig=|(?:password|passphrase|passcode|passwd|pwd)\s")
# The secret-assignment rules: a key word's ending, then the [:=] they all need.
_ASSIGNMENT = re.compile(r"(?i)(?:key|secret|token|passw(?:or)?d|pwd|phrase)\\?[\"']?[ \t]{0,16}[:=]")


def _may_hold_secret(text: str) -> bool:
    """False when no rule of the default redaction can match ``text`` (it would come back as it
    is); True when one might."""
    if _TRIGGERS.search(text) is not None or _CASELESS.search(text) is not None:
        return True
    return (":" in text or "=" in text) and _ASSIGNMENT.search(text) is not None


def _apply_rules(text: str) -> str:
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def default_redactor(text: str) -> str:
    """Replace secrets and personal data with ``[REDACTED:<kind>]``."""
    # No rule can change a text without any of their triggers; a rule that changes nothing
    # leaves the next one the same text, so none of them would.
    return _apply_rules(text) if _may_hold_secret(text) else text


def make_redactor(hook: Redactor | None = None, *, replace_default: bool = False) -> Redactor:
    """The default redaction, then ``hook`` (extending it), or ``hook`` alone with
    ``replace_default=True`` (the user takes full responsibility)."""
    if hook is None:
        return default_redactor
    if replace_default:
        return hook

    def both(text: str) -> str:
        return hook(default_redactor(text))

    return both


def redact_value(value: Any, redactor: Redactor = default_redactor) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every string redacted, keys
    included, and an integer that is a card number replaced by its mark."""
    if isinstance(value, str):
        return redactor(value)
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return _mark("card_number") if _is_card(str(abs(value))) else value
    if isinstance(value, dict):
        return {redact_value(k, redactor) if isinstance(k, str) else k: redact_value(v, redactor)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v, redactor) for v in value]
    return value
