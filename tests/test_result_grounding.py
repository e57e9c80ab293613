"""tool_result_verification's sources and matching (docs/scorers.md, tool_result_verification,
"Facts and their support"), the
explicit-failure contradictions, the options for tools without output and hand-offs, and the
evidence every flag carries. Each case has a twin: the supported statement passes, the
unsupported one is flagged, naming the fact."""

from __future__ import annotations

from typing import Any

import pytest

from otel_toolscore.scorers import ToolResultVerification
from otel_toolscore.trajectory import LLMCall, Message, ToolResultPart, Trajectory
from tests.support.trajectory_factory import NO_RESULT, make_call, make_trajectory


def score(trajectory: Trajectory, **options: Any) -> dict[str, Any]:
    result = ToolResultVerification(**options).score(trajectory)
    assert result.error is None, result.explanation
    return result.to_dict()


def flags(result: dict[str, Any]) -> list[str]:
    return sorted({i["type"] for c in result["details"]["tool_calls"] for i in c["issues"]
                   if i["type"] in ("hallucinated_content", "contradicts_response")})


def one(result: Any, answer: str, *, name: str = "lookup", user: str = "Please help.", **kw: Any) -> Trajectory:
    return make_trajectory([(name, {"q": "x"}, result)], output=answer, input=user, **kw)


# --- the three misses of the issue, and their twins --------------------------------------------


@pytest.mark.parametrize(
    ("result", "wrong", "right", "fact"),
    [
        ({"price_eur": 120}, "The ticket costs 45 EUR.", "The ticket costs 120 EUR.", "45 EUR"),
        ({"total": 120, "currency": "EUR"}, "Total: 145 EUR.", "Total: 120 EUR.", "145 EUR"),
    ],
)
def test_an_amount_no_result_supports_is_flagged_whatever_its_currency(
    result: Any, wrong: str, right: str, fact: str
) -> None:
    flagged = score(one(result, wrong))
    assert flags(flagged) == ["hallucinated_content"]
    assert flagged["details"]["ungrounded_facts"] == [fact]
    issue = next(i for i in flagged["details"]["tool_calls"][0]["issues"] if i["type"] == "hallucinated_content")
    assert issue["fact"] == fact and issue["sentence"] == wrong
    assert flagged["explanation"].startswith(f"States {fact}, which no tool result supports: '{wrong}'")
    assert flags(score(one(result, right))) == []


def test_a_cancelled_status_contradicts_a_confirmation() -> None:
    flagged = score(one({"status": "cancelled"}, "Your booking is confirmed.", name="get_booking"))
    assert flags(flagged) == ["contradicts_response"]
    issue = flagged["details"]["tool_calls"][0]["issues"][0]
    assert issue["sentence"] == "Your booking is confirmed." and "cancelled" in issue["result"]
    assert flags(score(one({"status": "cancelled"}, "Your booking has been cancelled.", name="get_booking"))) == []
    assert flags(score(one({"status": "confirmed"}, "Your booking is confirmed.", name="get_booking"))) == []
    # the action's own word for the state agrees: "cancellation … completed"
    assert flags(score(one({"status": "cancelled"}, "The cancellation has been completed.",
                           name="cancel_reservation"))) == []


# --- matching ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "supported", "unsupported"),
    [
        ({"payment_methods": ["gift_card_7091239"]}, "I used gift card 7091239.", "I used gift card 7091299."),
        ({"id": "gift_card_1591784"}, "The card ending in 1784 was charged.", "The card ending in 1794 was charged."),
        ({"order": 1042, "state": "shipped"}, "Order #1042 has shipped.", "Order #1043 has shipped."),
        ({"date": "2024-05-20"}, "Your flight is on May 20th.", "Your flight is on May 23rd."),
        ({"amount": 1023}, "You paid $1,023.00.", "You paid $1,123.00."),
        ({"payment_history": [{"amount": 305}, {"amount": -114}]}, "You will be refunded $114.",
         "You will be refunded $141."),
        ({"flights": [{"price": 152}, {"price": 103}]}, "The total is $255.", "The total is $265."),
        ({"base": 300, "bags": 50, "insurance": 30}, "With bags and insurance included it is $380.",
         "With bags and insurance included it is $390."),
        ({"paid": 500, "new_price": 375}, "You get $125 back.", "You get $135 back."),
        ({"price": 120}, "For 3 passengers that is $360.", "For 3 passengers that is $370."),
        ({"departure": "19:00:00", "arrival": "01:00:00+1", "date": "2024-05-25"},
         "You land on May 26 at 1 AM.", "You land on May 28 at 1 AM."),
    ],
    ids=["id_inside_id", "ending_in", "hash_number", "date_formats", "money_format", "sign",
         "column_total", "three_numbers", "difference", "count_times_price", "overnight"],
)
def test_leniently_read_facts_are_supported_and_their_twins_are_not(
    result: Any, supported: str, unsupported: str
) -> None:
    assert flags(score(one(result, supported))) == [], supported
    assert flags(score(one(result, unsupported))) == ["hallucinated_content"], unsupported


