"""Every run of the shared real-conversation corpus reads exactly: its calls (names, order,
arguments), its input (the turn's user message) and its output (the turn's answer, or none
when the turn ended on a tool call) equal the truth file."""

from __future__ import annotations

import pytest

from tests.realworld import corpus


@pytest.mark.parametrize("name", corpus.conversations())
def test_every_run_reads_exactly(name: str) -> None:
    runs = corpus.conversation_runs(name)
    assert len(runs) == len(corpus.truth()[name]["runs"])
    wrong = {run.key: corpus.reading_mismatches(run) for run in runs}
    assert not {k: v for k, v in wrong.items() if v}


def test_the_corpus_is_the_one_measured() -> None:
    runs = corpus.all_runs()
    assert len(runs) == 592
    assert sum(len(r.trajectory.tool_calls) for r in runs) == 514
