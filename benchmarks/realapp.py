"""Real-app cost (issue 32): what scoring costs the CPU of an app built on a real agent framework.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python -m benchmarks realapp [--apps pydantic_ai,langgraph] [--runs 300] [--rounds 3]
                                           [--concurrency 1,8] [--configs traced,thread,...]
                                           [--hooks] [--profile DIR] [--paired B] [--instructions]

The apps are real framework agents: Pydantic AI (its own OpenTelemetry instrumentation, GenAI
conventions) and a LangGraph graph (model node + ``ToolNode``) traced by OpenInference's
LangChain instrumentation, with the demo's four tools and five scenarios
(``otel_toolscore/demo_agent/agent_common.py``), cycled. The model is the scripted
OpenAI-compatible server (``otel_toolscore/demo_agent/scripted_model_server.py``) in a process of
its own, fresh per configuration; the app exports its spans, logs and metrics with the SDK's batch
processors and OTLP/HTTP exporters to a sink in this (the driver's) process that answers 200, so
the app pays the real encoding and sending. Neither the model's nor the sink's CPU is counted.

Configurations, each in a fresh app process: ``traced`` (the baseline: tracing only, no
otel-toolscore) and ``install()`` in front of the same set-up with ``scoring`` thread or process,
every run sampled or ``default_sample_rate=0.1`` (``thread-10%``, ``process-10%``); all code
scorers (the defaults), default outputs, expected tools from rules and tool schemas given, as
the demo does. A suffix changes the outputs: ``+no-eval-spans`` (``evaluation_spans=False``),
``+attributes-metrics`` (no evaluation spans and no events either), ``+events-unattached`` (events
only for scores the agent span does not carry, and the tool calls'), e.g. ``thread+no-eval-spans``.
Each process runs warm-up runs, flushes, then ``--runs`` measured runs
(sequentially, or ``--concurrency`` N at a time on one asyncio loop) and flushes again (so the
window holds all of the measured runs' scoring and exporting). Measured over that window:

* app CPU: ``time.process_time()`` of the app process (all its threads: the app, the SDK's
  export threads, thread mode's scoring worker);
* child CPU: the CPU time of the app's child processes (process mode's scoring child), from
  ``/proc`` (Linux);
* CPU per thread (``threads_cpu_ms``, by thread name, ``/proc/.../schedstat``): which of the app's
  threads pays;
* spans per run, and runs whose agent span came out scored.

``--hooks`` also times the span hooks on the app's own threads call by call
(``time.thread_time_ns``; ToolScoreSpanProcessor's where installed, else the SDK
BatchSpanProcessor's), which slows the app a little: read its app CPU figures apart.

Rounds are interleaved (every configuration once per round, the order rotated), so a busy
machine moves them alike; per configuration the figures are the median over rounds and the
spread (min-max); the ratio and the extra are paired with the same round's ``traced``.

``--paired B`` measures inside one app process per configuration and round: blocks of B runs,
alternately traced (the provider's processors as they were before install()) and scored (ABBA
order), each block's CPU taken with everything it caused flushed inside it; the ratio and the
extra are per pair of blocks, their median and spread over all pairs of all rounds, with each
round's median. One process's CPU per run moves by 5-10 % from one process to the next on a
shared machine (memory layout, hash seeds, neighbours), which a fresh process per configuration
puts into every ratio; pairs in one process leave only the block-to-block noise, which the median
of many pairs averages out. (The export threads' work lands in the block that flushes it, on the
main thread; ``gc_ms`` is the CPU each block spent in the collector, by generation.)

``--instructions`` counts instead the instructions the app process executes (valgrind's callgrind,
all of its threads; not the scoring child, which valgrind does not follow into its exec): per
configuration a process of ``--runs`` runs and one of 5, otherwise the same, and the difference
per run; the ratio and the extra are against the same round's ``traced``. A count does not move
with the machine's load or the neighbours' (the noise that the CPU figures fight), and a rerun
gives it again within a fraction of a percent. It is not CPU time: a cache miss costs time and no
instruction. Under callgrind the app runs about 50 times slower, so whatever runs by the clock is
stretched by as much (``TIME_SCALE``: the SDK's export schedules, the processor's hold timeout,
gathering and other waits, the switch interval), else it would do more per run than at full speed
(a log export every run, one run per gathered batch); and automatic full collections are held
off inside the window (one at its end in every process: one more or less would move a count by
millions a run). Needs ``valgrind`` (Debian's package).

``--profile DIR`` samples the measured window of the app process with py-spy (the bench extra;
1 kHz, all threads) and writes per configuration the folded stacks and a summary of the samples in
otel-toolscore's frames by thread and function, in µs per run. py-spy does not pause the app
(``--nonblocking``), and so counts a thread blocked in a C wait (a queue's ``get``, a pipe's
``read``) as busy: take each thread's CPU from ``threads_cpu_ms``, and from the profile only where
within a thread it goes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks.common import child_env, emit_json, machine

APPS = ("pydantic_ai", "langgraph")
CONFIGS = ("traced", "thread", "process", "thread-10%", "process-10%")
#: outputs other than the defaults, as a configuration's suffix (``thread+no-eval-spans``): what a
#: lighter default would save
OUTPUTS: dict[str, dict[str, Any]] = {
    "no-eval-spans": {"evaluation_spans": False},
    "attributes-metrics": {"evaluation_spans": False, "events": False},
    "events-unattached": {"events": "unattached"},
}
WARMUP = 25


# --- the app process ----------------------------------------------------------------------------


def _task_cpu_ns(pid: int | str, tid: int | str) -> int:
    """CPU time of one thread in ns (``schedstat``: the scheduler's own count, not 10 ms ticks)."""
    with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def _descendants_cpu_s() -> float:
    """CPU seconds of this process's live descendants (Linux /proc), py-spy's left out."""
    total = 0
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            for kid in kids:
                try:
                    with open(f"/proc/{kid}/comm") as f:
                        if f.read().strip() == "py-spy":
                            continue
                    total += sum(_task_cpu_ns(kid, t) for t in os.listdir(f"/proc/{kid}/task"))
                except OSError:
                    continue
                todo.append(kid)
    return total / 1e9


def _threads_cpu_ns() -> dict[str, int]:
    """CPU ns of this process's live Python threads, summed by thread name."""
    out: dict[str, int] = defaultdict(int)
    for t in threading.enumerate():
        try:
            out[t.name] += _task_cpu_ns("self", t.native_id or 0)
        except OSError:
            continue
    return out


class _Hooks:
    """CPU time of the span hooks on the app's own threads (``--hooks``): the class methods wrapped
    in ``time.thread_time_ns``; ToolScoreSpanProcessor's where it is installed (the SDK
    BatchSpanProcessor's hooks run inside them for the spans it forwards at once), else the
    BatchSpanProcessor's (``traced``): the difference is what the processor adds per span. What the
    clock adds to each timed call (timing an empty function) is taken off."""

    def __init__(self, scored: bool) -> None:
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from otel_toolscore.runtime.processor import ToolScoreSpanProcessor

        self.ns: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        self.on = False
        cls = ToolScoreSpanProcessor if scored else BatchSpanProcessor
        for name in ("on_start", "_on_ending", "on_end"):
            if hasattr(cls, name):
                setattr(cls, name, self._wrap(f"{name}", getattr(cls, name)))
        self.bias_ns = self._bias()

    @staticmethod
    def _app_thread() -> bool:
        name = threading.current_thread().name
        return not (name.startswith("otel-toolscore") or name.startswith("Otel"))

    def _wrap(self, key: str, fn: Any) -> Any:
        clock, ns, calls, app = time.thread_time_ns, self.ns, self.calls, self._app_thread

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.on or not app():
                return fn(*args, **kwargs)
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                ns[key] += clock() - t0
                calls[key] += 1
        return timed

    def _bias(self) -> float:
        """ns a timed call of an empty function records (the clock's own cost)."""
        probe = self._wrap("probe", lambda: None)
        self.on = True
        for _ in range(20_000):
            probe()
        self.on = False
        self.calls.pop("probe", None)
        return self.ns.pop("probe", 0) / 20_000

    def per_span_us(self) -> dict[str, Any]:
        """µs per call of each hook on the app's threads, the clock's bias taken off."""
        out: dict[str, Any] = {k: round((v / self.calls[k] - self.bias_ns) / 1e3, 2) for k, v in self.ns.items()}
        out["calls"] = dict(self.calls)
        out["bias_us"] = round(self.bias_ns / 1e3, 2)
        return out


def _telemetry(endpoint: str) -> tuple[Any, Any, Any, Any]:
    """(tracer provider, meter provider, logger provider, counting exporter): the app's own set-up,
    OTLP/HTTP to ``endpoint`` through the SDK's batch processors, set global."""
    from opentelemetry import _logs, metrics, trace
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from otel_toolscore.semconv import GEN_AI_EVALUATION_RESULT

    class CountingLogs(LogExporter):
        """The OTLP log exporter, counting the evaluation events it sends."""

        def __init__(self) -> None:
            self.inner = OTLPLogExporter(endpoint=f"{endpoint}/v1/logs")
            self.events = 0

        def export(self, batch: Sequence[Any]) -> Any:
            self.events += sum(1 for r in batch if getattr(getattr(r, "log_record", r), "event_name", None)
                               == GEN_AI_EVALUATION_RESULT)
            return self.inner.export(batch)

        def shutdown(self) -> None:
            self.inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    class Counting(SpanExporter):
        """The OTLP exporter, counting the spans and the scored agent spans it sends (and, ``logs``,
        the log exporter counting the evaluation events)."""

        def __init__(self) -> None:
            self.inner = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces")
            self.spans = 0
            self.scored = 0
            self.logs = CountingLogs()

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            self.spans += len(spans)
            self.scored += sum(1 for s in spans if s.attributes and "toolscore.scored" in s.attributes)
            return self.inner.export(spans)

        def shutdown(self) -> None:
            self.inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    resource = Resource.create({"service.name": "toolscore-realapp"})
    counting = Counting()
    tp = TracerProvider(resource=resource)
    tp.add_span_processor(BatchSpanProcessor(counting))
    mp = MeterProvider(resource=resource, metric_readers=[
        PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics"))])
    lp = LoggerProvider(resource=resource)
    lp.add_log_record_processor(BatchLogRecordProcessor(counting.logs))
    trace.set_tracer_provider(tp)
    metrics.set_meter_provider(mp)
    _logs.set_logger_provider(lp)
    return tp, mp, lp, counting


def _reported(tool: Any) -> Any:
    """A tool whose failure goes back to the model as an error result (as in examples/)."""
    import functools

    @functools.wraps(tool)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return tool(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the model is told, as a real agent would
            return {"error": f"{type(exc).__name__}: {exc}"}
    return wrapper


def _pydantic_ai_agent(base_url: str) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from otel_toolscore.demo_agent.agent_common import AGENT_NAME, MODEL, SYSTEM_PROMPT, TOOLS

    Agent.instrument_all()
    model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key="sk-local"))
    agent = Agent(model, name=AGENT_NAME, system_prompt=SYSTEM_PROMPT,
                  tools=[_reported(tool) for tool in TOOLS.values()])

    async def run(question: str) -> Any:
        return (await agent.run(question)).output
    return run


def _langgraph_agent(base_url: str, tracer_provider: Any) -> Any:
    from langchain_core.messages import SystemMessage
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from openinference.instrumentation.langchain import LangChainInstrumentor

    from otel_toolscore.demo_agent.agent_common import AGENT_NAME, MODEL, SYSTEM_PROMPT, TOOLS

    LangChainInstrumentor().instrument(tracer_provider=tracer_provider)
    tools = [StructuredTool.from_function(_reported(fn), name=name) for name, fn in TOOLS.items()]
    llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key="sk-local").bind_tools(tools)  # type: ignore[arg-type]

    async def model_node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke([SystemMessage(SYSTEM_PROMPT), *state["messages"]])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", model_node)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)  # to "tools", or to the end
    graph.add_edge("tools", "agent")
    app = graph.compile(name=AGENT_NAME)

    async def run(question: str) -> Any:
        return (await app.ainvoke({"messages": [("user", question)]}))["messages"][-1].content
    return run


def _install(config: str, tracer_provider: Any, mp: Any, lp: Any) -> None:
    if config == "traced":
        return
    import otel_toolscore
    from otel_toolscore.demo_agent.agent_common import SCENARIOS, TOOL_SCHEMAS

    rules = [{"input_pattern": "(?i)" + s["user_question"].split()[-1].rstrip("?."),
              "expected_tool": s["expected_tool"]} for s in SCENARIOS]
    config, *outputs = config.split("+")
    mode, _, rate = config.partition("-")
    settings: dict[str, Any] = {}
    for name in outputs:
        settings.update(OUTPUTS[name])
    otel_toolscore.install(tracer_provider, meter_provider=mp, logger_provider=lp, scoring=mode,
                           rules=rules, tool_schemas=TOOL_SCHEMAS,
                           default_sample_rate=float(rate.rstrip("%")) / 100 if rate else 1.0, **settings)


def _profiler(out: Path) -> subprocess.Popen[bytes]:
    cmd = ["py-spy", "record", "--pid", str(os.getpid()), "--rate", "1000", "--threads", "--nonblocking",
           "--full-filenames", "--format", "raw", "--output", str(out)]
    exe = Path(sys.executable).with_name("py-spy")
    if exe.exists():
        cmd[0] = str(exe)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # py-spy attaches
    return proc


def app_main(args: argparse.Namespace) -> None:
    """One configuration in this (fresh) process; prints its result line."""
    from otel_toolscore.demo_agent.agent_common import SCENARIOS

    _stretch_clocks()
    hooks = _Hooks(scored=args.config != "traced") if args.hooks else None
    tp, mp, lp, counting = _telemetry(args.sink)
    run = _pydantic_ai_agent(args.model) if args.app == "pydantic_ai" else _langgraph_agent(args.model, tp)
    before = _active_processors(tp)
    _install(args.config, tp, mp, lp)
    questions = [s["user_question"] for s in SCENARIOS]

    async def runs(n: int, offset: int) -> None:
        if args.concurrency <= 1:
            for i in range(n):
                await run(questions[(offset + i) % len(questions)])
            return
        gate = asyncio.Semaphore(args.concurrency)

        async def one(i: int) -> None:
            async with gate:
                await run(questions[(offset + i) % len(questions)])
        await asyncio.gather(*(one(i) for i in range(n)))

    def flush() -> None:
        tp.force_flush()
        lp.force_flush()
        mp.force_flush()

    loop = asyncio.new_event_loop()
    if args.paired:
        _paired(args, loop, runs, tp, lp, before, hooks)
        return
    loop.run_until_complete(runs(args.warmup, 0))
    flush()
    profiler = _profiler(Path(args.profile)) if args.profile else None
    spans0, scored0, events0 = counting.spans, counting.scored, counting.logs.events
    stretched = _stretched_scale() > 0
    if stretched:
        _hold_full_collections()
    gc0 = [g["collections"] for g in gc.get_stats()]
    threads0 = _threads_cpu_ns()
    if hooks is not None:
        hooks.on = True
    child0, wall0, cpu0 = _descendants_cpu_s(), time.perf_counter(), time.process_time()
    loop.run_until_complete(runs(args.runs, args.warmup))
    flush()
    if stretched:
        gc.collect()  # the one full collection of the window, in every process alike
    cpu1, wall1, child1 = time.process_time(), time.perf_counter(), _descendants_cpu_s()
    threads1 = _threads_cpu_ns()
    if hooks is not None:
        hooks.on = False
    if profiler is not None:
        profiler.send_signal(signal.SIGINT)
        profiler.wait(timeout=60)
    result = {
        "app_cpu_ms": (cpu1 - cpu0) * 1e3 / args.runs,
        "child_cpu_ms": (child1 - child0) * 1e3 / args.runs,
        "wall_ms": (wall1 - wall0) * 1e3 / args.runs,
        "spans_per_run": (counting.spans - spans0) / args.runs,
        "scored_runs": counting.scored - scored0,
        # gen_ai.evaluation.result events exported (each costs the app's SDK ~0.3 M instructions)
        "events_per_run": (counting.logs.events - events0) / args.runs,
        "warmup_scored_runs": scored0,
        # collections by generation in the window: a full one walks every live object (~0.1 s in
        # the LangGraph app), so one more or less moves an instruction count by millions a run
        "gc_collections": [g["collections"] - c for g, c in zip(gc.get_stats(), gc0, strict=True)],
        "runs": args.runs,
        # by thread name, of the threads alive at both ends of the window
        "threads_cpu_ms": {name: round((ns - threads0.get(name, 0)) / 1e6 / args.runs, 3)
                           for name, ns in sorted(threads1.items()) if name in threads0},
    }
    if hooks is not None:
        result["hooks_us_per_call"] = hooks.per_span_us()
    loop.close()
    tp.shutdown()
    emit_json(result)


def _active_processors(tp: Any) -> Any:
    return tp._active_span_processor._span_processors


def _paired(args: argparse.Namespace, loop: Any, runs: Any, tp: Any, lp: Any, traced: Any, hooks: Any) -> None:
    """``--paired``: one process, blocks of runs alternating traced / scored (ABBA), each block's
    CPU measured with everything it caused flushed inside it. Scoring is switched by putting
    the provider's processors back as they were before install() (the app, its tracer provider
    and its exporters stay the same objects), so the pair differs by the processor only and the
    process-to-process spread (±5-10 % on a shared machine) drops out of the ratio."""

    scored = _active_processors(tp)
    modes = {"traced": traced, "scored": scored}
    gc_ns = [0, 0, 0]  # CPU ns in collections, by generation (whichever thread ran them)
    gc_n = [0, 0, 0]
    gc_t0 = [0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_t0[0] = time.thread_time_ns()
        else:
            gc_ns[info["generation"]] += time.thread_time_ns() - gc_t0[0]
            gc_n[info["generation"]] += 1
    gc.callbacks.append(on_gc)
    processors = tp._active_span_processor

    def use(mode: str) -> None:
        processors._span_processors = modes[mode]

    def block(mode: str, offset: int) -> dict[str, Any]:
        use(mode)
        gc_ns[:] = [0, 0, 0]
        gc_n[:] = [0, 0, 0]
        threads0 = _threads_cpu_ns()
        child0, cpu0 = _descendants_cpu_s(), time.process_time()
        loop.run_until_complete(runs(args.paired, offset))
        tp.force_flush()  # scored: waits for scoring, then flushes the exporters behind it
        lp.force_flush()
        cpu1, child1 = time.process_time(), _descendants_cpu_s()
        threads1 = _threads_cpu_ns()
        return {"app_cpu_ms": (cpu1 - cpu0) * 1e3 / args.paired, "child_cpu_ms": (child1 - child0) * 1e3 / args.paired,
                "threads_cpu_ms": {name: round((ns - threads0.get(name, 0)) / 1e6 / args.paired, 3)
                                   for name, ns in sorted(threads1.items())},
                "gc_ms": [round(ns / 1e6 / args.paired, 3) for ns in gc_ns], "gc_collections": list(gc_n)}

    for mode in ("scored", "traced"):
        use(mode)
        loop.run_until_complete(runs(args.warmup, 0))
        tp.force_flush()
        lp.force_flush()
    pairs = []
    offset = args.warmup
    for i in range(max(1, args.runs // args.paired // 2)):
        order = ("traced", "scored") if i % 2 == 0 else ("scored", "traced")
        got = {}
        for mode in order:
            got[mode] = block(mode, offset)
            offset += args.paired
        pairs.append(got)
    use("scored")
    loop.close()
    tp.shutdown()
    emit_json({"pairs": pairs, "block_runs": args.paired})


def paired_summary(rounds: dict[tuple[str, int, str], list[dict[str, Any]]]) -> dict[str, Any]:
    """Per (app, concurrency, config): the ratio and extra of every pair of blocks, over all rounds
    (median, min-max, and each round's median), and per thread the extra."""
    out: dict[str, Any] = {}
    for (app, conc, config), results in rounds.items():
        ratios, extras, per_round, traced_ms, child = [], [], [], [], []
        threads: dict[str, list[float]] = defaultdict(list)
        for res in results:
            mine = []
            for pair in res["pairs"]:
                t, s = pair["traced"], pair["scored"]
                mine.append(s["app_cpu_ms"] / t["app_cpu_ms"])
                extras.append(s["app_cpu_ms"] - t["app_cpu_ms"])
                traced_ms.append(t["app_cpu_ms"])
                child.append(s["child_cpu_ms"])
                for name in set(s["threads_cpu_ms"]) | set(t["threads_cpu_ms"]):
                    threads[name].append(s["threads_cpu_ms"].get(name, 0.0) - t["threads_cpu_ms"].get(name, 0.0))
            ratios += mine
            per_round.append(round(statistics.median(mine), 4))
        out[f"{app} c={conc} {config}"] = {
            "ratio": _spread(ratios), "extra_ms": _spread(extras), "traced_ms": _spread(traced_ms),
            "child_cpu_ms": _spread(child), "round_medians": per_round, "pairs": len(ratios),
            "threads_extra_ms": {k: round(statistics.median(v), 3) for k, v in sorted(threads.items())
                                 if abs(statistics.median(v)) >= 0.005},
        }
    return out


def paired_table(summary: dict[str, Any]) -> str:
    def f(d: dict[str, float], fmt: str = "{:.2f}") -> str:
        return f"{fmt.format(d['median'])} ({fmt.format(d['min'])}–{fmt.format(d['max'])})"

    lines = ["| app, concurrency, configuration | traced ms/run | × traced (pairs) | round medians | extra ms/run "
             "| child ms/run | extra by thread, ms/run |", "|---|---|---|---|---|---|---|"]
    for name, row in summary.items():
        threads = ", ".join(f"{k} {v:+.2f}" for k, v in row["threads_extra_ms"].items())
        lines.append(f"| {name} | {f(row['traced_ms'])} | {f(row['ratio'], '{:.3f}')} ({row['pairs']}) "
                     f"| {' '.join(f'{r:.3f}' for r in row['round_medians'])} | {f(row['extra_ms'])} "
                     f"| {f(row['child_cpu_ms'])} | {threads} |")
    return "\n".join(lines)


# --- the driver -----------------------------------------------------------------------------------


class _Sink(BaseHTTPRequestHandler):
    """OTLP/HTTP receiver that accepts and drops everything (an empty protobuf answer is valid)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_model(script: Path) -> None:
    """The scripted model server in this process, until killed; prints its base URL."""
    from otel_toolscore.demo_agent.scripted_model_server import start_server

    server, base_url = start_server(json.loads(script.read_text()))
    # Its handler writes the headers and the body separately: with Nagle's algorithm and the
    # client's delayed ACK each reply waited ~40 ms, 100 ms of idle wall time per run.
    server.RequestHandlerClass.disable_nagle_algorithm = True  # type: ignore[attr-defined]
    print(base_url, flush=True)
    threading.Event().wait()


def _model_server(script: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.realapp", "--model-server", str(script)],
                            stdout=subprocess.PIPE, text=True, env=child_env())
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


#: ``--instructions``: the app process under callgrind (instructions executed, every thread of it;
#: not the scoring child, a program it execs, which valgrind does not follow)
_CALLGRIND = ("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--trace-children=no")
_COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")
#: how much slower the app runs under callgrind (about 50x here). What runs by the clock is
#: stretched by as much, so that it does as much per run as at full speed: the SDK's export
#: schedules (else a log export every run instead of every ~70), the processor's gathering (else
#: one run per batch instead of several) and its other waits, the interpreter's switch interval.
TIME_SCALE = 50.0
_TIME_SCALE_ENV = "TOOLSCORE_BENCH_TIME_SCALE"


def _stretched(scale: float) -> dict[str, str]:
    """The environment that stretches the SDK's and the processor's configurable clocks."""
    return {_TIME_SCALE_ENV: str(scale),
            "OTEL_BSP_SCHEDULE_DELAY": str(int(5_000 * scale)), "OTEL_BLRP_SCHEDULE_DELAY": str(int(1_000 * scale)),
            "OTEL_METRIC_EXPORT_INTERVAL": str(int(60_000 * scale)),
            "OTEL_TOOLSCORE_HOLD_TIMEOUT": str(2.0 * scale), "OTEL_TOOLSCORE_COMPLETION_GRACE": str(0.5 * scale),
            "OTEL_TOOLSCORE_DECISION_WAIT": str(2.0 * scale)}


def _stretched_scale() -> float:
    return float(os.environ.get(_TIME_SCALE_ENV, "0") or 0)


def _hold_full_collections() -> None:
    """Under ``--instructions``, from the measured window's start: no automatic full collection
    (one at the window's end instead, in every process). A full collection walks every live
    object (~0.1 s in the LangGraph app): whether one falls inside a 60-run window moved a count
    by ~1.9 M instructions a run, more than the differences measured. Their cost to the app, to
    which the processor's objects add (~9 % more objects to walk), is then not in the counts."""
    gc.collect()
    gen0, gen1, _ = gc.get_threshold()
    gc.set_threshold(gen0, gen1, 10**9)


def _stretch_clocks() -> None:
    """In the app process, under ``--instructions``: the processor's own waits (module constants,
    not settings) and the switch interval, stretched as ``_stretched`` does the rest."""
    scale = _stretched_scale()
    if scale <= 0:
        return
    from otel_toolscore.runtime import processor
    from otel_toolscore.runtime._processor import scoring, timer

    scoring.GATHER_S *= scale
    processor.GATHER_S = scoring.GATHER_S  # (imported by name)
    scoring._SEND_EVERY_S *= scale
    scoring._TALLY_FLUSH_S *= scale
    timer.HOLD_SLACK_S *= scale
    sys.setswitchinterval(sys.getswitchinterval() * scale)


def _one(app: str, config: str, concurrency: int, runs: int, warmup: int, sink: str, script: Path,
         profile: Path | None, hooks: bool = False, paired: int = 0, instructions: bool = False) -> dict[str, Any]:
    server, base_url = _model_server(script)
    env = child_env()
    if instructions:
        env["PYTHONHASHSEED"] = "0"  # the same dict and set layouts in every process
        env.update(_stretched(TIME_SCALE))
    try:
        cmd = [*(_CALLGRIND if instructions else ()),
               sys.executable, "-m", "benchmarks.realapp", "--app-process", "--app", app, "--config", config,
               "--concurrency", str(concurrency), "--runs", str(runs), "--warmup", str(warmup), "--sink", sink,
               "--model", base_url]
        if profile is not None:
            cmd += ["--profile", str(profile)]
        if hooks:
            cmd += ["--hooks"]
        if paired:
            cmd += ["--paired", str(paired)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    finally:
        server.terminate()
        server.wait()
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = dict(json.loads(line[7:]))
            if instructions:
                found = _COLLECTED.findall(proc.stderr)
                if not found:
                    raise RuntimeError(f"{app} {config}: callgrind printed no count\n{proc.stderr[-3000:]}")
                result["instructions"] = int(found[-1])
            return result
    raise RuntimeError(f"{app} {config}: exit status {proc.returncode}\n{proc.stderr[-3000:]}")


#: ``--instructions``: runs in the shorter process, whose count (start-up, warm-up, the runs, the
#: final flush and shutdown) is taken from the longer one's
INSTRUCTIONS_BASE = 5


def _instructions(app: str, config: str, concurrency: int, runs: int, warmup: int, sink: str,
                  script: Path) -> dict[str, Any]:
    """Instructions per run of one configuration: two processes, ``runs`` and INSTRUCTIONS_BASE
    runs, otherwise the same (side by side: a count does not depend on the other core's load)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        full, base = pool.map(lambda n: _one(app, config, concurrency, n, warmup, sink, script, None,
                                             instructions=True), (runs, INSTRUCTIONS_BASE))
    n = runs - INSTRUCTIONS_BASE
    # The first scored run imports and compiles what scoring needs (once per process): a
    # process whose warm-up scored no run (sampling) would count that in its runs, and the
    # difference would not cancel it. Reported, and flagged in the table.
    warm = [full["warmup_scored_runs"], base["warmup_scored_runs"]]
    return {"instructions_per_run": (full["instructions"] - base["instructions"]) / n,
            "warmup_scored_runs": warm, "warm": config == "traced" or min(warm) > 0,
            "gc_collections": [full["gc_collections"], base["gc_collections"]],
            "wall_ms": full["wall_ms"],  # per run, under callgrind: against the plain run's, the slowdown
            "instructions": [full["instructions"], base["instructions"]], "runs": [runs, INSTRUCTIONS_BASE],
            "scored_runs": full["scored_runs"] - base["scored_runs"], "measured_runs": n}


def instructions_summary(rounds: dict[tuple[str, int, str], list[dict[str, Any]]]) -> dict[str, Any]:
    """Per (app, concurrency, config): instructions per run (millions), and the ratio and the extra
    against the same round's ``traced``; median and spread over rounds."""
    out: dict[str, Any] = {}
    for (app, conc, config), results in rounds.items():
        traced = rounds.get((app, conc, "traced"))
        per_run = [r["instructions_per_run"] / 1e6 for r in results]
        row: dict[str, Any] = {"minstr_per_run": _spread(per_run),
                               "scored_share": _spread([r["scored_runs"] / r["measured_runs"] for r in results]),
                               "cold": sum(not r.get("warm", True) for r in results)}
        if traced is not None and config != "traced":
            pairs = list(zip(per_run, (t["instructions_per_run"] / 1e6 for t in traced), strict=False))
            row["ratio"] = _spread([s / t for s, t in pairs])
            row["extra_minstr"] = _spread([s - t for s, t in pairs])
        out[f"{app} c={conc} {config}"] = row
    return out


def instructions_table(summary: dict[str, Any]) -> str:
    def f(d: dict[str, float], fmt: str = "{:.2f}") -> str:
        return f"{fmt.format(d['median'])} ({fmt.format(d['min'])}-{fmt.format(d['max'])})"
    lines = ["| app, concurrency, configuration | M instructions/run | x traced | extra M/run | scored |",
             "|---|---|---|---|---|"]
    for key, row in summary.items():
        ratio = f(row["ratio"], "{:.3f}") if "ratio" in row else "—"
        extra = f(row["extra_minstr"]) if "extra_minstr" in row else "—"
        cold = f" ({row['cold']} cold: a warm-up scored no run, give more --warmup)" if row.get("cold") else ""
        lines.append(f"| {key} | {f(row['minstr_per_run'])} | {ratio} | {extra} | "
                     f"{row['scored_share']['median']:.0%}{cold} |")
    return "\n".join(lines)


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(rounds: dict[tuple[str, int, str], list[dict[str, Any]]]) -> dict[str, Any]:
    """Per (app, concurrency, config): medians and spreads over rounds; ratio and extra paired
    with the same round's ``traced``."""
    out: dict[str, Any] = {}
    for (app, conc, config), results in rounds.items():
        base = rounds.get((app, conc, "traced"))
        row: dict[str, Any] = {k: _spread([r[k] for r in results])
                               for k in ("app_cpu_ms", "child_cpu_ms", "wall_ms", "spans_per_run", "events_per_run")
                               if all(k in r for r in results)}  # (events: not in results saved before)
        row["scored_share"] = _spread([r["scored_runs"] / r["runs"] for r in results])
        if base is not None and config != "traced":
            pairs = list(zip(results, base))
            row["ratio"] = _spread([r["app_cpu_ms"] / b["app_cpu_ms"] for r, b in pairs])
            row["extra_ms"] = _spread([r["app_cpu_ms"] - b["app_cpu_ms"] for r, b in pairs])
        out[f"{app} c={conc} {config}"] = row
    return out


def table(summary: dict[str, Any]) -> str:
    def f(d: dict[str, float], fmt: str = "{:.2f}") -> str:
        return f"{fmt.format(d['median'])} ({fmt.format(d['min'])}–{fmt.format(d['max'])})"

    lines = ["| app, concurrency, configuration | spans/run | app CPU ms/run | × traced | extra ms/run "
             "| child CPU ms/run | scored |",
             "|---|---|---|---|---|---|---|"]
    for name, row in summary.items():
        ratio = f(row["ratio"], "{:.3f}") if "ratio" in row else "—"
        extra = f(row["extra_ms"]) if "extra_ms" in row else "—"
        lines.append(f"| {name} | {row['spans_per_run']['median']:.1f} | {f(row['app_cpu_ms'])} | {ratio} | {extra} "
                     f"| {f(row['child_cpu_ms'])} | {row['scored_share']['median']:.0%} |")
    return "\n".join(lines)


def profile_summary(folded: Path, runs: int, rate_hz: int = 1000) -> dict[str, Any]:
    """From py-spy's folded stacks: µs per run by thread, and in otel-toolscore's frames by function
    (self and inclusive), each sample 1/rate s of CPU."""
    per_sample_us = 1e6 / rate_hz
    threads: dict[str, float] = defaultdict(float)
    inclusive: dict[str, float] = defaultdict(float)
    own: dict[str, float] = defaultdict(float)
    entry: dict[str, float] = defaultdict(float)  # the first otel-toolscore frame of each stack
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        us = int(count) * per_sample_us / runs
        frames = stack.split(";")
        # py-spy --threads: the first frame is "thread (<tid>): <thread name>"
        threads[frames[0].partition(": ")[2] or frames[0]] += us
        ours = [fr for fr in frames if "otel_toolscore" in fr]
        for fr in set(ours):
            inclusive[fr] += us
        if ours:
            entry[ours[0]] += us
        if "otel_toolscore" in frames[-1]:
            own[frames[-1]] += us

    def top(d: dict[str, float], n: int = 25) -> list[tuple[str, float]]:
        return sorted(((k, round(v, 1)) for k, v in d.items()), key=lambda kv: -kv[1])[:n]
    return {"threads_us_per_run": top(threads, 12), "entry_us_per_run": top(entry),
            "inclusive_us_per_run": top(inclusive), "self_us_per_run": top(own)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apps", default=",".join(APPS))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--concurrency", default="1,8", help="comma-separated: runs in flight at once")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=WARMUP, help="runs before the measured ones, per process")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="60 runs, 1 round, sequential only")
    ap.add_argument("--profile", type=Path, help="directory: py-spy the app processes (one round)")
    ap.add_argument("--hooks", action="store_true",
                    help="time the processor's span hooks on the app's threads (µs per span)")
    ap.add_argument("--paired", type=int, default=0, metavar="B",
                    help="one process per configuration and round, blocks of B runs alternating traced and "
                         "scored (ABBA): --runs in all, ratios per pair of blocks")
    ap.add_argument("--instructions", action="store_true",
                    help="count the instructions the app process executes (callgrind): per configuration a "
                         f"process of --runs runs and one of {INSTRUCTIONS_BASE}, the difference per run")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    # the app process's own arguments (the driver passes them)
    ap.add_argument("--app-process", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model-server", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--app", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--sink", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.model_server:
        serve_model(args.model_server)
        return 0
    if args.app_process:
        args.concurrency = int(args.concurrency)
        app_main(args)
        return 0
    if args.quick:
        args.runs, args.rounds, args.concurrency = 60, 1, "1"
    apps = [a for a in args.apps.split(",") if a]
    configs = [c for c in args.configs.split(",") if c]
    unknown = (set(apps) - set(APPS)) | {c for c in configs if c.split("+")[0] not in CONFIGS
                                         or not set(c.split("+")[1:]) <= set(OUTPUTS)}
    if unknown:
        ap.error(f"unknown app or configuration: {', '.join(sorted(unknown))}")
    concurrencies = [int(c) for c in args.concurrency.split(",") if c]
    if args.paired:
        configs = [c for c in configs if c != "traced"]  # every process has its own traced blocks
    if args.instructions:
        if args.runs <= INSTRUCTIONS_BASE:
            ap.error(f"--instructions needs --runs above {INSTRUCTIONS_BASE}")
        configs = ["traced", *(c for c in configs if c != "traced")]

    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    sink_url = f"http://127.0.0.1:{sink.server_address[1]}"
    from otel_toolscore.demo_agent.agent_common import server_scripts

    script = Path(os.environ.get("TMPDIR", "/tmp")) / f"toolscore-realapp-{os.getpid()}.json"
    script.write_text(json.dumps(server_scripts()))
    print(f"machine: {machine()}", flush=True)
    results: dict[tuple[str, int, str], list[dict[str, Any]]] = defaultdict(list)
    profiles: dict[str, Any] = {}
    try:
        for r in range(args.rounds):
            for app in apps:
                for conc in concurrencies:
                    order = configs[r % len(configs):] + configs[:r % len(configs)]
                    for config in order:
                        folded = None
                        if args.profile is not None:
                            args.profile.mkdir(parents=True, exist_ok=True)
                            name = config.replace("%", "pct").replace("+", "_")
                            folded = args.profile / f"{app}-c{conc}-{name}.folded"
                        if args.instructions:
                            res = _instructions(app, config, conc, args.runs, args.warmup, sink_url, script)
                        else:
                            res = _one(app, config, conc, args.runs, args.warmup, sink_url, script, folded,
                                       args.hooks, args.paired)
                        results[(app, conc, config)].append(res)
                        print(f"round {r + 1} {app} c={conc} {config}: {json.dumps(res)[:2000]}", flush=True)
                        if folded is not None and folded.exists():
                            profiles[f"{app} c={conc} {config}"] = summary = profile_summary(folded, args.runs)
                            folded.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    finally:
        script.unlink(missing_ok=True)
        sink.shutdown()
    if args.instructions:
        summary = instructions_summary(results)
        print(instructions_table(summary))
    else:
        summary = paired_summary(results) if args.paired else summarise(results)
        print(paired_table(summary) if args.paired else table(summary))
    report = {"machine": machine(), "runs": args.runs, "rounds": args.rounds, "summary": summary,
              "rounds_raw": {" ".join(map(str, k)): v for k, v in results.items()}, "profiles": profiles}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    emit_json({"summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
