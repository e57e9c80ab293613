"""tool_call_validation (docs/scorers.md): one test per issue type and its clean case."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_toolscore.scorers import ScorerConfigError, ToolCallValidation
from otel_toolscore.scorers.tool_validation import compile_schema
from otel_toolscore.trajectory import ToolDefinition, Trajectory
from tests.support.trajectory_factory import NO_RESULT, llm, make_call, make_trajectory

EMAIL_SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string", "format": "email"}, "subject": {"type": "string"}},
    "required": ["to", "subject"],
    "additionalProperties": False,
}
OPEN_SCHEMA = {"type": "object", "properties": {"verbose": {"type": "boolean"}}}
ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "address": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                    "required": ["city"],
                },
            },
            "required": ["name", "address"],
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}},
                "required": ["sku", "qty"],
            },
        },
        "priority": {"enum": ["low", "high"]},
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
    },
    "required": ["customer"],
}
SCHEMAS: dict[str, Any] = {
    "send_email": EMAIL_SCHEMA,
    "status": OPEN_SCHEMA,
    "order": ORDER_SCHEMA,
}
GOOD_EMAIL = {"to": "bob@example.com", "subject": "deploy finished"}


def validate(trajectory: Trajectory, **options: Any) -> dict[str, Any]:
    options.setdefault("schemas", SCHEMAS)
    score = ToolCallValidation(**options).score(trajectory)
    assert score.error is None, score.explanation
    return score.to_dict()


def issues_of(result: dict[str, Any], call: int = 0) -> list[dict[str, Any]]:
    return result["details"]["tool_calls"][call]["issues"]


def types_of(result: dict[str, Any], call: int = 0) -> list[str]:
    return [issue["type"] for issue in issues_of(result, call)]


def one_call(name: str | None, args: Any = None, result: Any = None, **fields: Any) -> Trajectory:
    return make_trajectory([make_call(name, args, result, **fields)])


# --- clean ------------------------------------------------------------------------------------


def test_a_valid_call_has_no_issues_and_scores_one() -> None:
    result = validate(one_call("send_email", GOOD_EMAIL, {"sent": True}))
    assert types_of(result) == []
    assert result["value"] == 1.0 and result["label"] == "pass"
    call = result["details"]["tool_calls"][0]
    assert set(call) == {"tool_call_id", "name", "checked", "schema_source", "score", "valid", "issues",
                         "suggestions"}
    assert call == {
        "tool_call_id": "call_0",
        "name": "send_email",
        "checked": True,
        "schema_source": "option",
        "score": 1.0,
        "valid": True,
        "issues": [],
        "suggestions": [],
    }


def test_no_tool_calls() -> None:
    result = validate(make_trajectory([]))
    assert (result["value"], result["label"]) == (1.0, "no_tool_calls")
    assert (result["details"]["checked_calls"], result["details"]["unchecked_calls"]) == (0, 0)


# --- each issue type ----------------------------------------------------------------------------


def test_missing_tool_name_is_critical() -> None:
    result = validate(one_call(None, {}, {}))
    issue = issues_of(result)[0]
    assert (issue["type"], issue["severity"]) == ("missing_tool_name", "critical")
    call = result["details"]["tool_calls"][0]
    assert call["valid"] is False and call["score"] == 0.0
    assert result["label"] == "fail"


def test_tool_not_found_uses_the_tools_offered_in_that_request() -> None:
    invented = validate(one_call("send_email", GOOD_EMAIL, {}, offered_tools=["get_weather"]))
    assert types_of(invented) == ["tool_not_found"]
    issue = issues_of(invented)[0]
    assert issue["severity"] == "high" and issue["actual"] == "send_email"
    assert issue["expected"] == ["get_weather"]
    offered = validate(one_call("send_email", GOOD_EMAIL, {}, offered_tools=["send_email"]))
    assert "tool_not_found" not in types_of(offered)
    unknown_offer = validate(one_call("send_email", GOOD_EMAIL, {}, offered_tools=None))
    assert "tool_not_found" not in types_of(unknown_offer)


def test_tool_not_found_falls_back_to_the_requesting_llm_call() -> None:
    call = make_call("send_email", GOOD_EMAIL, {}, llm_span_id="llm1")
    trajectory = make_trajectory(steps=[llm("llm1", tools=["get_weather"]), call])
    assert types_of(validate(trajectory)) == ["tool_not_found"]


def test_unknown_tool_only_with_require_schemas() -> None:
    # docs/scorers.md, tool_call_validation (rewritten for issue 28): no schema is no penalty, unknown_tool is opt-in
    result = validate(one_call("mystery", {"a": 1}, {}), require_schemas=True)
    issue = issues_of(result)[0]
    assert (issue["type"], issue["severity"]) == ("unknown_tool", "medium")
    assert result["details"]["tool_calls"][0]["score"] == 0.6
    assert result["details"]["tool_calls"][0]["checked"] is True
    assert types_of(validate(one_call("mystery", {"a": 1}, {}))) == []
    # the older option still turns it off
    assert types_of(validate(one_call("mystery", {"a": 1}, {}), require_schemas=True, allow_unknown_tools=True)) == []


def test_unknown_tool_is_high_in_strict_mode_and_zeroes_the_call() -> None:
    result = validate(one_call("mystery", {"a": 1}, {}), strict=True, require_schemas=True)
    assert issues_of(result)[0]["severity"] == "high"
    assert result["details"]["tool_calls"][0]["score"] == 0.0
    assert result["value"] == 0.0


def test_deprecated_tool_names_its_replacement() -> None:
    schemas = {
        "old_mail": {"parameters": EMAIL_SCHEMA, "deprecated": True, "replaced_by": "send_email"}
    }
    result = validate(one_call("old_mail", GOOD_EMAIL, {}), schemas=schemas)
    assert types_of(result) == ["deprecated_tool"]
    assert issues_of(result)[0]["severity"] == "medium"
    assert result["details"]["tool_calls"][0]["suggestions"] == [
        "use 'send_email' instead (deprecated)"
    ]


@pytest.mark.parametrize(
    "spec",
    [
        ToolDefinition(name="old_mail", parameters=EMAIL_SCHEMA, deprecated=True, replaced_by="x"),
        {**EMAIL_SCHEMA, "deprecated": True},
    ],
)
def test_deprecated_from_a_tool_definition_or_the_schema_annotation(spec: Any) -> None:
    result = validate(one_call("old_mail", GOOD_EMAIL, {}), schemas={"old_mail": spec})
    assert types_of(result) == ["deprecated_tool"]


def test_missing_arguments() -> None:
    result = validate(one_call("send_email", None, {}))
    assert types_of(result) == ["missing_arguments"]
    assert issues_of(result)[0]["severity"] == "high"
    # "{}" is fine when the schema allows it, and so is no arguments at all for such a tool
    assert types_of(validate(one_call("status", {}, {}))) == []
    assert types_of(validate(one_call("status", None, {}))) == []
    # without any schema, absent arguments are still reported (a check that needs no schema),
    # and the call counts as checked
    no_schema = validate(one_call("mystery", None, {}))
    assert types_of(no_schema) == ["missing_arguments"]
    assert no_schema["details"]["tool_calls"][0]["checked"] is True
    assert no_schema["value"] == 0.3
    assert types_of(validate(one_call("mystery", None, {}), require_schemas=True)) == [
        "unknown_tool",
        "missing_arguments",
    ]


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", '"just a string"', '{"to": "bob@'])
def test_invalid_arguments(raw: str) -> None:
    result = validate(one_call("send_email", raw, {}))
    assert types_of(result) == ["invalid_arguments"]
    assert issues_of(result)[0]["actual"] == raw


def test_arguments_of_a_non_object_type_are_invalid() -> None:
    trajectory = make_trajectory(
        [make_call("send_email", None, {}, arguments=["a"], arguments_raw=None)]
    )
    assert types_of(validate(trajectory)) == ["invalid_arguments"]


def test_missing_required_param_at_any_depth_with_dotted_paths() -> None:
    args = {"customer": {"name": "A", "address": {"zip": "1"}}, "items": [{"sku": "x"}]}
    result = validate(one_call("order", args, {}))
    missing = {i["path"] for i in issues_of(result) if i["type"] == "missing_required_param"}
    assert missing == {"customer.address.city", "items.0.qty"}
    top = validate(one_call("send_email", {"to": "bob@example.com"}, {}))
    assert [(i["type"], i["path"]) for i in issues_of(top)] == [
        ("missing_required_param", "subject")
    ]
    assert top["details"]["tool_calls"][0]["suggestions"] == ["add required parameter 'subject'"]


def test_each_missing_property_is_its_own_issue() -> None:
    result = validate(one_call("send_email", {}, {}))
    assert sorted(i["path"] for i in issues_of(result)) == ["subject", "to"]


def test_type_mismatch() -> None:
    args = {"customer": {"name": 7, "address": {"city": "X"}}, "items": [{"sku": "x", "qty": "2"}]}
    result = validate(one_call("order", args, {}))
    found = {(i["path"], i["expected"], i["actual"]) for i in issues_of(result)}
    assert found == {("customer.name", "string", "integer"), ("items.0.qty", "integer", "string")}
    assert set(types_of(result)) == {"type_mismatch"}


@pytest.mark.parametrize(
    ("args", "path", "keyword"),
    [
        ({"to": "not-an-email", "subject": "s"}, "to", "format"),
        ({"to": "bob@example.com", "subject": "s", "cc": "x"}, None, "additionalProperties"),
    ],
)
def test_schema_violation_email(args: dict[str, Any], path: str | None, keyword: str) -> None:
    result = validate(one_call("send_email", args, {}))
    issue = issues_of(result)[0]
    assert types_of(result) == ["schema_violation"]
    assert issue["path"] == path and issue["severity"] == "high"
    assert f"({keyword})" in issue["message"]


@pytest.mark.parametrize(
    ("args", "path", "keyword"),
    [
        (
            {"customer": {"name": "A", "address": {"city": "X"}}, "priority": "urgent"},
            "priority",
            "enum",
        ),
        ({"customer": {"name": "A", "address": {"city": "X"}}, "code": "abc"}, "code", "pattern"),
        (
            {
                "customer": {"name": "A", "address": {"city": "X"}},
                "items": [{"sku": "a", "qty": 0}],
            },
            "items.0.qty",
            "minimum",
        ),
    ],
)
def test_schema_violation_other_keywords(args: dict[str, Any], path: str, keyword: str) -> None:
    result = validate(one_call("order", args, {}))
    issue = issues_of(result)[0]
    assert types_of(result) == ["schema_violation"] and issue["path"] == path
    assert issue["message"].endswith(f"({keyword})")


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        ("email", "a@b.co", "nope"),
        ("uri", "https://example.com/x", "not a uri"),
        ("date", "2025-03-03", "03/03/2025"),
        ("date-time", "2025-03-03T14:30:00Z", "2025-03-03 afternoon"),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000", "123"),
        ("ipv4", "10.0.0.1", "10.0.0.300"),
    ],
)
def test_formats_are_checked(fmt: str, good: str, bad: str) -> None:
    schemas = {"t": {"type": "object", "properties": {"v": {"type": "string", "format": fmt}}}}
    assert types_of(validate(one_call("t", {"v": good}, {}), schemas=schemas)) == []
    assert types_of(validate(one_call("t", {"v": bad}, {}), schemas=schemas)) == [
        "schema_violation"
    ]


def test_the_schemas_own_draft_is_used() -> None:
    # draft-04 spells an exclusive bound as a boolean; 2020-12 would reject this schema
    draft4 = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "type": "object",
        "properties": {"n": {"type": "number", "maximum": 10, "exclusiveMaximum": True}},
    }
    schemas = {"t": draft4}
    assert types_of(validate(one_call("t", {"n": 9}, {}), schemas=schemas)) == []
    assert types_of(validate(one_call("t", {"n": 10}, {}), schemas=schemas)) == ["schema_violation"]


def test_missing_result() -> None:
    assert types_of(validate(one_call("send_email", GOOD_EMAIL, NO_RESULT))) == ["missing_result"]
    failed = make_call("send_email", GOOD_EMAIL, NO_RESULT, error="timeout")
    assert types_of(validate(make_trajectory([failed]))) == []


# --- tool_misuse ----------------------------------------------------------------------------------


def test_an_identical_call_repeated_with_the_same_result_is_misuse() -> None:
    trajectory = make_trajectory(
        [("status", {"verbose": True}, {"s": "up"}), ("status", {"verbose": True}, {"s": "up"})]
    )
    result = validate(trajectory)
    assert types_of(result, 0) == [] and types_of(result, 1) == ["tool_misuse"]
    assert issues_of(result, 1)[0]["severity"] == "medium"


def test_argument_order_does_not_hide_a_repeat() -> None:
    first = make_call(
        "order", None, {"id": 1}, index=0, arguments={"a": 1, "b": 2}, arguments_raw='{"a":1,"b":2}'
    )
    second = make_call(
        "order", None, {"id": 1}, index=1, arguments={"b": 2, "a": 1}, arguments_raw='{"b":2,"a":1}'
    )
    result = validate(make_trajectory([first, second]), allow_unknown_tools=True, schemas={})
    assert "tool_misuse" in types_of(result, 1)


def test_different_arguments_are_not_misuse() -> None:
    trajectory = make_trajectory(
        [("status", {"verbose": True}, {}), ("status", {"verbose": False}, {})]
    )
    assert types_of(validate(trajectory), 1) == []


def test_new_information_in_between_is_not_misuse() -> None:
    trajectory = make_trajectory(
        [
            ("status", {}, {"s": "down"}),
            ("send_email", GOOD_EMAIL, {"sent": True}),  # a new result: the agent learnt something
            ("status", {}, {"s": "up"}),
        ]
    )
    assert types_of(validate(trajectory), 2) == []


def test_a_new_user_message_in_between_is_not_misuse() -> None:
    steps = [
        llm("l1", user_messages=1),
        make_call("status", {}, {"s": "up"}, index=0, llm_span_id="l1"),
        llm("l2", user_messages=2),  # the user asked again
        make_call("status", {}, {"s": "up"}, index=1, llm_span_id="l2"),
    ]
    assert types_of(validate(make_trajectory(steps=steps)), 1) == []
    same_turn = [steps[0], steps[1], llm("l2", user_messages=1), steps[3]]
    assert types_of(validate(make_trajectory(steps=same_turn)), 1) == ["tool_misuse"]


def test_an_alternating_loop_is_caught_from_its_second_round() -> None:
    a = ("status", {}, {"s": "up"})
    b = ("send_email", GOOD_EMAIL, {"sent": True})
    result = validate(make_trajectory([a, b, a, b, a]))
    assert [types_of(result, i) for i in range(5)] == [[], [], [], ["tool_misuse"], ["tool_misuse"]]


# --- scoring ------------------------------------------------------------------------------------


def test_weights_and_mean_rounded_to_two_decimals() -> None:
    trajectory = make_trajectory(
        [
            ("send_email", GOOD_EMAIL, {}),  # 1.0
            ("mystery", {"a": 1}),  # unknown_tool 0.4 + missing_result 0.4 → 0.2
            ("send_email", {"to": "bob@example.com"}, {}),  # high 0.7 → 0.3
        ]
    )
    result = validate(trajectory, require_schemas=True)
    assert [c["score"] for c in result["details"]["tool_calls"]] == [1.0, 0.2, 0.3]
    assert result["value"] == 0.5
    assert result["label"] == "fail"
    assert result["details"]["issue_counts"] == {
        "unknown_tool": 1,
        "missing_result": 1,
        "missing_required_param": 1,
    }


def test_mean_is_rounded() -> None:
    trajectory = make_trajectory(
        [
            ("send_email", GOOD_EMAIL, {}),
            ("send_email", GOOD_EMAIL | {"x": 1}, {}),
            ("status", {}, {}),
        ]
    )
    # 1.0, 0.3, 1.0 → 0.7666… → 0.77
    assert validate(trajectory)["value"] == 0.77


def test_strict_zeroes_calls_with_high_issues_only() -> None:
    trajectory = make_trajectory(
        [("send_email", {"to": "bob@example.com"}, {}), ("status", {}, NO_RESULT)]
    )
    result = validate(trajectory, strict=True)
    assert [c["score"] for c in result["details"]["tool_calls"]] == [0.0, 0.6]


def test_label_passes_with_only_medium_issues() -> None:
    result = validate(one_call("mystery", {}, {}), require_schemas=True)
    assert result["label"] == "pass" and result["value"] == 0.6


# --- schema sources -------------------------------------------------------------------------------


def test_schemas_from_the_trajectory_definitions() -> None:
    run_level = make_trajectory(
        [("send_email", {"to": "x"}, {})],
        tool_definitions=[ToolDefinition(name="send_email", parameters=EMAIL_SCHEMA)],
    )
    result = ToolCallValidation().score(run_level).to_dict()
    assert sorted(types_of(result)) == ["missing_required_param", "schema_violation"]

    per_request = make_trajectory(
        steps=[
            llm("l1", tools=[]).model_copy(
                update={
                    "tool_definitions": [ToolDefinition(name="send_email", parameters=EMAIL_SCHEMA)]
                }
            ),
            make_call("send_email", GOOD_EMAIL, {}, llm_span_id="l1"),
        ]
    )
    assert types_of(ToolCallValidation().score(per_request).to_dict()) == []


def test_the_schemas_option_wins_over_the_trajectory() -> None:
    trajectory = make_trajectory(
        [("send_email", {"to": "x"}, {})],
        tool_definitions=[ToolDefinition(name="send_email", parameters=EMAIL_SCHEMA)],
    )
    result = validate(trajectory, schemas={"send_email": {"type": "object"}})
    assert types_of(result) == []


def test_a_definition_without_parameters_is_no_schema() -> None:
    trajectory = make_trajectory(
        [("send_email", GOOD_EMAIL, {})], tool_definitions=[ToolDefinition(name="send_email")]
    )
    assert ToolCallValidation().score(trajectory).label == "skipped"
    assert types_of(ToolCallValidation(require_schemas=True).score(trajectory).to_dict()) == ["unknown_tool"]


def test_an_invalid_schema_counts_as_no_schema() -> None:
    result = validate(one_call("t", {"a": 1}, {}), schemas={"t": {"type": "no-such-type"}})
    assert result["label"] == "skipped"
    assert "not a valid JSON Schema" in result["details"]["schema_problems"]["t"]
    result = validate(one_call("t", {"a": 1}, {}), schemas={"t": {"type": "no-such-type"}}, require_schemas=True)
    assert types_of(result) == ["unknown_tool"]
    assert "not a valid JSON Schema" in issues_of(result)[0]["message"]


def test_remote_refs_are_never_fetched() -> None:
    schema = {"$ref": "https://example.invalid/schema.json"}
    result = validate(one_call("t", {"a": 1}, {}), schemas={"t": schema}, require_schemas=True)
    assert types_of(result) == ["unknown_tool"]
    assert "cannot be applied" in issues_of(result)[0]["message"]


def test_compiled_validators_are_cached_by_schema_text() -> None:
    first = compile_schema({"type": "object", "required": ["a"]})
    second = compile_schema({"required": ["a"], "type": "object"})
    assert first is second


def test_a_schema_asked_about_again_is_answered_from_the_object_then_from_a_copy_of_its_text() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    first = compile_schema(schema)
    assert compile_schema(schema) is first
    assert compile_schema(json.loads(json.dumps(schema))) is first


def test_a_schema_changed_in_place_is_compiled_as_it_is_now() -> None:
    """A trajectory's schema changed between two scorings is the schema of the second."""
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "integer"}}}
    trajectory = one_call("t", {"a": "x"}, {})
    trajectory.tool_definitions = [ToolDefinition(name="t", parameters=schema)]
    for _ in range(3):  # (from its second time, a schema is answered from the object)
        assert types_of(validate(trajectory)) == ["type_mismatch"]
    schema["properties"]["a"]["type"] = "string"
    assert types_of(validate(trajectory)) == []
    assert compile_schema(schema) is compile_schema(json.loads(json.dumps(schema)))


