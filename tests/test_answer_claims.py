"""tool_result_verification reads the answer claim by claim (docs/scorers.md, tool_result_verification,
"Facts and their support"): identifiers of every shape, counts, amounts derived only where framed,
written arithmetic, entity anchoring, runs without calls of their own, contradictions paired with
the call they speak about. Each case has a twin: the supported statement passes, the unsupported
one is flagged, naming the fact."""

from __future__ import annotations

from typing import Any

import pytest

from otel_toolscore.scorers import ToolResultVerification
from otel_toolscore.trajectory import LLMCall, Message, ToolCallRequest, ToolResultPart, Trajectory
from tests.support.trajectory_factory import make_trajectory


def verify(trajectory: Trajectory, **options: Any) -> dict[str, Any]:
    result = ToolResultVerification(**options).score(trajectory)
    assert result.error is None, result.explanation
    return result.to_dict()


def facts(result: dict[str, Any], kind: str = "hallucinated_content") -> list[str]:
    return [i.get("fact") or i["sentence"] for i in result["details"]["issues"] if i["type"] == kind]


def one(result: Any, answer: str, *, name: str = "lookup", user: str = "Please help.") -> Trajectory:
    return make_trajectory([(name, {"q": "x"}, result)], output=answer, input=user)


RESERVATION = {"reservation_id": "8C8K4E", "user_id": "mia_li_3668", "status": "confirmed",
               "flights": [{"flight_number": "HAT018", "date": "2024-05-17", "price": 114},
                           {"flight_number": "HAT250", "date": "2024-05-20", "price": 135}],
               "passengers": [{"first_name": "Mia"}, {"first_name": "Omar"}],
               "payment_history": [{"payment_id": "credit_card_4421486", "amount": 652.61}]}


@pytest.mark.parametrize(("right", "wrong", "fact"), [
    ("Your reservation **8C8K4E** has been cancelled.", "Your reservation **4S4Q7P** has been cancelled.",
     "4S4Q7P"),
    ("Your flight HAT018 leaves on May 17.", "Your flight HAT681 leaves on May 17.", "HAT681"),
    ("It was paid with card credit_card_4421486.", "It was paid with card credit_card_4421489.",
     "credit_card_4421489"),
    ("Your user id is mia_li_3668.", "Your user id is mia_li_3669.", "mia_li_3669"),
])
def test_identifiers_of_every_shape_are_facts_grounded_only_as_they_appear(right: str, wrong: str,
                                                                           fact: str) -> None:
    assert facts(verify(one(RESERVATION, right))) == []
    assert facts(verify(one(RESERVATION, wrong))) == [fact]


def test_a_count_is_grounded_by_a_number_or_a_list_of_that_length() -> None:
    assert facts(verify(one(RESERVATION, "The reservation has 2 passengers."))) == []
    assert facts(verify(one(RESERVATION, "The reservation has 9 passengers."))) == ["9"]
    assert facts(verify(one(RESERVATION, "- Passengers: 9\n- Flight: HAT018"))) == ["9"]
    # list numbering and ordinals are not facts
    assert facts(verify(one(RESERVATION, "1. Flight HAT018\n2. Flight HAT250\nStep 7 is done."))) == []


def test_an_amount_is_derived_only_where_the_answer_frames_it() -> None:
    paid = {"payment_history": [{"amount": 652.61}], "new_price": 642.72, "insurance": 30}
    assert facts(verify(one(paid, "Your refund is $9.89."))) == []  # 652.61 - 642.72, framed, whatever its size
    assert facts(verify(one(paid, "The new fare is $9.89."))) == ["$9.89"]  # arithmetic alone grounds nothing
    assert facts(verify(one(paid, "Insurance is $672.72 per passenger."))) == ["$672.72"]  # 642.72 + 30, unframed
    assert facts(verify(one(paid, "In total you pay $672.72."))) == []


def test_written_arithmetic_is_evaluated_as_written() -> None:
    prices = {"HAT235": 350, "HAT298": 499, "passengers": ["Chen Lee", "Noah Hernandez"]}
    assert facts(verify(one(prices, "New total: 2 passengers × ($350 + $499) = $1,698"))) == []
    wrong = verify(one(prices, "New total: 2 passengers × ($350 + $499) = $1,798"))
    assert facts(wrong) == ["$1,798"]
    assert wrong["details"]["issues"][0]["reason"] == "arithmetic"
    # an operand nothing states is named with the wrong result
    found = verify(one(prices, "Difference: $2,010 - $749 = $1,510"))["details"]["issues"]
    operand = next(i for i in found if i["reason"] == "arithmetic")
    assert operand["fact"] == "$1,510" and "$749" in operand["actual"]


