"""The default redaction's pre-check skips the rules only for texts they would leave as they are.

``default_redactor`` runs its rules only when ``_may_hold_secret`` finds what some rule's match
must contain; these properties hold it to that against the rules themselves (``_apply_rules``, the
plain redactor): every text a rule matches passes the pre-check, and the redactor with the
pre-check equals the plain one on texts with and without secrets.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from otel_toolscore.redaction import _RULES, _apply_rules, _may_hold_secret, default_redactor

# Pieces of real secrets, their near misses (a prefix without its body, a key word without its
# value, too few digits) and characters the rules' case folding treats specially ("ſ" is an "s",
# "K" (Kelvin) a "k" to an (?i) pattern), joined with arbitrary text.
_PIECES = [
    "sk-", "sk-abcdefghijklmnopqrstuvwx", "AKIA", "AKIAABCDEFGHIJKLMNOP", "ASIA", "ghp_", "gho_x",
    "ghp_" + "a" * 36, "github_pat_" + "b" * 30, "xoxb-", "xoxb-1234567890ab", "xapp-1-abcdefghij",
    "xoxe.xoxp-1234567890", "sk_live_", "sk_live_abc1", "pk_test_9abc", "get_live_scores", "whsec_",
    "whsec_" + "c" * 16, "eyJ", "eyJhbGciOiJI.eyJzdWIiOiIx.sig", "glpat-", "glpat-" + "d" * 20,
    "Bearer ", "bearer abcdefgh12345", "BEARER\tabcdefghij", "api_key", "API-KEY", "apikey", "token",
    "Token", "toKen", "tOKen", "passwd", "password", "PASSWORD", "pwd", "paſſword", "ſecret",
    "client_secret", "secret", "=", ":", ": ", " = ", '"', "'", '": "', "abcdef", "abcdefghijklmnopqrst",
    "@", "a@b.co", "bob@example.com", "https://", "https://user:hunter2@host.com/x", "://u:p@",
    "4111 1111 1111 1111", "4111111111111111", "1234567890123", "123456789012", "0000-0000-0000-0",
    "٤١١١١١١١١١١١١١١١", "12 34 56 78 90 12 3", " ", "\n", "\t", "_", "-", ".", "/", "get_weather",
    "The expected tool 'get_weather' was called.", "missing_required: argument 'city' is required",
]
_texts = st.lists(
    st.one_of(st.sampled_from(_PIECES), st.text(max_size=12)), max_size=12
).map("".join)


@pytest.mark.parametrize("index", range(len(_RULES)), ids=lambda i: f"rule{i}")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data())
def test_every_text_a_rule_matches_passes_the_precheck(index: int, data: st.DataObject) -> None:
    pattern = _RULES[index][0]
    text = data.draw(st.from_regex(pattern))
    assume(pattern.search(text) is not None)  # lookarounds are approximated by from_regex
    assert _may_hold_secret(text), (pattern.pattern, text)


@settings(max_examples=600, deadline=None)
@given(text=_texts)
def test_redactor_with_precheck_equals_the_plain_rules(text: str) -> None:
    assert default_redactor(text) == _apply_rules(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(text=_texts)
def test_a_text_the_precheck_clears_is_left_as_it_is(text: str) -> None:
    assume(not _may_hold_secret(text))
    assert _apply_rules(text) == text
    assert not any(pattern.search(text) for pattern, _ in _RULES)


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_arbitrary_text(text: str) -> None:
    assert default_redactor(text) == _apply_rules(text)


@pytest.mark.parametrize("text", [
    "call me at bob@example.com", "Authorization: Bearer abcdefghijklmnop", "api_key=abcdef123456",
    "paſſword: hunter22", "card 4111 1111 1111 1111", "https://u:pw1@host.com/x", "ASIAABCDEFGHIJKLMNOP",
])
def test_secrets_are_still_redacted(text: str) -> None:
    assert _may_hold_secret(text)
    assert re.search(r"\[REDACTED:[a-z_]+\]", default_redactor(text))


@pytest.mark.parametrize("text", [
    "All 5 tool call(s) are valid against their schemas.",
    "The expected tool 'get_weather' was called ([get_weather, get_flights]).",
    "missing_required: argument 'city' is required",
])
def test_plain_explanations_skip_the_rules(text: str) -> None:
    assert not _may_hold_secret(text)
    assert default_redactor(text) is text
