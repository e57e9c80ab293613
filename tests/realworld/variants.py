"""The stricter variants of tool_result_verification whose flags were adjudicated in
``verdicts.json`` (``flagged_by``), re-run on the corpus with their precision by the verdicts:

    .venv/bin/python -m tests.realworld.variants

The first version's flags (``first_version_e585e32``) come from a checkout of that commit.
Each variant switches one rule of ``_grounding.Sources`` off by patching it for the run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import Any

from otel_toolscore.scorers._grounding import Sources, _json
from tests.realworld import corpus
from tests.realworld.test_flags import OPTIONS, flags, verdicts


@contextlib.contextmanager
def _patched(name: str, value: Any) -> Iterator[None]:
    old = getattr(Sources, name)
    setattr(Sources, name, value)
    try:
        yield
    finally:
        setattr(Sources, name, old)


def _sources_of(history_results: bool = True, user_system: bool = True) -> classmethod:  # type: ignore[type-arg]
    """``Sources.of`` without earlier turns' results, or without user messages and the system."""

    def of(cls: type[Sources], trajectory: Any, calls: Any, results: Any, answered: Any = (),
           walks: Any = None) -> Sources:
        # ``walks`` (results walked already) only saves walking them again: each is walked here
        sources = cls()
        if user_system:
            for text in (trajectory.input, trajectory.system_instructions):
                sources.add_text(text)
        for call, value, ok in zip(calls, results, answered or repeat(False)):
            sources.add_result(value, own=True)
            for text in (call.result_raw, call.error):
                sources.add_text(text)
            if ok:
                sources.add_text(call.arguments_raw or _json(call.arguments))
        seen: set[int] = set()
        for llm in trajectory.llm_calls:
            for message in llm.input_messages:
                if id(message) in seen:
                    continue
                seen.add(id(message))
                if user_system and message.role in ("user", "system", "developer") and message.content:
                    sources.add_text(message.content)
                if history_results:
                    for part in message.tool_results:
                        sources.add_result(part.content, own=False)
                        sources.add_text(part.content_raw)
        return sources

    return classmethod(of)


VARIANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "current": contextlib.nullcontext,
    "no_totals": lambda: _patched("_is_total", lambda self, value: False),
    "no_ids_in_ids": lambda: _patched("_in_digit_runs", lambda self, digits: False),
    "own_results_only": lambda: _patched("of", _sources_of(history_results=False)),
    "results_only_no_user_system": lambda: _patched("of", _sources_of(user_system=False)),
}


def flagged(variant: str, options: dict[str, Any] = OPTIONS) -> list[str]:
    with VARIANTS[variant]():
        return [run.key for run in corpus.all_runs() if flags(run.trajectory, options)["issues"]]


def main() -> None:
    v = verdicts()
    for name in [*VARIANTS, "no_options"]:
        keys = flagged("current", {}) if name == "no_options" else flagged(name)
        right = sum(1 for k in keys if v.get(k, {}).get("verdict") == "unsupported")
        unread = sum(1 for k in keys if k not in v)
        print(f"{name}: {len(keys)} runs flagged, {right} right by the verdicts, {unread} unread")


if __name__ == "__main__":
    main()
