"""tool_result_verification's claim-driven grounding (``_grounding.ClaimSources``) against the
full index (``_grounding.Sources``, every source indexed), its oracle: the same verdict for every
fact an answer may state, the same caps reached, and the same score, on generated runs whose
answers restate, round, add up, negate, re-date and invent what their results say."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_toolscore.scorers import _facts, _grounding
from otel_toolscore.scorers import tool_results as tr
from otel_toolscore.scorers._common import step_positions
from otel_toolscore.trajectory import LLMCall, Message, ToolCallRequest, ToolResultPart, Trajectory
from tests.support.trajectory_factory import make_call, make_trajectory

# what results hold: amounts, counts, measures, dates, times, ids, percentages, next-day times
_TEXTS = st.sampled_from([
    "$1,234.50", "€85", "120 USD", "72°F", "20 °C", "12 km", "5 miles", "48 km", "33 kg",
    "61 mph", "27 hours", "4.5 miles", "$19.99", "2025-06-14", "June 14, 2025", "14 June",
    "03/04/2025", "20:15", "09:45", "7:30 pm", "01:00:00+1", "15%", "0.15", "BE571", "gift_card_7091239", "#1042",
    "ord-2231-x", "a1b2c3d4e5", "mia@example.com", "https://example.com/r/77", "partly cloudy", "3 passengers",
    "the total price is 375", "-114", "1.2 million", "ending in 1784", "",
    "Your flight leaves at 20:15 and arrives 01:00:00+1 on 2025-06-14.",
])
_NUMBERS = st.one_of(st.sampled_from([0, 1, 2, 3, 10, 11, 12.5, 85, 120, 130, -114, 375, 1000, 1784, 2025,
                                      7091239, 68.4, 0.15, 10**400]),
                     st.integers(-5000, 5000), st.floats(-1e4, 1e4, allow_nan=False).map(lambda v: round(v, 2)))
_UNITS = st.sampled_from(["", "°F", " °C", " km", " kg", " miles", "%", " USD", " dollars", " hours"])
_LEAF = st.one_of(_NUMBERS, _TEXTS, st.sampled_from([True, False, None]))
_KEYS = st.sampled_from(["price", "price_usd", "total", "amount", "seats", "count", "id", "date", "departs",
                         "temperature", "balance", "2025-06-14", "status"])
_RECORD = st.dictionaries(_KEYS, _LEAF, max_size=4)
_VALUE = st.recursive(
    st.one_of(_LEAF, _RECORD),
    lambda inner: (st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4)
                   | st.lists(_RECORD, min_size=2, max_size=4)  # lists of records: column totals
                   | inner.map(lambda v: json.dumps(v, default=str))),  # JSON inside a string
    max_leaves=14,
)


def _leaf_texts(value: Any) -> list[str]:
    leaves, _ = _grounding.walk(value, 10**6)
    return [str(leaf) for _, leaf in leaves]


@st.composite
def _runs(draw: st.DrawFn) -> Trajectory:
    """A run: own calls with results, an earlier turn's results in the history (copies of the own
    ones too, as model requests carry them), earlier answers, and an answer built from what the
    results say: restated, as written or with a unit, summed, negated, rounded, or invented."""
    own = draw(st.lists(_VALUE, min_size=1, max_size=4))
    earlier = draw(st.lists(_VALUE, max_size=3))
    texts = [t for value in own + earlier for t in _leaf_texts(value)]
    numbers = [float(t) for t in texts if _is_number(t)]
    # what the results' texts state as numbers (measures, amounts, years): restated in another unit
    stated = [f.value for t in texts for f in _facts.facts_of(t)
              if f.kind in ("number", "money", "percentage", "year") and _grounding.finite(f.value)]
    # and what they state in a unit or as money, year or percentage (a number of another
    # dimension than the answer's does not support it)
    measured = [f.value for t in texts for f in _facts.facts_of(t)
                if f.kind in ("number", "money", "percentage", "year") and (f.unit or f.kind != "number")
                and _grounding.finite(f.value)]
    pieces = st.one_of(
        st.sampled_from(texts) if texts else _TEXTS,
        st.sampled_from(numbers).map(lambda n: f"${n:,.2f}") if numbers else _TEXTS,
        st.sampled_from(numbers).map(lambda n: f"{-n:g}") if numbers else _TEXTS,
        st.sampled_from(numbers).map(lambda n: f"{round(n)} degrees") if numbers else _TEXTS,
        st.tuples(st.sampled_from(numbers), st.sampled_from(numbers)).map(lambda p: f"{p[0] + p[1]:g} in total")
        if numbers else _TEXTS,
        st.sampled_from(numbers).map(lambda n: f"{n * 3:g} for 3") if numbers else _TEXTS,
        st.tuples(st.sampled_from(stated), _UNITS).map(lambda p: f"{p[0]:g}{p[1]}") if stated else _TEXTS,
        st.tuples(st.sampled_from(measured), _UNITS).map(lambda p: f"{p[0]:g}{p[1]}") if measured else _TEXTS,
        _TEXTS,
        _NUMBERS.map(str),
    )
    answer = " and ".join(draw(st.lists(pieces, min_size=1, max_size=8))) + "."
    calls = [make_call("lookup", {"q": draw(_TEXTS)}, value, index=i, id=f"c{i}") for i, value in enumerate(own)]
    history = [Message(role="user", content=draw(_TEXTS))]
    for j, value in enumerate(earlier):
        history += [Message(role="assistant", tool_calls=[ToolCallRequest(id=f"e{j}", name="lookup",
                                                                          arguments={"q": draw(_TEXTS)})]),
                    Message(role="tool", tool_results=[ToolResultPart(tool_call_id=f"e{j}", content=value)])]
    steps: list[Any] = [LLMCall(span_id="l0", input_messages=list(history),
                                output_messages=[Message(role="assistant", content=draw(_TEXTS))])]
    for i, call in enumerate(calls):
        steps.append(call)
        history += [Message(role="assistant", tool_calls=[ToolCallRequest(id=call.id, name="lookup")]),
                    Message(role="tool", tool_results=[ToolResultPart(
                        tool_call_id=call.id, content=json.loads(json.dumps(own[i], default=str))
                        if draw(st.booleans()) else own[i])])]
        steps.append(LLMCall(span_id=f"l{i + 1}", input_messages=list(history),
                             output_messages=[Message(role="assistant", content=draw(_TEXTS))]))
    return make_trajectory(steps=steps, output=answer, input=draw(_TEXTS),
                           system_instructions=draw(st.sampled_from([None, "Insurance is $30 per passenger."])))


def _is_number(text: str) -> bool:
    try:
        return _grounding.finite(float(text))
    except ValueError:
        return False


def _sources(trajectory: Trajectory) -> tuple[Any, ...]:
    calls = step_positions(trajectory)[0]
    results = [tr.structured_result(call) for call in calls]
    values = [value for value, _ in results]
    errors = [tr.error_of(call, value) for call, value in zip(calls, values)]
    answered = [not malformed and error is None and not tr.is_empty(value) and not tr.reports_failure(value)
                for (value, malformed), error in zip(results, errors)]
    return trajectory, calls, values, answered


def _score(trajectory: Trajectory, scorer: tr.ToolResultVerification) -> tuple[Any, ...]:
    score = scorer.score(trajectory)
    assert score.error is None, (score.error, score.explanation)
    return (score.value, score.label, score.explanation, json.dumps(score.details, default=repr),
            [r.to_dict() for r in score.call_results])


def _full_index_only(self: _grounding.ClaimSources) -> bool:
    return False  # never tallied: every verdict and cap from the whole ``Sources``


#: (values, operands, text length) the sources examine: small caps too, so that the tally must see
#: each one reached exactly when the whole sources do, and texts past the length examined (the
#: user's, the results', the arguments written out: ``tool_results`` reads JSON inside a string
#: leaf as far as the sources do)
_CAPS = st.sampled_from([(50_000, 150, _grounding.MAX_TEXT), (12, 150, _grounding.MAX_TEXT),
                         (50_000, 3, _grounding.MAX_TEXT), (30, 6, _grounding.MAX_TEXT),
                         (50_000, 150, 12), (50_000, 150, 40)])


def _capped(patch: pytest.MonkeyPatch, caps: tuple[int, int, int]) -> None:
    patch.setattr(_grounding, "MAX_GROUNDING_VALUES", caps[0])
    patch.setattr(_grounding, "_MAX_OPERANDS", caps[1])
    patch.setattr(_grounding, "MAX_TEXT", caps[2])
    patch.setattr(tr, "MAX_TEXT", caps[2])


@settings(max_examples=600, deadline=None)
@given(_runs(), _CAPS, st.booleans())
def test_claim_driven_grounding_gives_the_full_index_verdicts_and_scores(
        trajectory: Trajectory, caps: tuple[int, int, int], cross_turn: bool) -> None:
    scorer = tr.ToolResultVerification(cross_turn=cross_turn)
    with pytest.MonkeyPatch.context() as patch:
        _capped(patch, caps)
        run = _sources(trajectory)
        claimed, full = _grounding.ClaimSources.of(*run), _grounding.Sources.of(*run)
        assert (claimed.complete, claimed.amounts_cut) == (full.complete, full.amounts_cut)
        texts = [trajectory.output or "", *(m.content or "" for s in trajectory.llm_calls for m in s.output_messages)]
        for fact in (f for text in texts for f in _facts.facts_of(text)):
            assert claimed.verdict(fact) == full.verdict(fact), fact
            # what the answer's check asks: support whatever the kinds, and as a framed total
            for derived in (False, True):
                assert claimed.supports(fact, derived) == full.supports(fact, derived), (fact, derived)
        for leaves, value in zip(claimed.own_leaves, run[2]):
            assert leaves is None or tr.salient_values(value, leaves=leaves) == tr.salient_values(value)
        claim_driven = _score(trajectory, scorer)
        patch.setattr(_grounding.ClaimSources, "_tally", _full_index_only)
        assert claim_driven == _score(trajectory, scorer)


_STATE = ("complete", "amounts_cut", "result_kinds", "own_kinds", "_budget", "_own_amounts", "_amounts",
          "_texts", "_numbers", "_digit_runs", "_overnight", "_texts_cut", "own_leaves")


@settings(max_examples=400, deadline=None)
@given(_runs(), _CAPS)
def test_the_whole_sources_built_from_the_tallys_walks_are_those_built_afresh(
        trajectory: Trajectory, caps: tuple[int, int, int]) -> None:
    """``ClaimSources.sources`` takes each result the tally walked whole as walked: the same
    sources, field by field, and the same verdicts, as walking every result again (near the
    caps too: few values, few amounts, short texts)."""
    with pytest.MonkeyPatch.context() as patch:
        _capped(patch, caps)
        run = _sources(trajectory)
        claimed, fresh = _grounding.ClaimSources.of(*run), _grounding.Sources.of(*run)
        reused = claimed.sources
        for sources in (reused, fresh):
            sources._scan()
        for name in _STATE:
            assert getattr(reused, name) == getattr(fresh, name), name
        for fact in _facts.facts_of(trajectory.output or ""):
            assert reused.verdict(fact) == fresh.verdict(fact), fact


def test_a_claim_the_own_results_hold_never_builds_the_whole_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of it: an answer made of the run's own results is checked without indexing the
    conversation; one fact from elsewhere (the user's words) builds it, and is supported there."""
    built: list[int] = []
    of = _grounding.Sources.of.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(_grounding.Sources, "of", classmethod(lambda cls, *a, **k: built.append(1) or of(cls, *a, **k)))
    run = make_trajectory([("get_flights", {"date": "2025-06-14"}, {"flight": "BE571", "price_usd": 85,
                                                                    "departs": "20:15"})],
                          input="Flights on 2025-06-14 for 2 people, budget $400?",
                          output="BE571 leaves at 20:15 for $85.")
    assert tr.ToolResultVerification().score(run).label == "pass" and built == []
    with_budget = run.model_copy(update={"output": "BE571 leaves at 20:15 for $85, within your $400."})
    assert tr.ToolResultVerification().score(with_budget).label == "pass" and built == [1]
    invented = run.model_copy(update={"output": "BE571 leaves at 20:15 for $95."})
    assert tr.ToolResultVerification().score(invented).label == "fail" and len(built) == 2


