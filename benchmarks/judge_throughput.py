"""Judge throughput: N evaluations against a judge that takes D seconds per answer, at several
concurrency limits, through the real litellm client over real HTTP (the scripted test server on
127.0.0.1), plus the cost of a cache hit.

    .venv/bin/python -m benchmarks judge [--n 200] [--delay 0.2] [--concurrency 1 4 16]

Concurrency 1 is the sequential baseline. The ideal wall time at concurrency c is N × D / c.
Prints a Markdown table (paste it into BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from importlib.metadata import version

from otel_toolscore.scorers.context_position import ContextPosition
from otel_toolscore.scorers.judge import JudgeClient, JudgeSettings, run_sync
from otel_toolscore.trajectory import Document, Retrieval, Trajectory
from tests.support.judge_server import JudgeServer, auto_responder


def trajectories(n: int) -> list[Trajectory]:
    # distinct inputs, so that no evaluation is a cache hit of another
    return [
        Trajectory(
            trace_id=f"{i:032x}",
            input=f"Question {i}: what is the capital of France?",
            output="Paris.",
            steps=[Retrieval(span_id=f"{i:016x}", documents=[Document(content=f"doc {j} for {i}") for j in range(3)])],
        )
        for i in range(n)
    ]


async def evaluate_all(scorer: ContextPosition, runs: list[Trajectory]) -> list[float | None]:
    scores = await asyncio.gather(*(scorer.ascore(t) for t in runs))
    return [s.value for s in scores]


def measure(server: JudgeServer, n: int, concurrency: int) -> dict[str, float]:
    judge = JudgeClient(
        JudgeSettings(model="openai/judge-test", api_base=server.url, api_key="sk-bench", max_concurrency=concurrency, timeout_s=30)
    )
    scorer = ContextPosition(judge=judge)
    runs = trajectories(n)
    server.reset_log()
    started = time.perf_counter()
    values = run_sync(evaluate_all(scorer, runs))
    wall = time.perf_counter() - started
    assert all(v == 1.0 for v in values), "every evaluation must succeed"
    assert len(server.requests) == n
    result = {"wall_s": wall, "max_in_flight": server.max_in_flight}

    # cache hits: the same N evaluations again; no request reaches the server
    hits = []
    for t in runs:
        t0 = time.perf_counter()
        run_sync(scorer.ascore(t))
        hits.append(time.perf_counter() - t0)
    assert len(server.requests) == n
    result["hit_median_us"] = statistics.median(hits) * 1e6
    result["hit_p95_us"] = sorted(hits)[int(len(hits) * 0.95)] * 1e6
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args()

    with JudgeServer(auto_responder(delay=args.delay)) as server:
        measure(server, 4, 4)  # warm-up: litellm import and its first client
        rows = [(c, measure(server, args.n, c)) for c in args.concurrency]

    cpu = platform.processor() or platform.machine()
    print(f"{args.n} evaluations × {args.delay * 1000:.0f} ms judge; {os.cpu_count()} CPUs ({cpu}); "
          f"Python {platform.python_version()}; litellm {version('litellm')}\n")
    print("| concurrency | wall (s) | ideal N×D/c (s) | wall / ideal | evaluations/s | max in flight | cache hit median (µs) | cache hit p95 (µs) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c, r in rows:
        ideal = args.n * args.delay / c
        print(
            f"| {c} | {r['wall_s']:.2f} | {ideal:.2f} | {r['wall_s'] / ideal:.2f} | {args.n / r['wall_s']:.1f} | "
            f"{r['max_in_flight']:.0f} | {r['hit_median_us']:.0f} | {r['hit_p95_us']:.0f} |"
        )


if __name__ == "__main__":
    main()
