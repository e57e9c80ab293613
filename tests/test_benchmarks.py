"""The benchmarks as one tool (issue 31): ``python -m benchmarks <workload>`` lists and runs every
workload, the module entry points other tools call still work, every benchmark command the docs
cite names a workload or module that exists, and the real-app benchmark (issue 32) measures
what it says: every run of a real framework agent scored, its evaluation spans exported, the
figures attributed by thread and function as py-spy's stacks say. Counts and arithmetic only:
the timings themselves live in BENCHMARKS.md."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.__main__ import ALL, WORKLOADS
from benchmarks.common import child_env
from benchmarks.realapp import instructions_summary, paired_summary, profile_summary, summarise
from tests.support import paths


def _bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=paths.REPO, env=child_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_the_runner_lists_every_workload_and_each_is_a_module() -> None:
    listed = _bench("--list")
    assert listed.returncode == 0, listed.stderr
    for name, (module, _) in WORKLOADS.items():
        assert re.search(rf"^\s+{re.escape(name)}\s", listed.stdout, re.M), name
        assert importlib.util.find_spec(module) is not None, module
    assert set(ALL) <= set(WORKLOADS)
    assert re.search(r"^\s+all\s", listed.stdout, re.M)


def test_an_unknown_workload_is_refused_with_the_list() -> None:
    refused = _bench("no-such-workload")
    assert refused.returncode == 2
    assert "no-such-workload" in refused.stderr and "realapp" in refused.stderr


@pytest.mark.parametrize("name", ["compare", "job", "hotpath", "realapp"])
def test_a_workload_runs_as_its_module_does(name: str) -> None:
    """``python -m benchmarks compare`` is ``python -m benchmarks.compare`` (other tools call the
    module form): the same options."""
    via_runner = _bench(name, "--help")
    direct = subprocess.run([sys.executable, "-m", WORKLOADS[name][0], "--help"], cwd=paths.REPO, env=child_env(),
                            capture_output=True, text=True, timeout=120)
    assert via_runner.returncode == direct.returncode == 0, via_runner.stderr
    options = set(re.findall(r"--[a-z][a-z-]+", direct.stdout))
    assert options and options == set(re.findall(r"--[a-z][a-z-]+", via_runner.stdout))


def _cited() -> list[tuple[str, str]]:
    """(file, citation) for every benchmark module or workload named in the docs and the code."""
    files = [paths.REPO / "README.md", paths.REPO / "BENCHMARKS.md", *sorted((paths.REPO / "docs").glob("*.md")),
             *sorted(paths.TESTS.glob("*.py")), *sorted((paths.REPO / "otel_toolscore").rglob("*.py")),
             *sorted((paths.REPO / "benchmarks").glob("*.py"))]
    found = []
    for f in files:
        text = f.read_text()
        for m in re.finditer(r"python -m benchmarks(?:\.(\w+)| ([a-z][a-z-]*))?", text):
            found.append((f.name, m.group(0)))
        # (a study whose code was removed is cited at its commit: ``21d3921:benchmarks/floor.py``)
        for m in re.finditer(r"(?<![0-9a-f]{7}:)benchmarks/(\w+)\.py|\bbenchmarks\.(\w+)\b", text):
            found.append((f.name, m.group(0)))
    return found


def test_every_benchmark_the_docs_cite_exists() -> None:
    cited = _cited()
    assert cited
    missing = []
    for where, citation in cited:
        m = re.fullmatch(r"python -m benchmarks (\S+)", citation)
        if m:
            if m.group(1) not in WORKLOADS and m.group(1) != "all":
                missing.append((where, citation))
            continue
        module = re.search(r"benchmarks[./](\w+)", citation)
        if module and not (paths.REPO / "benchmarks" / f"{module.group(1)}.py").exists():
            missing.append((where, citation))
    assert missing == []


# --- the real-app benchmark's own arithmetic -----------------------------------------------------


def _result(app_ms: float, child_ms: float = 0.0, scored: int = 0) -> dict[str, float]:
    return {"app_cpu_ms": app_ms, "child_cpu_ms": child_ms, "wall_ms": 20.0, "spans_per_run": 4.0,
            "scored_runs": scored, "runs": 10}


def test_the_ratio_and_the_extra_are_paired_with_the_same_rounds_baseline() -> None:
    rounds = {("a", 1, "traced"): [_result(10.0), _result(20.0), _result(12.0)],
              ("a", 1, "thread"): [_result(11.0, scored=10), _result(22.0, scored=10), _result(12.0, scored=5)]}
    row = summarise(rounds)["a c=1 thread"]
    # per round 1.10, 1.10, 1.00; unpaired medians would say 12/12 = 1.00
    assert row["ratio"] == pytest.approx({"median": 1.10, "min": 1.00, "max": 1.10})
    assert row["extra_ms"] == pytest.approx({"median": 1.0, "min": 0.0, "max": 2.0})
    assert row["scored_share"]["median"] == 1.0 and row["scored_share"]["min"] == 0.5
    assert "ratio" not in summarise(rounds)["a c=1 traced"]


def _block(cpu: float, worker: float = 0.0) -> dict[str, Any]:
    return {"app_cpu_ms": cpu, "child_cpu_ms": 0.0, "threads_cpu_ms": {"MainThread": cpu - worker,
                                                                       "otel-toolscore-worker": worker}}


def test_paired_blocks_give_a_ratio_per_pair_over_all_rounds_and_each_rounds_median() -> None:
    rounds = {("a", 1, "thread"): [
        {"pairs": [{"traced": _block(10.0), "scored": _block(11.0, 0.8)},
                   {"scored": _block(13.0, 1.0), "traced": _block(10.0)}], "block_runs": 5},
        {"pairs": [{"traced": _block(20.0), "scored": _block(21.0, 0.9)}], "block_runs": 5}]}
    row = paired_summary(rounds)["a c=1 thread"]
    # pairs 1.10, 1.30, 1.05: the median of all pairs; each round's own median besides
    assert row["pairs"] == 3
    assert row["ratio"] == pytest.approx({"median": 1.10, "min": 1.05, "max": 1.30})
    assert row["round_medians"] == pytest.approx([1.20, 1.05])
    assert row["extra_ms"] == pytest.approx({"median": 1.0, "min": 1.0, "max": 3.0})
    assert row["threads_extra_ms"]["otel-toolscore-worker"] == pytest.approx(0.9)


def _counted(per_run: float, scored: int = 0) -> dict[str, Any]:
    return {"instructions_per_run": per_run * 1e6, "scored_runs": scored, "measured_runs": 10}


def test_instruction_counts_are_paired_with_the_same_rounds_traced_count() -> None:
    rounds = {("a", 1, "traced"): [_counted(100.0), _counted(110.0)],
              ("a", 1, "process"): [_counted(102.0, 10), _counted(111.1, 10)]}
    summary = instructions_summary(rounds)
    row = summary["a c=1 process"]
    assert row["ratio"] == pytest.approx({"median": 1.015, "min": 1.01, "max": 1.02})
    assert row["extra_minstr"] == pytest.approx({"median": 1.55, "min": 1.1, "max": 2.0})
    assert row["scored_share"]["median"] == 1.0
    assert "ratio" not in summary["a c=1 traced"] and summary["a c=1 traced"]["scored_share"]["max"] == 0
    assert row["cold"] == 0
    rounds[("a", 1, "process")][0]["warm"] = False
    assert instructions_summary(rounds)["a c=1 process"]["cold"] == 1


def test_the_profile_is_attributed_by_thread_and_otel_toolscore_function(tmp_path: Path) -> None:
    """py-spy's folded stacks (``--threads --full-filenames``): each sample is 1 ms at 1 kHz."""
    folded = tmp_path / "p.folded"
    folded.write_text(
        "thread (11): MainThread;run (app.py:1);on_end (/r/otel_toolscore/runtime/processor.py:9);"
        "on_end (/v/opentelemetry/sdk/trace/export/__init__.py:3) 30\n"
        "thread (11): MainThread;run (app.py:1);step (app.py:2) 50\n"
        "thread (12): otel-toolscore-worker;_score (/r/otel_toolscore/runtime/engine.py:5);"
        "score (/r/otel_toolscore/scorers/run.py:7) 20\n")
    out = profile_summary(folded, runs=10)
    assert dict(out["threads_us_per_run"]) == {"MainThread": 8000.0, "otel-toolscore-worker": 2000.0}
    inclusive = dict(out["inclusive_us_per_run"])
    assert inclusive["on_end (/r/otel_toolscore/runtime/processor.py:9)"] == 3000.0
    assert inclusive["_score (/r/otel_toolscore/runtime/engine.py:5)"] == 2000.0
    assert inclusive["score (/r/otel_toolscore/scorers/run.py:7)"] == 2000.0
    # where the app's stacks first enter the package, and what the package runs itself
    assert dict(out["entry_us_per_run"]) == {"on_end (/r/otel_toolscore/runtime/processor.py:9)": 3000.0,
                                             "_score (/r/otel_toolscore/runtime/engine.py:5)": 2000.0}
    assert dict(out["self_us_per_run"]) == {"score (/r/otel_toolscore/scorers/run.py:7)": 2000.0}


