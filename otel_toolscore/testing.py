"""pytest plugin: assert on agent trajectories and scores in unit tests.

Installed with the package (entry point ``pytest11``), it provides the ``toolscore`` fixture::

    def test_weather_agent(toolscore):
        my_agent.run("What is the weather in Oslo?")      # instrumented code under test
        toolscore.assert_tool_called("get_weather")
        toolscore.assert_valid_arguments()
        toolscore.assert_score("tool_result_verification", at_least=0.8)

The fixture captures every span that ends during the test, in memory, from the global
OpenTelemetry tracer provider:

* if the app already set an SDK ``TracerProvider`` as the global one, a capture processor is
  added to it; the SDK cannot remove a processor, so it is a switch that captures only while a
  test using the fixture runs (one switch per provider, re-aimed at each test's capture);
* if no provider is set, an SDK ``TracerProvider`` carrying the switch becomes the global one.
  It stays global after the test with the capture switched off, because the OpenTelemetry API
  lets the global provider be set only once per process and tracers cache it;
* code that uses its own provider: ``toolscore.attach(provider)``.

Assertions check every top-level agent run captured (sub-agent runs are part of their outer
run), or the one given as ``run=``; they fail with what was called, with which arguments, what
was expected and every issue the scorer found.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_toolscore.assemble import build_trajectories
from otel_toolscore.scorers.base import Score, Scorer, build_scorers
from otel_toolscore.scorers.run import run_scorers
from otel_toolscore.scorers.tool_call_accuracy import ToolCallAccuracy
from otel_toolscore.scorers.tool_results import ToolResultVerification
from otel_toolscore.scorers.tool_validation import ToolCallValidation
from otel_toolscore.trajectory import Trajectory

__all__ = ["ToolScoreCapture", "toolscore"]

_MAX_VALUE_CHARS = 200
_MAX_CALLS_SHOWN = 30
_HALLUCINATION_ISSUES = ("hallucinated_content", "contradicts_response")

class _CaptureSwitch(SpanProcessor):
    """Forwards to ``target`` while it is set; does nothing otherwise."""

    def __init__(self) -> None:
        self.target: SpanProcessor | None = None

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        target = self.target
        if target is not None:
            target.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        target = self.target
        if target is not None:
            target.on_end(span)

    def shutdown(self) -> None:
        self.target = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        target = self.target
        return target.force_flush(timeout_millis) if target is not None else True


_switches: weakref.WeakKeyDictionary[TracerProvider, _CaptureSwitch] = weakref.WeakKeyDictionary()
_switches_lock = threading.Lock()


def _capture_switch(provider: TracerProvider) -> _CaptureSwitch:
    """The provider's one capture processor, added on first use (the SDK has no remove)."""
    with _switches_lock:
        switch = _switches.get(provider)
        if switch is None:
            switch = _switches[provider] = _CaptureSwitch()
            provider.add_span_processor(switch)
    return switch


def _global_sdk_provider() -> TracerProvider:
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    if isinstance(current, trace.ProxyTracerProvider):
        trace.set_tracer_provider(TracerProvider())
        current = trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            return current
    raise pytest.UsageError(
        f"toolscore: the global tracer provider is a {type(current).__name__}, not the OpenTelemetry "
        "SDK's TracerProvider, so spans cannot be captured from it; pass your provider to "
        "toolscore.attach(provider)"
    )


# --- describing what happened -------------------------------------------------------------------


