"""Reliability of the processor (issue 8): shutdown during scoring, scorers that raise or hang,
downstream processors that raise or hang, fork after start, interpreter exit without shutdown.

Nothing is lost (every span given to on_end reaches the downstream exactly once), nothing hangs
past the timeouts, nothing raises into the app. Real SDK TracerProviders throughout; the LLM
judges are real litellm over real HTTP where the behaviour depends on litellm (exit with a judge
that never answers, fork while litellm is being imported), the async test scorer elsewhere.

Decision (a downstream that hangs in on_end): forwarding is synchronous, as in the SDK. The
app's thread blocks for spans that are not held, as it would without this processor; for held
spans the worker (or the timer) blocks. Held spans behind a stuck worker are still released by
the timer at hold_timeout, and shutdown stays bounded; only a downstream that hangs on every
span can hang shutdown, as it hangs the app.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
from otel_toolscore.scorers.base import Score, Scorer
from tests.support.clock import SteppedClock
from tests.support.env import without_otel
from tests.support.paths import REPO
from tests.support.pipeline import InMemoryLogExporter
from tests.support.spans import weather_run
from tests.support.timing import MARGIN_S, wait_for

AGENT = "invoke_agent weather-bot"
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


# --- helpers ------------------------------------------------------------------------------------


class Recorder(SpanProcessor):
    """A downstream that records every span it is given, before and after its shutdown."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans: list[ReadableSpan] = []
        self.after_shutdown: list[ReadableSpan] = []
        self.shutdowns = 0
        self.is_shut_down = False

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            (self.after_shutdown if self.is_shut_down else self.spans).append(span)

    def shutdown(self) -> None:
        with self._lock:
            self.shutdowns += 1
            self.is_shut_down = True

    def names(self) -> Counter[str]:
        with self._lock:
            return Counter(s.name for s in self.spans)

    def agents(self) -> list[ReadableSpan]:
        with self._lock:
            return [s for s in self.spans if s.name.startswith("invoke_agent")]


class Gate(Scorer):
    """A code scorer that blocks until released (in the process given, else everywhere)."""

    name = "gate"
    kind = "code"

    def __init__(self, block_in_pid: int | None = None) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.block_in_pid = block_in_pid
        self.calls = 0

    def _score(self, trajectory: Any) -> Score:
        self.calls += 1
        if self.block_in_pid is None or os.getpid() == self.block_in_pid:
            self.entered.set()
            self.release.wait(60)
        return Score(name=self.name, value=1.0, label="pass", explanation="released")


class Raises(Scorer):
    """Raises ``exc`` on its first call only; scores normally afterwards."""

    name = "raises"
    kind = "code"

    def __init__(self, exc: BaseException | None) -> None:
        self.exc = exc
        self.calls = 0

    def _score(self, trajectory: Any) -> Score:
        self.calls += 1
        if self.calls == 1:
            if self.exc is None:  # a real one, not a raised instance
                def deeper(n: int) -> int:
                    return deeper(n + 1) + 1

                deeper(0)
            raise self.exc
        return Score(name=self.name, value=1.0, label="pass", explanation="second call")


class AsyncJudge(Scorer):
    """The LLM scorers' async interface without a model: answers, raises or never answers."""

    kind = "llm"

    def __init__(self, name: str = "judge", first: BaseException | None = None, hang_in_pid: int | None = None,
                 on_call: Any = None) -> None:
        self.name = name
        self.first = first
        self.hang_in_pid = hang_in_pid
        self.on_call = on_call
        self.calls = 0

    async def ascore(self, trajectory: Any) -> Score:
        self.calls += 1
        if self.on_call is not None:
            self.on_call()
        if self.hang_in_pid is not None and os.getpid() == self.hang_in_pid:
            await asyncio.Event().wait()
        await asyncio.sleep(0.01)
        if self.calls == 1 and self.first is not None:
            raise self.first
        return Score(name=self.name, value=0.75, label="good", explanation="judged")

    def _score(self, trajectory: Any) -> Score:  # pragma: no cover - the engine awaits ascore
        raise AssertionError("sync path not used by the processor")


