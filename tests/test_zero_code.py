"""The zero-code way in (issue 28): ``opentelemetry-instrument python app.py`` with
``OTEL_TOOLSCORE_ENABLED=true`` scores an app that has no otel-toolscore code. The real
command, in a child process: opentelemetry-distro's configurator sets the providers up from the
OTEL_* variables, the stock openai-v2 instrumentor traces the real ``openai`` client, and the
package's ``opentelemetry_post_instrument`` hook (runtime/autoinstall.py) installs scoring; all
of it is exported over OTLP/HTTP to a receiver on loopback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import paths
from tests.support.otlp_sink import OtlpSink

APP = paths.DATA / "zero_code_app.py"
BIN = Path(sys.executable).parent
INSTRUMENT = BIN / "opentelemetry-instrument"

needs_instrument = pytest.mark.skipif(
    not INSTRUMENT.exists() or shutil.which("python", path=str(BIN)) is None,
    reason="opentelemetry-instrument is not installed (the test extra brings opentelemetry-distro)")


def _run(rx: OtlpSink, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        # the venv's python first: opentelemetry-instrument execs the `python` it finds on PATH
        "PATH": f"{BIN}:/usr/bin:/bin", "HOME": "/tmp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": rx.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "zero-code-agent",
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only",
        "OTEL_TOOLSCORE_COMPLETION_GRACE": "0.05",
        "OTEL_TOOLSCORE_SCORERS": '["tool_call_accuracy", "tool_call_validation"]',
    }
    if "PYTHONPATH" in os.environ:
        base["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return subprocess.run([str(INSTRUMENT), "python", str(APP)], env={**base, **env}, capture_output=True,
                          text=True, timeout=180, cwd=paths.REPO)


@needs_instrument
def test_opentelemetry_instrument_with_the_switch_on_scores_the_app() -> None:
    with OtlpSink() as rx:
        proc = _run(rx, OTEL_TOOLSCORE_ENABLED="true")
        assert proc.returncode == 0, proc.stderr
    assert "good" in proc.stdout and "wrong_tool" in proc.stdout
    spans = rx.spans()
    agents = {s.attributes["toolscore.tool_call_accuracy.label"]: s for s in spans
              if s.name.startswith("invoke_agent") and "toolscore.tool_call_accuracy.label" in s.attributes}
    assert set(agents) == {"pass", "fail"}, [dict(s.attributes) for s in spans if s.name.startswith("invoke")]
    assert agents["pass"].attributes["toolscore.tool_call_accuracy.score"] == 1.0
    assert agents["fail"].attributes["toolscore.tool_call_accuracy.score"] == 0.0
    assert agents["pass"].resource.attributes["service.name"] == "zero-code-agent"
    # the stock instrumentation's chat spans went out too, each once
    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chats) == 4 and len({s.context.span_id for s in chats}) == 4
    assert not any(s.name.startswith("evaluation ") for s in spans)  # the agent spans carry the scores
    # events and metrics through the providers opentelemetry-instrument set up, before they shut down
    assert "gen_ai.evaluation.result" in {rec.event_name for rec in rx.log_records()}
    assert {"gen_ai.evaluation.score", "toolscore.evaluations"} <= rx.metric_names()


@needs_instrument
def test_opentelemetry_instrument_without_the_switch_leaves_the_app_alone() -> None:
    with OtlpSink() as rx:
        proc = _run(rx, OTEL_TOOLSCORE_ENABLED="maybe")
        assert proc.returncode == 0, proc.stderr
    spans = rx.spans()
    assert any(s.name.startswith("invoke_agent") for s in spans)  # traced as before
    # toolscore.expected_tool is the app's own attribute; no score, no evaluation span
    assert not [s for s in spans if any(k.endswith((".score", ".label")) for k in s.attributes)]
    assert not [s for s in spans if s.name.startswith("evaluation")]
    assert "OTEL_TOOLSCORE_ENABLED='maybe' is not true or false" in proc.stderr


def test_the_hook_never_raises_into_the_app(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from otel_toolscore.runtime import autoinstall

    monkeypatch.setenv("OTEL_TOOLSCORE_ENABLED", "TRUE")  # an OTel boolean: any case
    monkeypatch.setenv("OTEL_TOOLSCORE_HOLD_TIMEOUT", "soon")  # install() fails on it, before building anything
    with caplog.at_level("WARNING"):
        autoinstall.hook()
    assert "OTEL_TOOLSCORE_ENABLED=true but install() failed; the app runs unscored" in caplog.text
    assert "OTEL_TOOLSCORE_HOLD_TIMEOUT" in caplog.text