def test_facts_the_user_or_the_system_stated_are_supported() -> None:
    said = make_trajectory([("get_user", {"id": "u1"}, {"name": "Mia", "card": "credit_card_4421486"})],
                           input="Use my card, the one with $250 on it.",
                           system_instructions="Insurance costs $30 per passenger.",
                           output="I'll use the card with $250, and insurance is $30 per passenger.")
    assert flags(score(said)) == []
    made_up = make_trajectory([("get_user", {"id": "u1"}, {"name": "Mia", "balance": 40})],
                              input="Use my card.", output="Insurance is $35 per passenger.")
    assert flags(score(made_up)) == ["hallucinated_content"]


def _history_llm(*messages: Message) -> LLMCall:
    return LLMCall(span_id="l1", input_messages=list(messages), output_messages=[])


def test_earlier_turns_results_support_the_answer_but_are_not_this_runs_calls() -> None:
    earlier = Message(role="tool", tool_results=[ToolResultPart(tool_call_id="c0", content={"price": 121})])
    call = make_call("get_user", {"id": "u1"}, {"name": "Mia", "membership": "gold"})
    trajectory = make_trajectory(
        steps=[_history_llm(Message(role="user", content="Flights?"), earlier,
                            Message(role="user", content="Book HAT069.")), call],
        output="HAT069 costs $121 for you, Mia.",
    )
    assert flags(score(trajectory)) == []
    assert [c["name"] for c in score(trajectory)["details"]["tool_calls"]] == ["get_user"]
    wrong = trajectory.model_copy(update={"output": "HAT069 costs $171 for you, Mia."})
    assert flags(score(wrong)) == ["hallucinated_content"]


def test_a_query_answered_by_a_result_supports_the_answer() -> None:
    """A search for 2024-05-24 returns that day's flights: the date is the result's."""
    found = make_trajectory([("search", {"date": "2024-05-24"}, [{"flight": "HAT227", "price": 112}])],
                            output="On 2024-05-24, HAT227 costs $112.")
    assert flags(score(found)) == []
    failed = make_trajectory([("book", {"amount": 55, "date": "2024-05-24"}, "Error: balance is 20")],
                             output="I charged $55 to your card.")
    assert "hallucinated_content" in flags(score(failed))


# --- contradictions --------------------------------------------------------------------------


def test_an_empty_result_alone_never_contradicts() -> None:
    both = make_trajectory(
        [("search_direct", {"d": "x"}, []), ("search_onestop", {"d": "x"}, [{"flight": "HAT1", "price": 99}])],
        output="I found HAT1 for $99.",
    )
    assert flags(score(both)) == []


def test_a_failure_retried_with_success_is_no_contradiction() -> None:
    retried = make_trajectory(
        [("book", {"pay": "gc_1"}, "Error: payment method gc_1 not found"),
         ("book", {"pay": "cc_2"}, {"reservation_id": "HATHAU", "status": "booked"})],
        output="Your flight has been successfully booked: reservation HATHAU.",
    )
    assert flags(score(retried)) == []
    not_retried = make_trajectory([("book", {"pay": "gc_1"}, {"error": "payment declined"})],
                                  output="Your flight has been successfully booked.")
    assert flags(score(not_retried)) == ["contradicts_response"]


def test_tools_without_output_and_handoffs() -> None:
    think = make_trajectory([("think", {"thought": "check"}, ""), ("get", {"id": 1}, {"v": 7})],
                            output="The value is 7.")
    assert "empty_result" in [i["type"] for i in score(think)["details"]["tool_calls"][0]["issues"]]
    assert score(think, no_output_tools=["think"])["details"]["tool_calls"][0]["issues"] == []
    handoff = make_trajectory([("transfer_to_human_agents", {"summary": "x"}, NO_RESULT)], output=None)
    assert score(handoff)["details"]["tool_calls"][0]["issues"][0]["type"] == "missing_result"
    assert score(handoff, handoff_tools=["transfer_to_human_agents"])["details"]["tool_calls"][0]["issues"] == []