class App:
    """A real TracerProvider with the processor in it, over a recording downstream."""

    def __init__(self, scorers: Any, downstream: SpanProcessor | None = None, shutdown_on_exit: bool = False,
                 **settings: Any) -> None:
        self.logs = InMemoryLogExporter()
        logger_provider = LoggerProvider()
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))
        self.downstream = downstream if downstream is not None else Recorder()
        settings.setdefault("metrics", False)
        self.processor = ToolScoreSpanProcessor(self.downstream, scorers, logger_provider=logger_provider, **settings)
        self.provider = TracerProvider(shutdown_on_exit=shutdown_on_exit)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("app")

    def run(self, name: str = "weather-bot", straggler: bool = False) -> Any:
        """One agent run (``weather_run``, no tool definitions); with ``straggler``, a child left
        open (returned), so the run waits for its grace."""
        return weather_run(self.tracer, name, definitions=False, straggler=straggler)

    def events(self, scorer: str) -> list[Any]:
        return [r.log_record for r in self.logs.get_finished_logs()
                if r.log_record.attributes.get("gen_ai.evaluation.name") == scorer]


def scored(span: ReadableSpan) -> bool:
    return any(k.startswith("toolscore.") for k in span.attributes or {})


def waited(app: App, fn: Any) -> float:
    """How long ``fn`` had the processor wait (for scoring, judges, its threads), on a clock
    that moves only by what the processor asks to wait (tests/support/clock.py)."""
    with SteppedClock(app.processor) as clock:
        fn()
    return clock.waited


# --- shutdown while scoring ----------------------------------------------------------------------


def test_shutdown_while_a_code_scorer_is_mid_run_forwards_the_span_once_unscored_and_stays_bounded() -> None:
    gate = Gate()
    app = App([gate], hold_timeout=60, shutdown_timeout=0.5)
    app.run()
    assert gate.entered.wait(10)
    assert waited(app, app.processor.shutdown) == pytest.approx(0.5)  # shutdown_timeout, no more
    assert app.downstream.names() == Counter({AGENT: 1, "chat m": 2, "execute_tool get_weather": 1})
    assert not scored(app.downstream.agents()[0])
    assert app.downstream.shutdowns == 1
    # The scorer finishes after shutdown: its scores describe a span already gone, the
    # downstream is shut down. Nothing more may reach it, no event may be emitted.
    gate.release.set()
    app.processor._worker.join(10)
    assert not app.processor._worker.is_alive()
    assert app.downstream.after_shutdown == []
    assert app.events("gate") == []


def test_shutdown_with_the_scoring_queue_full_forwards_every_run_once() -> None:
    gate = Gate()
    app = App([gate], hold_timeout=60, shutdown_timeout=0.5, queue_size=1)
    app.run()
    assert gate.entered.wait(10)
    for _ in range(3):  # one waits in the queue, the others find it full
        app.run()
    assert app.processor.stats["dropped_queue_full"] >= 1
    assert waited(app, app.processor.shutdown) == pytest.approx(0.5)
    assert app.downstream.names()[AGENT] == 4
    assert app.downstream.names()["execute_tool get_weather"] == 4
    assert not any(scored(s) for s in app.downstream.agents())
    gate.release.set()
    app.processor._worker.join(10)
    assert not app.processor._worker.is_alive()
    assert gate.calls == 1  # the queued run was not scored after shutdown
    assert app.downstream.after_shutdown == []


def test_force_flush_returns_false_within_its_timeout_while_scoring_hangs() -> None:
    gate = Gate()
    app = App([gate], hold_timeout=60)
    app.run()
    assert gate.entered.wait(10)
    with SteppedClock(app.processor) as clock:
        assert app.processor.force_flush(300) is False
    assert clock.waited == pytest.approx(0.3)  # its timeout, no more
    gate.release.set()
    assert app.processor.force_flush(10_000) is True
    assert scored(app.downstream.agents()[0])
    app.provider.shutdown()


# --- scorers and judges raising what is not an Exception ----------------------------------------


@pytest.mark.parametrize("exc", [KeyboardInterrupt("in a scorer"), SystemExit(3), GeneratorExit(), None,
                                 MemoryError("scorer")], ids=["KeyboardInterrupt", "SystemExit", "GeneratorExit",
                                                              "RecursionError", "MemoryError"])
