"""Issue 28, docs/scorers.md, "No schema is no penalty"; schemas from the option, the offered
definitions and the tool spans (Strands, OpenInference); schemas the app supplies
(``otel_toolscore.tool_schemas``, a file, the setting); a stock openai-v2 app end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

import otel_toolscore
from otel_toolscore.assemble import build_trajectories
from otel_toolscore.config import ConfigError, load_settings
from otel_toolscore.ingest import read_otlp_json
from otel_toolscore.schemas import load_tool_schemas
from otel_toolscore.scorers import ToolCallValidation
from otel_toolscore.scorers.base import build_scorers
from otel_toolscore.trajectory import ToolDefinition, Trajectory
from tests.support import paths
from tests.support.trajectory_factory import make_call, make_trajectory

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
STRICT_WEATHER = {**WEATHER, "properties": {"city": {"type": "string", "minLength": 10}}}


def score(trajectory: Trajectory, **options: Any) -> dict[str, Any]:
    result = ToolCallValidation(**options).score(trajectory)
    assert result.error is None, result.explanation
    return result.to_dict()


def calls_of(result: dict[str, Any]) -> list[dict[str, Any]]:
    return result["details"]["tool_calls"]


# --- no schema is no penalty --------------------------------------------------------------------


def test_no_schema_anywhere_is_skipped_with_a_reason_and_a_how_to() -> None:
    result = score(make_trajectory([("get_weather", {"city": "Oslo"}, {"t": 5}), ("get_weather", {"city": "Rome"}, {})]))
    assert (result["value"], result["label"]) == (None, "skipped")
    details = result["details"]
    assert (details["checked_calls"], details["unchecked_calls"], details["reason"]) == (0, 2, "no_tool_schemas")
    assert [(c["checked"], c["schema_source"], c["score"], c["issues"]) for c in calls_of(result)] == [
        (False, None, None, [])] * 2
    for way in ("tool_schemas", "--tool-schemas FILE", "schemas option"):
        assert way in result["explanation"]


def test_the_score_is_the_mean_of_the_checked_calls_only() -> None:
    trajectory = make_trajectory([
        ("get_weather", {"city": 5}, {}),  # checked: type_mismatch, 0.3
        ("lookup", {"q": "x"}, {}),  # no schema: unchecked
        ("get_weather", {"city": "Oslo"}, {}),  # checked: 1.0
    ])
    result = score(trajectory, schemas={"get_weather": WEATHER})
    assert [c["checked"] for c in calls_of(result)] == [True, False, True]
    assert [c["score"] for c in calls_of(result)] == [0.3, None, 1.0]
    assert result["value"] == 0.65  # (0.3 + 1.0) / 2, not / 3 and no penalty for lookup
    assert (result["details"]["checked_calls"], result["details"]["unchecked_calls"]) == (2, 1)
    assert result["details"]["reason"] is None
    assert "1 unchecked" in result["explanation"]


@pytest.mark.parametrize(("call", "issue"), [
    (make_call(None, {"a": 1}, {}), "missing_tool_name"),
    (make_call("lookup", "not json", {}), "invalid_arguments"),
    (make_call("lookup", None, {}), "missing_arguments"),
    (make_call("lookup", {"a": 1}), "missing_result"),
])  # fmt: skip
def test_checks_that_need_no_schema_still_apply_and_make_the_call_checked(call: Any, issue: str) -> None:
    result = score(make_trajectory([call]))
    (report,) = calls_of(result)
    assert [i["type"] for i in report["issues"]] == [issue]
    assert report["checked"] is True and report["schema_source"] is None
    assert result["value"] == report["score"] and result["label"] != "skipped"
    assert result["details"]["checked_calls"] == 1


def test_a_loop_is_found_without_a_schema() -> None:
    result = score(make_trajectory([("lookup", {"q": "x"}, {"r": 1}), ("lookup", {"q": "x"}, {"r": 1})]))
    assert [c["checked"] for c in calls_of(result)] == [False, True]
    assert [i["type"] for i in calls_of(result)[1]["issues"]] == ["tool_misuse"]
    assert result["value"] == 0.6  # the repeat alone: the first call is unchecked


def test_unknown_tool_only_with_require_schemas() -> None:
    trajectory = make_trajectory([("lookup", {"q": "x"}, {})])
    assert score(trajectory)["label"] == "skipped"
    required = score(trajectory, require_schemas=True)
    assert [i["type"] for i in calls_of(required)[0]["issues"]] == ["unknown_tool"]
    assert (required["value"], required["details"]["checked_calls"]) == (0.6, 1)
    settings_built = build_scorers(["tool_call_validation"], require_schemas=True)[0]
    assert settings_built.score(trajectory).value == 0.6


def test_tool_not_found_only_when_the_requests_offered_list_was_recorded() -> None:
    invented = score(make_trajectory([make_call("lookup", {"q": "x"}, {}, offered_tools=["get_weather"])]))
    assert [i["type"] for i in calls_of(invented)[0]["issues"]] == ["tool_not_found"]
    assert invented["value"] == 0.3
    not_recorded = score(make_trajectory([make_call("lookup", {"q": "x"}, {}, offered_tools=None)]))
    assert not_recorded["label"] == "skipped"


def test_a_recorded_offered_list_makes_a_call_checked_even_without_schemas() -> None:
    # the names were offered (no parameters recorded): tool_not_found could be asked, and passed
    result = score(make_trajectory([make_call("lookup", {"q": "x"}, {}, offered_tools=["lookup"])]))
    assert calls_of(result)[0]["checked"] is True and calls_of(result)[0]["schema_source"] is None
    assert (result["value"], result["label"]) == (1.0, "pass")


# --- where a schema comes from --------------------------------------------------------------------


def test_schema_sources_option_then_offered_then_tool_span() -> None:
    span_only = make_call("get_weather", {"city": "Oslo"}, {}, schema=STRICT_WEATHER)
    # the tool span's schema alone: applied (and "Oslo" is shorter than 10)
    result = score(make_trajectory([span_only]))
    assert calls_of(result)[0]["schema_source"] == "tool_span"
    assert [i["type"] for i in calls_of(result)[0]["issues"]] == ["schema_violation"]
    # offered beats the tool span
    offered = make_trajectory([span_only], tool_definitions=[ToolDefinition("get_weather", parameters=WEATHER)])
    assert [(c["schema_source"], c["issues"]) for c in calls_of(score(offered))] == [("offered", [])]
    # the option beats both
    result = score(offered, schemas={"get_weather": STRICT_WEATHER})
    assert calls_of(result)[0]["schema_source"] == "option"
    assert [i["type"] for i in calls_of(result)[0]["issues"]] == ["schema_violation"]


def test_a_tool_span_schema_also_checks_a_call_of_that_tool_without_its_own_span() -> None:
    ran = make_call("get_weather", {"city": "Oslo"}, {}, index=0, schema=WEATHER)
    rejected = make_call("get_weather", {"town": "Oslo"}, index=1, error="validation error", span_id=None)
    result = score(make_trajectory([ran, rejected]))
    assert [c["schema_source"] for c in calls_of(result)] == ["tool_span", "tool_span"]
    assert [i["type"] for i in calls_of(result)[1]["issues"]] == ["missing_required_param"]


def test_an_unusable_schema_is_no_schema_and_says_why() -> None:
    result = score(make_trajectory([make_call("t", {"a": 1}, {}, schema={"type": "no-such-type"})]))
    assert result["label"] == "skipped"
    assert "not a valid JSON Schema" in result["details"]["schema_problems"]["t"]


# --- schemas recorded on tool spans, from real traces ------------------------------------------

STRANDS = paths.CAPTURES / "strands_latest" / "wrong_tool.json"


def _outermost(spans: Any) -> Trajectory:
    return next(t for t in build_trajectories(spans) if not t.nested)


def test_strands_gen_ai_tool_json_schema_is_read_and_checked_against(tmp_path: Path) -> None:
    trajectory = _outermost(read_otlp_json(STRANDS))
    (call,) = trajectory.tool_calls
    assert call.schema == {"properties": {"query": {"description": "Parameter query", "type": "string"}},
                           "required": ["query"], "type": "object"}
    assert trajectory.tool_definitions == []  # Strands records no offered definitions
    result = score(trajectory)
    assert [(c["checked"], c["schema_source"], c["issues"]) for c in calls_of(result)] == [(True, "tool_span", [])]
    assert (result["value"], result["label"]) == (1.0, "pass")

    # the same run with a bad argument (a number for the string query, wherever the call is seen)
    text = STRANDS.read_text().replace('\\"query\\": \\"Chicago weather today\\"', '\\"query\\": 42')
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    result = score(_outermost(read_otlp_json(bad)))
    (report,) = calls_of(result)
    assert report["schema_source"] == "tool_span"
    assert [(i["type"], i["path"]) for i in report["issues"]] == [("type_mismatch", "query")]
    assert result["label"] == "fail"


def test_openinference_tool_parameters_is_a_tool_span_schema_and_offered_tools_win() -> None:
    trajectory = _outermost(read_otlp_json(paths.CAPTURES / "openai_agents_openinference" / "wrong_tool.json"))
    (call,) = trajectory.tool_calls
    assert call.schema is not None and call.schema["required"] == ["query"]  # tool.parameters
    # its LLM span offered the tools (llm.tools): that source comes first
    assert [c["schema_source"] for c in calls_of(score(trajectory))] == ["offered"]
    assert [c["schema_source"] for c in calls_of(score(_without_offers(trajectory)))] == ["tool_span"]


def _without_offers(trajectory: Trajectory) -> Trajectory:
    for llm in trajectory.llm_calls:
        llm.tool_definitions = []
    for call in trajectory.tool_calls:
        call.offered_tools = None
    trajectory.tool_definitions = []
    return trajectory


def test_tool_schema_values_as_frameworks_write_them() -> None:
    from otel_toolscore.conventions.parsing import tool_schema_from

    assert tool_schema_from(json.dumps(WEATHER)) == WEATHER  # Strands: serialize(inputSchema["json"])
    assert tool_schema_from(json.dumps({"json": WEATHER})) == WEATHER  # older Strands: the whole inputSchema
    assert tool_schema_from({"json": json.dumps(WEATHER)}) == WEATHER
    assert tool_schema_from(WEATHER) == WEATHER
    for no_schema in ('{"city": "Oslo"}', "not json", "[1]", None, 42):
        assert tool_schema_from(no_schema) is None, no_schema


def test_agno_tool_parameters_holding_the_arguments_is_no_schema() -> None:
    trajectory = _outermost(read_otlp_json(paths.CAPTURES / "agno_openinference" / "wrong_tool.json"))
    assert [c.schema for c in trajectory.tool_calls] == [None]


# --- schemas the app supplies ---------------------------------------------------------------------


def get_weather(city: str, units: Literal["C", "F"] = "C", days: int | None = None) -> dict[str, Any]:
    """A tool function."""
    return {}


async def search(query: str, *, limit: int = 5, **extra: Any) -> list[str]:
    return []


class RunContext:  # (named as Pydantic AI's: the framework passes it, the model does not)
    pass


class Connection:  # a type JSON Schema cannot describe
    pass


def with_context(ctx: RunContext, city: str, conn: Connection | None = None) -> str:
    return city


class SendEmail(BaseModel):
    to: str = Field(pattern=r".+@.+")
    subject: str


class _StrandsLikeTool:
    tool_spec = {"name": "lookup", "description": "d", "inputSchema": {"json": WEATHER}}


def test_tool_schemas_of_functions_models_and_definitions() -> None:
    schemas = otel_toolscore.tool_schemas(
        get_weather, search, SendEmail, _StrandsLikeTool(),
        {"type": "function", "function": {"name": "openai_style", "parameters": WEATHER}},
        renamed=get_weather,
    )
    assert set(schemas) == {"get_weather", "search", "SendEmail", "lookup", "openai_style", "renamed"}
    weather = schemas["get_weather"]
    assert weather["required"] == ["city"] and set(weather["properties"]) == {"city", "units", "days"}
    assert weather["properties"]["units"]["enum"] == ["C", "F"]
    assert schemas["search"]["required"] == ["query"] and set(schemas["search"]["properties"]) == {"query", "limit"}
    assert schemas["SendEmail"]["required"] == ["to", "subject"]
    assert schemas["lookup"] == WEATHER and schemas["openai_style"] == WEATHER
    with pytest.raises(TypeError):
        otel_toolscore.tool_schemas(42)
    context = otel_toolscore.tool_schemas(with_context)["with_context"]
    assert context["required"] == ["city"] and set(context["properties"]) == {"city", "conn"}


def test_tool_schemas_check_calls_as_the_schemas_option() -> None:
    schemas = otel_toolscore.tool_schemas(get_weather, SendEmail)
    trajectory = make_trajectory([
        ("get_weather", {"city": "Oslo", "units": "K"}, {}),
        ("SendEmail", {"to": "bob"}, {}),
        ("get_weather", {"city": "Oslo"}, {}),
    ])
    result = score(trajectory, schemas=schemas)
    assert [c["schema_source"] for c in calls_of(result)] == ["option"] * 3
    assert [sorted(i["type"] for i in c["issues"]) for c in calls_of(result)] == [
        ["schema_violation"], ["missing_required_param", "schema_violation"], []]


def test_schemas_from_a_json_or_yaml_file_and_the_setting(tmp_path: Path) -> None:
    as_json = tmp_path / "schemas.json"
    as_json.write_text(json.dumps({"get_weather": WEATHER}))
    as_yaml = tmp_path / "schemas.yaml"
    as_yaml.write_text("get_weather:\n  type: object\n  properties: {city: {type: string}}\n  required: [city]\n")
    assert load_tool_schemas(as_json) == load_tool_schemas(as_yaml) == {"get_weather": WEATHER}
    assert load_settings(tool_schemas=str(as_yaml)).tool_schemas == {"get_weather": WEATHER}
    config = tmp_path / "toolscore.yaml"
    config.write_text(f"tool_schemas: {as_json}\nrequire_schemas: true\n")
    settings = load_settings(config)
    assert settings.tool_schemas == {"get_weather": WEATHER} and settings.require_schemas is True
    (not_a_map := tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ConfigError, match="tool name"):
        load_settings(tool_schemas=str(not_a_map))
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tool_schemas=str(tmp_path / "missing.json"))


def test_cli_tool_schemas_file_turns_a_skipped_run_into_a_checked_one(tmp_path: Path) -> None:
    trace = paths.CAPTURES / "otel_genai_openai_v2" / "wrong_tool.json"
    schemas = tmp_path / "schemas.yaml"
    schemas.write_text("search_web: {type: object, properties: {query: {type: string}}, required: [query]}\n")

    def validation(*args: str, gate: int = 0) -> dict[str, Any]:
        proc = subprocess.run([sys.executable, "-m", "otel_toolscore.cli", "score", str(trace), "--format", "json",
                               "-s", "tool_call_validation", "--fail-under", "0.8", *args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == gate, proc.stderr
        (run,) = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        (found,) = run["scores"]
        return found

    # a skipped score is no failure, but a gate whose only score was skipped judged nothing: it
    # fails, saying so (the gate never passes on nothing)
    assert validation(gate=1)["label"] == "skipped"
    checked = validation("--tool-schemas", str(schemas))
    assert (checked["value"], checked["label"]) == (1.0, "pass")
    assert checked["details"]["tool_calls"][0]["schema_source"] == "option"


# --- outputs of a skipped score -------------------------------------------------------------------


def test_a_skipped_validation_emits_no_value_no_zero_and_no_call_events() -> None:
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from otel_toolscore.config import ToolScoreSettings
    from otel_toolscore.outputs.otel import Emitter
    from tests.support.pipeline import InMemoryLogExporter

    trajectory = make_trajectory([("get_weather", {"city": "Oslo"}, {})])
    skipped = ToolCallValidation().score(trajectory)
    reader, logs = InMemoryMetricReader(), InMemoryLogExporter()
    meters, loggers = MeterProvider(metric_readers=[reader]), LoggerProvider()
    loggers.add_log_record_processor(SimpleLogRecordProcessor(logs))
    emitter = Emitter(ToolScoreSettings(call_events="all"), meter_provider=meters, logger_provider=loggers)
    try:
        assert emitter.span_attributes([skipped]) == {
            "toolscore.tool_call_validation.label": "skipped",
            "toolscore.tool_call_validation.explanation": emitter.span_attributes([skipped])[
                "toolscore.tool_call_validation.explanation"],
        }
        emitter.emit_events(trajectory, [skipped])
        emitter.record_metrics(trajectory, [skipped])
        (run_event,) = [dict(r.log_record.attributes or {}) for r in logs.get_finished_logs()]  # no per-call event
        assert "gen_ai.evaluation.score.value" not in run_event
        assert run_event["gen_ai.evaluation.score.label"] == "skipped"
        data = reader.get_metrics_data()
        by_name = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
        assert "gen_ai.evaluation.score" not in by_name  # no histogram point, so no 0
        (outcome,) = by_name["toolscore.evaluations"].data.data_points
        assert dict(outcome.attributes or {})["outcome"] == "skipped"
    finally:
        meters.shutdown()
        loggers.shutdown()


def test_the_pytest_plugin_passes_valid_arguments_when_there_is_no_schema() -> None:
    from otel_toolscore.testing import ToolScoreCapture

    capture = ToolScoreCapture()
    run = make_trajectory([("get_weather", {"city": "Oslo"}, {})])
    capture.assert_valid_arguments(run=run)  # unchecked: no failure
    capture.assert_valid_arguments({"get_weather": WEATHER}, run=run)
    with pytest.raises(AssertionError, match="invalid arguments"):
        capture.assert_valid_arguments({"get_weather": STRICT_WEATHER}, run=run)
    with pytest.raises(AssertionError, match="unknown_tool"):
        capture.assert_valid_arguments(run=run, require_schemas=True)


# --- a stock openai-v2 app, end to end -----------------------------------------------------------

APP = paths.DATA / "openai_v2_tools_app.py"


def _app(mode: str) -> dict[str, Any]:
    pytest.importorskip("openai")
    pytest.importorskip("opentelemetry.instrumentation.openai_v2")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "PYTEST"))}
    env["PYTHONPATH"] = str(paths.REPO)
    proc = subprocess.run([sys.executable, str(APP), mode, "good", "bad_arguments"], env=env, cwd=paths.REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_stock_openai_v2_app_without_schemas_is_skipped_not_penalised() -> None:
    out = _app("none")
    assert out["chat_spans_offer_tools"] is False  # the premise: the instrumentation records no tools
    for scenario in ("good", "bad_arguments"):
        assert out[scenario]["label"] == "skipped" and "score" not in out[scenario], out[scenario]
        assert "tool_schemas" in out[scenario]["explanation"]
    assert out["call_event_scores"] == [] and out["histogram_points"] == 0  # no 0, no 0.6


def test_stock_openai_v2_app_with_schemas_is_checked() -> None:
    out = _app("dict")
    assert (out["good"]["score"], out["good"]["label"]) == (1.0, "pass")
    assert (out["bad_arguments"]["score"], out["bad_arguments"]["label"]) == (0.3, "fail")  # "bob" is no email
    assert out["call_event_scores"] == [1.0, 0.3] and out["histogram_points"] == 2
    helper = _app("helper")  # tool_schemas() of the tool functions: their signatures (to: str, no email format)
    assert (helper["good"]["label"], helper["bad_arguments"]["label"]) == ("pass", "pass")
