"""The built-in scorers, one line each: the one place that ties a scorer's name to its module,
its kind and how the outputs show it.

A leaf: it imports no scorer and not ``scorers.base`` (not even for types: that closed an import
cycle), only names and import paths, so the CLI can list and sort scorers without loading the
judge (litellm), and a scorer's module is imported only when its class is first asked for.

Adding a scorer is its module under ``scorers/`` (a ``Scorer`` subclass with ``name``, ``kind``
and ``_score``) plus one line in ``BUILTIN``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any, Literal

#: code: deterministic, microseconds, on the hot path and in the default set;
#: llm: judged by a model, asynchronously, off the hot path
ScorerKind = Literal["code", "llm"]


@dataclass(frozen=True)
class ScorerEntry:
    name: str
    kind: ScorerKind
    #: ``module:Class``, the module relative to this package
    target: str
    #: the table's column header
    column: str
    #: reads an expected tool (``--expected-tool``, ``toolscore.expected_tool``, config rules)
    #: and is skipped without one
    needs_expectation: bool = False

    def load(self) -> type[Any]:
        """The scorer class the line names (a ``scorers.base.Scorer`` subclass), imported now."""
        module, _, class_name = self.target.partition(":")
        cls: type[Any] = getattr(import_module(f"{__package__}.{module}"), class_name)
        # the class carries its name and kind too (custom scorers have no line here); a line
        # that disagrees with its class must fail where it is read, not mislabel scores
        if cls.name != self.name or cls.kind != self.kind:
            raise TypeError(
                f"scorer registry line {self.name!r} ({self.kind}) names {self.target}, "
                f"which is {cls.name!r} ({cls.kind})"
            )
        return cls


BUILTIN: tuple[ScorerEntry, ...] = (
    ScorerEntry("tool_call_accuracy", "code", "tool_call_accuracy:ToolCallAccuracy", "accuracy", needs_expectation=True),
    ScorerEntry("tool_call_validation", "code", "tool_validation:ToolCallValidation", "arguments"),
    ScorerEntry("tool_result_verification", "code", "tool_results:ToolResultVerification", "results"),
    ScorerEntry("tool_call_appropriateness", "llm", "tool_appropriateness:ToolCallAppropriateness", "approp."),
    ScorerEntry("prompt_alignment", "llm", "prompt_alignment:PromptAlignment", "alignment"),
    ScorerEntry("context_position", "llm", "context_position:ContextPosition", "context"),
)  # fmt: skip

BY_NAME: dict[str, ScorerEntry] = {entry.name: entry for entry in BUILTIN}

#: the deterministic scorers that run on the hot path (microseconds per trajectory): the default set
CODE_SCORERS: tuple[str, ...] = tuple(entry.name for entry in BUILTIN if entry.kind == "code")
#: the LLM-judged scorers (need a judge model; run asynchronously, off the hot path)
LLM_SCORERS: tuple[str, ...] = tuple(entry.name for entry in BUILTIN if entry.kind == "llm")
#: the scorers that read an expected tool, which ``--expected-tool`` and friends configure
EXPECTATION_SCORERS: tuple[str, ...] = tuple(entry.name for entry in BUILTIN if entry.needs_expectation)


def column(name: str) -> str:
    """The table header of a scorer: its short name, else its own name (custom scorers)."""
    entry = BY_NAME.get(name)
    return entry.column if entry is not None else name