def test_a_scorer_raising_a_base_exception_is_an_error_score_and_the_worker_goes_on(exc: BaseException | None) -> None:
    app = App([Raises(exc), "tool_call_validation"], hold_timeout=5)
    app.run()
    assert app.processor.force_flush(10_000)
    first = app.downstream.agents()[0]
    expected = type(exc).__name__ if exc is not None else "RecursionError"
    assert first.attributes["toolscore.raises.label"] == "error"
    assert first.attributes["toolscore.raises.error"] == expected
    assert "toolscore.raises.score" not in first.attributes  # a failure is never a 0
    # the other scorer still ran (skipped: the run offers no tool definitions, docs/scorers.md, "No schema is no penalty")
    assert first.attributes["toolscore.tool_call_validation.label"] == "skipped"
    assert app.processor._worker.is_alive()
    app.run()
    assert app.processor.force_flush(10_000)
    second = app.downstream.agents()[1]
    assert second.attributes["toolscore.raises.label"] == "pass"
    assert app.processor.stats["holds_expired"] == 0
    app.provider.shutdown()


@pytest.mark.parametrize("exc", [KeyboardInterrupt("in a judge"), SystemExit(2)], ids=["KeyboardInterrupt", "SystemExit"])
def test_a_judge_raising_a_base_exception_does_not_stop_the_judge_loop(exc: BaseException) -> None:
    app = App([AsyncJudge(first=exc)])
    app.run()
    assert app.processor.force_flush(10_000)
    app.run()
    assert app.processor.force_flush(10_000), "the second run's judgement never finished"
    events = app.events("judge")
    assert len(events) == 2
    assert events[0].attributes["error.type"] == type(exc).__name__
    assert "gen_ai.evaluation.score.value" not in events[0].attributes
    assert events[1].attributes["gen_ai.evaluation.score.value"] == 0.75
    app.provider.shutdown()


# --- downstream processors that raise or hang ---------------------------------------------------


class RaisingEverywhere(Recorder):
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("on_start")

    def _on_ending(self, span: Any) -> None:
        raise RuntimeError("_on_ending")

    def on_end(self, span: ReadableSpan) -> None:
        super().on_end(span)
        raise RuntimeError("on_end")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        raise RuntimeError("force_flush")

    def shutdown(self) -> None:
        super().shutdown()
        raise RuntimeError("shutdown")


def test_a_downstream_raising_in_every_method_never_reaches_the_app() -> None:
    down = RaisingEverywhere()
    app = App(["tool_call_validation"], downstream=down)
    app.run()
    assert app.processor.force_flush(5_000) is False  # the downstream's flush failed
    assert app.provider.force_flush(5_000) is False
    assert down.names()[AGENT] == 1 and scored(down.agents()[0])
    app.provider.shutdown()  # raises nothing
    app.processor.shutdown()  # nor does a second call
    assert down.shutdowns == 1


class SystemExitForHeldSpans(Recorder):
    """Raises SystemExit for agent spans: those are forwarded from the worker or the timer."""

    def on_end(self, span: ReadableSpan) -> None:
        super().on_end(span)
        if span.name.startswith("invoke_agent"):
            raise SystemExit("exporter called sys.exit")


def test_a_downstream_raising_system_exit_for_held_spans_kills_neither_worker_nor_timer() -> None:
    down = SystemExitForHeldSpans()
    app = App(["tool_call_validation"], downstream=down, hold_timeout=5)
    app.run()
    assert app.processor.force_flush(5_000)
    app.run()  # forwarded by the worker again: it survived the first
    assert app.processor.force_flush(5_000)
    assert [scored(s) for s in down.agents()] == [True, True]
    assert app.processor._worker.is_alive()
    app.provider.shutdown()

    # the timer: held spans of a hanging scorer leave at hold_timeout, each forward raising
    down = SystemExitForHeldSpans()
    gate = Gate()
    app = App([gate], downstream=down, hold_timeout=0.3, completion_grace=0.05, queue_size=4)
    app.run()
    assert gate.entered.wait(10)
    assert wait_for(lambda: len(down.agents()) == 1)
    app.run()  # waits behind the stuck worker; only the timer can release it
    assert wait_for(lambda: len(down.agents()) == 2), "the timer died on the first SystemExit"
    assert app.processor._timer.is_alive()
    gate.release.set()
    app.provider.shutdown()
    assert down.names()[AGENT] == 2


