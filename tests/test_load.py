"""Sustained overload (issue 8): an open-loop app at 1,000 ten-span runs/s, more than one worker
can score, with a judge that answers slowly. The processor must shed scoring, never spans, and
count what it sheds. CI-sized version of ``benchmarks/load.py`` (same generator, same pipeline:
real SDK TracerProvider, ``ToolScoreSpanProcessor(BatchSpanProcessor(exporter))``, real litellm
over real HTTP to ``tests/support/judge_server.py`` in a child process). Invariants only, no timings:

* every span the app created is exported exactly once (app span ids are numbered; the exporter
  marks each in a bitmap, so a lost or repeated span is found exactly), and one evaluation span
  per judged run;
* ``toolscore.evaluations`` accounts for every run once per scorer (scored + skipped + error +
  dropped = runs), with drops > 0 for every scorer (the point of overloading it);
* the processor's bounds (pending traces, ready queue, judge runs in flight, judge requests in
  flight) never exceed their caps, so memory is bounded by the caps, not by time;
* shutting down in the middle of the overload forwards every span once and leaves every run
  with exactly one outcome, as do runs whose trace is evicted.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from benchmarks.load import (
    CODE_SCORERS,
    LLM_SCORER,
    OUTCOMES,
    AppThread,
    JudgeProcess,
    LoadConfig,
    bounds_of,
    build_pipeline,
    evaluations,
    evicted,
    run_load,
)
from benchmarks.workload import _emit, emit_run, genai_run
from tests.support.clock import SteppedClock
from tests.support.timing import wait_for

ALL_SCORERS = (*CODE_SCORERS, LLM_SCORER)


def _totals(evals: dict[str, dict[str, int]], name: str) -> int:
    return sum(evals.get(name, {}).get(o, 0) for o in OUTCOMES)


@pytest.fixture(scope="module")
def overload() -> dict[str, Any]:
    # queue_size and llm_max_inflight are small so that both kinds of shedding certainly happen
    # within seconds, whatever the CI machine's speed: the worker scores at most ~450 runs/s on
    # these 2 vCPUs, the judge answers 4 requests at a time, one per second each.
    cfg = LoadConfig(rate=1000, duration=8, judge_delay=1.0, judge_concurrency=4, pool=300,
                     sample_interval=0.1, flush_timeout=60,
                     # (evaluation spans for every score: they count what each scorer gave)
                     overrides={"queue_size": 64, "llm_max_inflight": 16, "max_pending_traces": 1000,
                                "evaluation_spans": True})
    return run_load(cfg)


def test_every_span_is_exported_exactly_once_under_overload(overload: dict[str, Any]) -> None:
    r = overload
    assert r["runs"] == r["target_runs"] and r["app_errors"] == 0
    created = r["spans_created_with_warmup"]  # the load and the warm-up before it
    assert created == r["runs_with_warmup"] * 10 and r["runs_with_warmup"] > r["runs"]
    assert r["duplicates"] == 0
    assert r["missing_first"] == [] and r["spans_exported"] == created
    assert r["sdk_span_drops"] == 0
    # The processor's own spans too: one evaluation span per score, of every code scorer for each
    # run they judged and of the judge for each run it answered for (all exported after
    # force_flush, before shutdown).
    judged = {name: r["accounting"][name]["total"] - r["accounting"][name]["dropped"] for name in ALL_SCORERS}
    assert len({judged[name] for name in CODE_SCORERS}) == 1  # the code scorers see the same runs
    assert r["evaluation_spans_exported"] == sum(judged[name] for name in ALL_SCORERS) > 0


def test_every_run_has_exactly_one_outcome_per_scorer_and_drops_are_counted(overload: dict[str, Any]) -> None:
    r = overload
    assert r["force_flush_ok"], "judges still in flight after force_flush: the counts are not final"
    # No trace outlived its bounds here (each completes as its agent span ends), so no run can
    # have left through an eviction that toolscore.evaluations does not see.
    assert r["evicted_other_than_queue_full"] == 0
    for name in ALL_SCORERS:
        a = r["accounting"][name]
        assert a["total"] == r["runs_with_warmup"], (name, a, r["runs_with_warmup"])
        assert a["dropped"] > 0, (name, a)
        assert a["scored"] > 0, (name, a)
        assert a["error"] == 0, (name, a)  # a slow judge is not a failing one
    # A queue-full drop counts every scorer once; the LLM scorer also sheds at its in-flight bound.
    queue_full = r["evicted"].get("queue_full", 0)
    assert queue_full == r["stats"].get("dropped_queue_full", 0) > 0
    for name in CODE_SCORERS:
        assert r["accounting"][name]["dropped"] == queue_full
    assert r["accounting"][LLM_SCORER]["dropped"] > queue_full
    # Every judged run reached the judge (cache_size is 0: no run was judged from the cache).
    assert r["judge_requests"] >= r["accounting"][LLM_SCORER]["scored"]


def test_bounds_never_exceed_their_caps(overload: dict[str, Any]) -> None:
    r = overload
    s, seen = r["settings"], r["max_bounds"]
    assert len(r["samples"]) >= 20  # the sampler really watched the run
    assert seen["pending_traces"] <= s["max_pending_traces"]
    # the ready queue may overshoot by one per thread handing over at the same moment (the app
    # threads, the timer, and force_flush's caller at the end)
    assert 0 < seen["ready_queue"] <= s["queue_size"] + r["config"]["threads"] + 2
    assert 0 < seen["judge_inflight"] <= s["llm_max_inflight"]
    assert 0 < r["judge_max_in_flight"] <= r["config"]["judge_concurrency"]
    # and everything drains once the load stops
    final = r["final_bounds"]
    assert final["pending_traces"] == 0 and final["ready_queue"] == 0 and final["judge_inflight"] == 0


# --- shutdown in the middle of the overload -------------------------------------------------------


@pytest.fixture(scope="module")
def shutdown_under_load() -> dict[str, Any]:
    """The app stops after 3 s of overload and shuts the provider down at once (no force_flush):
    the ready queue is full and the judge (5 s per answer) has runs in flight."""
    cfg = LoadConfig(rate=1000, duration=3, judge_delay=5.0, judge_concurrency=4, downstream="simple",
                     overrides={"llm_max_inflight": 16, "shutdown_timeout": 0.5, "hold_timeout": 0.5})
    pool = [genai_run(10, seed=i) for i in range(200)]
    n_runs = int(cfg.rate * cfg.duration)
    extra = [genai_run(10, seed=1_000 + i) for i in range(5)]
    with JudgeProcess(cfg.judge_delay) as judge:
        pipe = build_pipeline(cfg, judge.url, n_runs * 10 + 100)
        processor = pipe.processor
        # Mid-flight whatever the machine's load: once the judge has runs in flight (5 s each,
        # 4 at a time: they stay in flight past the shutdown), the worker takes no more runs, and
        # the last runs wait in the ready queue at shutdown. On a loaded machine the worker would
        # otherwise keep up with a slowed app and leave the queue empty.
        ready, taking = processor._queue, threading.Event()
        taking.set()
        take = ready.get

        def gated_get(*args: Any, **kwargs: Any) -> Any:
            taking.wait()
            return take(*args, **kwargs)

        ready.get = gated_get
        app = AppThread(pipe.tracer, pool, time.perf_counter_ns(), cfg.rate, n_runs, 0, 1, threading.Event())
        app.start()
        judges = processor._engine._judges
        assert wait_for(lambda: judges._inflight > 0, 120)
        taking.clear()
        app.join(timeout=120)
        created = app.spans + sum(emit_run(pipe.tracer, specs) for specs in extra)  # queued behind the worker
        before = bounds_of(processor)
        with SteppedClock(processor) as clock:
            pipe.provider.shutdown()
        taking.set()  # the worker takes the end mark and stops
        evals = evaluations(pipe.reader)  # what the app's metrics pipeline can still export
    return {"runs": app.runs + len(extra), "created": created, "errors": app.errors, "exporter": pipe.exporter,
            "before": before, "waited": clock.waited, "evaluations": evals, "evicted": evicted(pipe.reader)}


def test_shutdown_under_load_forwards_every_span_exactly_once(shutdown_under_load: dict[str, Any]) -> None:
    r = shutdown_under_load
    assert r["before"]["judge_inflight"] > 0 and r["before"]["ready_queue"] > 0  # really mid-flight
    assert r["errors"] == 0
    exp = r["exporter"]
    assert exp.duplicates == 0
    assert exp.missing(r["created"]) == [] and exp.app == r["created"]
    assert r["waited"] <= 0.5 + 1e-9  # it waited shutdown_timeout at most, not for the slow judge


def test_shutdown_under_load_leaves_every_run_with_one_outcome(shutdown_under_load: dict[str, Any]) -> None:
    r = shutdown_under_load
    assert r["before"]["judge_inflight"] > 0
    got = {name: _totals(r["evaluations"], name) for name in ALL_SCORERS}
    assert got == {name: r["runs"] for name in ALL_SCORERS}


# --- runs whose trace is evicted ----------------------------------------------------------------


def test_runs_evicted_at_max_pending_traces_are_counted_as_dropped() -> None:
    # Many runs in flight at once (an app serving concurrent requests), more than the processor
    # may buffer: the oldest traces are evicted while their agent spans are still open.
    cfg = LoadConfig(downstream="simple", overrides={"scorers": list(CODE_SCORERS), "max_pending_traces": 4})
    pipe = build_pipeline(cfg, "http://127.0.0.1:9/v1", 1000)  # no LLM scorer: no judge is called
    tracer = pipe.tracer
    roots = []
    for i in range(12):
        specs = genai_run(10, seed=i)
        root = tracer.start_span(specs[0].name, kind=specs[0].kind, attributes=specs[0].attributes)
        for c in specs[0].children:
            _emit(tracer, specs, c, root)
        roots.append(root)
    for root in roots:
        root.end()
    assert pipe.processor.force_flush(30_000)
    assert pipe.exporter.app == 120 and pipe.exporter.duplicates == 0  # spans: never lost
    assert evicted(pipe.reader).get("max_pending_traces", 0) == 8
    evals = evaluations(pipe.reader)
    pipe.provider.shutdown()
    for name in CODE_SCORERS:
        assert _totals(evals, name) == 12, (name, evals.get(name))