# --- the real-app benchmark, run ---------------------------------------------------------------


def _frameworks() -> bool:
    return all(importlib.util.find_spec(m) is not None
               for m in ("pydantic_ai", "langgraph", "langchain_openai", "openinference.instrumentation.langchain"))


@pytest.mark.skipif(not _frameworks(), reason="the bench extra is not installed (pip install -e '.[bench]')")
def test_the_paired_real_app_benchmark_scores_only_in_its_scored_blocks(tmp_path: Path) -> None:
    out = tmp_path / "paired.json"
    done = _bench("realapp", "--apps", "pydantic_ai", "--configs", "traced,thread", "--runs", "8", "--paired", "2",
                  "--warmup", "2", "--rounds", "1", "--concurrency", "1", "--out", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["summary"]) == {"pydantic_ai c=1 thread"}  # traced is every process's own blocks
    (result,) = report["rounds_raw"]["pydantic_ai 1 thread"]
    assert len(result["pairs"]) == 2 and result["block_runs"] == 2
    for pair in result["pairs"]:
        assert pair["scored"]["threads_cpu_ms"]["otel-toolscore-worker"] > 0
        # traced blocks: the processor is out of the provider, its worker idle (its 1 s tally wake-up aside)
        assert pair["traced"]["threads_cpu_ms"].get("otel-toolscore-worker", 0) < \
            pair["scored"]["threads_cpu_ms"]["otel-toolscore-worker"] / 4
    assert report["summary"]["pydantic_ai c=1 thread"]["ratio"]["median"] > 1


