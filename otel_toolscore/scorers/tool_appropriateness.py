"""``tool_call_appropriateness``: was each tool the agent called appropriate for the request?
(docs/scorers.md, tool_call_appropriateness; Mastra's LLM tool-call accuracy.)

The judge sees the user request, the final response, the tools called in order with their
arguments (and results, as data), and the tools the agent could have used; it answers one
evaluation per call plus the tools that were clearly needed but not called, and one sentence of
reason in the same answer (no second call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from otel_toolscore.scorers.base import Score, ScorerConfigError
from otel_toolscore.scorers.judge import (
    Flag,
    JudgeOutput,
    JudgeUsage,
    LLMScorer,
    expect_count,
    fraction_label,
)
from otel_toolscore.scorers.redaction import DATA_RULE, as_text
from otel_toolscore.trajectory import Trajectory

SYSTEM = f"""You evaluate whether an AI agent chose appropriate tools for a user's request.

Rules:
- Judge each called tool against what the user explicitly asked for, in the order the tools were called.
- A tool is appropriate only if calling it was needed to fulfil the explicit request. "Helpful" or "might be useful" is not "appropriate".
- If no tool was called: asking the user for clarification on a vague request is appropriate; a generic answer to a clear request that needed a tool is not, and the tools it needed are missing.
- missing_tools lists only tools from the available-tools list that the request clearly needed and that were never called. Never list tools that are not in that list.
- Give exactly one evaluation per tool call, in call order, with tool_called set to the called tool's name.
- reason: one sentence summing up your judgement.

{DATA_RULE}"""


class ToolEvaluation(JudgeOutput):
    tool_called: str
    was_appropriate: Flag
    reasoning: str


class AppropriatenessAnswer(JudgeOutput):
    evaluations: list[ToolEvaluation]
    missing_tools: list[str]
    reason: str = Field(description="one sentence")


def appropriateness_score(evaluations: Sequence[bool], missing_tools: Sequence[str]) -> float:
    """docs/scorers.md, tool_call_appropriateness: no evaluations → 1.0 when nothing is missing else 0.0; otherwise the
    share of appropriate calls, rounded to 2 decimals."""
    if not evaluations:
        return 0.0 if missing_tools else 1.0
    return round(sum(1 for ok in evaluations if ok) / len(evaluations), 2)


def _tools_of(value: Any) -> list[dict[str, str | None]]:
    """``available_tools`` given as names, (name, description) pairs, or dicts."""
    tools: list[dict[str, str | None]] = []
    for item in value:
        if isinstance(item, str):
            tools.append({"name": item, "description": None})
        elif isinstance(item, dict) and isinstance(item.get("name"), str):
            tools.append({"name": item["name"], "description": item.get("description")})
        elif isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
            tools.append({"name": item[0], "description": item[1]})
        else:
            raise ScorerConfigError(f"available_tools: cannot read {item!r} as a tool (name, description)")
    return tools


class ToolCallAppropriateness(LLMScorer):
    name = "tool_call_appropriateness"

    def __init__(self, model: str | None = None, *, available_tools: Sequence[Any] | None = None, **options: Any) -> None:
        super().__init__(model, **options)
        self.available_tools = _tools_of(available_tools) if available_tools is not None else None

    def _available(self, trajectory: Trajectory) -> list[dict[str, str | None]]:
        if self.available_tools is not None:
            return self.available_tools
        # Default: what this run actually offered, so a tool that was not available is never
        # reported missing. Fall back to the per-request offered names when no definitions.
        tools = [{"name": d.name, "description": d.description} for d in trajectory.tool_definitions]
        if not tools:
            seen: dict[str, None] = {}
            for call in trajectory.tool_calls:
                for offered in call.offered_tools or []:
                    seen.setdefault(offered)
            tools = [{"name": n, "description": None} for n in seen]
        return tools

    async def _ascore(self, trajectory: Trajectory, usage: JudgeUsage) -> Score:
        calls = trajectory.tool_calls
        available = self._available(trajectory)
        blocks = self.blocks()
        blocks.add("user_request", trajectory.input or "")
        blocks.add("agent_response", trajectory.output or "")
        call_ids = []
        for i, call in enumerate(calls, start=1):
            arguments = call.arguments if call.arguments_error is None else call.arguments_raw
            call_ids.append(blocks.add(f"tool_call_{i}", {"tool": call.name, "arguments": arguments}))
            if call.has_result or call.error:
                outcome = call.result if call.error is None else f"ERROR: {call.error}"
                blocks.add(f"tool_result_{i}", as_text(outcome))
        blocks.add("available_tools", [{"name": t["name"], "description": t["description"]} for t in available])
        user = (
            f"{blocks.render()}\n\n"
            f"The agent made {len(calls)} tool call(s), in the order of the tool_call_N blocks"
            f"{' (none)' if not calls else ''}. The tool_result_N blocks are what each call returned. "
            "The available_tools block lists every tool the agent could have called.\n"
            f"Return {len(calls)} evaluation(s), then missing_tools and reason."
        )
        answer = await self.judge.ask(
            system=SYSTEM,
            user=user,
            output=AppropriatenessAnswer,
            name="tool_call_appropriateness",
            check=lambda a: expect_count(a.evaluations, len(calls), "evaluations"),
            usage=usage,
        )
        names = {t["name"] for t in available}
        missing = [m for m in dict.fromkeys(m.strip() for m in answer.missing_tools) if m in names]
        ignored = [m for m in answer.missing_tools if m.strip() not in names]
        value = appropriateness_score([e.was_appropriate for e in answer.evaluations], missing)
        return Score(
            name=self.name,
            value=value,
            label=fraction_label(value, 1.0),
            explanation=answer.reason.strip(),
            details={
                "tools_called": [c.name for c in calls],
                "available_tools": [t["name"] for t in available],
                "available_tools_source": "options" if self.available_tools is not None else "trajectory",
                "evaluations": [
                    {
                        "tool_called": e.tool_called,
                        "was_appropriate": e.was_appropriate,
                        "reasoning": e.reasoning,
                        "tool_call_id": c.id,
                        "span_id": c.span_id,
                    }
                    for e, c in zip(answer.evaluations, calls)
                ],
                "appropriate": sum(1 for e in answer.evaluations if e.was_appropriate),
                "total": len(answer.evaluations),
                "missing_tools": missing,
                "missing_tools_ignored": ignored,
            },
        )
