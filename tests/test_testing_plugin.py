"""The ``toolscore`` pytest plugin, exercised the way a user meets it: a fresh project whose tests
only use the fixture (the plugin comes from the ``pytest11`` entry point), run by pytester in a
subprocess so the global tracer provider of each inner session is its own."""

from __future__ import annotations

import importlib.util
import os
import re
from importlib.metadata import entry_points

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the test extra installs tomli
    import tomli as tomllib

import pytest
from opentelemetry.trace import NoOpTracerProvider

import otel_toolscore.testing as plugin
from tests.support.judge_server import closed_port_url
from tests.support.paths import REPO

pytest_plugins = ["pytester"]

AGENT = '"""The code under test: an agent instrumented with the OpenTelemetry API only (GenAI conventions)."""\nimport json\n\nfrom opentelemetry import trace\n\ntracer = trace.get_tracer("weather_agent")  # module level, as apps do: a proxy until a provider is set\n\nWEATHER_TOOL = {"type": "function", "name": "get_weather", "parameters": {\n    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}\n\n\ndef run(question, calls, answer, agent="weather-bot", offered=(WEATHER_TOOL,)):\n    """calls: (tool name, arguments, result) in the order the model made them."""\n    with tracer.start_as_current_span(f"invoke_agent {agent}", attributes={\n            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}):\n        requested = [{"type": "tool_call", "id": f"c{i}", "name": name, "arguments": args}\n                     for i, (name, args, _) in enumerate(calls)]\n        with tracer.start_as_current_span("chat model", attributes={\n                "gen_ai.operation.name": "chat",\n                "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": question}]}]),\n                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": requested}]),\n                "gen_ai.tool.definitions": json.dumps(list(offered))}):\n            pass\n        for i, (name, args, result) in enumerate(calls):\n            with tracer.start_as_current_span(f"execute_tool {name}", attributes={\n                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": f"c{i}",\n                    "gen_ai.tool.call.arguments": args if isinstance(args, str) else json.dumps(args),\n                    "gen_ai.tool.call.result": json.dumps(result)}):\n                pass\n        with tracer.start_as_current_span("chat model", attributes={\n                "gen_ai.operation.name": "chat",\n                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": answer}]}])}):\n            pass\n'

