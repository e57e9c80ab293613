"""``scoring="process"``: code scorers in a child process, the processor's guarantees unchanged.

The same fixtures, captures and real conversations as ``test_three_paths`` give the exporter the
same spans, events and metrics in both modes; a child killed mid-run loses no span and is
replaced; shutdown with runs in flight and a fork of the app keep every span exactly once."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from otel_toolscore import read_otlp_json
from otel_toolscore.config import ConfigError, load_settings
from otel_toolscore.runtime._scoring_process import OUTCOME_DIED, ScoringProcessError
from otel_toolscore.runtime.processor import ToolScoreSpanProcessor
from otel_toolscore.runtime.replay import replay
from otel_toolscore.scorers.base import Score, Scorer
from tests.support import paths
from tests.support.clock import SteppedClock
from tests.support.pipeline import Pipeline, id_counts
from tests.support.spans import weather_run
from tests.support.timing import wait_for
from tests.test_three_paths import FILES

# --- what reaches the exporter, without what differs from run to run (ids drawn, clocks) ---------


def _spans(p: Pipeline) -> list[Any]:
    out = []
    for s in p.exported():
        parent = s.parent.span_id if s.parent else None
        # evaluation spans get fresh ids: keyed by what they evaluate
        own = None if s.name.startswith("evaluation ") else s.context.span_id
        out.append((s.context.trace_id, own, parent, s.name, sorted((s.attributes or {}).items())))
    return sorted(out, key=repr)


def _events(p: Pipeline) -> list[Any]:
    out = []
    for item in p.logs.get_finished_logs():
        record = getattr(item, "log_record", item)
        out.append((record.trace_id, record.span_id, record.severity_number.value, record.event_name,
                    sorted((record.attributes or {}).items())))
    return sorted(out, key=repr)


def _metrics(p: Pipeline) -> list[Any]:
    data = p.metrics.get_metrics_data()
    out = []
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for point in m.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = (point.count, point.sum, tuple(point.bucket_counts))
                    out.append((m.name, sorted(point.attributes.items()), value))
    return sorted(out, key=repr)


def _replay_all(p: Pipeline, files: list[Path]) -> None:
    for path in files:
        replay(read_otlp_json(path), p.processor)
        assert p.processor.force_flush(60_000)


def test_the_exporter_gets_the_same_from_both_modes() -> None:
    # (every output, evaluation spans included: evaluation_spans=True)
    thread, process = Pipeline(scoring="thread", evaluation_spans=True), Pipeline(scoring="process", evaluation_spans=True)
    for p in (thread, process):
        _replay_all(p, FILES)
    try:
        assert process.processor._remote is not None and process.processor._remote.stats["started"] == 1
        spans = _spans(thread)
        assert sum(1 for s in spans if s[3].startswith("evaluation ")) > 100  # runs were scored
        assert _spans(process) == spans
        assert _events(process) == _events(thread)
        assert _metrics(process) == _metrics(thread)
    finally:
        for p in (thread, process):
            p.processor.shutdown()


def test_per_call_events_prepared_in_the_child_are_the_threads() -> None:
    # Every call's event (call_events="all"), pinned to its call's span in the child; cut
    # explanations: what the child prepares is what the worker thread prepares.
    files = paths.traces(paths.FIXTURES)
    settings = {"call_events": "all", "explanation_max_chars": 24}
    thread, process = Pipeline(scoring="thread", **settings), Pipeline(scoring="process", **settings)
    for p in (thread, process):
        _replay_all(p, files)
    try:
        events = _events(thread)
        assert sum(1 for e in events if any(k == "gen_ai.tool.call.id" for k, _ in e[4])) > 50
        assert _events(process) == events
        assert _spans(process) == _spans(thread)
        assert _metrics(process) == _metrics(thread)
    finally:
        for p in (thread, process):
            p.processor.shutdown()


# --- scorers that take their time, importable by the child ----------------------------------------


class Slow(Scorer):
    """Takes ``seconds``; with a ``marker``, only the first time: it creates the file as it starts."""

    name = "slow"
    kind = "code"

    def __init__(self, seconds: float, marker: str | None = None) -> None:
        self.seconds = seconds
        self.marker = marker

    def _score(self, trajectory: Any) -> Score:
        if self.marker is None:
            time.sleep(self.seconds)
        elif not os.path.exists(self.marker):
            Path(self.marker).touch()
            time.sleep(self.seconds)
        return Score(name=self.name, value=1.0, label="pass")


def _setup(scorers: Any, **settings: Any) -> tuple[Pipeline, Any]:
    p = Pipeline(scorers, scoring="process", **settings)
    provider = TracerProvider()
    provider.add_span_processor(p.processor)
    return p, provider.get_tracer("app")


def _agents(p: Pipeline) -> list[ReadableSpan]:
    return [s for s in p.exported() if s.name.startswith("invoke_agent")]


def _outcomes(p: Pipeline) -> dict[tuple[str, str], int]:
    return {(dict(pt.attributes)["gen_ai.evaluation.name"], dict(pt.attributes)["outcome"]): pt.value
            for pt in p.metric_points("toolscore.evaluations")}


def test_a_child_killed_mid_run_loses_no_span_and_is_replaced(tmp_path: Path) -> None:
    marker = tmp_path / "scoring"
    p, tracer = _setup([Slow(60.0, str(marker)), "tool_call_validation"], hold_timeout=60.0)
    remote = p.processor._remote
    assert remote is not None
    weather_run(tracer)
    assert wait_for(marker.exists, 60)  # the child is scoring the run now
    first = remote.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    assert wait_for(lambda: bool(_agents(p)), 30)  # released on the child's death, long before hold_timeout
    assert "toolscore.scored" not in _agents(p)[0].attributes
    assert p.processor.stats[f"runs_{OUTCOME_DIED}"] == 1 and remote.stats["died"] == 1
    # the next run: a new child (the marker is there: no sleep), scored
    weather_run(tracer)
    assert p.processor.force_flush(60_000)
    assert remote.pid not in (None, first)
    agents = _agents(p)
    assert len(agents) == 2 and "toolscore.slow.label" in agents[-1].attributes
    assert max(id_counts(p.exported()).values()) == 1  # nothing twice
    outcomes = _outcomes(p)
    assert outcomes[("slow", OUTCOME_DIED)] == outcomes[("tool_call_validation", OUTCOME_DIED)] == 1
    assert outcomes[("slow", "scored")] == outcomes[("tool_call_validation", "scored")] == 1
    p.processor.shutdown()
    assert remote.pid is None or _gone(remote.pid)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_hung_child_is_bounded_by_the_hold_and_then_replaced(tmp_path: Path) -> None:
    p, tracer = _setup([Slow(3600.0)], hold_timeout=0.3)
    remote = p.processor._remote
    assert remote is not None
    remote.hung_after = 1.0
    weather_run(tracer)
    assert wait_for(lambda: bool(_agents(p)), 30)
    assert p.processor.stats["holds_expired"] == 1  # the hold ran out: the span left unscored
    # then the silent child was killed
    assert wait_for(lambda: p.processor.stats[f"runs_{OUTCOME_DIED}"] >= 1, 30)
    assert _outcomes(p)[("slow", OUTCOME_DIED)] == 1
    p.processor.shutdown()
    assert len(_agents(p)) == 1


def test_shutdown_with_runs_in_flight_forwards_everything_once() -> None:
    p, tracer = _setup([Slow(0.25), "tool_call_validation"], hold_timeout=30.0, shutdown_timeout=1.0)
    for _ in range(12):
        weather_run(tracer)
    assert wait_for(lambda: any("toolscore.slow.label" in s.attributes for s in _agents(p)), 60)  # the child scores
    with SteppedClock(p.processor) as clock:
        p.processor.shutdown()
    # it waited for the runs in flight shutdown_timeout and no longer (the joins and the child's
    # stop were given what was left of it: nothing)
    assert clock.waited == pytest.approx(1.0)
    agents = _agents(p)
    assert len(agents) == 12
    assert max(id_counts(p.exported()).values()) == 1
    scored = sum("toolscore.slow.label" in s.attributes for s in agents)
    assert 0 < scored < 12
    outcomes = _outcomes(p)
    # every run counted once: scored, or not scored (left unscored at shutdown)
    assert sum(n for (name, _), n in outcomes.items() if name == "slow") == 12
    assert outcomes[("slow", "scored")] == scored


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_fork_of_the_app_gets_its_own_scoring_process() -> None:
    p, tracer = _setup(None)
    weather_run(tracer)
    assert p.processor.force_flush(60_000)
    remote = p.processor._remote
    assert remote is not None
    parent_child = remote.pid
    assert parent_child is not None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the app's fork: no share in the parent's child or its pipes; its own when needed
        code = 1
        try:
            os.close(read_end)
            code = 3 if remote.pid is not None else 2  # the parent's child is not the fork's
            if code == 2:
                p.spans.clear()
                weather_run(tracer)
                ok = p.processor.force_flush(60_000)
                agents = _agents(p)
                scored = ok and len(agents) == 1 and "toolscore.tool_call_validation.label" in agents[0].attributes
                code = 0 if scored and remote.pid not in (None, parent_child) else 4
            os.write(write_end, str(remote.pid).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    forked_child = os.read(read_end, 64).decode()
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert forked_child != str(parent_child)
    # the parent's child was neither shared nor stopped by the fork's exit
    p.spans.clear()
    weather_run(tracer)
    assert p.processor.force_flush(60_000)
    assert remote.pid == parent_child and remote.stats["died"] == 0
    assert "toolscore.tool_call_validation.label" in _agents(p)[0].attributes
    p.processor.shutdown()
    assert _gone(parent_child) or _wait_gone(parent_child)


def _wait_gone(pid: int) -> bool:
    return wait_for(lambda: _gone(pid), 10)


# --- construction and settings ---------------------------------------------------------------------


class Unpicklable(Scorer):
    name = "unpicklable"
    kind = "code"

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def _score(self, trajectory: Any) -> Score:
        return Score(name=self.name, value=1.0)


def test_a_scorer_that_cannot_cross_fails_at_construction() -> None:
    with pytest.raises(ScoringProcessError, match="scoring='thread'"):
        Pipeline([Unpicklable()], scoring="process")
    Pipeline([Unpicklable()], scoring="thread").processor.shutdown()  # fine in process


def test_the_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert load_settings().scoring == "thread"
    monkeypatch.setenv("OTEL_TOOLSCORE_SCORING", "process")
    assert load_settings().scoring == "process"
    monkeypatch.delenv("OTEL_TOOLSCORE_SCORING")
    config = tmp_path / "c.yaml"
    config.write_text("scoring: process\n")
    assert load_settings(config).scoring == "process"
    with pytest.raises(ConfigError, match="scoring"):
        load_settings(scoring="fork")
    processor = ToolScoreSpanProcessor(Pipeline().downstream, settings=load_settings(), scoring="process")
    assert processor.settings.scoring == "process" and processor._remote is not None
    processor.shutdown()
    with pytest.raises(ValueError, match="scoring"):
        ToolScoreSpanProcessor(Pipeline().downstream, scoring="fork")


def test_llm_judges_stay_in_the_app_and_get_the_whole_trajectory() -> None:
    from tests.test_processor import AsyncJudge

    judge = AsyncJudge(delay=0.05)  # not sent to the child: judges wait on the network, not the GIL
    p, tracer = _setup(["tool_call_validation", judge])
    weather_run(tracer)
    assert p.processor.force_flush(60_000)
    agent = _agents(p)[0]
    assert "toolscore.tool_call_validation.label" in agent.attributes
    assert judge.calls == 1
    records = [r.log_record for r in p.logs.get_finished_logs()]
    judged = [r for r in records if r.attributes.get("gen_ai.evaluation.name") == "judge"]
    # the explanation counts the run's tool calls: the trajectory came back whole for the judge
    assert judged and judged[0].attributes["gen_ai.evaluation.explanation"] == "1 calls"
    p.processor.shutdown()


def test_install_takes_the_setting() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_toolscore import install

    p = Pipeline()
    processor = install(TracerProvider(), span_exporter=InMemorySpanExporter(), meter_provider=p.meter_provider,
                        logger_provider=p.logger_provider, set_global=False, scoring="process")
    assert processor is not None and processor.settings.scoring == "process" and processor._remote is not None
    processor.shutdown()
    p.processor.shutdown()


def test_the_apps_garbage_collector_is_left_as_it_was_in_both_modes() -> None:
    # Only processes that are ours alone (the scoring child, `serve`) tune the collector.
    import gc
    import subprocess
    import sys

    before = (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled())
    for mode in ("thread", "process"):
        p = Pipeline(scoring=mode)
        _replay_all(p, FILES[:5])
        p.processor.shutdown()
        assert any("toolscore.tool_call_validation.label" in (s.attributes or {}) for s in p.exported())
        assert (gc.get_threshold(), gc.get_freeze_count(), gc.isenabled()) == before, mode
    own = subprocess.run(
        [sys.executable, "-c", "import gc; from otel_toolscore.runtime._own_process import GC_GEN0, tune_gc; "
         "tune_gc(); print(gc.get_threshold()[0] == GC_GEN0 != 700, gc.get_freeze_count() > 0)"],
        capture_output=True, text=True, check=True)
    assert own.stdout.split() == ["True", "True"]


def test_tool_schemas_cross_to_the_scoring_process() -> None:
    """The compiled validators do not pickle: the scorer crosses without them, the child compiles
    its own, and both modes check the arguments alike (issue 30)."""
    schemas = {"get_weather": {"type": "object", "properties": {"city": {"type": "integer"}},
                               "required": ["city"]}}
    thread, process = Pipeline(scoring="thread", tool_schemas=schemas), Pipeline(scoring="process", tool_schemas=schemas)
    try:
        for p in (thread, process):
            _replay_all(p, FILES)
        scored = [a.attributes.get("toolscore.tool_call_validation.score") for a in _agents(process)]
        assert any(score is not None and score < 1 for score in scored)  # the schema was applied in the child
        assert _spans(process) == _spans(thread)
    finally:
        for p in (thread, process):
            p.processor.shutdown()


# --- tool schemas: the schemas cross the pipe, the child compiles them (issue 30) -----------------

_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"),
               (dict, "object"))


def _json_type(value: Any) -> str | None:
    return next((name for kind, name in _JSON_TYPES if type(value) is kind), None)


def _schemas_of(files: list[Path]) -> dict[str, Any]:
    """A schema for every tool called in ``files``: each argument typed as recorded, required
    when every call gave it; every other tool's first argument typed wrong, so that both modes
    have failures to agree on as well as passes."""
    from otel_toolscore.assemble import build_trajectories

    seen: dict[str, list[dict[str, Any]]] = {}
    for path in files:
        for traj in build_trajectories(read_otlp_json(path)):
            for call in traj.tool_calls:
                if call.name:
                    seen.setdefault(call.name, []).append(call.arguments if isinstance(call.arguments, dict) else {})
    schemas: dict[str, Any] = {}
    for i, (name, calls) in enumerate(sorted(seen.items())):
        props: dict[str, Any] = {}
        for args in calls:
            for key, value in args.items():
                kind = _json_type(value)
                if kind is not None and props.get(key, {"type": kind}) == {"type": kind}:
                    props[key] = {"type": kind}
                else:
                    props[key] = {}  # types differ between calls: anything
        required = sorted(k for k in props if all(k in args for args in calls))
        typed = [k for k in props if props[k]]
        if i % 2 and typed:
            props[typed[0]] = {"type": "null"}
        schemas[name] = {"type": "object", "properties": props, "required": required}
    return schemas


def test_what_crosses_to_the_scoring_process_is_schemas_not_validators() -> None:
    import pickle

    from otel_toolscore.scorers.tool_validation import ToolCallValidation

    schemas = _schemas_of(FILES)
    assert len(schemas) >= 5
    p = Pipeline(scoring="process", tool_schemas=schemas)
    try:
        remote = p.processor._remote
        assert remote is not None
        _, sent = pickle.loads(remote._spec)
        # no compiled validator, nor anything of jsonschema, in what the child is sent
        assert b"jsonschema" not in sent and b"CompiledSchema" not in sent
        _, scorers = pickle.loads(sent)  # as the child reads it: the schemas, compiled there
        validation = next(s for s in scorers if isinstance(s, ToolCallValidation))
        assert {name: spec.schema for name, spec in validation.specs.items()} == schemas
        assert {spec.name for spec, _ in validation._compiled.values()} == set(schemas)
    finally:
        p.processor.shutdown()


def test_tool_schemas_on_every_fixture_score_the_same_in_both_modes() -> None:
    schemas = _schemas_of(FILES)
    thread, process = Pipeline(scoring="thread", tool_schemas=schemas), Pipeline(scoring="process", tool_schemas=schemas)
    try:
        for p in (thread, process):
            _replay_all(p, FILES)
        assert process.processor._remote is not None and process.processor._remote.stats["started"] == 1
        scores = [a.attributes.get("toolscore.tool_call_validation.score") for a in _agents(thread)]
        checked = [s for s in scores if s is not None]
        assert any(s == 1 for s in checked) and any(s < 1 for s in checked)  # passes and failures
        assert _spans(process) == _spans(thread)
        assert _events(process) == _events(thread)
        assert _metrics(process) == _metrics(thread)
    finally:
        for p in (thread, process):
            p.processor.shutdown()