class HangsOnFirstAgentSpan(Recorder):
    """Hangs in on_end for the first agent span (forwarded from the worker) until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.hanging = threading.Event()

    def on_end(self, span: ReadableSpan) -> None:
        super().on_end(span)
        if span.name.startswith("invoke_agent") and not self.hanging.is_set():
            self.hanging.set()
            self.release.wait(60)


def test_a_downstream_hanging_in_on_end_for_a_held_span_keeps_holds_and_shutdown_bounded() -> None:
    down = HangsOnFirstAgentSpan()
    app = App(["tool_call_validation"], downstream=down, hold_timeout=0.5, completion_grace=0.05,
              shutdown_timeout=0.5)
    app.run()
    assert down.hanging.wait(10)  # the worker is stuck in the downstream
    app.run()  # behind it: released by the timer at hold_timeout, unscored
    assert wait_for(lambda: len(down.agents()) == 2)
    assert not scored(down.agents()[1])
    app.run()
    assert waited(app, app.provider.shutdown) <= 0.5 + 1e-9
    assert down.names()[AGENT] == 3 and down.names()["execute_tool get_weather"] == 3
    assert down.shutdowns == 1
    down.release.set()
    app.processor._worker.join(10)
    assert not app.processor._worker.is_alive()
    assert down.names()[AGENT] == 3 and down.after_shutdown == []  # still exactly once


# --- shutdown twice, from a scorer, from a judge, during a storm; spans after shutdown ------------


def test_double_and_concurrent_shutdown_shut_the_downstream_down_once() -> None:
    gate = Gate()
    app = App([gate], hold_timeout=60, shutdown_timeout=0.5)
    app.run()
    assert gate.entered.wait(10)
    threads = [threading.Thread(target=app.processor.shutdown) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(0.5 + MARGIN_S)
    assert not any(t.is_alive() for t in threads)
    app.processor.shutdown()
    app.provider.shutdown()
    assert app.downstream.shutdowns == 1
    assert app.downstream.names()[AGENT] == 1
    gate.release.set()


def test_spans_after_shutdown_are_forwarded_unscored_and_nothing_raises() -> None:
    judge = AsyncJudge()
    app = App(["tool_call_validation", judge])
    app.run()
    assert app.processor.force_flush(5_000)
    app.processor.shutdown()
    threads_before = {t for t in threading.enumerate() if t.name.startswith("otel-toolscore")}
    app.run()
    assert app.processor.force_flush(1_000)
    names = Counter(s.name for s in app.downstream.after_shutdown)
    assert names == Counter({AGENT: 1, "chat m": 2, "execute_tool get_weather": 1})  # forwarded at once
    assert not any(scored(s) for s in app.downstream.after_shutdown)
    assert judge.calls == 1
    assert {t for t in threading.enumerate() if t.name.startswith("otel-toolscore")} <= threads_before


class ShutsDown(Scorer):
    """Calls the processor's shutdown from inside scoring (the worker thread)."""

    name = "shuts_down"
    kind = "code"
    processor: ToolScoreSpanProcessor | None = None

    def _score(self, trajectory: Any) -> Score:
        assert self.processor is not None
        self.processor.shutdown()
        return Score(name=self.name, value=1.0, label="pass", explanation="shut down")


def test_shutdown_from_inside_a_scorer_completes_and_forwards_everything() -> None:
    scorer = ShutsDown()
    app = App([scorer], hold_timeout=60, shutdown_timeout=0.5)
    scorer.processor = app.processor
    with SteppedClock(app.processor) as clock:
        app.run()
        assert wait_for(lambda: app.downstream.shutdowns == 1, 0.5 + MARGIN_S), "shutdown did not complete"
    assert clock.waited == 0  # on the worker, it cannot wait for the worker, and does not
    assert app.downstream.names()[AGENT] == 1
    app.processor._worker.join(5)
    assert not app.processor._worker.is_alive()
    app.provider.shutdown()
    assert app.downstream.shutdowns == 1


def test_shutdown_from_inside_a_judge_completes() -> None:
    holder: dict[str, ToolScoreSpanProcessor] = {}
    app = App([AsyncJudge(on_call=lambda: holder["p"].shutdown())], shutdown_timeout=0.5)
    holder["p"] = app.processor
    app.run()
    assert wait_for(lambda: app.downstream.shutdowns == 1, 0.5 + MARGIN_S), "shutdown did not complete"
    assert app.downstream.names()[AGENT] == 1
    # the judge loop is shared (it stays for other engines and closes at exit): this engine's
    # runs are all done or cancelled, and it takes no more
    judges = app.processor._engine._judges
    assert wait_for(lambda: judges._inflight == 0, MARGIN_S)
    assert judges._closing