def _short(value: Any, limit: int = _MAX_VALUE_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _run_name(traj: Trajectory) -> str:
    name = repr(traj.agent_name) if traj.agent_name else "(no agent span)"
    return f"run {name} (trace {traj.trace_id}, span {traj.span_id})"


def _calls(traj: Trajectory) -> list[str]:
    calls = traj.tool_calls
    if not calls:
        return ["  tools called: none"]
    lines = [f"  tools called ({len(calls)}):"]
    for i, call in enumerate(calls[:_MAX_CALLS_SHOWN], 1):
        if call.arguments_error is not None:
            args = f"{_short(call.arguments_raw or '')} [unreadable: {call.arguments_error}]"
        else:
            args = _short(call.arguments) if call.arguments is not None else ""
        line = f"    {i}. {call.name or '(no name)'}({args})"
        if call.error is not None:
            line += f" -> error: {_short(call.error)}"
        elif call.has_result:
            line += f" -> {_short(call.result if call.result is not None else call.result_raw)}"
        lines.append(line)
    if len(calls) > _MAX_CALLS_SHOWN:
        lines.append(f"    … {len(calls) - _MAX_CALLS_SHOWN} more")
    return lines


def _issue_lines(score: Score, types: Sequence[str] | None = None) -> list[str]:
    lines = []
    for call in score.calls:
        for issue in call.issues:
            if types is not None and issue.type not in types:
                continue
            where = f" at {issue.path}" if issue.path else ""
            lines.append(f"    call {call.index + 1} {call.name}: {issue.type}{where} "
                         f"({issue.severity}): {issue.message}")
    return lines


def _score_line(score: Score) -> str:
    value = "no value" if score.value is None else f"{score.value:g}"
    label = f" [{score.label}]" if score.label else ""
    error = f" error={score.error}" if score.error else ""
    return f"  {score.name} = {value}{label}{error}: {score.explanation}"


# --- the capture ----------------------------------------------------------------------------------


class ToolScoreCapture:
    """Spans captured during one test, their trajectories, scores and assertions on them."""

    def __init__(self) -> None:
        self._exporter = InMemorySpanExporter()
        self._target: SpanProcessor = SimpleSpanProcessor(self._exporter)
        self._attached: list[_CaptureSwitch] = []
        self.tracer_provider: TracerProvider | None = None

    # life cycle

    def start(self) -> None:
        """Capture from the global SDK tracer provider (set one if none is)."""
        self.tracer_provider = _global_sdk_provider()
        self.attach(self.tracer_provider)

    def attach(self, provider: TracerProvider) -> None:
        """Also capture spans from ``provider`` (an SDK TracerProvider) until the test ends."""
        switch = _capture_switch(provider)
        switch.target = self._target
        self._attached.append(switch)

    def stop(self) -> None:
        for switch in self._attached:
            if switch.target is self._target:
                switch.target = None
        self._attached.clear()

    def clear(self) -> None:
        """Forget the spans captured so far."""
        self._exporter.clear()

    # what was captured

    def spans(self) -> list[ReadableSpan]:
        """Every span that ended since the test started (or since ``clear()``)."""
        return list(self._exporter.get_finished_spans())

    def trajectories(self) -> list[Trajectory]:
        """One trajectory per agent run in the captured spans (nested sub-agent runs included)."""
        return build_trajectories(self.spans())

    def score(self, scorer: str | Scorer, *, run: Trajectory | None = None, **options: Any) -> list[Score]:
        """Score every run (or ``run``) with a scorer given by name (with its options) or as an object.

        With no run captured it fails (as the assertions do) rather than return no scores, which
        ``all(s.value >= 0.8 for s in toolscore.score(...))`` would take for a pass. A score that
        could not be made is returned as it is: ``error`` set (the scorer or its judge failed),
        or no value with a label saying why (``skipped``, ``not_applicable``...).
        """
        __tracebackhide__ = True  # failures point at the test, not at the plugin
        if isinstance(scorer, str):
            built = build_scorers([scorer], {scorer: options})[0]
        elif options:
            raise TypeError("options are for a scorer given by name; configure a scorer object yourself")
        else:
            built = scorer
        runs = [run] if run is not None else (self.trajectories() or self._runs(None))
        return [run_scorers(traj, [built])[0] for traj in runs]

    # assertions

    def _runs(self, run: Trajectory | None) -> list[Trajectory]:
        __tracebackhide__ = True  # failures point at the test, not at the plugin
        if run is not None:
            return [run]
        runs = [t for t in self.trajectories() if not t.nested]
        if runs:
            return runs
        spans = self.spans()
        if not spans:
            why = "no span ended during the test"
        else:
            names = ", ".join(sorted({s.name for s in spans})[:10])
            why = f"{len(spans)} span(s) ended ({names}), but none is an agent, LLM or tool span"
        raise AssertionError(
            f"toolscore: no agent run was captured: {why}. Is the code under test instrumented, and does it "
            "use the global tracer provider (or toolscore.attach(provider))?"
        )

    @staticmethod
    def _fail(headline: str, failures: list[list[str]], total: int) -> None:
        __tracebackhide__ = True  # failures point at the test, not at the plugin
        if failures:
            parts = [f"{headline} in {len(failures)} of {total} agent run(s):"]
            for lines in failures:
                parts.extend(lines)
            raise AssertionError("\n".join(parts))

    def assert_tool_called(self, tool: str, *, strict: bool = False, run: Trajectory | None = None) -> None:
        """The run called ``tool`` (strict: called only ``tool``, any number of times)."""
        __tracebackhide__ = True  # failures point at the test, not at the plugin
        scorer = ToolCallAccuracy(expected_tool=tool, strict=strict)
        runs = self._runs(run)
        failures = []
        for traj in runs:
            score = scorer.score(traj)
            if score.value != 1.0:
                expected = f"only {tool!r} to be called" if strict else f"{tool!r} to be called"
                failures.append([_run_name(traj), *_calls(traj), f"  expected: {expected}", _score_line(score)])
        what = f"tool {tool!r} was not the only tool called" if strict else f"tool {tool!r} was not called"
        self._fail(what, failures, len(runs))

    def assert_tool_order(self, tools: Sequence[str], *, strict: bool = False, run: Trajectory | None = None) -> None:
        """The run called ``tools`` in this order (strict: exactly these calls; else other calls may come between)."""
        __tracebackhide__ = True  # failures point at the test, not at the plugin
        if isinstance(tools, str):
            tools = [t.strip() for t in tools.split(",") if t.strip()]
        scorer = ToolCallAccuracy(expected_tool_order=list(tools), strict=strict)
        runs = self._runs(run)
        failures = []
        order = " -> ".join(tools)
        for traj in runs:
            score = scorer.score(traj)
            if score.value != 1.0:
                how = "exactly" if strict else "in this order (other calls allowed between)"
                failures.append([_run_name(traj), *_calls(traj), f"  expected {how}: {order}",
                                 f"  actual order: {' -> '.join(traj.tool_names) or '(no calls)'}",
                                 _score_line(score)])
        self._fail(f"tools were not called in the order {order}", failures, len(runs))

    def assert_valid_arguments(self, schemas: dict[str, Any] | None = None, *, run: Trajectory | None = None,
                               allow_unknown_tools: bool = False, require_schemas: bool = False) -> None:
        """Every tool call has readable arguments that satisfy its JSON Schema.

        Schemas come from ``schemas`` (tool name → JSON Schema, e.g.
        ``otel_toolscore.tool_schemas(my_tool)``), the tool definitions the model was offered
        and the schemas frameworks record on tool spans. Fails on high/critical issues
        (unreadable or missing arguments, schema violations, a tool that was not offered); a
        call whose tool has no known schema is unchecked, unless ``require_schemas``: then it
        fails too (``unknown_tool``).
        """
        __tracebackhide__ = True  # failures point at the test, not at the plugin
        scorer = ToolCallValidation(schemas=schemas, allow_unknown_tools=allow_unknown_tools,
                                    require_schemas=require_schemas)
        runs = self._runs(run)
        failures = []
        for traj in runs:
            score = scorer.score(traj)
            unknown = require_schemas and any(i.type == "unknown_tool" for c in score.calls for i in c.issues)
            if score.label == "fail" or score.error or unknown:
                failures.append([_run_name(traj), *_calls(traj), "  issues:",
                                 *(_issue_lines(score) or ["    (none listed)"]), _score_line(score)])
        self._fail("tool calls with invalid arguments", failures, len(runs))

    def assert_no_hallucination(self, *, threshold: float = 0.3, cross_turn: bool = False,
                                run: Trajectory | None = None, no_output_tools: Sequence[str] = (),
                                handoff_tools: Sequence[str] = ()) -> None:
        """The response states no facts missing from every tool result and input, and contradicts no result."""
        __tracebackhide__ = True  # failures point at the test, not at the plugin
        scorer = ToolResultVerification(hallucination_threshold=threshold, cross_turn=cross_turn,
                                        no_output_tools=no_output_tools, handoff_tools=handoff_tools)
        runs = self._runs(run)
        failures = []
        for traj in runs:
            score = scorer.score(traj)
            issues = _issue_lines(score, types=_HALLUCINATION_ISSUES)
            if issues or score.error:
                failures.append([_run_name(traj), *_calls(traj),
                                 f"  response: {_short(traj.output or '(none recorded)', 400)}",
                                 "  issues:", *issues, _score_line(score)])
        self._fail("the response is not supported by the tool results", failures, len(runs))

    def assert_score(self, scorer: str, *, at_least: float | None = None, run: Trajectory | None = None,
                     **options: Any) -> None:
        """The scorer scores every run at least ``at_least`` (default: its label is not ``fail``).

        A run the scorer cannot score fails the assertion: an error (the scorer raised, its judge
        was unreachable) as much as a skip (no expectation, nothing applicable), since neither is a
        pass.
        """
        __tracebackhide__ = True  # failures point at the test, not at the plugin
        runs = self._runs(run)
        failures = []
        for traj in runs:
            (score,) = self.score(scorer, run=traj, **options)
            if score.error:
                why = f"could not be scored: error {score.error}"
            elif score.value is None:
                why = f"could not be scored ({score.label or 'no value'})"
            elif at_least is not None and score.value < at_least:
                why = f"{score.value:g} < {at_least:g}"
            elif at_least is None and score.label == "fail":
                why = f"{score.value:g}, label fail"
            else:
                continue
            failures.append([f"{_run_name(traj)}: {scorer} {why}", *_calls(traj), _score_line(score),
                             *(["  issues:", *lines] if (lines := _issue_lines(score)) else [])])
        gate = f"at least {at_least:g}" if at_least is not None else "a passing score"
        self._fail(f"{scorer} is not {gate}", failures, len(runs))


@pytest.fixture
def toolscore() -> Iterator[ToolScoreCapture]:
    """Captures the spans of the code under test; assertions on its agent runs and their scores."""
    capture = ToolScoreCapture()
    capture.start()
    try:
        yield capture
    finally:
        capture.stop()
