"""Redaction as one component (issue 30): a corpus of secret shapes, held against the redactor and
against every output that leaves the process with the default settings (judge request bodies,
explanations on events and evaluation spans, the CLI's table, JSON lines and JUnit XML, our log
lines); ordinary ids the scorers compare stay readable; every pattern is linear by structure
(checked on the parsed pattern, not timed); ``score --show-secrets`` prints raw values."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_toolscore import redaction
from otel_toolscore.outputs.jsonlines import JsonLinesSpanExporter
from otel_toolscore.redaction import _RULES, _TRIGGERS, default_redactor, redact_value
from otel_toolscore.scorers import get_scorer
from otel_toolscore.trajectory import ToolDefinition
from tests.support.judge_server import JudgeServer, ok
from tests.support.pipeline import Pipeline
from tests.support.trajectory_factory import make_trajectory

if sys.version_info >= (3, 11):
    from re import _compiler as sre_compile
    from re import _constants as sre_constants
    from re import _parser as sre_parse
else:  # pragma: no cover - 3.10
    import sre_compile
    import sre_constants
    import sre_parse

# --- the corpus ----------------------------------------------------------------------------------

#: (what, text as it appears in a run, the secret that must never come out)
CORPUS: list[tuple[str, str, str]] = [
    # the defects issue 30 found
    ("card after a digit", "order 7 4111 1111 1111 1111 paid", "4111 1111 1111 1111"),
    ("card glued to a digit", "ref 94111111111111111", "4111111111111111"),
    ("dotted card", "card 4111.1111.1111.1111 exp 12/29", "4111.1111.1111.1111"),
    ("google api key", "maps key AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    ("password in prose", "hi, my password is Tr0ub4dor&3zz thanks", "Tr0ub4dor&3zz"),
    ("quoted password whole", '{"password": "Tr0ub4dor&3zz"}', "3zz"),
    ("bare aws secret key", "secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY here", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("basic auth", "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l", "YWxhZGRpbjpvcGVuc2VzYW1l"),
    ("pem private key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA75pLk3Zx\nQm9yZSBzZWNyZXQ=\n"
     "-----END RSA PRIVATE KEY-----", "MIIEpAIBAAKCAQEA75pLk3Zx"),
    ("pem key in json text", '{"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0\\n'
     '-----END PRIVATE KEY-----\\n"}', "MIIEvQIBADANBgkqhkiG9w0"),
    # the usual provider and cloud keys
    ("openai", "OPENAI_API_KEY sk-Zx8YwV7uT6sR5qP4oN3mL2kJ9hG7fD", "sk-Zx8YwV7uT6sR5qP4oN3mL2kJ9hG7fD"),
    ("openai project", "key sk-proj-Zx8YwV7uT6sR5qP4oN3mL2kJ_aB-cD", "sk-proj-Zx8YwV7uT6sR5qP4oN3mL2kJ_aB-cD"),
    ("anthropic", "use sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx-yz01", "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx-yz01"),
    ("github classic", "gh ghp_16C7e42F292c6912E7710c838347Ae178B4a", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
    ("github fine-grained", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123",
     "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123"),
    ("slack bot", "xoxb-123456789012-1234567890123-AbCdEfGhIjKl", "xoxb-123456789012-1234567890123-AbCdEfGhIjKl"),
    ("stripe live", "stripe sk_live_51HxYzAbCdEf0123456789", "sk_live_51HxYzAbCdEf0123456789"),
    ("jwt", "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    ("aws access key id", "AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE"),
    ("gcp oauth token", "ya29.a0AfH6SMBx3kQ-ZlZ1Xc9vYt8Qw2E4r5T6y7U8", "ya29.a0AfH6SMBx3kQ-ZlZ1Xc9vYt8Qw2E4r5T6y7U8"),
    ("azure storage key", "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net",
     "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq"),
    ("azure sas", "https://acme.blob.core.windows.net/c/b?sv=2022-11-02&sig=AbCdEf0123456789%2BxyzXYZ%3D",
     "AbCdEf0123456789%2BxyzXYZ"),
    ("hugging face", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"),
    ("bearer", "Authorization: Bearer abc123DEF456ghi789JKL", "abc123DEF456ghi789JKL"),
    ("url password", "postgres://app:s3cr3t-Pa55@db.internal:5432/x", "s3cr3t-Pa55"),
    ("email", "write to alice.private@example.com", "alice.private@example.com"),
    ("amex", "amex 378282246310005.", "378282246310005"),
    ("api key header", "X-Api-Key: 0123456789abcdef0123", "0123456789abcdef0123"),
]
SECRETS = [secret for _, _, secret in CORPUS]

#: values scorers compare and people read: never redacted
ORDINARY = [
    "booking ABC123 confirmed", "flight UA901 at 10:30, gate B12", "amount 1234.56 USD", "total $12,345.67",
    "trace 4bf92f3577b34da6a3ce929d0e0e4736 span 00f067aa0ba902b7",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b", "order 4111 1111 1111 1112 (fails Luhn)",
    "scores 0.5 0.7 0.9 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 0.1 0.2", "phone +1 415 555 2671",
    "the password is required", "use basic authentication", "max_tokens=1024 and token: none",
    "call get_live_scores then run_test_case", "date 2024-05-01T10:30:00Z", "ip 192.168.100.200 and 10.0.0.1",
    "user_id 8f14e45f-ceea-467f-a0e6-a0cf3b7c1e2d",
    # hex ids whose digit runs pass Luhn (real trace ids of the corpora): part of a word, not a card
    "trace 04e8324fe152aa298150748437892744", "trace 06642677ae25e297537901091222305d",
    "trace a06bc34d515d738197555357659d1a60",
]


@pytest.mark.parametrize(("what", "text", "secret"), CORPUS, ids=[c[0] for c in CORPUS])
def test_every_shape_of_the_corpus_is_redacted(what: str, text: str, secret: str) -> None:
    out = default_redactor(text)
    assert secret not in out, out
    assert "[REDACTED:" in out


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_ids_and_prose_stay(text: str) -> None:
    assert default_redactor(text) == text


def test_a_card_after_a_digit_keeps_the_digit_and_finds_the_card() -> None:
    assert default_redactor("order 7 4111 1111 1111 1111 paid") == "order 7 [REDACTED:card_number] paid"
    assert default_redactor("ref 94111111111111111") == "ref 9[REDACTED:card_number]"
    assert default_redactor('{"password": "Tr0ub4dor&3zz"}') == '{"password": "[REDACTED:secret]"}'


def test_values_walk_redacts_strings_keys_and_card_integers() -> None:
    value = {"card": 4111111111111111, "amount": 1234, "note": ["mail bob@example.com"], "ok": True, "x": 0.5}
    assert redact_value(value) == {"card": "[REDACTED:card_number]", "amount": 1234,
                                   "note": ["mail [REDACTED:email]"], "ok": True, "x": 0.5}


# --- linear time, by structure -------------------------------------------------------------------

MAXREPEAT = sre_constants.MAXREPEAT
REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT)


def _infallible(item: tuple[Any, Any]) -> bool:
    """Matches (the empty string at least) wherever it is tried: a repeat of at least zero."""
    op, av = item
    return op in REPEATS and av[0] == 0


def _single_chars(items: list[Any]) -> set[str] | None:
    """The characters (of the first 0x250) a one-character item matches; None if it is not one."""
    sub = sre_parse.SubPattern(sre_parse.State(), list(items))
    if len(items) != 1 or sub.getwidth() != (1, 1):
        return None
    compiled = sre_compile.compile(sub)  # the parsed item compiled back, asked char by char
    return {chr(c) for c in range(0x250) if compiled.fullmatch(chr(c))}


def problems(pattern: str, flags: int = 0) -> list[str]:
    """Why ``pattern`` could rescan text from many start positions (empty: it cannot):

    - an unbounded repeat with something after it that can fail (each start would run the
      repeat to its end, then fail: quadratic);
    - a repeat whose body holds a repeat of variable width, unless the body is an optional single
      character followed by a single character of a disjoint set (``(?:[ -]?\\d){12,}``: one way
      only to match a run) — nested choices multiply the ways to match.
    """
    found: list[str] = []

    def walk(seq: list[Any], tail_ok: bool, where: str) -> None:
        for i, (op, av) in enumerate(seq):
            rest_ok = tail_ok and all(_infallible(x) for x in seq[i + 1:])
            if op in REPEATS:
                lo, hi, body = av
                if hi == MAXREPEAT and not rest_ok:
                    found.append(f"{where}: unbounded repeat #{i} is followed by what can fail")
                inner = [x for x in body if x[0] in REPEATS or x[0] == sre_constants.SUBPATTERN]
                if hi > 1 and inner and not _deterministic(list(body)):
                    found.append(f"{where}: repeat #{i} holds a variable-width repeat")
                walk(list(body), hi == 1 and rest_ok, f"{where}/{i}")
            elif op == sre_constants.SUBPATTERN:
                walk(list(av[-1]), rest_ok, f"{where}/{i}")
            elif op == sre_constants.BRANCH:
                for k, alt in enumerate(av[1]):
                    walk(list(alt), rest_ok, f"{where}/{i}|{k}")
            elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
                walk(list(av[1]), True, f"{where}/{i}?")

    walk(list(sre_parse.parse(pattern, flags)), True, "")
    return found


def _deterministic(body: list[Any]) -> bool:
    if len(body) != 2:
        return False
    (op, av), second = body
    if op not in REPEATS or av[0] != 0 or av[1] != 1:
        return False
    first_chars, second_chars = _single_chars(av[2]), _single_chars([second])
    return first_chars is not None and second_chars is not None and not first_chars & second_chars


ALL = [(p.pattern, p.flags) for p, _ in _RULES] + [
    (p.pattern, p.flags) for p in (_TRIGGERS, redaction._CASELESS, redaction._ASSIGNMENT)]


@pytest.mark.parametrize(("pattern", "flags"), ALL, ids=[f"pattern{i}" for i in range(len(ALL))])
def test_every_pattern_is_linear_by_its_structure(pattern: str, flags: int) -> None:
    assert problems(pattern, flags) == []


@pytest.mark.parametrize(("pattern", "why"), [
    (r"[a-z.]+@", "unbounded repeat #0 is followed by what can fail"),
    (r"\beyJ[A-Za-z0-9_\-]{6,}\.eyJ", "unbounded repeat"),  # the JWT pattern before issue 30: "eyJ-eyJ-…"
    (r"(?:a+)+b", "variable-width repeat"),
    (r"(?:\d[ -]?){12,}x", "unbounded repeat"),
])
def test_the_structure_check_catches_what_rescans(pattern: str, why: str) -> None:
    assert any(why in p for p in problems(pattern)), problems(pattern)


class _Counted:
    """A rule's pattern, counting its scans and its callback's calls."""

    def __init__(self, pattern: Any, log: dict[str, int]) -> None:
        self._pattern, self._log = pattern, log

    def sub(self, replacement: Any, text: str) -> str:
        self._log["scans"] += 1
        if callable(replacement):
            inner = replacement

            def counted(match: Any) -> str:
                self._log["callbacks"] += 1
                return str(inner(match))

            return str(self._pattern.sub(counted, text))
        return str(self._pattern.sub(replacement, text))


_PIECES = [s for s in SECRETS] + [" ", "\n", "1", "1 ", "4111 ", "a", ".", "=", ":", '"', "password is ", "key=",
                                  "Basic ", "eyJ", "-", "@", "sk-", "-----BEGIN PRIVATE KEY-----"]


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=8)), max_size=40))
def test_one_scan_per_rule_and_callbacks_bounded_by_length(parts: list[str]) -> None:
    """Whatever the text: each rule scans it once (or not at all, when the pre-check clears it),
    and the rules' callbacks run at most once per 6 characters (their shortest match): redaction
    is a fixed number of linear scans, counted, not timed."""
    text = "".join(parts)
    log = {"scans": 0, "callbacks": 0}
    original = list(redaction._RULES)
    redaction._RULES[:] = [(_Counted(p, log), r) for p, r in original]  # type: ignore[misc]
    try:
        out = redaction.default_redactor(text)
    finally:
        redaction._RULES[:] = original
    assert out == redaction.default_redactor(text)
    assert log["scans"] in (0, len(_RULES))
    assert log["callbacks"] <= len(text) // 6 + 1


# --- every output, default settings --------------------------------------------------------------

PROSE = " | ".join(text for _, text, _ in CORPUS)
ECHO = {"evaluations": [{"tool_called": "lookup", "was_appropriate": True, "reasoning": PROSE}],
        "missing_tools": [], "reason": PROSE}


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def test_no_secret_of_the_corpus_reaches_a_judge(judge_server: JudgeServer) -> None:
    judge_server.responder = lambda body: ok({"verdicts": [{"verdict": "yes", "reason": "r"}] * 2})
    traj = make_trajectory([("lookup", {"query": PROSE}, {"result": PROSE})], input=PROSE, output=PROSE,
                           system_instructions="Be brief. " + PROSE,
                           tool_definitions=[ToolDefinition(name="lookup", description="d")])
    for name, options in [("tool_call_appropriateness", {}), ("prompt_alignment", {"instructions": ["Be brief.", PROSE]}),
                          ("context_position", {"context": [PROSE, "other"]})]:
        s = get_scorer(name, model="openai/judge-test", api_base=judge_server.url, api_key="sk-test",
                       max_retries=0, **options)
        s.score(traj)
    assert len(judge_server.requests) >= 3
    assert _leaks(json.dumps(judge_server.requests)) == []


def test_no_secret_of_the_corpus_leaves_on_spans_or_events(judge_server: JudgeServer) -> None:
    """A judge that echoes every secret in its reasoning (a user hook that let one through, a
    hallucination): the explanation on the events and the evaluation span is redacted."""
    judge_server.responder = lambda body: ok(ECHO)
    sinks = Pipeline(["tool_call_appropriateness"], scorer_options={"tool_call_appropriateness": {
        "model": "openai/judge-test", "api_base": judge_server.url, "api_key": "sk-test", "max_retries": 0}},
        explanation_max_chars=100_000)
    provider = TracerProvider()
    provider.add_span_processor(sinks.processor)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                     "gen_ai.agent.name": "a"}):
        with tracer.start_as_current_span("execute_tool lookup", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "c1",
                "gen_ai.tool.call.arguments": json.dumps({"q": PROSE})}):
            pass
    assert sinks.processor.force_flush(60_000)
    provider.shutdown()
    out = [f"{k}={v}" for s in sinks.spans.get_finished_spans() if s.name.startswith("evaluation ")
           for k, v in (s.attributes or {}).items()]
    out += [f"{k}={v}" for r in sinks.logs.get_finished_logs() for k, v in (r.log_record.attributes or {}).items()]
    text = "\n".join(out)
    assert "[REDACTED:" in text  # the explanation went out, redacted
    assert _leaks(text) == []


def _trace_file(path: Path) -> Path:
    """A run whose input, tool arguments and result hold the corpus, written as the Collector's
    JSON lines; its tool call violates the schema given, so validation quotes the values."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesSpanExporter(path)))
    tracer = provider.get_tracer("app")
    args = {"query": PROSE, "card": 4111111111111111, "dsn": "postgres://app:s3cr3t-Pa55@db.internal:5432/x"}
    with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                     "gen_ai.agent.name": "a"}):
        with tracer.start_as_current_span("chat m", attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": PROSE}]}]),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                    {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": args}]}])}):
            pass
        with tracer.start_as_current_span("execute_tool lookup", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.id": "c1",
                "gen_ai.tool.call.arguments": json.dumps(args), "gen_ai.tool.call.result": json.dumps({"r": PROSE})}):
            pass
        with tracer.start_as_current_span("chat m", attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                    {"type": "text", "content": "Done: " + PROSE}]}])}):
            pass
    provider.shutdown()
    return path