def test_shutdown_during_an_on_end_storm_loses_and_duplicates_nothing() -> None:
    class Witness(SpanProcessor):
        """Added before the processor: sees every span the app ends."""

        def __init__(self) -> None:
            self.ids: list[int] = []
            self._lock = threading.Lock()

        def on_end(self, span: ReadableSpan) -> None:
            with self._lock:
                self.ids.append(span.context.span_id)

    witness = Witness()
    app = App(["tool_call_validation"], hold_timeout=2, completion_grace=0.05, shutdown_timeout=1)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(witness)
    provider.add_span_processor(app.processor)
    app.tracer = provider.get_tracer("storm")
    stop = threading.Event()
    errors: list[BaseException] = []

    def storm() -> None:
        try:
            while not stop.is_set():
                app.run()
        except BaseException as exc:  # noqa: BLE001 - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=storm) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert waited(app, app.processor.shutdown) <= 1 + 1e-9
    time.sleep(0.1)  # runs still start and end after shutdown
    stop.set()
    for t in threads:
        t.join(10)
    assert errors == []
    forwarded = Counter(s.context.span_id for s in app.downstream.spans + app.downstream.after_shutdown
                        if s.instrumentation_scope.name != "otel_toolscore")
    assert forwarded == Counter(witness.ids)  # every span once, none twice
    assert len(witness.ids) > 40


# --- fork ------------------------------------------------------------------------------------


def in_child(fn: Any) -> tuple[int, dict[str, Any]]:
    """Fork; run ``fn`` in the child, which sends back a JSON result; (exit status, result)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            result = fn()
            os.write(write, json.dumps(result).encode())
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(write, json.dumps({"error": repr(exc)}).encode())
        finally:
            sys.stderr.flush()  # os._exit does not flush (an at-fork hook's error is printed there)
            os._exit(code)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), json.loads(b"".join(chunks) or b"{}")


@needs_fork
def test_fork_with_spans_held_and_the_worker_busy() -> None:
    gate = Gate(block_in_pid=os.getpid())
    memory = InMemorySpanExporter()
    app = App([gate, "tool_call_validation"], downstream=SimpleSpanProcessor(memory), hold_timeout=60)
    app.run("parent-one")
    assert gate.entered.wait(10)  # the worker is busy with it; its agent span is held
    app.run("parent-two")  # queued behind it, held too

    def child() -> dict[str, Any]:
        memory.clear()  # the parent's exported spans, copied into the child
        app.run("child")
        flushed = app.processor.force_flush(10_000)
        app.processor.shutdown()
        agents = [(s.name, scored(s)) for s in memory.get_finished_spans() if s.name.startswith("invoke_agent")]
        return {"flushed": flushed, "agents": agents}

    code, result = in_child(child)
    assert code == 0, result
    # the child scores its own run; the parent's held spans are the parent's to forward
    assert result == {"flushed": True, "agents": [["invoke_agent child", True]]}
    gate.release.set()
    assert app.processor.force_flush(10_000)
    agents = Counter((s.name, scored(s)) for s in memory.get_finished_spans() if s.name.startswith("invoke_agent"))
    assert agents == Counter({("invoke_agent parent-one", True): 1, ("invoke_agent parent-two", True): 1})
    app.provider.shutdown()


@needs_fork
def test_fork_with_a_judge_in_flight_gives_the_child_a_working_judge_loop() -> None:
    judge = AsyncJudge(hang_in_pid=os.getpid())
    app = App(["tool_call_validation", judge], shutdown_timeout=0.5)
    app.run("parent")
    assert wait_for(lambda: judge.calls == 1)  # in flight, never answering in the parent

    def child() -> dict[str, Any]:
        app.logs.clear()
        app.run("child")
        flushed = app.processor.force_flush(10_000)
        values = [r.attributes.get("gen_ai.evaluation.score.value") for r in app.events("judge")]
        return {"flushed": flushed, "values": values}

    code, result = in_child(child)
    assert code == 0, result
    assert result == {"flushed": True, "values": [0.75]}
    assert app.processor.force_flush(300) is False  # the parent's judge is still in flight
    assert waited(app, app.provider.shutdown) <= 0.5 + 1e-9


@needs_fork
def test_fork_while_another_thread_starts_the_judges_loop_leaves_the_child_a_usable_one() -> None:
    """The judges' shared loop is started under a lock; a fork while another thread holds it
    must not leave the child's lock held by a thread the child does not have."""
    from otel_toolscore.scorers._loop import _LoopThread

    runner = _LoopThread()
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with runner._lock:
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(5)

    def child() -> dict[str, Any]:
        got: list[Any] = []
        starter = threading.Thread(target=lambda: got.append(runner.loop()), daemon=True)
        starter.start()
        starter.join(5)
        return {"loop": bool(got) and got[0].is_running()}

    try:
        code, result = in_child(child)
    finally:
        release.set()
        holder.join(5)
    assert code == 0, result
    assert result == {"loop": True}
    runner.close()