TESTS = """
import weather_agent
from opentelemetry.sdk.trace import TracerProvider

OSLO = [("get_weather", {"city": "Oslo"}, {"temp_c": 5, "sky": "cloudy"})]


def test_passing_run(toolscore):
    weather_agent.run("Weather in Oslo?", OSLO, "It is 5°C and cloudy in Oslo.")
    assert len(toolscore.trajectories()) == 1
    assert {s.name for s in toolscore.spans()} >= {"invoke_agent weather-bot", "execute_tool get_weather"}
    toolscore.assert_tool_called("get_weather", strict=True)
    toolscore.assert_tool_order(["get_weather"])
    toolscore.assert_valid_arguments()
    toolscore.assert_no_hallucination()
    toolscore.assert_score("tool_call_validation", at_least=0.8)
    toolscore.assert_score("tool_call_accuracy", expected_tool="get_weather")
    (score,) = toolscore.score("tool_call_accuracy", expected_tool="get_weather")
    assert score.value == 1.0 and score.label == "pass"
    (run,) = toolscore.trajectories()
    assert toolscore.score("tool_result_verification", run=run)[0].label == "pass"


def test_wrong_tool(toolscore):
    weather_agent.run("Weather in Oslo?", [("search_web", {"query": "oslo weather"}, ["5 degrees"])],
                      "It is 5 degrees.")
    toolscore.assert_tool_called("get_weather")


def test_wrong_order(toolscore):
    weather_agent.run("x", [("lookup", {}, 1), ("auth", {}, 2)], "done")
    toolscore.assert_tool_order(["auth", "lookup"])


def test_invalid_arguments(toolscore):
    weather_agent.run("Weather in Oslo?", [("get_weather", {"city": 5}, {"temp_c": 5})], "It is 5°C.")
    toolscore.assert_valid_arguments()


def test_schema_given_by_the_test(toolscore):
    weather_agent.run("Weather?", [("get_weather", {"city": "Oslo"}, {"temp_c": 5})], "It is 5°C.", offered=())
    toolscore.assert_valid_arguments(schemas={"get_weather": {
        "type": "object", "properties": {"city": {"type": "string"}, "units": {"enum": ["C", "F"]}},
        "required": ["city", "units"]}})


def test_hallucination(toolscore):
    weather_agent.run("Weather in Oslo?", OSLO, "It is 25°C in Oslo with winds of 40 km/h.")
    toolscore.assert_no_hallucination()


def test_score_below_threshold(toolscore):
    weather_agent.run("Weather in Oslo?", [("get_weather", "{city: Oslo", {"temp_c": 5})], "It is 5°C.")
    toolscore.assert_score("tool_call_validation", at_least=0.9)


def test_unscorable_is_a_failure(toolscore):
    weather_agent.run("Weather in Oslo?", OSLO, "It is 5°C and cloudy.")
    toolscore.assert_score("tool_call_accuracy")  # no expectation anywhere: skipped, which is no pass


def test_nothing_captured(toolscore):
    toolscore.assert_tool_called("get_weather")


def test_no_scores_from_nothing_captured(toolscore):
    # no run: an error, not [] (over which all(...) would pass)
    assert all(s.value >= 0.8 for s in toolscore.score("tool_call_validation"))


def test_an_unreachable_judge_is_a_failure(toolscore):
    weather_agent.run("Weather in Oslo?", OSLO, "It is 5°C and cloudy.")
    toolscore.assert_score("tool_call_appropriateness", at_least=0.5, model="openai/gpt-4o-mini",
                           api_base=JUDGE_URL, api_key="sk-test", max_retries=0)


def test_each_test_sees_only_its_own_spans(toolscore):
    assert toolscore.spans() == []
    weather_agent.run("Weather in Oslo?", OSLO, "It is 5°C and cloudy.")
    assert len(toolscore.trajectories()) == 1
    toolscore.clear()
    assert toolscore.spans() == []


def test_own_provider_attached(toolscore):
    provider = TracerProvider()
    toolscore.attach(provider)
    with provider.get_tracer("other").start_as_current_span("invoke_agent other", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "other"}):
        with provider.get_tracer("other").start_as_current_span("execute_tool ping", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "ping"}):
            pass
    toolscore.assert_tool_called("ping")


def test_capture_is_off_between_tests():
    from otel_toolscore.testing import _switches

    assert _switches and all(switch.target is None for switch in _switches.values())
"""

APP_CONFTEST = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

APP_EXPORTER = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(APP_EXPORTER))
trace.set_tracer_provider(provider)
"""

APP_TESTS = """
from opentelemetry import trace

import weather_agent
from conftest import APP_EXPORTER

OSLO = [("get_weather", {"city": "Oslo"}, {"temp_c": 5})]


def test_capture_joins_the_apps_provider(toolscore):
    assert toolscore.tracer_provider is trace.get_tracer_provider()
    weather_agent.run("Weather in Oslo?", OSLO, "It is 5°C.")
    toolscore.assert_tool_called("get_weather")
    assert len(APP_EXPORTER.get_finished_spans()) == len(toolscore.spans()) == 4  # the app still exports


def test_switched_off_after_the_test():
    from otel_toolscore.testing import _switches

    APP_EXPORTER.clear()
    weather_agent.run("Weather in Oslo?", OSLO, "It is 5°C.")
    assert len(APP_EXPORTER.get_finished_spans()) == 4
    assert [switch.target for switch in _switches.values()] == [None]


def test_second_test_reuses_the_switch(toolscore):
    from otel_toolscore.testing import _switches

    weather_agent.run("Weather in Oslo?", OSLO, "It is 5°C.")
    assert len(toolscore.spans()) == 4 and len(_switches) == 1
