"""tool_result_verification (docs/scorers.md): issue types, clean cases and false positives."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_toolscore.scorers import ScorerConfigError, ToolResultVerification
from otel_toolscore.scorers import tool_results as tr
from otel_toolscore.scorers._facts import FactIndex, extract_facts
from otel_toolscore.trajectory import LLMCall, Message, Trajectory
from tests.support.trajectory_factory import NO_RESULT, llm, make_call, make_trajectory

WEATHER = {"temperature": "68°F", "condition": "partly cloudy"}


def verify(trajectory: Trajectory, **options: Any) -> dict[str, Any]:
    score = ToolResultVerification(**options).score(trajectory)
    assert score.error is None, score.explanation
    return score.to_dict()


def call_report(result: dict[str, Any], call: int = 0) -> dict[str, Any]:
    return result["details"]["tool_calls"][call]


def types_of(result: dict[str, Any], call: int = 0) -> list[str]:
    return [issue["type"] for issue in call_report(result, call)["issues"]]


def single(result: Any, output: str | None, *, error: str | None = None, **kw: Any) -> Trajectory:
    return make_trajectory(
        [("get_weather", {"location": "NY"}, result, error)], output=output, **kw
    )


# --- clean -------------------------------------------------------------------------------------


def test_a_result_repeated_in_the_answer_is_clean() -> None:
    result = verify(single(WEATHER, "It's currently 68°F and partly cloudy in New York."))
    assert types_of(result) == []
    assert (result["value"], result["label"]) == (1.0, "pass")
    report = call_report(result)
    assert report == {
        "tool_call_id": "call_0",
        "name": "get_weather",
        "score": 1.0,
        "hallucinated": False,
        "hallucination_score": 0.0,
        "integrated": True,
        "ungrounded_facts": [],
        "issues": [],
    }


def test_no_tool_calls_scores_one() -> None:
    result = verify(make_trajectory([], output="Hello!"))
    assert (result["value"], result["label"]) == (1.0, "no_tool_calls")


def test_summary() -> None:
    trajectory = make_trajectory(
        [
            ("get_weather", {"location": "NY"}, WEATHER),
            ("get_weather", {"location": "LA"}, {"temperature": "80°F"}),
            ("send_email", {"to": "a@b.co"}, None, "SMTP down"),
        ],
        output="NY is 68°F and partly cloudy, LA is 55°F. I couldn't send the email.",
    )
    summary = verify(trajectory)["details"]["summary"]
    assert summary["total_calls"] == 3
    assert (
        summary["hallucinated_calls"] == 2
    )  # 55°F is invented; both weather results hold temperatures
    # the made-up 55°F is one run-level issue, carried by the last call whose result holds a
    # temperature (LA); NY is valid, the e-mail failed
    assert summary["valid_calls"] == 1
    assert summary["integrated_calls"] == 2  # NY used; the failure admitted; LA unused
    assert summary["issues"] == sum(summary["issue_counts"].values())
    assert summary["issue_counts"]["error_result"] == 1


# --- each issue type, and its clean counterpart ---------------------------------------------------


def test_missing_result() -> None:
    result = verify(single(NO_RESULT, "I'll check."))
    assert types_of(result) == ["missing_result"]
    assert call_report(result)["score"] == 0.7 and call_report(result)["integrated"] is False


@pytest.mark.parametrize("empty", [{}, [], "", None, "   "])
def test_empty_result(empty: Any) -> None:
    result = verify(single(empty, "There is no weather data."))
    assert types_of(result) == ["empty_result"]
    assert call_report(result)["score"] == 0.9


@pytest.mark.parametrize(
    ("result_value", "error"),
    [
        ({"temperature": "68°F"}, "TimeoutError: upstream"),  # span status / exception event
        ({"status": "Error", "message": "no such city"}, None),
        ({"error": "TypeError: missing 'subject'"}, None),
        ({"error": True, "message": "validation failed"}, None),
        ("An error occurred while running the tool.", "Error"),
    ],
)
def test_error_result(result_value: Any, error: str | None) -> None:
    result = verify(single(result_value, "The weather lookup failed, sorry.", error=error))
    assert "error_result" in types_of(result)
    assert "unused_result" not in types_of(result)  # a failure's text need not be quoted
    assert call_report(result)["integrated"] is True  # the answer admits the failure


@pytest.mark.parametrize(
    "result_value",
    [
        {"error": None, "temperature": "68°F"},
        {"error": False, "temperature": "68°F"},
        {"status": "ok", "temperature": "68°F"},
        "Error: this text alone is not an error signal, 68°F",
    ],
)
def test_not_an_error_result(result_value: Any) -> None:
    assert "error_result" not in types_of(verify(single(result_value, "It's 68°F.")))


def test_malformed_result() -> None:
    call = make_call("get_weather", {"location": "NY"}, '{"temperature": "68°F", "cond', index=0)
    result = verify(make_trajectory([call], output="It's 68°F."))
    assert types_of(result) == ["malformed_result"]
    assert call_report(result)["score"] == 0.4


def test_plain_text_and_python_repr_results_are_not_malformed() -> None:
    for text in ("[tool-result: get_weather]", "{'temperature': '68°F'}", "68°F and sunny"):
        call = make_call("get_weather", {"location": "NY"}, text, index=0)
        assert "malformed_result" not in types_of(verify(make_trajectory([call], output="68°F")))


def test_hallucinated_content() -> None:
    result = verify(single({"forecast": "72°F, sunny"}, "It's 55°F and raining."))
    assert "hallucinated_content" in types_of(result)
    report = call_report(result)
    assert report["hallucinated"] is True
    assert report["hallucination_score"] == 1.0
    assert report["ungrounded_facts"] == ["55°F"]
    assert result["label"] == "fail"


def test_hallucination_score_is_a_share_of_all_facts() -> None:
    trajectory = single(
        {"temperature": "72°F", "humidity": "40%", "wind": "5 mph"},
        "It's 72°F with 40% humidity, wind 5 mph, and a high of 80°F.",
    )
    report = call_report(verify(trajectory))
    assert report["hallucination_score"] == 0.25  # 80°F of four facts
    assert report["hallucinated"] is False  # ≤ 0.3
    strict = call_report(verify(trajectory, hallucination_threshold=0.2))
    assert strict["hallucinated"] is True


def test_facts_from_the_user_input_or_system_instructions_are_grounded() -> None:
    from_input = single(
        {"temperature": "72°F"},
        "It's 72°F; you said 60°F yesterday.",
        input="Yesterday it was 60°F. What now?",
    )
    assert "hallucinated_content" not in types_of(verify(from_input))
    from_system = single(
        {"temperature": "72°F"},
        "It's 72°F, alert above 90°F.",
        system_instructions="Warn when the temperature is above 90°F.",
    )
    assert "hallucinated_content" not in types_of(verify(from_system))


def test_facts_from_another_tool_result_are_grounded() -> None:
    trajectory = make_trajectory(
        [
            (
                "get_weather",
                {"location": "London"},
                {"temperature": "57°F", "condition": "overcast"},
            ),
            ("get_weather", {"location": "Berlin"}, {"temperature": "64°F", "condition": "sunny"}),
        ],
        output="London is 57°F and overcast, while Berlin is 64°F and sunny.",
    )
    result = verify(trajectory)
    assert types_of(result, 0) == [] and types_of(result, 1) == []


def test_a_fact_of_another_kind_is_not_blamed_on_the_call() -> None:
    # the calendar result holds times only; an invented temperature is not its hallucination
    trajectory = make_trajectory(
        [("calendar", {}, {"meeting": "14:30"})],
        output="Your meeting is at 2:30 pm; it will be 90°F.",
    )
    report = call_report(verify(trajectory))
    assert report["hallucinated"] is False and report["ungrounded_facts"] == []


def test_a_converted_unit_is_not_invented() -> None:
    trajectory = single(
        {"temperature": "68°F", "wind": "10 mph"}, "It's 68°F (20°C), wind 16 km/h."
    )
    report = call_report(verify(trajectory))
    assert report["hallucination_score"] == 0.0 and report["ungrounded_facts"] == []
    invented = single({"temperature": "68°F"}, "It's 68°F (25°C).")
    assert call_report(verify(invented))["ungrounded_facts"] == ["25°C"]


def test_list_numbering_and_ordinals_are_not_hallucination_evidence() -> None:
    trajectory = single({"temperature": "68°F", "count": 12}, "1. Step 3 is done.\n2. Option 4: it's 68°F.")
    assert call_report(verify(trajectory))["hallucination_score"] == 0.0


def test_a_small_number_that_counts_something_is_a_fact() -> None:
    """docs/scorers.md: "3 bags" is a quantity; a count no source holds (no number, no list of
    that length) is flagged, one that a result holds is not."""
    counted = single({"temperature": "68°F", "readings": [61, 64, 68]}, "I found 3 readings; it's 68°F.")
    assert "hallucinated_content" not in types_of(verify(counted))
    invented = single({"temperature": "68°F", "readings": [61, 64, 68]}, "I found 7 readings; it's 68°F.")
    assert verify(invented)["details"]["ungrounded_facts"] == ["7"]
    labelled = single({"temperature": "68°F", "readings": [61, 64, 68]}, "- Readings: 7\n- Latest: 68°F")
    assert verify(labelled)["details"]["ungrounded_facts"] == ["7"]


def test_contradicts_response_failed_but_claims_success() -> None:
    trajectory = make_trajectory(
        [("send_email", {"to": "bob@example.com"}, {"error": "SMTP unavailable"})],
        output="I've sent the email to Bob successfully.",
    )
    result = verify(trajectory)
    assert set(types_of(result)) == {"error_result", "contradicts_response"}
    # the contradiction is a run-level issue (carried by its call): the call's own score pays for
    # the error, the run's for the contradiction
    assert call_report(result)["score"] == 0.4
    assert result["value"] == 0.0 and result["label"] == "fail"
    assert [i["type"] for i in result["details"]["issues"]] == ["contradicts_response"]
    assert call_report(result)["integrated"] is False


def test_contradicts_response_succeeded_but_claims_failure() -> None:
    trajectory = make_trajectory(
        [("send_email", {"to": "bob@example.com"}, {"status": "sent", "id": "MSG-1001"})],
        output="Unfortunately I was unable to send the email.",
    )
    assert "contradicts_response" in types_of(verify(trajectory))


def test_not_found_reported_as_not_found_is_agreement() -> None:
    trajectory = make_trajectory(
        [("lookup_order", {"id": "ORD-1234"}, {"status": "not_found"})],
        output="Order ORD-1234 was not found.",
    )
    result = verify(trajectory)
    assert types_of(result) == []
    assert call_report(result)["integrated"] is True


def test_not_found_but_claims_success_is_a_contradiction() -> None:
    trajectory = make_trajectory(
        [("cancel_order", {"id": "ORD-1234"}, {"status": "not_found"})],
        output="I've cancelled order ORD-1234 for you.",
    )
    assert "contradicts_response" in types_of(verify(trajectory))


def test_an_empty_action_result_with_a_success_claim_is_no_contradiction() -> None:
    trajectory = make_trajectory(
        [("log_event", {"message": "x"}, None)], output="I've logged the event."
    )
    assert types_of(verify(trajectory)) == ["empty_result"]
    # docs/scorers.md, tool_result_verification: "An empty result alone is never a contradiction" (real runs search twice
    # and rightly quote the search that found something; a think tool returns nothing).
    search = make_trajectory([("search", {"q": "x"}, [])], output="I found several great options.")
    assert types_of(verify(search)) == ["empty_result"]
    # an explicit "nothing found" still contradicts a claim of success
    missing = make_trajectory([("find_order", {"id": "A1"}, {"status": "not_found"})],
                              output="Your order has been found and shipped.")
    assert "contradicts_response" in types_of(verify(missing))


def test_unused_result() -> None:
    result = verify(single(WEATHER, "Let me know if you need anything else."))
    assert types_of(result) == ["unused_result"]
    assert call_report(result)["score"] == 0.7 and call_report(result)["integrated"] is False


def test_a_key_named_in_the_answer_is_not_use() -> None:
    result = verify(single({"temperature": "68°F"}, "I checked the temperature."))
    assert types_of(result) == ["unused_result"]


def test_incomplete_integration() -> None:
    result_value = {
        "temperature": "68°F",
        "humidity": "40%",
        "wind": "5 mph",
        "uv": "index 7",
        "pollen": "high",
    }
    result = verify(single(result_value, "It's 68°F."))
    assert types_of(result) == ["incomplete_integration"]
    assert call_report(result)["score"] == 0.9
    half = verify(single({"a": "alpha", "b": "beta", "c": "gamma", "d": "delta"}, "alpha and beta"))
    assert types_of(half) == []  # half is not under half


def test_incomplete_integration_needs_three_values() -> None:
    assert types_of(verify(single({"a": "alpha", "b": "beta"}, "alpha"))) == []


def test_long_text_results_are_matched_by_sentence() -> None:
    docs = (
        "A balanced diet is important for health.\n\nExercise strengthens the heart and improves "
        "blood circulation.\n\nRegular exercise reduces stress and anxiety.\n\nExercise equipment "
        "can be expensive."
    )
    answer = (
        "Exercise strengthens the heart and improves blood circulation, and regular exercise also "
        "reduces stress and anxiety."
    )
    assert types_of(verify(single(docs, answer))) == []
    assert types_of(verify(single(docs, "Drink water."))) == ["unused_result"]


# --- normalised matching --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result_value", "answer"),
    [
        ({"temperature": "72°F"}, "It is 72 degrees right now."),
        ({"temperature": 72}, "It is 72°F."),
        ({"temperature": 72.0}, "It is 72 degrees."),
        ({"temperature": "72 degrees"}, "It's 72°F."),
        ({"total": "1,234.50"}, "The total is $1234.5."),
        ({"total": 1234.5}, "The total is $1,234.50."),
        ({"total": "USD 10"}, "That costs 10 dollars."),
        ({"reading": 68.4}, "It's about 68°F."),
        ({"status": "not_found"}, "That order was Not Found."),
        ({"date": "2025-03-03"}, "It is due on March 3, 2025."),
        ({"date": "2025-03-03"}, "It is due on 3 Mar 2025."),
        ({"at": "14:30"}, "The meeting is at 2:30 pm."),
        ({"at": "2pm"}, "The meeting is at 14:00."),
        ({"id": "ORD-1234"}, "Your order ord-1234 shipped."),
        ({"share": 0.15}, "That is 15%."),
    ],
)
def test_the_same_value_written_differently_is_used_and_grounded(
    result_value: Any, answer: str
) -> None:
    result = verify(single(result_value, answer))
    assert types_of(result) == [], result["details"]


def test_a_python_repr_result_is_read_as_a_structure() -> None:
    call = make_call("get_weather", {"location": "NY"}, "{'temperature': '68°F'}", index=0)
    assert types_of(verify(make_trajectory([call], output="I checked the temperature."))) == [
        "unused_result"
    ]
    assert types_of(verify(make_trajectory([call], output="It's 68°F."))) == []


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("72°F", "number", 72.0),
        ("-5 °C", "number", -5.0),
        ("$1,234.50", "money", 1234.5),
        ("€12", "money", 12.0),
        ("USD 10", "money", 10.0),
        ("15%", "percentage", 15.0),
        ("2025-03-03", "date", (2025, 3, 3)),
        ("March 3, 2025", "date", (2025, 3, 3)),
        ("3 Mar 2025", "date", (2025, 3, 3)),
        ("14:30", "time", 870),
        ("2pm", "time", 840),
        ("ORD-1234", "identifier", "ord-1234"),
        (
            "123e4567-e89b-12d3-a456-426614174000",
            "identifier",
            "123e4567-e89b-12d3-a456-426614174000",
        ),
        ("9fceb02d", "identifier", "9fceb02d"),
        ("Bob@Example.com", "email", "bob@example.com"),
        ("https://Example.com/a/", "url", "example.com/a"),
        ("1.5 million", "number", 1_500_000.0),
    ],
)
def test_fact_extraction(text: str, kind: str, value: Any) -> None:
    facts = extract_facts(f"see {text} here")
    assert [(f.kind, f.value) for f in facts] == [(kind, value)]


def test_fact_index_matches_numbers_as_numbers() -> None:
    index = FactIndex(texts=["It was 1,234.50 and 68.4 on 2025-03-03"])
    for text in ("$1234.5", "about 68", "1234.50 USD", "March 3"):
        assert all(index.contains(f) for f in extract_facts(text)), text
    for text in ("$1235", "69°F", "March 4"):
        assert not any(index.contains(f) for f in extract_facts(text)), text


# --- cross_turn and options ---------------------------------------------------------------------


def test_cross_turn_also_reads_later_assistant_messages() -> None:
    steps = [
        llm("l1"),
        make_call("get_weather", {"location": "NY"}, WEATHER, index=0, llm_span_id="l1"),
        llm("l2", text="It's 68°F and partly cloudy. Anything else?"),
    ]
    trajectory = make_trajectory(steps=steps, output="Glad to help!")
    assert types_of(verify(trajectory)) == ["unused_result"]
    assert types_of(verify(trajectory, cross_turn=True)) == []


def test_cross_turn_ignores_messages_written_before_the_call() -> None:
    steps = [
        LLMCall(span_id="l1", output_messages=[Message(role="assistant", content="It's 68°F.")]),
        make_call("get_weather", {"location": "NY"}, WEATHER, index=0),
    ]
    trajectory = make_trajectory(steps=steps, output="Done.")
    assert types_of(verify(trajectory, cross_turn=True)) == ["unused_result"]


def test_final_answer_falls_back_to_the_last_llm_text() -> None:
    steps = [
        make_call("get_weather", {"location": "NY"}, WEATHER, index=0),
        llm("l2", text="68°F, partly cloudy"),
    ]
    result = verify(make_trajectory(steps=steps, output=None))
    assert types_of(result) == [] and result["details"]["response_available"] is True


def test_without_any_response_only_the_results_are_checked() -> None:
    result = verify(single(WEATHER, None))
    assert types_of(result) == [] and result["details"]["response_available"] is False
    assert "No response text" in result["explanation"]


def test_bad_threshold_is_a_configuration_error() -> None:
    with pytest.raises(ScorerConfigError):
        ToolResultVerification(hallucination_threshold=2)


# --- robustness --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result_value",
    [
        {"nested": {"deep": [[[{"x": "68°F"}]]]}},
        {"n": float("inf"), "m": float("nan")},
        [1, "two", None, True, {"three": 3.0}],
        "x" * 300_000,
        "{" * 10_000,
        "[" * 50_000 + "]" * 50_000,
        {"inner": "[" * 50_000 + "]" * 50_000},
        {"k": "\x00\ud7ff weird ☃"},
    ],
)
def test_odd_results_never_raise(result_value: Any) -> None:
    call = make_call("t", {}, None, index=0).model_copy(
        update={"result": result_value, "result_raw": None, "has_result": True}
    )
    score = ToolResultVerification().score(make_trajectory([call], output="It's 68°F."))
    assert score.error is None and score.value is not None
    json.dumps(score.to_dict())


def test_a_broken_trajectory_gives_an_error_score() -> None:
    broken = Trajectory.model_construct(trace_id="t", steps=5)  # skips validation: not a list
    score = ToolResultVerification().score(broken)
    assert score.value is None and score.label == "error" and score.error == "TypeError"


def test_integers_beyond_float_range_in_results_are_not_an_error() -> None:
    """JSON integers have no size limit; 10**400 in a result once made the scorer fail with
    OverflowError (found by the hostile-input fuzzing)."""
    from otel_toolscore.scorers import get_scorer
    from tests.support.trajectory_factory import make_trajectory

    scorer = get_scorer("tool_result_verification")
    for result in ({"n": 10**400, "temp": 21}, [10**400, 21], f'{{"n": {"9" * 400}, "temp": 21}}'):
        score = scorer.score(make_trajectory([("get", {"q": 1}, result)], input="q", output="It is 21 degrees."))
        assert score.error is None and score.value is not None, (result, score.explanation)


# --- contradictions: the result asked first --------------------------------------------------------

_OUTCOME_VALUES = st.sampled_from([
    {"status": "ok"}, {"status": "error", "message": "card declined"}, {"status": "not_found"},
    {"status": "cancelled"}, {"state": "Expired "}, {"state": "active"}, {"sent": True}, {"found": False},
    {"error": "timeout"}, {"isError": True}, {"a": "", "b": []}, {"temperature": "72°F"}, {},
    "Error: payment method not found", "No results found", "Booking confirmed", "", None, [1, 2],
])
_OUTCOME_ANSWERS = st.sampled_from([
    "Here is your booking.", "I found 3 bookings.",
    "I've booked your flight.", "The booking was cancelled; I could not complete it.",
    "Unfortunately the payment failed.", "Your reservation has been confirmed successfully.",
    "The cancellation is complete and the email was sent.", "It is 72°F in Paris.", "",
    "I have sent the invite, but the calendar update failed.",
])


def _contradiction_the_long_way(call: Any, value: Any, error: str | None, response: Any, outcomes: Any,
                                i: int) -> Any:
    """``_contradiction`` written plainly, sentence by sentence, without asking the result first: the
    oracle."""
    for sentence in response.sentences():
        success, failure = tr._SUCCESS_RE.search(sentence), tr._FAILURE_RE.search(sentence)
        if not success or failure or not tr._speaks_about(sentence, call, i, outcomes) or outcomes.retried_ok(i):
            continue
        if error is not None:
            return tr._contradicts("the tool failed but the response claims success", sentence, error)
        if tr.reports_not_found(value):
            return tr._contradicts("the result reports nothing found but the response claims success", sentence,
                                   tr._shown(value))
        if tr.reports_failure(value):
            return tr._contradicts("the tool reported a failure but the response claims success", sentence,
                                   tr._shown(value))
        state = tr._state_of(value)
        if state in tr._NEGATIVE_STATES and i == outcomes.last_stateful and not tr._mentions(response, state):
            return tr._contradicts(f"the result says {state!r} but the response claims success", sentence,
                                   tr._shown(value))
        break  # the first success claim about the call decides
    if error is None and tr.reports_success(value) and not outcomes.later_failed(i):
        for sentence in response.sentences():
            if (tr._FAILURE_RE.search(sentence) and not tr._SUCCESS_RE.search(sentence)
                    and not tr._POLICY_REFUSAL.search(sentence) and tr._speaks_about(sentence, call, i, outcomes)):
                return tr._contradicts("the tool succeeded but the response says it failed", sentence,
                                       tr._shown(value))
    failed_lookup = tr._is_lookup(call.name) and (
        error is not None or tr.reports_failure(value) or tr._explicitly_not_found(value))
    if failed_lookup and not outcomes.retried_ok(i):
        for sentence in response.sentences():
            if (tr._FOUND_RE.search(sentence) and not tr._FAILURE_RE.search(sentence)
                    and tr._found_about(sentence, call, i, outcomes)):
                return tr._contradicts("the look-up failed but the response presents what it found", sentence,
                                       error if error is not None else tr._shown(value))
    return None


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["book", "pay", "get_booking", "search"]), _OUTCOME_VALUES,
                          st.sampled_from([None, None, "", "timeout"])), min_size=1, max_size=4),
       _OUTCOME_ANSWERS)
def test_a_contradiction_is_what_asking_the_response_first_finds(
        calls: list[tuple[str, Any, str | None]], answer: str) -> None:
    made = [make_call(name, {}, value, index=i, id=f"c{i}", error=error) for i, (name, value, error) in enumerate(calls)]
    values = [tr.structured_result(call)[0] for call in made]
    errors = [tr.error_of(call, value) for call, value in zip(made, values)]
    for i, (call, value, error) in enumerate(zip(made, values, errors)):
        fast = tr._contradiction(call, value, error, tr.Response.of(answer), tr._Outcomes(made, values, errors), i)
        slow = _contradiction_the_long_way(call, value, error, tr.Response.of(answer),
                                           tr._Outcomes(made, values, errors), i)
        assert fast == slow