def test_a_call_that_ends_the_run_has_no_missing_result() -> None:
    """No later model request could carry its result (the run ended on it)."""
    ask = LLMCall(span_id="l1", input_messages=[Message(role="user", content="Get me a human.")],
                  output_messages=[], start_time=1)
    handoff = make_call("escalate", {"why": "x"}, NO_RESULT)
    assert score(make_trajectory(steps=[ask, handoff]))["details"]["tool_calls"][0]["issues"] == []


def test_ungrounded_facts_are_reported_once_per_run_and_on_calls_of_that_kind() -> None:
    trajectory = make_trajectory(
        [("get_weather", {"city": "Oslo"}, {"temp": "5°C"}), ("get_calendar", {"d": 1}, {"event": "standup"})],
        output="It is 15°C in Oslo, and you have standup.",
    )
    result = score(trajectory)
    assert result["details"]["ungrounded_facts"] == ["15°C"]
    per_call = [c["ungrounded_facts"] for c in result["details"]["tool_calls"]]
    assert per_call == [["15°C"], []]  # the calendar result holds no temperature


def test_options_are_checked() -> None:
    from otel_toolscore.scorers import ScorerConfigError

    with pytest.raises(ScorerConfigError):
        ToolResultVerification(no_output_tools="think")  # type: ignore[arg-type]


def test_the_explanation_that_leaves_the_process_names_the_fact_and_its_sentence() -> None:
    """The agent span's explanation attribute is cut at ``explanation_max_chars``: the evidence
    comes first, so a person paged sees the fact and the sentence without opening details."""
    from otel_toolscore.config import ToolScoreSettings
    from otel_toolscore.outputs.otel import Emitter

    padding = " ".join(f"Item {i} is ready." for i in range(40))
    trajectory = one({"total": 120, "currency": "EUR"}, f"{padding} Total: 145 EUR. Anything else?")
    result = ToolResultVerification().score(trajectory)
    settings = ToolScoreSettings()
    attrs = Emitter(settings, meter_provider=None, logger_provider=None).span_attributes([result])
    text = attrs["toolscore.tool_result_verification.explanation"]
    assert len(text) <= settings.explanation_max_chars
    assert text.startswith("States 145 EUR, which no tool result supports: 'Total: 145 EUR.'")


def test_a_number_of_another_dimension_does_not_support_a_measured_one() -> None:
    """A framework's stock prompt ("a 55 year old lumberjack") does not ground "55°F"; a bare 55,
    or 12.8°C converted, still does (numbers match as numbers unless both units say otherwise)."""
    weather = {"temperature": "72°F", "condition": "sunny"}
    answer = "It's 55°F and raining in Madrid today."
    age = make_trajectory([("get_weather", {"location": "Madrid"}, weather)], output=answer,
                          system_instructions="Example: John Doe, a 55 year old lumberjack.")
    assert flags(score(age)) == ["hallucinated_content"]
    bare = make_trajectory([("get_weather", {"location": "Madrid"}, weather)], output=answer,
                           system_instructions="Example: the answer is 55.")
    assert flags(score(bare)) == []
    celsius = make_trajectory([("get_weather", {"location": "Madrid"}, {"temperature": "12.8°C"})], output=answer)
    assert flags(score(celsius)) == []


# --- bounded indexing ----------------------------------------------------------------------------


def test_results_are_indexed_up_to_the_value_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from otel_toolscore.scorers import _facts, _grounding

    monkeypatch.setattr(_grounding, "MAX_GROUNDING_VALUES", 4)

    def indexed(sources: _grounding.Sources, *values: float) -> list[bool]:
        return [sources.index.contains(_facts.number_fact(value)) for value in values]

    within = _grounding.Sources()
    within.add_result({"a": 101.5, "b": [202.5, "x 303.5"], "c": '{"d": 404.5}'}, own=True)
    assert within.complete
    assert indexed(within, 101.5, 202.5, 303.5, 404.5) == [True] * 4
    beyond = _grounding.Sources()
    beyond.add_result({"a": 101.5, "b": [202.5, "x 303.5"], "c": '{"d": 404.5}', "e": 505.5}, own=True)
    assert not beyond.complete  # the fifth value is past the budget: the hallucination check is skipped
    assert indexed(beyond, 101.5, 202.5, 303.5, 404.5, 505.5) == [True] * 4 + [False]
    # the budget is the run's, over all its results
    beyond.add_result({"f": 606.5}, own=False)
    assert indexed(beyond, 606.5) == [False]
