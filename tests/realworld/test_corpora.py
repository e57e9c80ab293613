"""tool_result_verification on every real-conversation corpus the repo carries (tests/corpora/:
airline by GPT-4o, telecom by three GPT-4 models, airline by Claude Sonnet 4.5 and GPT-5.4),
measured as docs/scorers.md, "What is caught (figures)" reports it:

* every run is read exactly (its calls, input and answer as the truth says);
* a flag on a real answer has been read by a person (``verdicts.json``) and is right: the answers
  read as supported that are flagged stay at or under 1 % of the answered runs of each corpus, and
  at least 90 % of the flags are right;
* a clean real answer with one grounded fact replaced by a value nothing supports is caught
  (flagged ``hallucinated_content`` naming it): at least 95 % overall, 90 % for every kind of fact
  and for the runs that made no call of their own;
* every flag carries its evidence.
"""

from __future__ import annotations

import json
from collections import Counter
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import pytest

from tests.realworld import corpora

VERDICTS_FILE = Path(__file__).with_name("verdicts.json")
CORPORA = list(corpora.CORPORA)


@cache
def figures(corpus: str) -> corpora.Figures:
    return corpora.measure(corpus)


@lru_cache(maxsize=1)
def verdicts() -> dict[str, dict[str, Any]]:
    """Every read run by ``<corpus>/<conversation>#<index>``."""
    doc = json.loads(VERDICTS_FILE.read_text())
    out = {f"tau_airline/{key}": verdict for key, verdict in doc["runs"].items()}
    out.update(doc["other_corpora"])
    return out


@pytest.mark.parametrize("corpus", CORPORA)
def test_every_run_is_read_exactly(corpus: str) -> None:
    f = figures(corpus)
    assert f.runs > 0 and f.exact == f.runs


@pytest.mark.parametrize("corpus", CORPORA)
def test_flags_on_real_answers_were_read_and_are_right(corpus: str) -> None:
    f = figures(corpus)
    flagged = [key for key, _ in f.clean_flagged or []]
    unread = [key for key in flagged if key not in verdicts()]
    assert not unread, f"flagged runs nobody has read (read each, add it to verdicts.json): {unread}"
    wrong = [key for key in flagged if verdicts()[key]["verdict"] != "unsupported"]
    assert len(wrong) <= 0.01 * f.answered, f"answers read as supported but flagged: {wrong}"
    assert not flagged or (len(flagged) - len(wrong)) / len(flagged) >= 0.9, wrong


def test_made_up_facts_are_caught_in_every_corpus_every_kind_and_without_calls() -> None:
    caught: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for corpus in CORPORA:
        f = figures(corpus)
        for kind, (c, n) in (f.by_kind or {}).items():
            caught[kind] += c
            total[kind] += n
        for own, (c, n) in (f.by_calls or {}).items():
            caught[f"own calls: {own}"] += c
            total[f"own calls: {own}"] += n
    overall = sum(figures(c).caught for c in CORPORA) / sum(figures(c).mutated for c in CORPORA)
    assert overall >= 0.95, overall
    low = {kind: f"{caught[kind]}/{total[kind]}" for kind in total if caught[kind] / total[kind] < 0.9}
    assert not low, low
    assert total["own calls: False"] >= 100  # answers of runs that restate earlier turns are checked


@pytest.mark.parametrize("corpus", CORPORA)
def test_every_flag_carries_its_evidence(corpus: str) -> None:
    for key, found in figures(corpus).clean_flagged or []:
        for issue in found:
            assert issue.get("sentence"), (key, issue)
            assert issue.get("fact") or issue.get("result"), (key, issue)
            assert issue.get("kind"), (key, issue)


def test_a_mutated_answers_flag_names_the_sentence_and_the_entity_record_when_anchored() -> None:
    seen_entity = False
    for corpus in CORPORA:
        for m in corpora.mutation_file(corpus)["mutations"][:40]:
            for issue in corpora.issues(corpora.replay(corpus, m)):
                if issue["type"] != "hallucinated_content":
                    continue
                assert issue["sentence"] and issue["fact"] and issue["kind"], issue
                if issue.get("reason") == "entity":
                    assert issue.get("entity") and issue.get("record"), issue
                    seen_entity = True
    assert seen_entity