@pytest.mark.skipif(not _frameworks(), reason="the bench extra is not installed (pip install -e '.[bench]')")
def test_the_real_app_benchmark_scores_every_run_of_each_framework(tmp_path: Path) -> None:
    out = tmp_path / "realapp.json"
    done = _bench("realapp", "--apps", "pydantic_ai,langgraph", "--configs", "traced,thread,process",
                  "--runs", "6", "--warmup", "2", "--rounds", "1", "--concurrency", "1", "--hooks",
                  "--out", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    summary, raw = report["summary"], report["rounds_raw"]
    for app in ("pydantic_ai", "langgraph"):
        traced, thread, process = (summary[f"{app} c=1 {c}"] for c in ("traced", "thread", "process"))
        assert traced["scored_share"]["median"] == 0
        assert thread["scored_share"]["median"] == 1 and process["scored_share"]["median"] == 1
        # the app's own spans in every configuration, the scores on its agent span (no evaluation
        # spans by default)
        app_spans = traced["spans_per_run"]["median"]
        assert app_spans >= 3
        for scored in (thread, process):
            assert scored["spans_per_run"]["median"] == app_spans
            assert "ratio" in scored and "extra_ms" in scored
            # a run event per code scorer, at least (tool-call events for calls with issues besides)
            assert scored["events_per_run"]["median"] >= 3
        assert traced["events_per_run"]["median"] == 0
        # where the CPU was: the scoring worker only where installed, the child only in process mode
        (traced_run,), (thread_run,), (process_run,) = (raw[f"{app} 1 {c}"] for c in ("traced", "thread", "process"))
        assert not any(name.startswith("otel-toolscore") for name in traced_run["threads_cpu_ms"])
        assert thread_run["threads_cpu_ms"]["otel-toolscore-worker"] > 0 and thread_run["child_cpu_ms"] == 0
        assert process_run["child_cpu_ms"] > 0
        # the hooks timed: every span the app made ended on the app's threads, through the SDK's
        # processor alone (traced) or through otel-toolscore's; evaluation spans never do
        for run in (traced_run, thread_run, process_run):
            assert run["hooks_us_per_call"]["calls"]["on_end"] == app_spans * run["runs"]


@pytest.mark.skipif(not _frameworks() or shutil.which("valgrind") is None,
                    reason="needs the bench extra and valgrind")
def test_the_instruction_count_takes_the_short_process_from_the_long_one(tmp_path: Path) -> None:
    out = tmp_path / "instructions.json"
    done = _bench("realapp", "--instructions", "--apps", "pydantic_ai", "--configs", "thread", "--runs", "8",
                  "--warmup", "1", "--rounds", "1", "--concurrency", "1", "--out", str(out), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["summary"]) == {"pydantic_ai c=1 traced", "pydantic_ai c=1 thread"}
    (traced,), (thread,) = report["rounds_raw"]["pydantic_ai 1 traced"], report["rounds_raw"]["pydantic_ai 1 thread"]
    for result in (traced, thread):
        long_, short = result["instructions"]
        assert long_ > short > 0 and result["runs"] == [8, 5] and result["measured_runs"] == 3
    assert thread["scored_runs"] == 3 and traced["scored_runs"] == 0
    # the warm-up scored a run in both processes: the first scoring's one-off cost is in both
    assert thread["warmup_scored_runs"] == [1, 1] and thread["warm"]
    assert all(len(counts) == 3 for counts in thread["gc_collections"])  # by generation, each process
    # scoring three runs executes more instructions in the app than tracing them alone
    assert report["summary"]["pydantic_ai c=1 thread"]["ratio"]["median"] > 1


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_the_outputs_floor_counts_what_each_output_adds() -> None:
    done = _bench("outputs-floor", "--n", "40", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.rsplit("RESULT ", 1)[1])
    assert result["n"] == 40
    # an event is recorded, batched, encoded and exported; a point only aggregated: both cost
    # something, an event several times what a point does
    assert result["point_instructions"] > 0
    assert result["event_instructions"] > 2 * result["point_instructions"]


def test_the_outputs_floor_refuses_an_unknown_output() -> None:
    done = _bench("outputs-floor", "--emit", "span", "1")
    assert done.returncode != 0 and "unknown output 'span'" in done.stderr
