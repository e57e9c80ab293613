"""Every regular expression of the package on adversarial input: linear or not.

    .venv/bin/python -m benchmarks regex-scan [--chars 20000]

Each pattern scans runs of shapes that make backtracking patterns rescan from every position
(word/punctuation alternations, whitespace runs, separators, the pattern's own characters) at
two lengths, N and 2N, in the same sitting: a linear pattern takes about twice as long on 2N, a
quadratic one four times. Reported: the worst time at 2N and the worst growth ratio, per pattern
and overall; exit status 1 when a pattern grows faster than `--max-growth` (3.0) where its time is
long enough to measure. (The unit test, tests/test_regex_linear.py, checks the shapes that
backtrack exponentially in the patterns' parse trees, without timing.)
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
import time

from benchmarks.common import emit_json, machine

#: runs that make backtracking patterns rescan from every position: word/punctuation
#: alternations (".a" defeated the e-mail and URL patterns), whitespace runs, separators
SHAPES = [".a", "a.", "a", " ", "\t", "\n", "a ", "a@", "@a", "sk-", "a-", "1-", "1 ", "1.", "1", "a://", "a:",
          "a/", "token ", "x=", "aa.", "<", ">", "{", "[", '"', "\\", "%", "_", "é", "A", "Aa"]
MEASURABLE_S = 0.02  # below this a growth ratio is noise (a quadratic pattern takes seconds at 2N)


def _best_of_3(pattern: re.Pattern[str], text: str) -> float:
    """The fastest of three scans, the cyclic GC off: a quadratic pattern is slow every time."""
    best = float("inf")
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(3):
            t0 = time.perf_counter()
            pattern.findall(text)
            pattern.search(text + "\x00")  # a failing search from every position
            best = min(best, time.perf_counter() - t0)
    finally:
        if enabled:
            gc.enable()
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chars", type=int, default=20_000, help="characters of input per shape at N")
    parser.add_argument("--max-growth", type=float, default=3.0, help="time(2N)/time(N) above which a pattern fails")
    args = parser.parse_args()

    from tests.test_regex_linear import PATTERNS

    rows = []
    for name, pattern in sorted(PATTERNS.items()):
        worst_s, worst_growth, worst_shape = 0.0, 0.0, ""
        for shape in SHAPES + sorted({c for c in pattern.pattern if c.isprintable()}):
            reps = max(1, args.chars // len(shape))
            t1 = _best_of_3(pattern, shape * reps)
            t2 = _best_of_3(pattern, shape * (2 * reps))
            growth = t2 / t1 if t2 >= MEASURABLE_S and t1 > 0 else 0.0
            if t2 > worst_s:
                worst_s = t2
            if growth > worst_growth:
                worst_growth, worst_shape = growth, shape
        rows.append({"pattern": name, "worst_2n_s": round(worst_s, 5), "worst_growth": round(worst_growth, 2),
                     "shape": worst_shape})
    failing = [r for r in rows if r["worst_growth"] > args.max_growth]
    emit_json({
        "benchmark": "regex_scan", "machine": machine(), "patterns": len(rows), "chars": args.chars,
        "worst_2n_s": max(r["worst_2n_s"] for r in rows),
        "worst_growth": max(r["worst_growth"] for r in rows),
        "slowest": sorted(rows, key=lambda r: -r["worst_2n_s"])[:5],
        "failing": failing,
    })
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
