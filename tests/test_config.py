"""Settings: precedence (arguments > environment > YAML > defaults), validation with errors that
name their source, rules, and the trace-id sampling rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased

from otel_toolscore.config import (
    CONFIG_FILE_ENV,
    ConfigError,
    Rule,
    ToolScoreSettings,
    load_settings,
    sampled,
)
from tests.support.paths import REPO

#: no OTEL_* variable of the machine running the tests leaks in
pytestmark = pytest.mark.usefixtures("clean_otel_env")


def write_yaml(tmp_path: Path, data: Any, name: str = "toolscore.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data, "utf-8")
    return path


# --- defaults and precedence ------------------------------------------------------------------


def test_defaults() -> None:
    settings = load_settings()
    assert settings == ToolScoreSettings()
    assert settings.completion_grace == 0.5
    assert settings.hold_timeout == 2.0
    assert settings.max_pending_traces == 10_000
    assert settings.max_spans_per_trace == 5_000
    assert settings.trace_ttl == 300.0
    assert settings.queue_size == 2_048
    assert settings.decision_wait == 2.0
    assert settings.explanation_max_chars == 256
    assert settings.span_attributes and settings.events
    assert settings.evaluation_spans and settings.metrics
    assert settings.scorers is None
    assert settings.scorer_options == {} and settings.sample_rates == {}
    assert settings.default_sample_rate == 1.0
    assert settings.rules == [] and settings.tool_schemas is None
    assert settings.allow_unknown_tools is False


def test_precedence_arguments_over_env_over_yaml_over_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_yaml(
        tmp_path, {"hold_timeout": 3.0, "queue_size": 10, "trace_ttl": 60.0, "events": False}
    )
    monkeypatch.setenv("OTEL_TOOLSCORE_HOLD_TIMEOUT", "4")
    monkeypatch.setenv("OTEL_TOOLSCORE_QUEUE_SIZE", "20")

    settings = load_settings(path, hold_timeout=5.0)
    assert settings.hold_timeout == 5.0  # argument
    assert settings.queue_size == 20  # environment over YAML
    assert settings.trace_ttl == 60.0  # YAML over default
    assert settings.events is False  # YAML
    assert settings.decision_wait == 2.0  # default

    assert load_settings(path).hold_timeout == 4.0
    monkeypatch.delenv("OTEL_TOOLSCORE_HOLD_TIMEOUT")
    assert load_settings(path).hold_timeout == 3.0
    assert load_settings().hold_timeout == 2.0


def test_none_overrides_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TOOLSCORE_HOLD_TIMEOUT", "4")
    assert load_settings(hold_timeout=None, scorers=None).hold_timeout == 4.0


def test_config_file_from_env_and_argument_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_env = write_yaml(tmp_path, {"queue_size": 7}, "env.yaml")
    from_arg = write_yaml(tmp_path, {"queue_size": 9}, "arg.yaml")
    monkeypatch.setenv(CONFIG_FILE_ENV, str(from_env))
    assert load_settings().queue_size == 7
    assert ToolScoreSettings().queue_size == 7  # direct construction reads it too
    assert load_settings(from_arg).queue_size == 9


def test_env_is_case_insensitive_and_json_for_nested(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("otel_toolscore_metrics", "false")
    monkeypatch.setenv("OTEL_TOOLSCORE_SAMPLE_RATES", '{"tool_call_validation": 0.25}')
    monkeypatch.setenv("OTEL_TOOLSCORE_SCORER_OPTIONS", '{"tool_call_accuracy": {"strict": true}}')
    monkeypatch.setenv(
        "OTEL_TOOLSCORE_RULES", '[{"agent": "weather.*", "expected_tool_order": "a,b"}]'
    )
    settings = load_settings()
    assert settings.metrics is False
    assert settings.sample_rates == {"tool_call_validation": 0.25}
    assert settings.scorer_options == {"tool_call_accuracy": {"strict": True}}
    assert settings.rules[0].expected_tool_order == ["a", "b"]


@pytest.mark.parametrize("value", ['["tool_call_accuracy", "tool_call_validation"]',
                                   "tool_call_accuracy, tool_call_validation"])  # fmt: skip
def test_scorers_from_env_as_json_or_commas(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("OTEL_TOOLSCORE_SCORERS", value)
    assert load_settings().scorers == ["tool_call_accuracy", "tool_call_validation"]


def test_dict_settings_merge_per_key_across_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pydantic-settings deep-merges dict values: the environment overrides one scorer's rate,
    # the file's rate for another scorer stays.
    path = write_yaml(tmp_path, {"sample_rates": {"a": 0.1, "b": 0.2}})
    monkeypatch.setenv("OTEL_TOOLSCORE_SAMPLE_RATES", '{"a": 0.5}')
    settings = load_settings(path)
    assert settings.sample_rates == {"a": 0.5, "b": 0.2}
    assert settings.sample_rate_for("a") == 0.5
    assert settings.sample_rate_for("c") == settings.default_sample_rate


def test_full_yaml_file(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path,
        """