_LONG = "x" * 50  # past the length examined below (``MAX_TEXT`` made 40)


def _one_long_text(where: str) -> Trajectory:
    """A run whose texts are all short but the one ``where`` says (``"none"``: none)."""
    def text(here: str) -> str:
        return _LONG if where == here else "short"

    call = make_call("lookup", {"q": "a"}, {"price": 85, text("leaf"): text("leaf")}, index=0, id="c0")
    earlier = ToolCallRequest(id="e0", name="lookup", arguments={"q": text("arguments")})
    raw = ToolCallRequest(id="e1", name="lookup", arguments={"q": "a"}, arguments_raw=f'{{"q": "{text("raw")}"}}')
    history = [Message(role="user", content=text("message")),
               Message(role="assistant", tool_calls=[earlier, raw]),
               Message(role="tool", tool_results=[
                   ToolResultPart(tool_call_id="e0", content={"seats": 2}, content_raw=text("content_raw")),
                   ToolResultPart(tool_call_id="e1", content={"total": 120})])]
    steps = [LLMCall(span_id="l0", input_messages=history), call,
             LLMCall(span_id="l1", input_messages=[*history, Message(role="tool", tool_results=[
                 ToolResultPart(tool_call_id="c0", content=call.result)])])]
    return make_trajectory(steps=steps, output="It costs $85.", input=text("input"))


@pytest.mark.parametrize("where", ["none", "input", "message", "arguments", "raw", "content_raw", "leaf"])
def test_the_tally_sees_every_text_the_whole_sources_cut(where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each text the whole sources measure, alone past the length: the tally says so too (or
    leaves it to the whole sources), never "complete" where they are not."""
    monkeypatch.setattr(_grounding, "MAX_TEXT", 40)
    monkeypatch.setattr(tr, "MAX_TEXT", 40)
    run = _sources(_one_long_text(where))
    full = _grounding.Sources.of(*run)
    assert full.complete is (where == "none")
    claimed = _grounding.ClaimSources(*(list(part) if i else part for i, part in enumerate(run)))
    assert claimed._tally() is (where == "none")
    assert _grounding.ClaimSources.of(*run).complete is full.complete
