"""Secrets and privacy (issue 8 item 5) through the real processor, the real SDK and real litellm
over real HTTP: what leaves the process — the judge request, explanations on the agent span, the
evaluation span and events, metrics — never carries the run's secrets; explanations can be turned
off; with only code scorers nothing leaves the process but the app's own telemetry."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from tests.support.judge_server import JudgeServer, always, ok, raw
from tests.support.paths import SAMPLE
from tests.support.pipeline import Pipeline

API_KEY = "sk-proj-Zx8YwV7uT6sR5qP4oN3mL2kJ"
EMAIL = "alice.private@example.com"
CARD = "4111 1111 1111 1111"
URL = "https://bob:hunter2pass@db.internal.example/x"
BEARER = "Bearer eyJhbGciOiJIUzI1NiJ9.cGF5bG9hZA.c2ln"
#: a short prefixed token in plain prose, the way users paste them (issue 18)
USER_TOKEN = "tok_live_4f9a"
SECRETS = [API_KEY, EMAIL, CARD, "hunter2pass", "eyJhbGciOiJIUzI1NiJ9.cGF5bG9hZA.c2ln", USER_TOKEN]

TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        # Every secret is a schema violation, so the validator's messages quote each one.
        "api_key": {"type": "string", "maxLength": 8},
        "owner": {"type": "string", "pattern": "^[a-z]+$"},
        "card": {"type": "integer"},
        "dsn": {"type": "string", "maxLength": 8},
    },
    "required": ["api_key"],
}


class Sinks(Pipeline):
    """The processor's in-memory sinks, and what otel-toolscore itself put in them."""

    def toolscore_output(self) -> list[str]:
        """Every string otel-toolscore itself put on the way out: ``toolscore.*`` attributes
        of the agent span, the evaluation span, and the evaluation events."""
        out: list[str] = []
        for span in self.spans.get_finished_spans():
            for key, value in (span.attributes or {}).items():
                if key.startswith("toolscore.") or span.name.startswith("evaluation "):
                    out.append(f"{key}={value}")
        for record in self.logs.get_finished_logs():
            out.extend(f"{k}={v}" for k, v in (record.log_record.attributes or {}).items())
        return out

    def metric_attribute_values(self) -> list[Any]:
        data = self.metrics.get_metrics_data()
        values: list[Any] = []
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        values.extend((point.attributes or {}).values())
        return values


def run_with_secrets(provider: TracerProvider) -> None:
    """A GenAI-convention run whose user input, tool arguments and tool result hold secrets."""
    tracer = provider.get_tracer("app")
    arguments = {"api_key": API_KEY, "owner": EMAIL, "card": CARD, "dsn": URL}
    user = f"Look up the account of {EMAIL}, card {CARD}; auth header {BEARER}. Log in with token {USER_TOKEN}"
    with tracer.start_as_current_span("invoke_agent accounts", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "accounts",
    }):
        with tracer.start_as_current_span("chat m", attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": user}]}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "tool_call", "id": "c1", "name": "lookup_account", "arguments": arguments}]}]),
            "gen_ai.tool.definitions": json.dumps([
                {"type": "function", "name": "lookup_account", "description": "Find an account", "parameters": TOOL_SCHEMA}]),
        }):
            pass
        with tracer.start_as_current_span("execute_tool lookup_account", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_account", "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.call.arguments": json.dumps(arguments),
            "gen_ai.tool.call.result": json.dumps({"owner": EMAIL, "token": API_KEY, "balance": 1200}),
        }):
            pass
        with tracer.start_as_current_span("chat m", attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                {"type": "text", "content": f"The account of {EMAIL} has a balance of 1200."}]}]),
        }):
            pass


def judge_options(server: JudgeServer) -> dict[str, Any]:
    return {"tool_call_appropriateness": {
        "model": "openai/judge-test", "api_base": server.url, "api_key": "sk-test-key", "backoff_base_s": 0.01,
        "max_retries": 0,
    }}


# A careless judge: its reasoning repeats the secrets it should never have seen (it cannot have
# seen them, as the request is redacted, but a user hook may let some through, or a judge may
# hallucinate; what the judge says is content too).
ECHOING_JUDGE = {
    "evaluations": [{"tool_called": "lookup_account", "was_appropriate": True,
                     "reasoning": f"Looked up {EMAIL} with key {API_KEY} and {URL}"}],
    "missing_tools": [],
    "reason": f"The user {EMAIL} (card {CARD}) needed the lookup; {BEARER}",
}


@pytest.mark.parametrize("redact", [True, False], ids=["redacted", "redaction-off"])
def test_secrets_never_leave_in_explanations_or_judge_requests(judge_server: JudgeServer, redact: bool) -> None:
    judge_server.script(ok(ECHOING_JUDGE))
    sinks = Sinks(
        scorers=["tool_call_validation", "tool_result_verification", "tool_call_appropriateness"],
        scorer_options=judge_options(judge_server),
        redact_explanations=redact,
        explanation_max_chars=4096,
    )
    processor = sinks.processor
    provider = TracerProvider()
    provider.add_span_processor(processor)
    run_with_secrets(provider)
    # Generous: the first judged run in a process pays litellm's lazy import, which on a loaded
    # 2-core machine has taken over 10 s; the wait ends as soon as the run is scored.
    assert processor.force_flush(60_000)
    provider.shutdown()

    # The judge scored (so its explanation was emitted) and validation found the violations.
    agent = next(s for s in sinks.spans.get_finished_spans() if s.name == "invoke_agent accounts")
    assert agent.attributes["toolscore.tool_call_validation.label"] == "fail"
    evals = [s for s in sinks.spans.get_finished_spans() if s.name == "evaluation tool_call_appropriateness"]
    assert len(evals) == 1 and evals[0].attributes["gen_ai.evaluation.score.value"] == 1.0

    # The judge request is redacted whatever the explanation setting.
    assert len(judge_server.requests) == 1
    sent = json.dumps(judge_server.requests)
    assert not [secret for secret in SECRETS if secret in sent]

    out = "\n".join(sinks.toolscore_output())
    leaked = [secret for secret in SECRETS if secret in out]
    if redact:
        assert leaked == [], out
        for kind in ("api_key", "email", "url_password", "card_number", "bearer_token"):
            assert f"[REDACTED:{kind}]" in out, kind
    else:  # the switch is real: without redaction the same run leaks through its explanations
        assert API_KEY in out and EMAIL in out

    # Metrics carry names and enums only, whatever redaction says.
    values = sinks.metric_attribute_values()
    assert values and not [v for v in values if any(secret in str(v) for secret in SECRETS)]
    ids = {format(s.context.span_id, "016x") for s in sinks.spans.get_finished_spans()}
    ids |= {format(s.context.trace_id, "032x") for s in sinks.spans.get_finished_spans()} | {"c1"}
    assert not ids & {str(v) for v in values}


