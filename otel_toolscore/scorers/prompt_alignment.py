"""``prompt_alignment``: did the agent's response follow its instructions? (docs/scorers.md,
prompt_alignment; Mastra PromptAlignmentMetric.)

Instructions come from the ``instructions`` option, else from the run's system instructions,
which a first judge call splits into individual instructions (cached like any judge answer, so
a system prompt shared by many runs is split once). A second call gives one verdict per
instruction. The reason is composed from the verdicts, so it cannot change the score.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from otel_toolscore.scorers.base import Score, ScorerConfigError
from otel_toolscore.scorers.judge import (
    JudgeOutput,
    JudgeUsage,
    LLMScorer,
    YesNoNA,
    expect_count,
    fraction_label,
)
from otel_toolscore.scorers.redaction import DATA_RULE
from otel_toolscore.trajectory import Trajectory

LABEL_NOT_APPLICABLE = "not_applicable"

SPLIT_SYSTEM = f"""You split an AI agent's system instructions into individual, self-contained instructions.

Rules:
- One entry per distinct instruction, constraint or requirement the agent must follow, in the order they appear.
- Keep each instruction's meaning; do not add, merge or drop requirements. Background facts that ask nothing of the agent are not instructions.

{DATA_RULE}"""

VERDICT_SYSTEM = f"""You check whether an AI agent's response follows each of its instructions.

Rules:
- Give exactly one verdict per instruction, in the given order.
- verdict "yes" only when the response fully follows the instruction; partially following it is "no".
- verdict "n/a" only when the instruction concerns a completely different domain from the user's request and the response. Instructions about the agent's domain are always applicable.
- If the response is empty, formatting instructions are applicable and their verdict is "no".
- reason: one short sentence per verdict.

{DATA_RULE}"""


class SplitAnswer(JudgeOutput):
    instructions: list[str]


class InstructionVerdict(JudgeOutput):
    instruction: str
    verdict: YesNoNA
    reason: str


class AlignmentAnswer(JudgeOutput):
    verdicts: list[InstructionVerdict]


def alignment_score(verdicts: Sequence[str], scale: float = 1.0) -> float | None:
    """docs/scorers.md, prompt_alignment: ``round2(yes / (yes + no) × scale)``; None when nothing is applicable."""
    yes = sum(1 for v in verdicts if v == "yes")
    no = sum(1 for v in verdicts if v == "no")
    if yes + no == 0:
        return None
    return round(yes / (yes + no) * scale, 2)


def _instruction_list(value: Sequence[str] | str | None) -> list[str] | None:
    if value is None:
        return None
    items = value.splitlines() if isinstance(value, str) else list(value)
    if not all(isinstance(i, str) for i in items):
        raise ScorerConfigError("instructions must be strings")
    return [i.strip() for i in items if i.strip()]


class PromptAlignment(LLMScorer):
    name = "prompt_alignment"

    def __init__(
        self,
        model: str | None = None,
        *,
        instructions: Sequence[str] | str | None = None,
        scale: float = 1.0,
        **options: Any,
    ) -> None:
        super().__init__(model, **options)
        if scale <= 0:
            raise ScorerConfigError("scale must be positive")
        self.instructions = _instruction_list(instructions)
        self.scale = float(scale)

    async def _instructions(self, trajectory: Trajectory, usage: JudgeUsage) -> tuple[list[str], str]:
        if self.instructions is not None:
            return self.instructions, "options"
        system = (trajectory.system_instructions or "").strip()
        if not system:
            return [], "system_instructions"
        blocks = self.blocks()
        blocks.add("system_instructions", system)
        answer = await self.judge.ask(
            system=SPLIT_SYSTEM,
            user=f"{blocks.render()}\n\nSplit the system_instructions block into individual instructions.",
            output=SplitAnswer,
            name="instruction_split",
            usage=usage,
        )
        return [i.strip() for i in answer.instructions if i.strip()], "system_instructions"

    async def _ascore(self, trajectory: Trajectory, usage: JudgeUsage) -> Score:
        instructions, source = await self._instructions(trajectory, usage)
        base = {"instructions": instructions, "instructions_source": source}
        if not instructions:
            return Score(
                name=self.name,
                value=None,
                label=LABEL_NOT_APPLICABLE,
                explanation="No instructions to check the response against.",
                details={**base, "total": 0, "applicable": 0, "followed": 0, "not_applicable": 0, "verdicts": []},
            )
        blocks = self.blocks()
        blocks.add("user_request", trajectory.input or "")
        blocks.add("agent_response", trajectory.output or "")
        for i, instruction in enumerate(instructions, start=1):
            blocks.add(f"instruction_{i}", instruction)
        user = (
            f"{blocks.render()}\n\n"
            f"There are {len(instructions)} instructions (instruction_1 … instruction_{len(instructions)}). "
            f"Return exactly {len(instructions)} verdicts, in that order, for the agent_response "
            "given the user_request."
        )
        answer = await self.judge.ask(
            system=VERDICT_SYSTEM,
            user=user,
            output=AlignmentAnswer,
            name="prompt_alignment",
            check=lambda a: expect_count(a.verdicts, len(instructions), "verdicts"),
            usage=usage,
        )
        words = [v.verdict for v in answer.verdicts]
        followed = words.count("yes")
        not_applicable = words.count("n/a")
        applicable = len(words) - not_applicable
        verdicts = [
            {"instruction": instr, "verdict": v.verdict, "reason": v.reason}
            for instr, v in zip(instructions, answer.verdicts)
        ]
        details = {
            **base,
            "total": len(words),
            "applicable": applicable,
            "followed": followed,
            "not_applicable": not_applicable,
            "verdicts": verdicts,
            "scale": self.scale,
        }
        value = alignment_score(words, self.scale)
        if value is None:
            return Score(
                name=self.name,
                value=None,
                label=LABEL_NOT_APPLICABLE,
                explanation="None of the instructions applies to this request and response.",
                details=details,
            )
        return Score(
            name=self.name,
            value=value,
            label=fraction_label(value, self.scale),
            explanation=_reason(value, applicable, followed, verdicts),
            details=details,
        )


def _reason(value: float, applicable: int, followed: int, verdicts: list[dict[str, Any]]) -> str:
    """"The score is X because …", built from the verdicts (so it states, never sets, X)."""
    text = f"The score is {value:g} because {followed} of {applicable} applicable instructions were followed"
    missed = [v for v in verdicts if v["verdict"] == "no"]
    if missed:
        first = missed[0]
        text += f"; not followed: {_clip(first['instruction'])!r} ({_clip(first['reason'])})"
        if len(missed) > 1:
            text += f" and {len(missed) - 1} more"
    return text + "."


def _clip(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split()).rstrip(".")
    return text if len(text) <= limit else text[: limit - 1] + "…"
