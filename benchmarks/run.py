"""Run every benchmark: ``.venv/bin/python -m benchmarks.run [--quick] [--only NAME,...]``.

Each benchmark is its own module (also runnable alone, ``python -m benchmarks.<name>``) and runs
in its own subprocess; this prints their summaries and writes all results, with the machine
description, to ``benchmarks/results/<UTC time>.json`` (``--out`` to choose).

    hotpath     app-thread overhead of the processor, and its own on_start+on_end per span
    throughput  completed runs scored per second per core (fixtures; 10…1000-span runs)
    latency     agent span end → scored agent span downstream, p50/p99, open loop
    memory      RSS under a storm of spans from traces that never complete
    sidecar     spans/s through ``otel-toolscore serve`` over OTLP gRPC and HTTP (needs the serve extra)

Full run: about 15 minutes on 2 cores; ``--quick``: about 4.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import child_env, machine
from tests.support.paths import REPO

ALL = ("hotpath", "throughput", "latency", "memory", "sidecar")


def _sidecar_available() -> bool:
    try:
        from otel_toolscore.runtime.serve import ToolScoreServer  # noqa: F401
    except ImportError:
        return False
    return True


def run_one(name: str, quick: bool, extra: Sequence[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", f"benchmarks.{name}", *(["--quick"] if quick else []), *extra]
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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (about 4 minutes in all)")
    ap.add_argument("--only", default=",".join(ALL), help=f"comma-separated subset of {', '.join(ALL)}")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(ALL)
    if unknown:
        ap.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    report: dict[str, Any] = {"machine": machine(), "quick": args.quick,
                              "started": dt.datetime.now(dt.timezone.utc).isoformat(), "benchmarks": {}}
    print(f"machine: {report['machine']}")
    for name in names:
        if name == "sidecar" and not _sidecar_available():
            print("== sidecar: not measured (otel_toolscore.runtime.serve.ToolScoreServer is not there)")
            report["benchmarks"][name] = {"skipped": "needs otel_toolscore.runtime.serve.ToolScoreServer"}
            continue
        report["benchmarks"][name] = run_one(name, args.quick, [])
    out = args.out or REPO / "benchmarks" / "results" / (
        dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + ("-quick" if args.quick else "") + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    print(f"results: {out}")
    return 1 if any("error" in r for r in report["benchmarks"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