@needs_fork
def test_a_processor_shut_down_before_fork_stays_shut_down_in_the_child() -> None:
    app = App(["tool_call_validation"])
    app.processor.shutdown()

    def child() -> dict[str, Any]:
        app.run()
        threads = [app.processor._worker, app.processor._timer]
        return {"threads": sum(t.is_alive() for t in threads), "forwarded": len(app.downstream.after_shutdown),
                "scored": any(map(scored, app.downstream.after_shutdown))}

    code, result = in_child(child)
    assert code == 0, result
    assert result == {"threads": 0, "forwarded": 4, "scored": False}


@needs_fork
def test_fork_after_a_processor_was_collected_prints_no_error(capfd: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import gc
    import weakref

    # An at-fork hook's exception goes to sys.unraisablehook (pytest collects those itself):
    # straight to the child's stderr here.
    monkeypatch.setattr(sys, "unraisablehook",
                        lambda u: os.write(2, f"Exception ignored: {u.exc_value!r}\n".encode()))
    app = App(["tool_call_validation"])
    app.provider.shutdown()
    collected = weakref.ref(app.processor)
    del app
    gc.collect()
    assert collected() is None
    code, result = in_child(lambda: {"ok": True})
    assert code == 0 and result == {"ok": True}
    assert "Exception ignored" not in capfd.readouterr().err


# --- interpreter exit (subprocesses) ----------------------------------------------------------------

PRELUDE = textwrap.dedent(
    """
    import atexit, json, os, sys, threading, time
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
    from otel_toolscore.scorers.base import Score, Scorer
    from tests.test_reliability import App

    def line(span):
        keys = sorted(k for k in span.attributes if k.startswith("toolscore."))
        return json.dumps({{"name": span.name, "toolscore": keys}}) + "\\n"

    exporter = ConsoleSpanExporter(out=open({out!r}, "w"), formatter=line)

    # What the processor asks to wait for, reported once its atexit shutdown is over (registered
    # before the provider's hook, so it runs after it): the test asserts on that, not on a clock.
    WAITS = []
    atexit.register(lambda: print("waited", sum(WAITS), flush=True))

    def record_waits(processor):
        real = processor._scoring.wait

        def wait(idle, timeout):
            WAITS.append(timeout)
            return real(idle, timeout)

        processor._scoring.wait = wait
    """
)


def run_script(tmp_path: Path, body: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float, list[dict[str, Any]]]:
    """Run a script; (the process, what its processor asked to wait for at exit, as its "waited"
    line says, spans exported). ``timeout`` only detects a hang."""
    out = tmp_path / "spans.jsonl"
    script = PRELUDE.format(out=str(out)) + textwrap.dedent(body)
    # cwd: the repository, so that the script imports ``tests``
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout,
                          env=without_otel("LITELLM_"), cwd=REPO, check=False)
    marks = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("waited ")]
    waited = float(marks[-1]) if marks else float("nan")
    spans = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    return proc, waited, spans


