"""``otel-toolscore demo``: a real instrumented agent, scored in process, in well under a minute.

It starts the scripted OpenAI-compatible model of ``otel_toolscore/demo_agent/`` on 127.0.0.1,
runs the example agent of ``demo_agent/agent_common.py`` (which ``examples/`` shares) through
five runs (a good one, a wrong tool, bad arguments, a hallucinated answer, a failing tool),
scores them with ``install()``, prints a table of runs × scores with the issues found, and
writes what was exported: OTLP/JSON lines in ``./toolscore-demo/`` (spans,
``gen_ai.evaluation.result`` events, metrics; ``outputs/jsonlines.py``), or OTLP/HTTP to a
backend (``--otlp-endpoint``), and/or the traces to a local Arize Phoenix (``--phoenix``;
``demo_agent/phoenix.py``).

The model client is the real ``openai`` client traced by opentelemetry-instrumentation-openai-v2
(latest GenAI conventions) when the ``examples`` extra is installed, or by OpenInference when
asked; without them, a small built-in client emits the same GenAI ``chat`` spans through the SDK,
so the demo also runs without the examples extra (the ``cli`` extra gives the command itself).
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from otel_toolscore import semconv
from otel_toolscore.demo_agent.phoenix import PHOENIX_INSTALL_HINT, Phoenix, PhoenixError, find_phoenix
from otel_toolscore.extras import install_command
from otel_toolscore.outputs.jsonlines import JsonLinesLogExporter, JsonLinesMetricExporter, JsonLinesSpanExporter
from otel_toolscore.outputs.report import _cell, _issues
from otel_toolscore.runtime._wrap import LogExporterWrapper, MetricExporterWrapper
from otel_toolscore.runtime.bootstrap import install
from otel_toolscore.scorers.base import Score, Scorer, build_scorers
from otel_toolscore.scorers.registry import column
from otel_toolscore.trajectory import Trajectory

SERVICE_NAME = "otel-toolscore-demo"
PHOENIX_PROJECT = "otel-toolscore-demo"
INSTRUMENTATIONS = ("auto", "openai-v2", "openinference", "builtin")
_LOOPBACK = ("127.0.0.1", "localhost")


class DemoError(RuntimeError):
    """Something the demo needs is missing; the message says what to do."""


# --- the example agent -------------------------------------------------------------------------


def load_examples() -> ModuleType:
    """The example agent (tools, runs, loop) shipped in the package: the demo runs from a wheel."""
    from otel_toolscore.demo_agent import agent_common

    return agent_common


# --- tees that also count what went out, for the summary ------------------------------------


@dataclass
class Exported:
    spans: int = 0
    scored_agent_spans: int = 0
    evaluation_spans: int = 0
    events: int = 0
    log_records: int = 0
    metrics: set[str] = field(default_factory=set)
    #: exports a destination refused or could not take (a backend down, a wrong endpoint)
    failed: Counter[str] = field(default_factory=Counter)


class _SpanTee(SpanExporter):
    def __init__(self, exporters: Sequence[SpanExporter], seen: Exported) -> None:
        self._exporters = list(exporters)
        self._seen = seen

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            self._seen.spans += 1
            attrs = span.attributes or {}
            if any(k.startswith(semconv.TOOLSCORE_PREFIX) and k.endswith(".score") for k in attrs):
                self._seen.scored_agent_spans += 1
            if attrs.get(semconv.OI_SPAN_KIND) == semconv.OI_KIND_EVALUATOR:
                self._seen.evaluation_spans += 1
        results = [exporter.export(spans) for exporter in self._exporters]
        ok = all(r is SpanExportResult.SUCCESS for r in results)
        if not ok:
            self._seen.failed["spans"] += 1
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        for exporter in self._exporters:
            exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(exporter.force_flush(timeout_millis) for exporter in self._exporters)


class _LogTee(LogExporterWrapper):
    def __init__(self, inner: Any, seen: Exported) -> None:
        super().__init__(inner)
        self._seen = seen

    def export(self, batch: Sequence[Any]) -> Any:
        for item in batch:
            record = getattr(item, "log_record", item)
            self._seen.log_records += 1
            if getattr(record, "event_name", None) == semconv.GEN_AI_EVALUATION_RESULT:
                self._seen.events += 1
        result = super().export(batch)
        if getattr(result, "name", "SUCCESS") != "SUCCESS":
            self._seen.failed["logs"] += 1
        return result


class _MetricTee(MetricExporterWrapper):
    def __init__(self, inner: MetricExporter, seen: Exported) -> None:
        super().__init__(inner)
        self._seen = seen

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        for rm in metrics_data.resource_metrics:
            for sm in rm.scope_metrics:
                self._seen.metrics.update(m.name for m in sm.metrics)
        result = super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        if result is not MetricExportResult.SUCCESS:
            self._seen.failed["metrics"] += 1
        return result


# --- scores as the processor computed them ----------------------------------------------------


class _Recording(Scorer):
    """Delegates to a scorer and keeps what it returned, for the summary table."""

    def __init__(self, inner: Scorer, sink: Callable[[Trajectory, Score], None]) -> None:
        self.name = inner.name  # type: ignore[misc]
        self.kind = inner.kind  # type: ignore[misc]
        self._inner = inner
        self._sink = sink

    def _score(self, trajectory: Trajectory) -> Score:
        score = self._inner.score(trajectory)
        self._sink(trajectory, score)
        return score


class _Runs:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_input: dict[str, tuple[Trajectory, list[Score]]] = {}

    def add(self, trajectory: Trajectory, score: Score) -> None:
        with self._lock:
            entry = self.by_input.setdefault(trajectory.input or "", (trajectory, []))
            entry[1].append(score)


# --- model clients -----------------------------------------------------------------------------


def _no_proxy_for_loopback() -> None:
    """The scripted model is on 127.0.0.1: never send it through a proxy from the environment."""
    for var in ("NO_PROXY", "no_proxy"):
        have = [h for h in os.environ.get(var, "").split(",") if h]
        os.environ[var] = ",".join(have + [h for h in _LOOPBACK if h not in have])


def _semconv_messages(messages: list[dict]) -> list[dict]:
    """Chat Completions messages in the GenAI conventions' parts form."""
    out = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        if m["role"] == "tool":
            parts.append({"type": "tool_call_response", "id": m.get("tool_call_id"), "response": m.get("content")})
        elif m.get("content"):
            parts.append({"type": "text", "content": m["content"]})
        for call in m.get("tool_calls") or []:
            try:
                arguments: Any = json.loads(call["function"].get("arguments") or "{}")
            except ValueError:
                arguments = call["function"].get("arguments")
            parts.append({"type": "tool_call", "id": call.get("id"), "name": call["function"]["name"],
                          "arguments": arguments})
        out.append({"role": m["role"], "parts": parts})
    return out


