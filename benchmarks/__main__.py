"""The benchmarks' one entry point: ``python -m benchmarks <workload> [options]``.

    .venv/bin/python -m benchmarks --list               # the workloads, one line each
    .venv/bin/python -m benchmarks job --quick           # one workload (its --help says the rest)
    .venv/bin/python -m benchmarks all [--quick]         # job, hotpath, latency, memory, sidecar

A workload runs exactly as its module would (``python -m benchmarks.<module>``, still callable so):
same options, same output, its last line ``RESULT {json}``. ``all`` runs each in a subprocess of
its own and writes their results, with the machine description, to
``benchmarks/results/<UTC time>.json`` (``--out`` to choose). The inputs are shared:
``benchmarks/workload.py`` (synthetic GenAI runs, the recorded fixtures) and
``benchmarks/common.py`` (exporters, providers, statistics). BENCHMARKS.md has the current figures,
each with the command it came from.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import runpy
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: name -> (module, what it measures). The order is the order of --list.
WORKLOADS: dict[str, tuple[str, str]] = {
    "job": ("benchmarks.throughput",
            "the scoring job per run (read → assemble → score → prepare → emit), runs/s/core; "
            "--scoring process splits it into the app's side and the child's"),
    "hotpath": ("benchmarks.hotpath",
                "what the processor costs the thread that makes the spans, as a ratio to tracing alone"),
    "latency": ("benchmarks.latency", "agent span end → scored agent span downstream, p50/p99, open loop"),
    "memory": ("benchmarks.memory", "RSS under a storm of spans from traces that never complete"),
    "soak": ("benchmarks.soak", "RSS over a long run at a steady rate, in-app or through `serve`: flat or growing"),
    "sidecar": ("benchmarks.sidecar", "spans/s/core through `otel-toolscore serve` over OTLP gRPC and HTTP"),
    "judge": ("benchmarks.judge_throughput", "LLM-judge evaluations/s at several concurrency limits, cache hits"),
    "realapp": ("benchmarks.realapp",
                "app CPU per run of real framework agents (Pydantic AI, LangGraph) with and without "
                "scoring, thread/process, 100 %/10 % sampling (needs the bench extra)"),
    "outputs-floor": ("benchmarks.outputs_floor",
                      "instructions the app's own SDK spends per evaluation event and per histogram point "
                      "(needs valgrind)"),
    "load": ("benchmarks.load", "minutes of open-loop load with a slow judge: nothing lost, bounds held"),
    "judge-down": ("benchmarks.judge_down", "the app thread's cost while the judge hangs, refuses or fails"),
    "sidecar-outage": ("benchmarks.sidecar_outage",
                       "stock SDK senders through `serve` during an upstream outage: spans lost, duplicated"),
    "sidecar-kill": ("benchmarks.sidecar_kill", "what an in-memory `serve` loses on kill -9 and holds while upstream fails"),
    "regex-scan": ("benchmarks.regex_scan",
                   "every regular expression of the package on adversarial input: time at 2N and growth 2N/N"),
    "emit-dump": ("benchmarks.emit_dump",
                  "every exported byte for the fixtures, the synthetic runs and the real conversations, "
                  "digested (cmp two trees' files)"),
    "compare": ("benchmarks.compare", "before/after of two trees in one process, interleaved (--before TREE)"),
}

#: what ``all`` runs (the others need a judge, minutes, a second tree, or the bench extra)
ALL = ("job", "hotpath", "latency", "memory", "sidecar")


def _listing() -> str:
    width = max(map(len, WORKLOADS))
    return "\n".join(f"  {name:{width}}  {what}" for name, (_, what) in WORKLOADS.items()) + \
        f"\n  {'all':{width}}  {', '.join(ALL)}, each in its own process, results to benchmarks/results/"


def _sidecar_available() -> bool:
    try:
        from otel_toolscore.runtime.serve import ToolScoreServer  # noqa: F401
    except ImportError:
        return False
    return True


def _run_one(name: str, quick: bool) -> dict[str, Any]:
    from benchmarks.common import child_env

    cmd = [sys.executable, "-m", "benchmarks", name, *(["--quick"] if quick else [])]
    print(f"== {name}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True)
    result: dict[str, Any] = {"command": " ".join([".venv/bin/python", *cmd[1:]]), "seconds": time.perf_counter() - t0}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result["result"] = json.loads(line[7:])
        else:
            print("   " + line)
    for line in proc.stderr.splitlines():
        print("   " + line)
    if proc.returncode != 0 or "result" not in result:
        result["error"] = f"exit status {proc.returncode}"
        print(f"   FAILED ({result['error']})")
    return result


def run_all(argv: Sequence[str]) -> int:
    from benchmarks.common import machine
    from tests.support.paths import REPO

    ap = argparse.ArgumentParser(prog="python -m benchmarks all", description="run " + ", ".join(ALL))
    ap.add_argument("--quick", action="store_true", help="smaller runs (about 4 minutes in all, 2 cores)")
    ap.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of {', '.join(ALL)}")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(ALL)
    if unknown:
        ap.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
    report: dict[str, Any] = {"machine": machine(), "quick": args.quick,
                              "started": dt.datetime.now(dt.timezone.utc).isoformat(), "benchmarks": {}}
    print(f"machine: {report['machine']}")
    for name in names:
        if name == "sidecar" and not _sidecar_available():
            print("== sidecar: not measured (the serve extra is not installed)")
            report["benchmarks"][name] = {"skipped": "needs the serve extra"}
            continue
        report["benchmarks"][name] = _run_one(name, args.quick)
    out = args.out or REPO / "benchmarks" / "results" / (
        dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + ("-quick" if args.quick else "") + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    print(f"results: {out}")
    return 1 if any("error" in r for r in report["benchmarks"].values()) else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip() + "\n\nworkloads:\n" + _listing())
        return 0 if args else 2
    if args[0] == "--list":
        print(_listing())
        return 0
    name, rest = args[0], args[1:]
    if name == "all":
        return run_all(rest)
    if name not in WORKLOADS:
        print(f"unknown workload {name!r}; one of:\n{_listing()}", file=sys.stderr)
        return 2
    module = WORKLOADS[name][0]
    sys.argv = [f"python -m benchmarks {name}", *rest]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)  # as the interpreter prints a workload's own refusal
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