SCHEMA = {"lookup": {"type": "object", "properties": {
    "query": {"type": "string", "maxLength": 5}, "card": {"type": "string"}, "dsn": {"type": "integer"}}}}


@pytest.mark.parametrize("fmt", ["json", "junit", "table"])
def test_no_secret_of_the_corpus_in_the_cli_output_unless_asked(tmp_path: Path, fmt: str) -> None:
    trace = _trace_file(tmp_path / "trace.jsonl")
    schemas = tmp_path / "schemas.json"
    schemas.write_text(json.dumps(SCHEMA))

    def score(*extra: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "otel_toolscore.cli", "score", str(trace), "--format", fmt,
                               "--tool-schemas", str(schemas), "--fail-under", "0.9", *extra],
                              capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "COLUMNS": "400"})
        assert proc.returncode in (0, 1), proc.stderr
        return proc.stdout + proc.stderr

    out = score()
    assert "schema_violation" in out or "tool_call_validation" in out  # the run was scored
    assert _leaks(out) == [], out
    if fmt != "table":  # (the table names issues, not values: nothing of the run to redact)
        assert "[REDACTED:" in out
        assert _leaks(score("--show-secrets")), "--show-secrets prints the values as they are"


def test_our_log_lines_are_redacted() -> None:
    import otel_toolscore  # noqa: F401 - installs the filter on every logger of the package

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("otel_toolscore")
    root.addHandler(handler)
    try:
        from otel_toolscore.runtime import engine

        engine.logger.warning("scorer failed on %s", PROSE)
        try:
            raise ValueError(PROSE)
        except ValueError:
            logging.getLogger("otel_toolscore.scorers._loop").exception("judge run failed")
    finally:
        root.removeHandler(handler)
    text = stream.getvalue()
    assert "scorer failed on" in text and "ValueError" in text
    assert _leaks(text) == [], text