def test_exit_without_shutdown_exports_a_held_span_scored(tmp_path: Path) -> None:
    """The SDK TracerProvider shuts its processors down at exit (atexit): an agent span still
    held then (its trace has an open child, the grace period is long) is scored and exported."""
    proc, waited, spans = run_script(tmp_path, """
        from opentelemetry.trace import use_span

        app = App(["tool_call_validation"], downstream=BatchSpanProcessor(exporter), shutdown_on_exit=True,
                  hold_timeout=60, completion_grace=60)
        processor = app.processor
        record_waits(processor)
        root = app.tracer.start_span("request")  # never ends
        with use_span(root, end_on_exit=False):
            app.run(straggler=True)  # the run waits for completion_grace
        time.sleep(0.2)
        assert processor._holds and not processor._holds[0].released, "not held at exit"
        print("exiting", time.monotonic(), flush=True)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "exiting" in proc.stdout
    # it waited for the run's scoring, not for the 60 s grace or hold
    assert waited <= 5.0, waited  # shutdown_timeout (the default)
    agents = [s for s in spans if s["name"] == AGENT]
    assert len(agents) == 1
    assert "toolscore.tool_call_validation.label" in agents[0]["toolscore"]


def test_exit_with_a_hanging_scorer_and_a_hanging_judge_is_bounded(tmp_path: Path) -> None:
    """A real litellm judge against a port that never answers, and a code scorer that never
    returns: the interpreter still exits (atexit shutdown, no explicit one) within
    shutdown_timeout and a margin, with every agent span exported once."""
    proc, waited, spans = run_script(tmp_path, """
        import socket
        from tests.support.clock import SteppedClock
        from otel_toolscore.scorers import get_scorer

        hole = socket.socket()
        hole.bind(("127.0.0.1", 0))
        hole.listen(16)  # a judge that takes the request and never answers
        judge = get_scorer("tool_call_appropriateness", model="openai/judge-test", api_key="sk-test",
                           api_base="http://127.0.0.1:%d/v1" % hole.getsockname()[1], timeout_s=600,
                           max_retries=0, cache_size=0)

        class HangsOnSecondRun(Scorer):
            name = "hangs"
            kind = "code"
            calls = 0

            def _score(self, trajectory):
                HangsOnSecondRun.calls += 1
                if HangsOnSecondRun.calls == 2:
                    threading.Event().wait()  # forever
                return Score(name=self.name, value=1.0, label="pass", explanation="ok")

        app = App([HangsOnSecondRun(), judge], downstream=BatchSpanProcessor(exporter), shutdown_on_exit=True,
                  hold_timeout=60, shutdown_timeout=1)
        processor = app.processor
        WAITS = SteppedClock(processor).__enter__().waits  # its waits pass at once, recorded
        app.run("first")
        hole.settimeout(90)
        held = hole.accept()  # the judge's request is on its way; it is never read
        app.run("second")
        deadline = time.monotonic() + 30
        while HangsOnSecondRun.calls < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        print("exiting", time.monotonic(), flush=True)
    """)
    assert proc.returncode == 0, proc.stderr
    assert waited == pytest.approx(1.0), waited  # shutdown_timeout: the hanging scorer and judge waited out, no more
    names = Counter(s["name"] for s in spans)
    assert names["invoke_agent first"] == 1 and names["invoke_agent second"] == 1
    first = next(s for s in spans if s["name"] == "invoke_agent first")
    second = next(s for s in spans if s["name"] == "invoke_agent second")
    assert "toolscore.hangs.label" in first["toolscore"] and second["toolscore"] == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_the_first_judgement_imports_litellm(tmp_path: Path) -> None:
    """The first judgement imports litellm on a background thread (seconds). A fork then must
    not leave the child with litellm's import lock held by a thread it does not have: the
    child's judges answer, and so do the parent's."""
    proc, _, _ = run_script(tmp_path, """
        from tests.support.judge_server import JudgeServer, auto_responder
        from otel_toolscore.scorers import get_scorer

        server = JudgeServer(auto_responder()).start()
        judge = get_scorer("tool_call_appropriateness", model="openai/judge-test", api_key="sk-test",
                           api_base=server.url, timeout_s=30, max_retries=0, cache_size=0)
        app = App(["tool_call_validation", judge])
        app.run("parent")
        deadline = time.monotonic() + 60
        while "litellm" not in sys.modules and time.monotonic() < deadline:
            time.sleep(0.001)
        assert "litellm" in sys.modules
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                app.logs.clear()
                app.run("child")
                ok = app.processor.force_flush(60_000)
                values = [r.attributes.get("gen_ai.evaluation.score.value")
                          for r in app.events("tool_call_appropriateness")]
                print("child", ok, values, flush=True)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print("parent", app.processor.force_flush(60_000), len(app.events("tool_call_appropriateness")), flush=True)
        app.provider.shutdown()
        server.stop()
    """, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "child True [1.0]" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert "parent True 1" in proc.stdout