"""


def _run(pytester: pytest.Pytester) -> pytest.RunResult:
    autoload = not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    registered = any(ep.value == "otel_toolscore.testing" for ep in entry_points(group="pytest11"))
    extra = [] if autoload and registered else ["-p", "otel_toolscore.testing"]
    return pytester.runpytest_subprocess(*extra, "-p", "no:cacheprovider", "-p", "no:randomly")


def test_entry_point_is_declared_and_installed() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    assert declared == {"otel_toolscore": "otel_toolscore.testing"}
    installed = [ep for ep in entry_points(group="pytest11") if ep.name == "otel_toolscore"]
    assert installed, "the installed metadata predates the entry point: pip install -e ."
    assert installed[0].load() is plugin


def test_plugin_in_a_fresh_project(pytester: pytest.Pytester) -> None:
    # the judge: a loopback port nothing listens on
    pytester.makepyfile(weather_agent=AGENT, test_agent=f"JUDGE_URL = {closed_port_url()!r}\n" + TESTS)
    result = _run(pytester)
    result.assert_outcomes(passed=4, failed=10)
    result.stdout.fnmatch_lines([
        "*AssertionError: tool 'get_weather' was not called in 1 of 1 agent run(s):",
        "*run 'weather-bot' (trace *, span *)",
        "*tools called (1):",
        '*1. search_web({"query": "oslo weather"}) -> [[]"5 degrees"]',
        "*expected: 'get_weather' to be called",
        "*tool_call_accuracy = 0 [[]fail]: The expected tool 'get_weather' was not called*",
    ])
    result.stdout.fnmatch_lines([
        "*AssertionError: tools were not called in the order auth -> lookup in 1 of 1 agent run(s):",
        "*expected in this order (other calls allowed between): auth -> lookup",
        "*actual order: lookup -> auth",
    ])
    result.stdout.fnmatch_lines([
        "*AssertionError: tool calls with invalid arguments in 1 of 1 agent run(s):",
        '*1. get_weather({"city": 5}) -> {"temp_c": 5}',
        "*call 1 get_weather: type_mismatch at city (high): 'city' should be string, got integer",
    ])
    result.stdout.fnmatch_lines(["*call 1 get_weather: missing_required_param at units (high)*"])
    result.stdout.fnmatch_lines([
        "*AssertionError: the response is not supported by the tool results in 1 of 1 agent run(s):",
        "*response: It is 25°C in Oslo with winds of 40 km/h.",
        "*call 1 get_weather: hallucinated_content (high): *25°C*",
    ])
    result.stdout.fnmatch_lines([
        "*AssertionError: tool_call_validation is not at least 0.9 in 1 of 1 agent run(s):",
        "*tool_call_validation 0.3 < 0.9",
        "*1. get_weather({city: Oslo [[]unreadable: *]) -> *",
        "*invalid_arguments (high)*",
    ])
    result.stdout.fnmatch_lines([
        "*AssertionError: tool_call_accuracy is not a passing score*",
        "*tool_call_accuracy could not be scored (skipped)",
    ])
    result.stdout.fnmatch_lines(["*toolscore: no agent run was captured: no span ended during the test*"])
    # both tests that captured nothing fail saying so (pytest's summary repeats the message untruncated under CI)
    for test in ("test_nothing_captured", "test_no_scores_from_nothing_captured"):
        result.stdout.fnmatch_lines([f"*FAILED test_agent.py::{test} *"])
    assert result.stdout.str().count("toolscore: no agent run was captured: no span ended during the test") >= 2
    if importlib.util.find_spec("litellm") is not None:
        result.stdout.fnmatch_lines([
            "*AssertionError: tool_call_appropriateness is not at least 0.5 in 1 of 1 agent run(s):",
            "*run 'weather-bot' (trace *, span *): tool_call_appropriateness could not be scored: error judge_unavailable",
        ])
        # failures point at the test's own line, not into the plugin
        assert "otel_toolscore/testing.py" not in result.stdout.str()
    else:  # the core install (scripts/test-pythons): the judge's test fails saying which extra it needs
        result.stdout.fnmatch_lines(["*needs the 'judge' extra*"])
    # the whole trace id, which a backend's search finds
    assert re.search(r"run 'weather-bot' \(trace [0-9a-f]{32}, span [0-9a-f]{16}\)", result.stdout.str())


def test_plugin_joins_an_app_provider(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(weather_agent=AGENT, conftest=APP_CONFTEST, test_app=APP_TESTS)
    _run(pytester).assert_outcomes(passed=3)


def test_a_non_sdk_global_provider_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugin.trace, "get_tracer_provider", lambda: NoOpTracerProvider())
    with pytest.raises(pytest.UsageError, match="NoOpTracerProvider"):
        plugin.ToolScoreCapture().start()