def test_a_value_of_another_entity_is_flagged_with_the_record() -> None:
    search = [{"flight_number": "HAT018", "prices": {"economy": 114, "business": 450}, "date": "2024-05-17"},
              {"flight_number": "HAT250", "prices": {"economy": 135, "business": 510}, "date": "2024-05-20"}]
    assert facts(verify(one(search, "- HAT018: economy $114 on 2024-05-17"))) == []
    wrong = verify(one(search, "- HAT018: economy $135 on 2024-05-17"))  # the other flight's fare
    (issue,) = wrong["details"]["issues"]
    assert (issue["fact"], issue["reason"], issue["entity"]) == ("$135", "entity", "hat018")
    assert "114" in issue["record"] and issue["sentence"] == "- HAT018: economy $135 on 2024-05-17"
    other_leg = verify(one(search, "- HAT018 departs on 2024-05-20"))  # the other leg's date
    assert facts(other_leg) == ["2024-05-20"]


def test_numbers_inside_tokens_are_not_amounts() -> None:
    result = {"item": "Laptop 13-inch, Suite 501 warehouse", "price": 900}
    # 13 + 501 would be 514: a number inside a word is no operand
    assert facts(verify(one(result, "The total for the laptop is $514."))) == ["$514"]


def _history(answer: str, earlier_result: Any) -> Trajectory:
    """A run that made no call of its own: the earlier turn's look-up is in the request history."""
    messages = [
        Message(role="system", content="You are an airline agent."),
        Message(role="user", content="Where is my flight?"),
        Message(role="assistant", tool_calls=[ToolCallRequest(id="c1", name="get_reservation_details",
                                                              arguments={"reservation_id": "8C8K4E"})]),
        Message(role="tool", tool_results=[ToolResultPart(tool_call_id="c1", content=earlier_result)]),
        Message(role="assistant", content="I found your reservation."),
        Message(role="user", content="Remind me of the first flight?"),
    ]
    call = LLMCall(span_id="l1", input_messages=messages, output_messages=[Message(role="assistant", content=answer)])
    return make_trajectory(steps=[call], output=answer, input="Remind me of the first flight?")


def test_a_run_without_calls_of_its_own_is_checked_against_the_conversation() -> None:
    right = verify(_history("Your first flight is HAT018 on May 17.", RESERVATION))
    assert (right["value"], right["label"], facts(right)) == (1.0, "pass", [])
    wrong = verify(_history("Your first flight is HAT683 on May 17.", RESERVATION))
    assert (wrong["value"], wrong["label"], facts(wrong)) == (0.4, "fail", ["HAT683"])
    assert wrong["details"]["tool_calls"] == [] and wrong["explanation"].startswith("States HAT683")
    nothing = verify(_history("Happy to help!", RESERVATION))
    assert (nothing["value"], nothing["label"]) == (1.0, "no_tool_calls")
    empty = verify(make_trajectory([], output=None))
    assert (empty["value"], empty["label"]) == (None, "no_answer")


def test_contradictions_are_claim_by_claim() -> None:
    lookups = make_trajectory(
        [("find_user_by_email", {"email": "x@example.com"}, "Error: user not found"),
         ("find_user_by_name", {"name": "Mia Li"}, {"user_id": "mia_li_3668"})],
        output="I also checked x@example.com, but no account was found. I've located your account: mia_li_3668.")
    assert facts(verify(lookups), "contradicts_response") == []
    refusal = one({"status": "ok"}, "I can't cancel this booking because the policy does not allow it.",
                  name="get_reservation_details")
    assert facts(verify(refusal), "contradicts_response") == []
    claimed = make_trajectory([("cancel_reservation", {"reservation_id": "8C8K4E"}, {"status": "failed"}),
                               ("get_user_details", {"user_id": "mia_li_3668"}, {"membership": "gold"})],
                              output="Your reservation 8C8K4E has been cancelled. You are a gold member.")
    issues = verify(claimed)["details"]["issues"]
    assert [i["type"] for i in issues] == ["contradicts_response"]
    assert issues[0]["sentence"] == "Your reservation 8C8K4E has been cancelled."
    # the paired call carries it
    carried = [c["name"] for c in verify(claimed)["details"]["tool_calls"]
               for i in c["issues"] if i["type"] == "contradicts_response"]
    assert carried == ["cancel_reservation"]


def test_a_run_level_issue_costs_the_run_once() -> None:
    booking = {"reservation_id": "8C8K4E", "status": "confirmed"}
    one_fact = verify(one(booking, "Your reservation 8C8K4E is confirmed: flight HAT999."))
    assert facts(one_fact) == ["HAT999"]
    assert one_fact["details"]["tool_calls"][0]["score"] == 1.0  # the call's own score: its result was used
    assert one_fact["value"] == 0.4 and one_fact["label"] == "fail"  # the run's: 1.0 - 0.6
    two = verify(one(booking, "Your reservation 8C8K4E is confirmed: flights HAT999 and HAT998."))
    assert sorted(facts(two)) == ["HAT998", "HAT999"] and two["value"] == 0.0  # 1.0 - 2 x 0.6, floor 0