scorers: [tool_call_accuracy, tool_call_validation]
scorer_options:
  tool_call_validation: {strict: true}
sample_rates: {tool_call_validation: 0.5}
default_sample_rate: 0.9
rules:
  - agent: "weather-.*"
    input_pattern: "(?i)forecast"
    expected_tool: get_forecast
    strict: true
  - expected_tool_order: "search, summarize"
tool_schemas:
  get_forecast: {type: object, required: [city]}
allow_unknown_tools: true
""",
    )
    settings = load_settings(path)
    assert settings.scorers == ["tool_call_accuracy", "tool_call_validation"]
    assert settings.scorer_options == {"tool_call_validation": {"strict": True}}
    assert settings.default_sample_rate == 0.9
    assert settings.rules[0].expected_tool == "get_forecast" and settings.rules[0].strict
    assert settings.rules[1].expected_tool_order == ["search", "summarize"]
    assert settings.tool_schemas == {"get_forecast": {"type": "object", "required": ["city"]}}
    assert settings.allow_unknown_tools is True


def test_empty_yaml_file_is_empty_configuration(tmp_path: Path) -> None:
    assert load_settings(write_yaml(tmp_path, "")) == ToolScoreSettings()


# --- errors -----------------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="nope.yaml.*cannot be read"):
        load_settings(path)


def test_missing_file_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONFIG_FILE_ENV, str(tmp_path / "gone.yaml"))
    with pytest.raises(ConfigError, match="gone.yaml"):
        load_settings()


def test_unparsable_yaml(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "hold_timeout: [1, 2\n")
    with pytest.raises(ConfigError, match=f"{path}.*not valid YAML"):
        load_settings(path)


def test_yaml_not_a_mapping(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, "- a\n- b\n")
    with pytest.raises(ConfigError, match=f"{path}.*expected a mapping, got list"):
        load_settings(path)


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, {"hold_timeout": 1.0, "hold_timout": 2.0})
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert str(path) in str(info.value) and "'hold_timout'" in str(info.value)


def test_unknown_key_inside_a_rule(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, {"rules": [{"agent": "a", "expected_tools": "x"}]})
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert f"config file {path}" in message and "rules.0.expected_tools" in message


def test_bad_regex_names_file_and_key(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, {"rules": [{"agent": "(unclosed", "expected_tool": "x"}]})
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert f"config file {path}" in message
    assert "rules.0.agent" in message and "invalid regular expression" in message


def test_bad_value_in_yaml_names_file_and_key(tmp_path: Path) -> None:
    path = write_yaml(tmp_path, {"sample_rates": {"tool_call_validation": 1.5}})
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert f"config file {path}" in message and "sample_rates.tool_call_validation" in message


def test_bad_value_in_env_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TOOLSCORE_HOLD_TIMEOUT", "-1")
    with pytest.raises(ConfigError, match="OTEL_TOOLSCORE_HOLD_TIMEOUT.*hold_timeout.*greater"):
        load_settings()


def test_undecodable_json_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TOOLSCORE_SCORER_OPTIONS", "{not json")
    with pytest.raises(ConfigError, match="scorer_options"):
        load_settings()


def test_unknown_argument() -> None:
    with pytest.raises(ConfigError, match="argument: hold_timout"):
        load_settings(hold_timout=1.0)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("hold_timeout", 0),
        ("hold_timeout", -1.0),
        ("trace_ttl", 0),
        ("decision_wait", -0.1),
        ("completion_grace", -0.1),
        ("hold_timeout", float("inf")),
        ("hold_timeout", float("nan")),
        ("default_sample_rate", 1.01),
        ("default_sample_rate", -0.01),
        ("sample_rates", {"x": 2}),
        ("max_pending_traces", 0),
        ("max_spans_per_trace", 0),
        ("queue_size", -5),
        ("explanation_max_chars", 0),
    ],
)
def test_out_of_range_values(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"argument: {key}"):
        load_settings(**{key: value})


def test_boundary_values_are_accepted() -> None:
    settings = load_settings(
        completion_grace=0, default_sample_rate=0, sample_rates={"a": 1}, queue_size=1
    )
    assert settings.completion_grace == 0 and settings.default_sample_rate == 0


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


# --- rules ------------------------------------------------------------------------------------


def test_rule_agent_fullmatch_and_input_search() -> None:
    rule = Rule(agent="weather-.*", input_pattern=r"\bforecast\b", expected_tool="get_forecast")
    assert rule.matches("weather-bot", "what is the forecast for Paris")
    assert not rule.matches("my-weather-bot", "forecast")  # agent must match whole name
    assert not rule.matches("weather-bot", "forecasting")  # input pattern not found
    assert not rule.matches(None, "forecast")
    assert not rule.matches("weather-bot", None)


def test_rule_without_matchers_matches_every_run() -> None:
    rule = Rule(expected_tool="search")
    assert rule.matches(None, None) and rule.matches("any", "thing")


def test_rule_only_agent() -> None:
    rule = Rule(agent="a|b", expected_tool="x")
    assert rule.matches("a", None) and rule.matches("b", "whatever")
    assert not rule.matches("ab", None)


@pytest.mark.parametrize(
    ("given_order", "expected"),
    [("a,b,c", ["a", "b", "c"]), (" a , b ", ["a", "b"]), (["a", " b"], ["a", "b"]),
     ("a,,b", ["a", "b"])],
)  # fmt: skip
def test_rule_tool_order_spellings(given_order: Any, expected: list[str]) -> None:
    assert Rule(expected_tool_order=given_order).expected_tool_order == expected


def test_rule_needs_an_expectation() -> None:
    with pytest.raises(ValueError, match="expected_tool or expected_tool_order"):
        Rule(agent="a", strict=True)
    with pytest.raises(ValueError, match="expected_tool or expected_tool_order"):
        Rule(expected_tool="  ", expected_tool_order="")  # type: ignore[arg-type]


def test_rule_bad_regex_and_extra_key() -> None:
    with pytest.raises(ValueError, match="input_pattern"):
        Rule(input_pattern="[", expected_tool="x")
    with pytest.raises(ValueError, match="extra"):
        Rule(expected_tool="x", expected="y")  # type: ignore[call-arg]


# --- sampling ---------------------------------------------------------------------------------

TRACE_IDS = st.integers(min_value=1, max_value=2**128 - 1)
RATES = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(TRACE_IDS, RATES, RATES)
def test_lower_rates_are_subsets_of_higher_ones(trace_id: int, a: float, b: float) -> None:
    low, high = min(a, b), max(a, b)
    if sampled(trace_id, low):
        assert sampled(trace_id, high)


@given(TRACE_IDS, RATES)
def test_agrees_with_the_sdk_sampler(trace_id: int, rate: float) -> None:
    decision = TraceIdRatioBased(rate).should_sample(None, trace_id, "span").decision
    assert sampled(trace_id, rate) == (decision is Decision.RECORD_AND_SAMPLE)


@given(TRACE_IDS)
def test_rate_one_always_rate_zero_never(trace_id: int) -> None:
    assert sampled(trace_id, 1.0)
    assert not sampled(trace_id, 0.0)


def test_only_the_low_64_bits_decide() -> None:
    low = 2**63  # exactly half way: kept at rate > 0.5, dropped at 0.5
    assert not sampled(low, 0.5) and sampled(low, 0.51)
    assert sampled((1 << 64) | 5, 0.01) == sampled(5, 0.01)


def test_rate_close_to_half_keeps_about_half() -> None:
    kept = sum(sampled(trace_id * 0x9E3779B97F4A7C15, 0.5) for trace_id in range(1, 20_001))
    assert 9_000 < kept < 11_000


@pytest.mark.parametrize("rate", [-0.1, 1.1, float("nan")])
def test_invalid_rate(rate: float) -> None:
    with pytest.raises(ValueError, match="sample rate"):
        sampled(1, rate)


def test_the_configuration_reference_documents_every_setting() -> None:

    from otel_toolscore.config import ToolScoreSettings

    reference = (REPO / "docs" / "configuration.md").read_text()
    missing = [n for n in ToolScoreSettings.model_fields if f"`OTEL_TOOLSCORE_{n.upper()}`" not in reference]
    assert not missing, f"docs/configuration.md lacks {missing}"
