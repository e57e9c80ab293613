"""Hypothesis in CI: derandomized, so a CI run explores exactly the examples a local run with
CI=true explored, and a red CI is a reproducible fact, not a draw. Local runs stay random (and
keep finding new cases, as the hostile-input tests did).

The fixtures every test module may use: ``clean_otel_env`` and ``judge_server``; the ``e2e``
mark on every test under tests/e2e."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.support.env import clear_otel
from tests.support.judge_server import JudgeServer

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


_E2E = os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e") + os.sep


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/e2e is marked ``e2e``: ``pytest -m "not e2e"`` runs the unit tests
    alone (``./scripts/test --quick``)."""
    for item in items:
        if str(item.path).startswith(_E2E):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def clean_otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No ``OTEL_*`` variable of the machine running the tests; the monkeypatch, to set some."""
    clear_otel(monkeypatch)
    return monkeypatch


@pytest.fixture
def judge_server() -> Iterator[JudgeServer]:
    """A started scripted judge (``tests/support/judge_server.py``), stopped after the test. The
    judges' circuit breakers and request budgets (per model and endpoint, process-wide) start
    afresh: a port reused by a later test's server must not find an earlier test's open breaker."""
    from otel_toolscore.scorers._judge_guard import reset_guards

    reset_guards()
    with JudgeServer() as server:
        yield server