def test_explanations_off_sends_scores_and_labels_only(judge_server: JudgeServer) -> None:
    judge_server.script(ok(ECHOING_JUDGE))
    sinks = Sinks(
        scorers=["tool_call_validation", "tool_call_appropriateness"],
        scorer_options=judge_options(judge_server),
        explanations=False,
    )
    processor = sinks.processor
    provider = TracerProvider()
    provider.add_span_processor(processor)
    run_with_secrets(provider)
    assert processor.force_flush(60_000)
    provider.shutdown()
    out = sinks.toolscore_output()
    assert any(line.startswith("toolscore.tool_call_validation.score=") for line in out)
    assert any(line.startswith("gen_ai.evaluation.score.value=1.0") for line in out)
    assert not [line for line in out if "explanation" in line.split("=", 1)[0]]


#: a provider refusing the key the way OpenAI does: 401, with the key in the message
REFUSED = raw(json.dumps({"error": {"message": f"Incorrect API key provided: {API_KEY}. You can find your key at"
                                               " https://platform.example/account/api-keys.",
                                    "type": "invalid_request_error", "code": "invalid_api_key"}}), code=401)


def test_a_judge_error_quoting_the_api_key_is_redacted(judge_server: JudgeServer) -> None:
    """litellm puts the provider's error text, wrong key included, in its exception; that text
    becomes the error evaluation's explanation."""
    judge_server.responder = always(lambda: REFUSED)
    options = {"tool_call_appropriateness": {
        "model": "openai/judge-test", "api_base": judge_server.url,
        "api_key": API_KEY, "backoff_base_s": 0.01, "max_retries": 0,
    }}
    sinks = Sinks(scorers=["tool_call_appropriateness"], scorer_options=options, explanation_max_chars=4096)
    processor = sinks.processor
    provider = TracerProvider()
    provider.add_span_processor(processor)
    run_with_secrets(provider)
    assert processor.force_flush(60_000)
    provider.shutdown()
    records = [r.log_record.attributes for r in sinks.logs.get_finished_logs()
               if r.log_record.attributes.get("gen_ai.evaluation.name") == "tool_call_appropriateness"]
    assert len(records) == 1 and records[0].get("error.type")
    assert "gen_ai.evaluation.score.value" not in records[0]
    explanation = records[0]["gen_ai.evaluation.explanation"]
    assert "Incorrect API key" in explanation  # the message itself still helps whoever reads it
    assert API_KEY not in explanation and "[REDACTED:api_key]" in explanation


def test_code_scorers_open_no_connection(tmp_path: Path) -> None:
    """Content leaves the process only where the user enabled it: with the default settings
    (code scorers only) scoring every bundled trace makes no network connection and resolves no
    name, checked by an audit hook in a fresh interpreter."""
    script = tmp_path / "audit.py"
    script.write_text(textwrap.dedent(f"""
        import socket, sys
        events = []
        def hook(event, args):
            if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto",
                         "urllib.Request", "http.client.connect"):
                events.append((event, repr(args)[:200]))
        sys.addaudithook(hook)
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from otel_toolscore import ToolScoreSpanProcessor, replay_file
        exporter = InMemorySpanExporter()
        processor = ToolScoreSpanProcessor(SimpleSpanProcessor(exporter))
        replay_file({str(SAMPLE)!r}, processor)
        processor.shutdown()
        scored = [s for s in exporter.get_finished_spans()
                  if any(k.startswith("toolscore.") for k in (s.attributes or {{}}))]
        print("scored", len(scored))
        print("events", events)
        # the hook itself works: a connection attempt is seen
        try:
            socket.create_connection(("127.0.0.1", 9), timeout=1).close()
        except OSError:
            pass
        print("probe", len(events))
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert int(lines["scored"]) == 5  # the five runs of sample.jsonl were scored ...
    assert lines["events"] == "[]"  # ... without a single connection or name lookup
    assert int(lines["probe"]) >= 1


def test_explanations_with_lone_surrogates_still_encode() -> None:
    """A custom scorer's explanation cut inside an emoji must not cost the evaluation its export."""
    from otel_toolscore.config import ToolScoreSettings
    from otel_toolscore.outputs.otel import Emitter
    from otel_toolscore.scorers.base import Score

    emitter = Emitter(ToolScoreSettings(metrics=False, events=False))
    attrs = emitter.span_attributes([Score(name="mine", value=0.5, label="half", explanation="cut \ud83d here")])
    text = attrs["toolscore.mine.explanation"]
    assert text == "cut \ufffd here"
    text.encode("utf-8")
