"""The app while the judge is down: what ToolScoreSpanProcessor costs the app thread with the LLM
scorers configured, judge healthy vs judge hanging vs refusing connections vs answering 500s.

An app thread creates 10-span GenAI agent runs (``workload.genai_run``) through an SDK
TracerProvider at a steady rate (``--rate`` runs/s, as an app serving requests would, rather
than as fast as one thread can), with ``ToolScoreSpanProcessor(BatchSpanProcessor(no-op
exporter))``: the default code scorers plus the three LLM scorers (tool_call_appropriateness,
prompt_alignment from the run's system prompt, context_position with three context items), with
the judge client's production defaults (30 s attempt timeout, 3 retries, backoff 0.5–20 s,
16 requests at once per scorer) and ``llm_max_inflight`` 256. Measured on the app thread:

* per span: the processor's own ``on_start`` + ``_on_ending`` + ``on_end``;
* per run: the wall time to create and end the run's 10 spans.

The app thread never waits for a judge; what a judge fault can still cost it is CPU: every judge
attempt runs litellm on the judge loop thread, which shares the GIL with the app (a failed
attempt costs more than a successful one: litellm formats and redacts the traceback).

Scenarios, each in a fresh process, with the judge (``tests/support/judge_server.py``) in another
process so its work does not compete with the app for the GIL:

* ``healthy``: valid answers after ``--judge-delay`` (the baseline of the ratios);
* ``hanging``: the judge accepts every request and never answers (each call waits out its 30 s
  timeout, so every concurrency slot is held for the whole measurement);
* ``refused``: nothing listens on the judge port (connection refused at once, then retries);
* ``storm500``: every request gets an immediate 500 (retried with backoff, then an error);
* ``code_only``: no LLM scorers (for reference).

Rounds interleave the scenarios (``--repeats``); samples are pooled per scenario. Also reported:
how the LLM evaluations of all runs (warm-up included) stood a second after the last run (scored,
error, dropped at the in-flight bound, still pending), and how long ``shutdown()`` took.

    .venv/bin/python -m benchmarks judge-down [--quick] [--runs N] [--rate R] [--repeats K]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from benchmarks.common import (
    CountingExporter,
    TimedProcessor,
    child_env,
    emit_json,
    machine,
    percentile,
    telemetry_providers,
)
from benchmarks.workload import emit_run, genai_run

SCENARIOS = ("healthy", "hanging", "refused", "storm500", "code_only")
LLM_SCORERS = ("tool_call_appropriateness", "prompt_alignment", "context_position")
CONTEXT = ["Paris: 21°C and sunny.", "Flights from London to Paris leave hourly.", "Berlin is the capital of Germany."]
WARMUP_RUNS = 20


# --- the judge, in its own process ----------------------------------------------------------------


def serve(kind: str, delay: float) -> None:
    """Run a judge server until stdin closes; print its URL first."""
    from tests.support.judge_server import JudgeServer, always, auto_responder, hang, status

    responders = {
        "healthy": auto_responder(delay=delay),
        "hanging": always(hang),
        "storm500": always(lambda: status(500)),
    }
    with JudgeServer(responders[kind]) as server:
        print(server.url, flush=True)
        sys.stdin.read()  # until the parent closes the pipe
        time.sleep(0.5)  # the app process has exited: its connections' closes have arrived
        print(json.dumps({"requests": len(server.requests), "in_flight": server.in_flight,
                          "max_in_flight": server.max_in_flight}), flush=True)


class Judge:
    """The judge for one scenario: a server process, a closed port, or none."""

    def __init__(self, scenario: str, delay: float) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.url: str | None = None
        if scenario in ("healthy", "hanging", "storm500"):
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.judge_down", "--_serve", scenario, "--judge-delay", str(delay)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(),
            )
            assert self.proc.stdout is not None
            self.url = self.proc.stdout.readline().strip()
        elif scenario == "refused":
            from tests.support.judge_server import closed_port_url

            self.url = closed_port_url()

    def stop(self) -> dict[str, Any]:
        if self.proc is None:
            return {}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        out = self.proc.stdout.read()
        self.proc.wait(30)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {}


# --- the app, in its own process -------------------------------------------------------------------


def _outcomes(reader: Any) -> dict[str, int]:
    """toolscore.evaluations of the LLM scorers, by outcome."""
    out: dict[str, int] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name != "toolscore.evaluations":
                    continue
                for p in m.data.data_points:
                    if p.attributes.get("gen_ai.evaluation.name") in LLM_SCORERS:
                        key = str(p.attributes.get("outcome"))
                        out[key] = out.get(key, 0) + int(p.value)
    return out


def app_once(scenario: str, url: str | None, runs: int, rate: float) -> dict[str, Any]:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
    from otel_toolscore.scorers import get_scorer
    from otel_toolscore.scorers.base import build_scorers

    scorers: list[Any] = list(build_scorers(None))
    if scenario != "code_only":
        from otel_toolscore.scorers.judge import _import_litellm

        _import_litellm()  # seconds, once per process: not inside the measurement
        judge = {"model": "openai/judge-test", "api_base": url, "api_key": "sk-bench"}
        scorers += [
            get_scorer("tool_call_appropriateness", **judge),
            get_scorer("prompt_alignment", **judge),
            get_scorer("context_position", context=CONTEXT, **judge),
        ]
    reader = InMemoryMetricReader()
    mp, lp, _ = telemetry_providers("sdk", reader=reader)
    exporter = CountingExporter()
    processor = ToolScoreSpanProcessor(BatchSpanProcessor(exporter), scorers, meter_provider=mp, logger_provider=lp)
    timed = TimedProcessor(processor)
    provider = TracerProvider()
    provider.add_span_processor(timed)
    tracer = provider.get_tracer("bench")
    pool = [genai_run(10, seed=i) for i in range(WARMUP_RUNS + runs)]
    for specs in pool[:WARMUP_RUNS]:
        emit_run(tracer, specs)
    time.sleep(2.0)  # the warm-up's judge calls are under way (or failing, or hanging)
    timed.pairs.clear()
    timed.agent_pairs.clear()
    gc.collect()
    run_ns: list[int] = []
    interval = 1.0 / rate
    started = time.perf_counter()
    for i, specs in enumerate(pool[WARMUP_RUNS:]):
        due = started + i * interval
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        t = time.perf_counter_ns()
        emit_run(tracer, specs)
        run_ns.append(time.perf_counter_ns() - t)
    duration = time.perf_counter() - started
    time.sleep(1.0)  # what the judge has done with them a second after the last run
    # every run's LLM evaluations, the warm-up's included (they may end during the measurement)
    outcomes = _outcomes(reader)
    if scenario != "code_only":
        outcomes["pending"] = (WARMUP_RUNS + runs) * len(LLM_SCORERS) - sum(outcomes.values())
    t = time.perf_counter()
    provider.shutdown()
    shutdown_s = time.perf_counter() - t
    spans = sorted(timed.pairs + timed.agent_pairs)
    runs_sorted = sorted(run_ns)
    return {
        "scenario": scenario,
        "span_median_us": statistics.median(spans) / 1000, "span_p99_us": percentile(spans, 99) / 1000,
        "run_median_us": statistics.median(runs_sorted) / 1000, "run_p99_us": percentile(runs_sorted, 99) / 1000,
        "spans": len(spans), "runs": len(run_ns), "achieved_rate": len(run_ns) / duration,
        "exported": exporter.count, "llm_outcomes": outcomes, "shutdown_s": shutdown_s,
        "span_samples_us": [s / 1000 for s in spans], "run_samples_us": [r / 1000 for r in runs_sorted],
    }


def _one(scenario: str, runs: int, rate: float, delay: float) -> dict[str, Any]:
    judge = Judge(scenario, delay)
    try:
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.judge_down", "--_one", scenario, "--runs", str(runs),
             "--rate", str(rate), "--url", judge.url or ""],
            check=False, capture_output=True, text=True, env=child_env(), timeout=600,
        )
    finally:
        server = judge.stop()
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
            result["judge_server"] = server
            return result
    raise RuntimeError(f"benchmark subprocess failed:\n{out.stdout}\n{out.stderr}")


def _pooled(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    spans = sorted(s for r in results for s in r["span_samples_us"])
    runs = sorted(s for r in results for s in r["run_samples_us"])
    outcomes: dict[str, int] = {}
    for r in results:
        for k, v in r["llm_outcomes"].items():
            outcomes[k] = outcomes.get(k, 0) + v
    return {
        "span_median_us": statistics.median(spans), "span_p99_us": percentile(spans, 99),
        "run_median_us": statistics.median(runs), "run_p99_us": percentile(runs, 99),
        "span_median_us_per_round": [r["span_median_us"] for r in results],
        "run_median_us_per_round": [r["run_median_us"] for r in results],
        "spans": len(spans), "runs": len(runs), "achieved_rate": [round(r["achieved_rate"], 1) for r in results],
        "llm_outcomes": outcomes, "shutdown_s": [round(r["shutdown_s"], 2) for r in results],
        "judge_server": [r.get("judge_server", {}) for r in results],
        "all_exported": all(r["exported"] >= (r["runs"] + WARMUP_RUNS) * 10 for r in results),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--runs", type=int, default=None, help="measured runs per scenario and round")
    ap.add_argument("--rate", type=float, default=10.0, help="agent runs per second the app creates")
    ap.add_argument("--repeats", type=int, default=None, help="rounds (each scenario once per round)")
    ap.add_argument("--judge-delay", type=float, default=0.05, help="seconds the healthy judge takes")
    ap.add_argument("--_one", choices=SCENARIOS, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_serve", choices=("healthy", "hanging", "storm500"), default=None, help=argparse.SUPPRESS)
    ap.add_argument("--url", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._serve:
        serve(args._serve, args.judge_delay)
        return {}
    runs = args.runs or (100 if args.quick else 300)
    if args._one:
        result = app_once(args._one, args.url or None, runs, args.rate)
        emit_json(result)
        return result
    repeats = args.repeats or (1 if args.quick else 2)
    rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in SCENARIOS}
    for r in range(repeats):
        for scenario in SCENARIOS:
            res = _one(scenario, runs, args.rate, args.judge_delay)
            rounds[scenario].append(res)
            print(f"  round {r + 1} {scenario}: span median {res['span_median_us']:.2f} µs, p99 "
                  f"{res['span_p99_us']:.2f} µs; run median {res['run_median_us']:.0f} µs, p99 "
                  f"{res['run_p99_us']:.0f} µs; LLM outcomes {res['llm_outcomes']}; shutdown "
                  f"{res['shutdown_s']:.2f} s", file=sys.stderr, flush=True)
    pooled = {s: _pooled(rs) for s, rs in rounds.items()}
    base = pooled["healthy"]
    print(f"{runs} runs × {repeats} round(s) per scenario at {args.rate:g} runs/s, 10 spans each; "
          f"healthy judge answers in {args.judge_delay * 1000:.0f} ms\n")
    print("| scenario | on_start+on_end median (µs) | p99 (µs) | ratio median / p99 | run wall median (µs) | "
          "p99 (µs) | ratio median / p99 | LLM evaluations (all runs), 1 s after the last run | shutdown (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for s in SCENARIOS:
        p = pooled[s]
        print(f"| {s} | {p['span_median_us']:.2f} | {p['span_p99_us']:.2f} | "
              f"{p['span_median_us'] / base['span_median_us']:.2f} / {p['span_p99_us'] / base['span_p99_us']:.2f} | "
              f"{p['run_median_us']:.0f} | {p['run_p99_us']:.0f} | "
              f"{p['run_median_us'] / base['run_median_us']:.2f} / {p['run_p99_us'] / base['run_p99_us']:.2f} | "
              f"{p['llm_outcomes']} | {', '.join(str(x) for x in p['shutdown_s'])} |")
    print("\nJudge server (its own process), per round: requests received, most in flight at once, "
          "still open when the app process had exited:")
    for s in SCENARIOS:
        for srv in pooled[s]["judge_server"]:
            if srv:
                print(f"- {s}: {srv['requests']} requests, max in flight {srv['max_in_flight']}, "
                      f"open at the end {srv['in_flight']}")
    out = {"benchmark": "judge_down", "machine": machine(), "runs": runs, "repeats": repeats, "rate": args.rate,
           "judge_delay": args.judge_delay, "scenarios": pooled}
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
