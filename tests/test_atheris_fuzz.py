"""The atheris harness (tests/fuzz/fuzz_otlp.py) fuzzes the OTLP decoding path for a fixed budget.

Decoding untrusted OTLP must return spans and problem notes or raise its documented error; the
spans must re-export whole and go through assembly, the code scorers and emission without an
exception (the harness's docstring has the full contract). A crash fails this test and shows the
crashing input and how to replay it.

Budget: ``OTEL_TOOLSCORE_FUZZ_SECONDS`` of fuzzing (default 20; about 30 s in all with start-up
and the seeds); raise it for a longer local run, 0 runs the seed corpus only.
``OTEL_TOOLSCORE_FUZZ_SEED`` fixes libFuzzer's seed (the output shows the one used).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import TESTS

pytest.importorskip(
    "atheris",
    reason="atheris is not installed: it has wheels only for CPython 3.10-3.13 on Linux x86_64, "
    "where the test extra installs it",
)

HARNESS = TESTS / "fuzz" / "fuzz_otlp.py"
DEFAULT_SECONDS = 20
# libFuzzer's own limits: a decode that takes 10 s or 2 GB for one input is a bug too.
PER_INPUT_TIMEOUT_S = 10
RSS_LIMIT_MB = 2048
MAX_LEN = 65536


def _crash_report(artifacts: Path, output: str) -> str:
    # The Python exception and libFuzzer's summary, without its progress lines (#1234 NEW ...).
    start = output.find("=== Uncaught Python exception")
    quiet = [ln for ln in output[max(start, 0):].splitlines() if not ln.startswith("#")]
    lines = ["", "--- fuzzer output ---", "\n".join(quiet)[-8000:]]
    for crash in sorted(artifacts.iterdir()):
        data = crash.read_bytes()
        lines += [
            f"--- {crash.name} ({len(data)} bytes; replay: {sys.executable} {HARNESS} {crash}) ---",
            repr(data[:2000]) + (" ..." if len(data) > 2000 else ""),
        ]
    return "\n".join(lines)


def test_fuzz_otlp_decoding_path(tmp_path: Path) -> None:
    seconds = int(os.environ.get("OTEL_TOOLSCORE_FUZZ_SECONDS", DEFAULT_SECONDS))
    corpus = tmp_path / "corpus"
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    budget = [f"-max_total_time={seconds}"] if seconds > 0 else ["-runs=0"]
    seed = os.environ.get("OTEL_TOOLSCORE_FUZZ_SEED")
    command = [
        sys.executable,
        str(HARNESS),
        f"--make-corpus={corpus}",
        *budget,
        *([f"-seed={seed}"] if seed else []),
        f"-timeout={PER_INPUT_TIMEOUT_S}",
        f"-rss_limit_mb={RSS_LIMIT_MB}",
        f"-max_len={MAX_LEN}",
        f"-artifact_prefix={artifacts}{os.sep}",
        "-print_final_stats=1",
    ]
    # The harness scores with default settings: the caller's OTEL_TOOLSCORE_* must not change them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_TOOLSCORE_")}
    proc = subprocess.run(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        errors="replace", timeout=max(seconds, 0) + 180,
    )
    output = proc.stdout
    assert proc.returncode == 0, f"the fuzzer found a crash (exit {proc.returncode})" + _crash_report(artifacts, output)
    assert not any(artifacts.iterdir()), _crash_report(artifacts, output)

    # It really fuzzed: every seed ran (the fixtures and their protobuf, gzip, HTTP and
    # JSON-lines forms), and with a time budget, inputs beyond them.
    seeds = len(list(corpus.glob("seed-*")))
    assert seeds > 50, f"only {seeds} seeds were written"
    executed = re.search(r"stat::number_of_executed_units: (\d+)", output)
    assert executed is not None, output[-3000:]
    assert int(executed.group(1)) >= (seeds if seconds <= 0 else seeds + 1), output[-3000:]
