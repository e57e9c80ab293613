#!/usr/bin/env python3
"""Generate conformance captures: real instrumentation libraries, scripted model, OTLP/JSON.

Run by hand (not part of the test suite)::

    python tests/conformance/generator.py --out tests/conformance/captures
    python tests/conformance/generator.py --out /tmp/caps --stacks pydantic_ai --scenarios no_tool

For each stack it creates (or reuses) a venv ``<repo>/.venv-conformance-<venv>`` with the
pinned packages of ``tests/conformance/requirements/<venv>.txt``, and for each scenario it
starts the scripted model server (``examples/scripted_model_server.py``) on 127.0.0.1,
runs ``runner.py`` inside the venv (a real agent loop, real ``openai`` client, real
instrumentation, ``SimpleSpanProcessor(InMemorySpanExporter())``) and checks the result.
It writes ``<out>/<stack>/<scenario>.json`` (one OTLP/JSON ExportTraceServiceRequest, one
trace), ``<out>/labels.json`` (ground truth) and ``<out>/stacks.json`` (versions, settings).
This script itself needs only the stdlib.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
REQ_DIR = os.path.join(HERE, "requirements")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "examples"))

import scenarios as S
from scripted_model_server import start_server

MAX_CAPTURE_BYTES = 200_000

_V2_ENV = {
    "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
    # util-genai 1.1b0 on the experimental path accepts span_only|event_only|span_and_event
    # (NO_CONTENT otherwise); "true" would capture nothing.
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only",
}

# crewAI's own telemetry, its run tracing and its PyPI version check off (nothing may leave the
# machine). Not OTEL_SDK_DISABLED: the SDK would then disable the runner's provider too.
_CREWAI_OFF = {
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_DISABLE_TRACKING": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "CREWAI_DISABLE_VERSION_CHECK": "true",
}
_ADK_ENV = {
    # litellm: read the bundled model cost map instead of downloading it at import (the runner
    # allows loopback only).
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
}
_ADK_PACKAGES = ["google-adk", "google-genai", "litellm", "openai"]
_STRANDS_PACKAGES = ["strands-agents", "openai", "opentelemetry-instrumentation-threading"]
_AF_ENV = {
    # agent_framework.observability.ObservabilitySettings: instrumentation is on by default; content
    # (messages, tool arguments and results) needs ENABLE_SENSITIVE_DATA.
    "ENABLE_INSTRUMENTATION": "true",
    "ENABLE_SENSITIVE_DATA": "true",
}
_AF_PACKAGES = ["agent-framework-core", "agent-framework-openai", "openai"]

STACKS: dict[str, dict] = {
    "openinference_openai": {
        "venv": "openinference_openai",
        "what": "openai client + openinference-instrumentation-openai (OpenInference); hand-written tool loop",
        "key_packages": ["openai", "openinference-instrumentation-openai", "openinference-instrumentation",
                         "openinference-semantic-conventions"],
    },
    "openinference_openai_stream": {
        "venv": "openinference_openai",
        "args": ["--stream"],
        "what": "as openinference_openai, but every Chat Completions call streams (stream=True, include_usage)",
        "key_packages": ["openai", "openinference-instrumentation-openai", "openinference-instrumentation",
                         "openinference-semantic-conventions"],
    },
    "otel_genai_openai_v2": {
        "venv": "otel_genai_openai_v2",
        "env": _V2_ENV,
        "what": "openai client + opentelemetry-instrumentation-openai-v2 (official GenAI semconv, latest experimental, "
                "content in span attributes); hand-written tool loop",
        "key_packages": ["openai", "opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai"],
    },
    "otel_genai_openai_v2_stream": {
        "venv": "otel_genai_openai_v2",
        "env": _V2_ENV,
        "args": ["--stream"],
        "what": "as otel_genai_openai_v2, but every Chat Completions call streams (stream=True, include_usage)",
        "key_packages": ["openai", "opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai"],
    },
    "openllmetry_openai": {
        "venv": "openllmetry_openai",
        "env": {"TRACELOOP_TRACE_CONTENT": "true"},
        "what": "openai client + opentelemetry-instrumentation-openai (Traceloop/OpenLLMetry); hand-written tool loop",
        "key_packages": ["openai", "opentelemetry-instrumentation-openai", "opentelemetry-semantic-conventions-ai"],
    },
    "openllmetry_openai_stream": {
        "venv": "openllmetry_openai",
        "env": {"TRACELOOP_TRACE_CONTENT": "true"},
        "args": ["--stream"],
        "what": "as openllmetry_openai, but every Chat Completions call streams (stream=True, include_usage)",
        "key_packages": ["openai", "opentelemetry-instrumentation-openai", "opentelemetry-semantic-conventions-ai"],
    },
    "pydantic_ai": {
        "venv": "pydantic_ai",
        "what": "pydantic-ai Agent (OpenAIChatModel + OpenAIProvider(base_url=scripted server), system_prompt=, "
                "six plain-function tools) with its built-in instrumentation, Agent.instrument_all()",
        "key_packages": ["openai", "pydantic-ai-slim", "pydantic-graph"],
    },
    "openai_agents_openinference": {
        "venv": "openai_agents",
        "what": "OpenAI Agents SDK (Agent + function_tool, Runner.run_sync, Responses API) + "
                "openinference-instrumentation-openai-agents (the SDK's default OpenAI trace upload is removed)",
        "key_packages": ["openai", "openai-agents", "openinference-instrumentation-openai-agents",
                         "openinference-instrumentation", "openinference-semantic-conventions"],
    },
    "openai_agents_openllmetry": {
        "venv": "openai_agents",
        "env": {"TRACELOOP_TRACE_CONTENT": "true", "TRACELOOP_METRICS_ENABLED": "false"},
        "what": "OpenAI Agents SDK (Agent + function_tool, Runner.run_sync, Responses API) + "
                "opentelemetry-instrumentation-openai-agents (Traceloop/OpenLLMetry)",
        "key_packages": ["openai", "openai-agents", "opentelemetry-instrumentation-openai-agents",
                         "opentelemetry-semantic-conventions-ai"],
    },
    "llamaindex_openinference": {
        "venv": "llamaindex_openinference",
        # OpenInference records message content by default (OPENINFERENCE_HIDE_* unset = false).
        "what": "llama-index FunctionAgent (FunctionTool tools, llama-index OpenAI LLM with api_base=scripted server, "
                "streaming as by default) + openinference-instrumentation-llama-index",
        "key_packages": ["openai", "llama-index-core", "llama-index-llms-openai", "llama-index-workflows",
                         "llama-index-instrumentation", "openinference-instrumentation-llama-index",
                         "openinference-instrumentation", "openinference-semantic-conventions"],
    },
    "smolagents_openinference": {
        "venv": "smolagents_openinference",
        # OpenInference records message content by default (OPENINFERENCE_HIDE_* unset = false).
        # server: frameworks/smolagents.py plays the final text as a final_answer tool call and counts
        # smolagents' "Calling tools:" messages as tool results (see that module).
        "server": "smolagents",
        "what": "smolagents ToolCallingAgent (@tool functions, OpenAIServerModel with api_base=scripted server; the "
                "final text is scripted as a final_answer tool call) + openinference-instrumentation-smolagents",
        "key_packages": ["openai", "smolagents", "openinference-instrumentation-smolagents",
                         "openinference-instrumentation", "openinference-semantic-conventions"],
    },
    "crewai_openinference": {
        "venv": "crewai",
        # OpenInference records message content by default (OPENINFERENCE_HIDE_* unset = false).
        "env": _CREWAI_OFF,
        "what": "CrewAI Agent + Task + Crew (@tool tools, crewai.LLM with base_url=scripted server: crewai's native "
                "OpenAI provider) + openinference-instrumentation-crewai + openinference-instrumentation-openai",
        "key_packages": ["openai", "crewai", "openinference-instrumentation-crewai",
                         "openinference-instrumentation-openai", "openinference-instrumentation",
                         "openinference-semantic-conventions"],
    },
    "crewai_openllmetry": {
        "venv": "crewai",
        "env": {**_CREWAI_OFF, "TRACELOOP_TRACE_CONTENT": "true", "TRACELOOP_METRICS_ENABLED": "false"},
        "what": "CrewAI Agent + Task + Crew (as crewai_openinference) + opentelemetry-instrumentation-crewai + "
                "opentelemetry-instrumentation-openai (Traceloop/OpenLLMetry)",
        "key_packages": ["openai", "crewai", "opentelemetry-instrumentation-crewai",
                         "opentelemetry-instrumentation-openai", "opentelemetry-semantic-conventions-ai"],
    },
    "agno_openinference": {
        "venv": "agno_openinference",
        # OpenInference records message content by default (OPENINFERENCE_HIDE_* unset = false);
        # AGNO_TELEMETRY=false: Agno's own telemetry off.
        "env": {"AGNO_TELEMETRY": "false"},
        "what": "Agno Agent (plain-function tools, OpenAIChat with base_url=scripted server, instructions=) + "
                "openinference-instrumentation-agno",
        "key_packages": ["openai", "agno", "openinference-instrumentation-agno", "openinference-instrumentation",
                         "openinference-semantic-conventions"],
    },
}
# The Anthropic SDK (2.x) traces its own API calls whenever a global tracer provider is set (anthropic._tracing);
# ANTHROPIC_OPEN_TELEMETRY=false, its documented switch, keeps those spans out of the instrumentation-package stacks.
_ANTHROPIC_NATIVE_OFF = {"ANTHROPIC_OPEN_TELEMETRY": "false"}
_ANTHROPIC_NATIVE_CONTENT = {"ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE": "content"}
STACKS.update({
    "anthropic_openinference": {
        "venv": "anthropic_openinference",
        "env": _ANTHROPIC_NATIVE_OFF,
        "what": "anthropic client (Messages API) + openinference-instrumentation-anthropic (OpenInference); "
                "hand-written tool loop",
        "key_packages": ["anthropic", "openinference-instrumentation-anthropic", "openinference-instrumentation",
                         "openinference-semantic-conventions"],
    },
    "anthropic_openllmetry": {
        "venv": "anthropic_openllmetry",
        "env": {**_ANTHROPIC_NATIVE_OFF, "TRACELOOP_TRACE_CONTENT": "true"},
        "what": "anthropic client (Messages API) + opentelemetry-instrumentation-anthropic (Traceloop/OpenLLMetry); "
                "hand-written tool loop",
        "key_packages": ["anthropic", "opentelemetry-instrumentation-anthropic", "opentelemetry-semantic-conventions-ai"],
    },
    "anthropic_native": {
        "venv": "anthropic_native",
        "env": _ANTHROPIC_NATIVE_CONTENT,
        "what": "anthropic client (Messages API) with the SDK's own OpenTelemetry tracing (content mode 'content'), "
                "no instrumentation package; hand-written tool loop",
        "key_packages": ["anthropic", "opentelemetry-api"],
    },
})
for _name in ("anthropic_openinference", "anthropic_openllmetry", "anthropic_native"):
    STACKS[f"{_name}_stream"] = dict(
        STACKS[_name], args=["--stream"],
        what=f"as {_name}, but every call streams: client.messages.stream(...) and get_final_message()",
    )
STACKS["anthropic_native_tool_runner"] = {
    "venv": "anthropic_native",
    "env": _ANTHROPIC_NATIVE_CONTENT,
    "what": "the Anthropic SDK's own agent loop, client.beta.messages.tool_runner(tools=[beta_tool(f)...]).until_done(), "
            "with the SDK's own OpenTelemetry tracing (content mode 'content'); the SDK makes the root span",
    "key_packages": ["anthropic", "opentelemetry-api"],
}
# Google ADK, Strands Agents, Microsoft Agent Framework (tests/conformance/frameworks/)
STACKS.update({
    # --- Google ADK (tests/conformance/frameworks/adk.py) ---
    "adk_native": {
        "venv": "adk",
        "env": _ADK_ENV | {
            # ADK's default schema (ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN unset = 2, OTel GenAI semconv 1.44):
            # content on the semconv spans only in the span-bearing modes SPAN_ONLY|SPAN_AND_EVENT
            # (google/adk/telemetry/context.py TelemetryConfig); "true" would mean EVENT_ONLY (logs, not spans).
            "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
        },
        "what": "Google ADK LlmAgent (LiteLlm openai/gpt-4o-mini, api_base=scripted server; six function tools) run by "
                "InMemoryRunner.run_async, ADK's own OpenTelemetry tracing, default telemetry schema (2)",
        "key_packages": _ADK_PACKAGES,
    },
    "adk_native_legacy": {
        "venv": "adk",
        "env": _ADK_ENV | {
            # The legacy schema (gcp.vertex.agent.* attributes, call_llm spans); its span content is
            # ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS (default on, set explicitly here).
            "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1",
            "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "true",
        },
        "what": "as adk_native, with ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1 (legacy schema, gcp.vertex.agent.*)",
        "key_packages": _ADK_PACKAGES,
    },
    "adk_openinference": {
        "venv": "adk",
        "env": _ADK_ENV,
        "what": "as adk_native (default schema 2), plus openinference-instrumentation-google-adk (GoogleADKInstrumentor: "
                "its own CHAIN/AGENT/TOOL spans, LLM attributes written onto ADK's spans)",
        "key_packages": _ADK_PACKAGES + ["openinference-instrumentation-google-adk", "openinference-instrumentation",
                                         "openinference-semantic-conventions"],
    },
    "adk_openinference_legacy": {
        "venv": "adk",
        "env": _ADK_ENV | {"ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1"},
        "what": "as adk_openinference, with ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1 (ADK's legacy schema: call_llm spans, "
                "which the OpenInference instrumentor turns into LLM spans)",
        "key_packages": _ADK_PACKAGES + ["openinference-instrumentation-google-adk", "openinference-instrumentation",
                                         "openinference-semantic-conventions"],
    },
    # SSE streaming (RunConfig(streaming_mode=SSE)): ADK traces every streamed chunk's partial response
    "adk_native_sse": {
        "venv": "adk",
        "env": _ADK_ENV | {
            "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
        },
        "what": "as adk_native, run with RunConfig(streaming_mode=StreamingMode.SSE) (LiteLLM streams every model call)",
        "key_packages": _ADK_PACKAGES,
    },
    "adk_native_legacy_sse": {
        "venv": "adk",
        "env": _ADK_ENV | {"ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1", "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "true"},
        "what": "as adk_native_legacy, run with RunConfig(streaming_mode=StreamingMode.SSE)",
        "key_packages": _ADK_PACKAGES,
    },
    "adk_openinference_sse": {
        "venv": "adk",
        "env": _ADK_ENV,
        "what": "as adk_openinference, run with RunConfig(streaming_mode=StreamingMode.SSE)",
        "key_packages": _ADK_PACKAGES + ["openinference-instrumentation-google-adk", "openinference-instrumentation",
                                         "openinference-semantic-conventions"],
    },
    # --- Strands Agents (tests/conformance/frameworks/strands.py); Strands always records content ---
    "strands_latest": {
        "venv": "strands",
        "env": {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"},
        "what": "Strands Agents Agent (OpenAIModel, client_args base_url=scripted server, streaming Chat Completions; "
                "six @tool functions) with its built-in tracing, latest GenAI conventions (content in span events)",
        "key_packages": _STRANDS_PACKAGES,
    },
    "strands_default": {
        "venv": "strands",
        "what": "as strands_latest, without OTEL_SEMCONV_STABILITY_OPT_IN (the deprecated per-message span events)",
        "key_packages": _STRANDS_PACKAGES,
    },
    "strands_span_attributes": {
        "venv": "strands",
        "env": {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental,gen_ai_span_attributes_only"},
        "what": "as strands_latest, plus gen_ai_span_attributes_only (content as span attributes, no span events)",
        "key_packages": _STRANDS_PACKAGES,
    },
    # --- Microsoft Agent Framework (tests/conformance/frameworks/agent_framework.py) ---
    "agent_framework_chat": {
        "venv": "agent_framework",
        "env": _AF_ENV,
        "what": "Microsoft Agent Framework Agent (OpenAIChatCompletionClient, base_url=scripted server: Chat "
                "Completions; six @tool functions), agent.run, its own OpenTelemetry instrumentation with sensitive data",
        "key_packages": _AF_PACKAGES,
    },
    "agent_framework_responses": {
        "venv": "agent_framework",
        "env": _AF_ENV,
        "what": "as agent_framework_chat, with OpenAIChatClient (the Responses API)",
        "key_packages": _AF_PACKAGES,
    },
})
COMMON_PACKAGES = ["opentelemetry-sdk", "opentelemetry-api", "opentelemetry-exporter-otlp-proto-common", "protobuf"]


# ---------------------------------------------------------------------------------------
# venvs
# ---------------------------------------------------------------------------------------
def venv_dir(venv: str) -> str:
    return os.path.join(REPO, f".venv-conformance-{venv}")


def venv_python(venv: str) -> str:
    return os.path.join(venv_dir(venv), "bin", "python")


def _sha(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _pip(python: str, *args: str) -> None:
    cmd = [python, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    subprocess.run(cmd, check=True)


def ensure_venv(venv: str, base_python: str, log) -> str:
    """Create or reuse the venv; (re)install when its requirements file changed."""
    req = os.path.join(REQ_DIR, f"{venv}.txt")
    marker = os.path.join(venv_dir(venv), ".conformance-requirements.sha256")
    want = _sha(req)
    python = venv_python(venv)
    if os.path.exists(python) and os.path.exists(marker):
        with open(marker) as fh:
            if fh.read().strip() == want:
                return python
    if not os.path.exists(python):
        log(f"creating venv {venv_dir(venv)}")
        subprocess.run([base_python, "-m", "venv", venv_dir(venv)], check=True)
    log(f"installing {os.path.relpath(req, REPO)} into {os.path.basename(venv_dir(venv))}")
    _pip(python, "install", "-r", req)
    with open(marker, "w") as fh:
        fh.write(want + "\n")
    return python


def refreeze(venv: str, base_python: str, log) -> None:
    """Rebuild the venv from <venv>.in and write the full pins to <venv>.txt."""
    src = os.path.join(REQ_DIR, f"{venv}.in")
    if os.path.exists(venv_dir(venv)):
        shutil.rmtree(venv_dir(venv))
    log(f"refreeze {venv}: fresh venv from {os.path.relpath(src, REPO)}")
    subprocess.run([base_python, "-m", "venv", venv_dir(venv)], check=True)
    _pip(venv_python(venv), "install", "-r", src)
    frozen = subprocess.run([venv_python(venv), "-m", "pip", "freeze", "--exclude-editable"],
                            check=True, capture_output=True, text=True).stdout
    with open(os.path.join(REQ_DIR, f"{venv}.txt"), "w") as fh:
        fh.write(frozen)


def installed_versions(venv: str) -> dict[str, str]:
    out = subprocess.run([venv_python(venv), "-m", "pip", "freeze"], check=True, capture_output=True, text=True).stdout
    versions = {}
    for line in out.splitlines():
        if "==" in line:
            name, ver = line.split("==", 1)
            versions[name.lower().replace("_", "-")] = ver
    return versions


# ---------------------------------------------------------------------------------------
# checks on a capture
# ---------------------------------------------------------------------------------------
def _strings_of_value(value: dict, out: list[str]) -> None:
    if "stringValue" in value:
        _strings_of_text(value["stringValue"], out)
    for v in (value.get("arrayValue") or {}).get("values", []):
        _strings_of_value(v, out)
    for kv in (value.get("kvlistValue") or {}).get("values", []):
        out.append(kv.get("key", ""))
        _strings_of_value(kv.get("value", {}), out)


def _strings_of_text(text: str, out: list[str]) -> None:
    out.append(text)
    stripped = text.strip()
    if stripped[:1] in "[{\"":
        try:
            _strings_of_json(json.loads(stripped), out)
        except ValueError:
            pass


def _strings_of_json(obj, out: list[str]) -> None:
    if isinstance(obj, str):
        _strings_of_text(obj, out)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.append(str(k))
            _strings_of_json(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _strings_of_json(v, out)
    elif obj is not None:
        out.append(json.dumps(obj))


def all_spans(doc: dict) -> list[dict]:
    return [sp for rs in doc.get("resourceSpans", []) for ss in rs.get("scopeSpans", []) for sp in ss.get("spans", [])]


def check_capture(doc: dict, name: str) -> list[str]:
    problems = []
    spans = all_spans(doc)
    if not spans:
        return ["no spans"]
    traces = {sp["traceId"] for sp in spans}
    if len(traces) != 1:
        problems.append(f"{len(traces)} traces")
    ids = {sp["spanId"] for sp in spans}
    roots = [sp for sp in spans if not sp.get("parentSpanId")]
    if len(roots) != 1:
        problems.append(f"{len(roots)} root spans")
    for sp in spans:
        if sp.get("parentSpanId") and sp["parentSpanId"] not in ids:
            problems.append(f"span {sp['name']} has a parent outside the file")
        for key in ("traceId", "spanId", "parentSpanId"):
            v = sp.get(key)
            if v and (v != v.lower() or any(c not in "0123456789abcdef" for c in v)):
                problems.append(f"span {sp['name']} {key} is not lowercase hex")
    strings: list[str] = []
    for sp in spans:
        for attr in sp.get("attributes", []):
            _strings_of_value(attr.get("value", {}), strings)
        for ev in sp.get("events", []):
            for attr in ev.get("attributes", []):
                _strings_of_value(attr.get("value", {}), strings)

    def seen(needle: str) -> bool:
        return any(needle in s for s in strings)

    label = S.label(name, [])
    for result in label["tool_results"]:
        if not seen(result["name"]):
            problems.append(f"tool name {result['name']} not in any attribute")
        for v in result["arguments"].values():
            if not seen(str(v)):
                problems.append(f"argument value {v!r} of {result['name']} not in any attribute")
        for v in (result["result"].values() if isinstance(result["result"], dict) else [result["result"]]):
            if isinstance(v, str) and not seen(v):
                problems.append(f"tool result value {v!r} of {result['name']} not in any attribute")
    if not seen(label["final_answer"]):
        problems.append("final answer not in any attribute")
    return problems


# ---------------------------------------------------------------------------------------
# one run
# ---------------------------------------------------------------------------------------
def child_env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.upper().endswith("_PROXY") and not k.startswith(("OTEL_", "TRACELOOP_", "OPENAI_", "LOGFIRE_", "ANTHROPIC_"))}
    env.update({
        "NO_PROXY": "127.0.0.1,localhost",
        "OPENAI_API_KEY": "sk-conformance",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    env.update(extra)
    return env


def server_for(spec: dict):
    """start_server, or the stack's own (frameworks/<spec["server"]>.py ``start_server``: same contract)."""
    if not spec.get("server"):
        return start_server
    import importlib

    return importlib.import_module(f"frameworks.{spec['server']}").start_server