def builtin_complete(base_url: str, tracer: Any, model: str) -> Callable[[list[dict], list[dict]], dict]:
    """A stdlib Chat Completions client that traces each call as a GenAI ``chat`` span."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def complete(messages: list[dict], tools: list[dict]) -> dict:
        attrs = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT,
            semconv.GEN_AI_PROVIDER_NAME: "openai",
            semconv.GEN_AI_REQUEST_MODEL: model,
            semconv.GEN_AI_INPUT_MESSAGES: json.dumps(_semconv_messages(messages), ensure_ascii=False),
        }
        with tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attrs) as span:
            body = json.dumps({"model": model, "messages": messages, "tools": tools}).encode()
            request = urllib.request.Request(
                base_url.rstrip("/") + "/chat/completions", data=body,
                headers={"Content-Type": "application/json", "Authorization": "Bearer sk-local"},
            )
            with opener.open(request, timeout=30) as response:
                reply = json.load(response)
            choice = reply["choices"][0]
            message = choice["message"]
            output = _semconv_messages([message])[0]
            output["finish_reason"] = choice.get("finish_reason")
            span.set_attributes({
                semconv.GEN_AI_RESPONSE_MODEL: reply.get("model", model),
                "gen_ai.response.id": reply.get("id", ""),
                semconv.GEN_AI_RESPONSE_FINISH_REASONS: [choice.get("finish_reason") or ""],
                "gen_ai.usage.input_tokens": (reply.get("usage") or {}).get("prompt_tokens", 0),
                "gen_ai.usage.output_tokens": (reply.get("usage") or {}).get("completion_tokens", 0),
                semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps([output], ensure_ascii=False),
            })
        return {k: v for k, v in message.items() if v is not None}

    return complete


@dataclass
class _Client:
    description: str
    complete: Callable[[list[dict], list[dict]], dict]
    convention: str
    close: Callable[[], None] = lambda: None


def _version(dist: str) -> str:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001
        return "?"


def _available(*modules: str) -> bool:
    import importlib.util

    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):
        return False


def make_client(choice: str, base_url: str, examples: ModuleType, tracer_provider: TracerProvider,
                meter_provider: MeterProvider, logger_provider: LoggerProvider) -> _Client:
    if choice == "auto":
        choice = "openai-v2" if _available("openai", "opentelemetry.instrumentation.openai_v2") else "builtin"
    if choice == "openai-v2":
        if not _available("openai", "opentelemetry.instrumentation.openai_v2"):
            raise DemoError(f"openai-v2 needs the examples extra: {install_command('examples')}")
        # Latest GenAI conventions, with message content on the spans (what the scorers read).
        opt_in = [v for v in os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "").split(",") if v.strip()]
        if "gen_ai_latest_experimental" not in opt_in:
            os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = ",".join([*opt_in, "gen_ai_latest_experimental"])
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
        from openai import OpenAI
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider,
                                logger_provider=logger_provider)
        client = OpenAI(base_url=base_url, api_key="sk-local", max_retries=0)
        return _Client(
            f"openai {_version('openai')} + opentelemetry-instrumentation-openai-v2 "
            f"{_version('opentelemetry-instrumentation-openai-v2')} (GenAI latest conventions)",
            examples.openai_complete(client), "genai", instrumentor.uninstrument,
        )
    if choice == "openinference":
        if not _available("openai", "openinference.instrumentation.openai"):
            raise DemoError(f"openinference needs the examples extra: {install_command('examples')}")
        from openai import OpenAI
        from openinference.instrumentation.openai import (
            OpenAIInstrumentor as OIInstrumentor,
        )

        oi = OIInstrumentor()
        oi.instrument(tracer_provider=tracer_provider)
        client = OpenAI(base_url=base_url, api_key="sk-local", max_retries=0)
        return _Client(
            f"openai {_version('openai')} + openinference-instrumentation-openai "
            f"{_version('openinference-instrumentation-openai')}",
            examples.openai_complete(client), "openinference", oi.uninstrument,
        )
    if choice == "builtin":
        tracer = tracer_provider.get_tracer("otel_toolscore.demo.client")
        return _Client(
            f"built-in stdlib client emitting GenAI chat spans ({install_command('examples')} for the "
            "real openai client and instrumentation)",
            builtin_complete(base_url, tracer, examples.MODEL), "genai",
        )
    raise DemoError(f"unknown instrumentation {choice!r} (one of {', '.join(INSTRUMENTATIONS)})")


# --- the demo ----------------------------------------------------------------------------------


@dataclass
class DemoOptions:
    out: Path = Path("toolscore-demo")
    otlp_endpoint: str | None = None
    phoenix: bool = False
    instrumentation: str = "auto"
    keep_running: bool | None = None


def _otlp_exporters(endpoint: str) -> tuple[SpanExporter, Any, MetricExporter]:
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    base = endpoint.rstrip("/")
    return (OTLPSpanExporter(endpoint=f"{base}/v1/traces"), OTLPLogExporter(endpoint=f"{base}/v1/logs"),
            OTLPMetricExporter(endpoint=f"{base}/v1/metrics"))


def run_demo(options: DemoOptions, console: Console | None = None) -> int:
    """Run the demo; 0 when every run was scored, 1 otherwise (2 for a missing component)."""
    console = console or Console()
    try:
        return _run(options, console)
    except (DemoError, PhoenixError) as exc:
        # soft_wrap: one line in a CI log, not cut at the console's width
        Console(stderr=True).print(f"[red]otel-toolscore demo:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2


def _run(options: DemoOptions, console: Console) -> int:
    started = time.monotonic()
    examples = load_examples()
    _no_proxy_for_loopback()
    phoenix: Phoenix | None = None
    if options.phoenix:
        command = find_phoenix()
        if command is None:
            raise DemoError(f"--phoenix: Phoenix is not installed. {PHOENIX_INSTALL_HINT}")
        console.print(f"Starting Phoenix ({command}) …", highlight=False)
        phoenix = Phoenix(command, (options.out / "phoenix").resolve()).start()
    try:
        code = _run_agents(options, console, examples, phoenix, started)
    except BaseException:
        if phoenix is not None:  # never leave a Phoenix behind
            phoenix.stop()
        raise
    if phoenix is not None:
        _keep_phoenix(console, phoenix, options.keep_running)
    return code


def _run_agents(options: DemoOptions, console: Console, examples: ModuleType, phoenix: Phoenix | None,
                started: float) -> int:
    seen = Exported()
    files: list[Path] = []
    if options.otlp_endpoint:
        span_out, log_out, metric_out = _otlp_exporters(options.otlp_endpoint)
        span_exporters: list[SpanExporter] = [span_out]
    else:
        files = [options.out / "spans.jsonl", options.out / "logs.jsonl", options.out / "metrics.jsonl"]
        span_exporters = [JsonLinesSpanExporter(files[0])]
        log_out, metric_out = JsonLinesLogExporter(files[1]), JsonLinesMetricExporter(files[2])
    if phoenix is not None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )

        span_exporters.append(OTLPSpanExporter(endpoint=phoenix.traces_endpoint))

    resource = Resource.create({"service.name": SERVICE_NAME, "openinference.project.name": PHOENIX_PROJECT})
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    meter_provider = MeterProvider(
        resource=resource, shutdown_on_exit=False,
        metric_readers=[PeriodicExportingMetricReader(_MetricTee(metric_out, seen), export_interval_millis=math.inf)],
    )
    logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(_LogTee(log_out, seen)))

    runs = _Runs()
    # the app's own tool schemas: stock instrumentation does not record the tools it offers
    scorers: list[Scorer | str] = [_Recording(s, runs.add) for s in build_scorers(None, schemas=examples.TOOL_SCHEMAS)]
    # Phoenix shows a score as an evaluation when it is an EVALUATOR span of its own: one per
    # score there (docs/backends.md); otherwise the defaults.
    outputs: dict[str, Any] = {"evaluation_spans": True} if phoenix is not None else {}
    processor = install(tracer_provider, scorers=scorers, span_exporter=_SpanTee(span_exporters, seen),
                        meter_provider=meter_provider, logger_provider=logger_provider, set_global=False,
                        **outputs)

    server, base_url = examples.start_model_server()
    client: _Client | None = None
    failures: list[str] = []
    try:
        client = make_client(options.instrumentation, base_url, examples, tracer_provider, meter_provider,
                             logger_provider)
        tracer = tracer_provider.get_tracer("examples.agent")
        for scenario in examples.SCENARIOS:
            try:
                examples.run_agent(scenario["user_question"], client.complete, tracer=tracer,
                                   convention=client.convention, expected_tool=scenario["expected_tool"])
            except Exception as exc:  # noqa: BLE001 - show it, keep going
                failures.append(f"{scenario['name']}: {type(exc).__name__}: {exc}")
    finally:
        if client is not None:
            client.close()
        server.stop()
        if processor is not None:  # None: install() found the SDK disabled (OTEL_SDK_DISABLED)
            processor.force_flush(10_000)
        tracer_provider.shutdown()
        logger_provider.shutdown()
        meter_provider.force_flush()  # the reader has no period: this is its one export
        meter_provider.shutdown()

    console.print(
        f"\n[bold]otel-toolscore demo[/]: {len(examples.SCENARIOS)} runs of agent "
        f"'{examples.AGENT_NAME}', model = scripted server on {base_url}\n"
        f"instrumentation: {escape(client.description)}\n", highlight=False,
        soft_wrap=True,  # the install command it may name stays whole, copyable
    )
    scored = _summary(console, examples.SCENARIOS, runs)
    for failure in failures:
        console.print(f"[red]run failed[/] {escape(failure)}", highlight=False)
    _where(console, options, files, seen, phoenix)
    if seen.failed:
        what = ", ".join(f"{n} {signal}" for signal, n in sorted(seen.failed.items()))
        console.print(f"[red]export failed[/] ({what} export calls): is the endpoint up?", highlight=False)
    console.print(f"\nDone in {time.monotonic() - started:.1f}s.", highlight=False)
    return 0 if scored == len(examples.SCENARIOS) and not failures and not seen.failed else 1


def _summary(console: Console, scenarios: list[dict], runs: _Runs) -> int:
    """Runs × scores (outputs/report.py's cells), then what each run was meant to show and its issues."""
    names: list[str] = []
    for _, scores in runs.by_input.values():
        for s in scores:
            if s.name not in names:
                names.append(s.name)
    table = Table(pad_edge=False)
    table.add_column("run")
    table.add_column("tools called", max_width=24, overflow="fold")
    for name in names:
        table.add_column(column(name), justify="right")
    notes: list[str] = []
    scored = 0
    for scenario in scenarios:
        trajectory, scores = runs.by_input.get(scenario["user_question"], (None, []))
        if trajectory is not None:
            scored += 1
        tools = ", ".join(c.name or "?" for c in trajectory.tool_calls) if trajectory else "(not scored)"
        by_name = {s.name: s for s in scores}
        table.add_row(scenario["name"], tools or "—", *(_cell(by_name.get(n), None) for n in names))
        found = [f"{column(s.name)}: {text}" for s in scores for text in _issues(s)]
        notes.append(f"[bold]{scenario['name']}[/] [dim]({escape(scenario['what'])})[/]")
        # explanations hold lists like "[search_web]", which are not markup
        notes.extend(f"  [yellow]•[/] {escape(line)}" for line in found)
        if not found:
            notes.append("  [green]•[/] no issues")
    console.print(table)
    console.print("[bold]Issues found[/]")
    for line in notes:
        console.print("  " + line, highlight=False)
    return scored


def _where(console: Console, options: DemoOptions, files: list[Path], seen: Exported,
           phoenix: Phoenix | None) -> None:
    console.print("\n[bold]Exported[/]", highlight=False)
    metrics = ", ".join(sorted(seen.metrics)) or "none"
    if files:
        spans, logs, metrics_file = files
        console.print(
            f"  {spans}  {seen.spans} spans: {seen.scored_agent_spans} agent spans with toolscore.* "
            f"attributes, {seen.evaluation_spans} evaluation spans\n"
            f"  {logs}  {seen.events} gen_ai.evaluation.result events\n"
            f"  {metrics_file}  {metrics}\n"
            f"  (OTLP/JSON, one export request per line, as the Collector's file exporter writes)",
            highlight=False,
        )
    else:
        console.print(
            f"  to {options.otlp_endpoint} over OTLP/HTTP: {seen.spans} spans ({seen.scored_agent_spans} "
            f"scored agent spans, {seen.evaluation_spans} evaluation spans), {seen.events} evaluation "
            f"events, metrics {metrics}", highlight=False,
        )
    if phoenix is not None:
        console.print(f"  traces also in Phoenix: {phoenix.url}/projects (project '{PHOENIX_PROJECT}')",
                      highlight=False)
    hints = []
    if files:
        hints.append(f"otel-toolscore score {files[0]}")
    if not options.otlp_endpoint:
        hints.append("--otlp-endpoint http://127.0.0.1:4318 (a Collector or any OTLP backend)")
    if not options.phoenix:
        hints.append("--phoenix (a local Arize Phoenix)")
    console.print("Next: " + " · ".join(hints), highlight=False)


def _keep_phoenix(console: Console, phoenix: Phoenix, keep_running: bool | None) -> None:
    if keep_running is None:
        keep_running = sys.stdin.isatty() and sys.stdout.isatty()
    if not keep_running:
        console.print(f"Phoenix stopped (its data stays in {phoenix.working_dir}); --keep-running keeps it up.",
                      highlight=False)
        phoenix.stop()
        return
    console.print(f"\nPhoenix is running at [bold]{phoenix.url}[/]: press Ctrl-C to stop it.", highlight=False)
    try:
        while phoenix.process is not None and phoenix.process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        phoenix.stop()

