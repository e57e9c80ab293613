"""tool_result_verification on real conversations: the flags that page a person are right, and a
wrong fact put into a clean real answer is flagged, naming it.

``verdicts.json`` holds our own reading of real runs of the tau_airline corpus (docs/scorers.md,
tool_result_verification, sources:
tool results of the conversation so far, user messages, the system policy): every run that some
version of the scorer flagged (the first version, and stricter variants of this one: no totals,
no ids inside ids, only the run's own results as sources), and the other runs that made calls and
answered. Each verdict says whether the answer states a fact nothing supports, which, and why.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from otel_toolscore.scorers.tool_results import ToolResultVerification
from otel_toolscore.trajectory import Trajectory
from tests.realworld import corpus, mutation

VERDICTS_FILE = Path(__file__).with_name("verdicts.json")
#: the airline agent's `think` tool returns nothing by design; a transfer ends the conversation
OPTIONS: dict[str, Any] = {"no_output_tools": ["think"], "handoff_tools": ["transfer_to_human_agents"]}
_FLAGS = ("hallucinated_content", "contradicts_response")


@lru_cache(maxsize=1)
def verdicts() -> dict[str, dict[str, Any]]:
    return json.loads(VERDICTS_FILE.read_text())["runs"]


@lru_cache(maxsize=1)
def runs() -> dict[str, corpus.Run]:
    return {run.key: run for run in corpus.all_runs()}


def flags(trajectory: Trajectory, options: dict[str, Any] = OPTIONS) -> dict[str, Any]:
    score = ToolResultVerification(**options).score(trajectory)
    # run-level issues: every one is in details.issues (a run without calls has no call to carry it)
    issues = [i for i in score.details.get("issues", []) if i["type"] in _FLAGS]
    return {"issues": issues, "ungrounded": score.details.get("ungrounded_facts", []), "score": score}


def test_the_verdicts_cover_enough_runs() -> None:
    flagged_once = [k for k, v in verdicts().items() if v["flagged_by"]]
    clean = [k for k, v in verdicts().items() if v["verdict"] == "supported"]
    assert len(flagged_once) >= 60
    assert len(clean) >= 100
    assert set(verdicts()) <= set(runs())


def test_flags_on_real_answers_are_right() -> None:
    """At least 90 % of the runs flagged today really state something unsupported; every flagged
    run has been read (a new flag on an unread run fails here until someone reads it)."""
    flagged = {key: f for key, run in runs().items() if (f := flags(run.trajectory))["issues"]}
    unread = sorted(set(flagged) - set(verdicts()))
    assert not unread, f"flagged runs nobody has adjudicated: {unread}"
    wrong = {k: f["ungrounded"] for k, f in flagged.items() if verdicts()[k]["verdict"] != "unsupported"}
    right = len(flagged) - len(wrong)
    assert not flagged or right / len(flagged) >= 0.9, f"wrong flags: {wrong}"


def test_every_flag_names_its_evidence() -> None:
    for key, run in runs().items():
        for issue in flags(run.trajectory)["issues"]:
            assert issue.get("sentence"), (key, issue)
            assert issue.get("fact") or issue.get("result"), (key, issue)


def _clean_runs() -> list[corpus.Run]:
    return [runs()[k] for k, v in sorted(verdicts().items()) if v["verdict"] == "supported"]


def test_clean_answers_are_not_flagged() -> None:
    flagged = {run.key: flags(run.trajectory)["ungrounded"] for run in _clean_runs() if flags(run.trajectory)["issues"]}
    assert not flagged


def test_a_wrong_fact_in_a_clean_answer_is_flagged_naming_it() -> None:
    """One grounded fact (a price, an amount, a flight number, a date, an id) of each clean answer
    replaced by a plausible value nothing supports, in the recorded OTLP span."""
    mutated = missed = 0
    misses = []
    for run in _clean_runs():
        if not run.trajectory.tool_calls:
            continue
        m = mutation.mutate(run)
        if m is None:
            continue
        mutated += 1
        found = flags(mutation.replay(m))
        named = any(m.new_text in i.get("fact", "") or m.new_text in " ".join(i.get("actual") or [])
                    for i in found["issues"] if i["type"] == "hallucinated_content")
        if not named:
            missed += 1
            misses.append((run.key, m.fact.text, m.new_text))
    assert mutated >= 100
    assert (mutated - missed) / mutated >= 0.9, misses