def run_one(stack: str, scenario: str, out_dir: str, timeout: float) -> tuple[bool, list[str], dict]:
    spec = STACKS[stack]
    server, base_url = server_for(spec)(S.server_script(scenario))
    target = os.path.join(out_dir, stack, f"{scenario}.json")
    problems: list[str] = []
    summary: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_out = os.path.join(tmp, "capture.json")
        result_file = os.path.join(tmp, "result.json")
        cmd = [venv_python(spec["venv"]), os.path.join(HERE, "runner.py"), "--stack", stack, "--scenario", scenario,
               "--base-url", base_url, "--out", tmp_out, "--result", result_file, *spec.get("args", [])]
        try:
            proc = subprocess.run(cmd, env=child_env(spec.get("env", {})), capture_output=True, text=True,
                                  timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            server.stop()
            return False, [f"timed out after {timeout}s"], {}
        finally:
            requests = list(server.requests)
            server_problems = list(server.problems)
            server.stop()
        if os.path.exists(result_file):
            with open(result_file, encoding="utf-8") as fh:
                summary = json.load(fh)
        if not summary.get("ok"):
            problems.append(f"runner failed (rc={proc.returncode}): {summary.get('error') or proc.stderr[-2000:]}")
            if summary.get("traceback"):
                problems.append(summary["traceback"])
            return False, problems, summary
        problems += [f"scripted server: {p}" for p in server_problems]
        if summary.get("blocked_network"):
            problems.append(f"non-loopback network attempts: {summary['blocked_network']}")
        label = S.label(scenario, [])
        if summary.get("final_answer") != label["final_answer"]:
            problems.append(f"final answer {summary.get('final_answer')!r} != scripted {label['final_answer']!r}")
        got = [(e["name"], e["arguments"], e["result"]) for e in summary.get("executed", [])]
        want = [(r["name"], r["arguments"], r["result"]) for r in label["tool_results"]]
        if got != want:
            problems.append(f"executed tools {got!r} != expected {want!r}")
        model_calls = [r for r in requests if r["method"] == "POST"]
        n_turns = len(S.SCENARIOS[scenario]["turns"])
        if len(model_calls) != n_turns:
            problems.append(f"{len(model_calls)} model requests, script has {n_turns} turns")
        with open(tmp_out, encoding="utf-8") as fh:
            doc = json.load(fh)
        problems += check_capture(doc, scenario)
        size = os.path.getsize(tmp_out)
        if size > MAX_CAPTURE_BYTES:
            problems.append(f"capture is {size} bytes (> {MAX_CAPTURE_BYTES})")
        summary["model_requests"] = [{"path": r["path"], "turn": r.get("turn"), "stream": bool((r["body"] or {}).get("stream"))}
                                     for r in model_calls]
        if not problems:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(tmp_out, target)
    return not problems, problems, summary


def run_checked(stack: str, scenario: str, out_dir: str, timeout: float) -> tuple[bool, list[str], dict]:
    """run_one, removing a stale capture of an earlier run when this one fails."""
    ok, problems, summary = run_one(stack, scenario, out_dir, timeout)
    target = os.path.join(out_dir, stack, f"{scenario}.json")
    if not ok and os.path.exists(target):
        os.remove(target)
    return ok, problems, summary


# ---------------------------------------------------------------------------------------
# labels
# ---------------------------------------------------------------------------------------
def write_labels(out_dir: str) -> dict:
    stacks_by_scenario = {
        name: sorted(st for st in STACKS if os.path.exists(os.path.join(out_dir, st, f"{name}.json")))
        for name in S.SCENARIOS
    }
    labels = {
        "schema_version": 1,
        "agent_name": S.AGENT_NAME,
        "system_prompt": S.SYSTEM_PROMPT,
        "request_model": S.REQUEST_MODEL,
        "response_model": S.RESPONSE_MODEL,
        "tools_offered": "all six tools in every scenario and stack",
        "tool_schemas": S.TOOL_SCHEMAS,
        "score_definitions": {
            "tool_selection_non_strict": "1 if every expected tool was called at least once (extra tools allowed); with no expected tools, 1 iff no tool was called",
            "tool_selection_strict": "1 if the set of called tool names equals the set of expected tools (no extra tools)",
            "order_flexible": "1 if expected_order is a subsequence of the called sequence (other calls may be interleaved); null when the scenario has no order expectation",
            "order_strict": "1 if the called sequence equals expected_order exactly; null when no order expectation",
            "hallucinated": "the final answer states something contradicted by / not supported by the tool results",
            "tool_call_failed": "at least one tool call failed: the tool returned an error payload, or the call was rejected (argument validation / TypeError)",
            "arguments_valid": "all tool-call arguments validate against tool_schemas (required, type, format=email, no additional properties)",
        },
        "scenarios": {name: S.label(name, stacks_by_scenario[name]) for name in S.SCENARIOS},
    }
    with open(os.path.join(out_dir, "labels.json"), "w", encoding="utf-8") as fh:
        json.dump(labels, fh, indent=1)
        fh.write("\n")
    return labels


def write_stacks(out_dir: str, versions: dict[str, dict]) -> None:
    path = os.path.join(out_dir, "stacks.json")
    doc = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    for stack, vers in versions.items():
        spec = STACKS[stack]
        doc[stack] = {
            "what": spec["what"],
            "venv": f".venv-conformance-{spec['venv']}",
            "requirements": f"tests/conformance/requirements/{spec['venv']}.txt",
            "runner_args": spec.get("args", []),
            "env": spec.get("env", {}),
            "key_versions": {p: vers.get(p) for p in spec["key_packages"] + COMMON_PACKAGES if vers.get(p)},
        }
    doc = {k: doc[k] for k in sorted(doc) if k in STACKS}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "captures"), help="output folder (default: %(default)s)")
    ap.add_argument("--stacks", nargs="*", default=list(STACKS), choices=list(STACKS), metavar="STACK")
    ap.add_argument("--scenarios", nargs="*", default=list(S.SCENARIOS), choices=list(S.SCENARIOS), metavar="SCENARIO")
    ap.add_argument("--python", default=sys.executable, help="interpreter used to create the venvs")
    ap.add_argument("--refreeze", action="store_true",
                    help="rebuild each venv from requirements/<venv>.in and rewrite requirements/<venv>.txt first")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per run")
    ap.add_argument("--list", action="store_true", help="list stacks and scenarios and exit")
    args = ap.parse_args(argv)

    if args.list:
        for st, spec in STACKS.items():
            print(f"stack    {st:30s} {spec['what']}")
        for sc in S.SCENARIOS:
            print(f"scenario {sc:30s} {S.SCENARIOS[sc]['user_question']}")
        return 0

    def log(msg: str) -> None:
        print(msg, flush=True)

    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    venvs = sorted({STACKS[s]["venv"] for s in args.stacks})
    for venv in venvs:
        if args.refreeze:
            refreeze(venv, args.python, log)
        ensure_venv(venv, args.python, log)
    versions = {st: installed_versions(STACKS[st]["venv"]) for st in args.stacks}

    failures = []
    passed = 0
    for stack in args.stacks:
        for scenario in args.scenarios:
            t0 = time.monotonic()
            ok, problems, _summary = run_checked(stack, scenario, out_dir, args.timeout)
            status = "ok  " if ok else "FAIL"
            log(f"{status} {stack:30s} {scenario:20s} {time.monotonic() - t0:5.1f}s")
            if ok:
                passed += 1
            else:
                failures.append((stack, scenario, problems))
                for p in problems:
                    log("       " + p.replace("\n", "\n       "))
    write_stacks(out_dir, versions)
    write_labels(out_dir)
    log(f"{passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
