"""Where extracting a new answer's facts goes (``scorers._facts.extract_facts``, uncached), and what
one combined scan of the planned patterns would cost instead: thread CPU µs per answer of synthetic
10-span runs, the parts interleaved in each repeat (min and median over the repeats):

* ``extract``: the whole extraction as scoring runs it;
* ``triggers``: the trigger set that picks the plan (``_triggers``);
* ``guards``: the guard searches of the planned patterns;
* ``sequential``: the planned patterns whose guards hold, each over the text (``finditer``, without
  the blanking ``sub`` or the makers: a lower bound of today's scans);
* ``combined``: one ``finditer`` of the alternation of those patterns, in plan order, each in a
  named group (what a one-scan extractor would search, before any check that it equals the
  sequential pipeline).

    python -m benchmarks.extract_cost [--runs 50] [--repeats 40]

Its finding (2026-11-26, issue 17): the combined scan costs more than the sequential scans it would
replace: the regex engine tries every alternative at each position that any of them can begin
at (capitals for identifiers, u/c/a for currencies, digits), where each pattern alone skips to its
own first characters in C.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.workload import genai_run, readable_run
from otel_toolscore import assemble
from otel_toolscore.scorers import _facts


def answers(runs: int) -> list[str]:
    """The final answers of ``runs`` synthetic 10-span runs."""
    texts = []
    for seed in range(runs):
        trajectory = assemble.build_trajectories(readable_run(genai_run(10, seed=seed), trace_id=seed + 1))[0]
        if trajectory.output:
            texts.append(trajectory.output.replace("’", "'"))
    return texts


def _renamed(pattern: re.Pattern[str], index: int) -> str:
    """The pattern's text with its group names made unique to its alternative, under its own flags."""
    text = re.sub(r"\(\?P<(\w+)>", lambda m: f"(?P<{m.group(1)}_{index}>", pattern.pattern)
    text = re.sub(r"\(\?P=(\w+)\)", lambda m: f"(?P={m.group(1)}_{index})", text)
    return f"(?P<p{index}>(?i:{text}))" if pattern.flags & re.I else f"(?P<p{index}>{text})"


def guarded_plan(text: str) -> list[re.Pattern[str]]:
    """The planned patterns of the text whose guards hold."""
    return [
        pattern for pattern, _, guard in _facts._plan(_facts._triggers(text))
        if guard is None or guard.search(text) is not None
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args(argv)
    texts = answers(args.runs)
    plans = [guarded_plan(text) for text in texts]
    scanners = [re.compile("|".join(_renamed(p, i) for i, p in enumerate(plan))) for plan in plans]
    planned = [_facts._plan(_facts._triggers(text)) for text in texts]

    def extract() -> Any:
        return [_facts.extract_facts.__wrapped__(text) for text in texts]  # type: ignore[attr-defined]

    def triggers() -> Any:
        return [_facts._triggers(text) for text in texts]

    def guards() -> Any:
        return [[g.search(t) for _, _, g in plan if g is not None] for t, plan in zip(texts, planned)]

    def sequential() -> Any:
        return [[list(p.finditer(t)) for p in plan] for t, plan in zip(texts, plans)]

    def one_scan() -> Any:
        return [list(scanner.finditer(t)) for t, scanner in zip(texts, scanners)]

    parts: dict[str, Callable[[], Any]] = {
        "extract": extract, "triggers": triggers, "guards": guards, "sequential": sequential, "combined": one_scan}
    timings: dict[str, list[float]] = {name: [] for name in parts}
    for repeat in range(args.repeats):
        order = list(parts.items())
        for name, part in order if repeat % 2 == 0 else order[::-1]:
            start = time.thread_time()
            part()
            timings[name].append((time.thread_time() - start) / len(texts) * 1e6)
    print(f"{len(texts)} answers, {statistics.mean(map(len, texts)):.0f} characters on average; "
          f"µs per answer over {args.repeats} repeats")
    for name, xs in timings.items():
        print(f"  {name:10s} min {min(xs):6.2f}  median {statistics.median(xs):6.2f}  max {max(xs):6.2f}")


if __name__ == "__main__":
    main()