def test_bad_options_are_configuration_errors() -> None:
    with pytest.raises(ScorerConfigError):
        ToolCallValidation(schemas={"t": 42})
    with pytest.raises(ScorerConfigError):
        ToolCallValidation(schemas=["t"])  # type: ignore[arg-type]


# --- robustness -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"to": object()},
        {"to": float("nan"), "subject": "s"},
        {1: "x"},
        {"to": b"bytes", "subject": "s"},
    ],
)
def test_weird_argument_values_never_raise(arguments: dict[Any, Any]) -> None:
    call = make_call("send_email", None, {}, arguments=arguments, arguments_raw="?")
    score = ToolCallValidation(schemas=SCHEMAS).score(make_trajectory([call]))
    # still a judgement (the values are wrong, not the scorer), and it serialises
    assert score.error is None and score.value is not None and score.value < 1.0
    json.dumps(score.to_dict())


def test_a_broken_trajectory_gives_an_error_score(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(self: Trajectory) -> list[Any]:
        raise ValueError("reader bug")

    monkeypatch.setattr(Trajectory, "tool_calls", property(explode))
    score = ToolCallValidation(schemas=SCHEMAS).score(make_trajectory())
    assert score.value is None and score.label == "error" and score.error == "ValueError"


def test_a_non_trajectory_gives_an_error_score() -> None:
    score = ToolCallValidation().score(None)  # type: ignore[arg-type]
    assert score.value is None and score.error == "AttributeError"
