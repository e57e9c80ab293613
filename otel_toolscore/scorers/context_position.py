"""``context_position``: were the relevant context items placed first? (docs/scorers.md,
context_position; Mastra ContextPositionMetric.)

The judge gives one relevance verdict per context item, in order; the score weights position i
(0-based) by 1/(i+1). ``ideal_position_score`` and ``precision`` in the details separate "the
relevant items came first" from "few items were relevant".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from otel_toolscore.scorers.base import Score, ScorerConfigError
from otel_toolscore.scorers.judge import JudgeOutput, JudgeUsage, LLMScorer, YesNo, expect_count, fraction_label
from otel_toolscore.scorers.redaction import DATA_RULE, as_text
from otel_toolscore.trajectory import Trajectory

LABEL_NO_CONTEXT = "no_context"

SYSTEM = f"""You judge, for each context item an AI agent retrieved, whether it was relevant to answering the user's request.

Rules:
- Give exactly one verdict per context item, in the given order.
- verdict "yes" when the item contains information that is useful for answering the user's request (as the agent's response does or should), else "no".
- reason: one short sentence per verdict.

{DATA_RULE}"""


class ContextVerdict(JudgeOutput):
    verdict: YesNo
    reason: str


class ContextAnswer(JudgeOutput):
    verdicts: list[ContextVerdict]


def _weights(n: int) -> list[float]:
    return [1.0 / (i + 1) for i in range(n)]


def position_scores(relevant: Sequence[bool], scale: float = 1.0) -> dict[str, float]:
    """docs/scorers.md, context_position, for a non-empty verdict list: ``score`` (weighted by position),
    ``ideal_position_score`` (against the best order for that many relevant items), ``precision``."""
    weights = _weights(len(relevant))
    got = sum(w for w, ok in zip(weights, relevant) if ok)
    hits = sum(1 for ok in relevant if ok)
    best = sum(weights[:hits])
    return {
        "score": round(got / sum(weights) * scale, 2) if hits else 0.0,
        "ideal_position_score": round(got / best, 2) if hits else 0.0,
        "precision": round(hits / len(relevant), 2),
    }


def _context_list(value: Sequence[str] | None) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not all(isinstance(i, str) for i in value):
        raise ScorerConfigError("context must be a list of strings")
    return list(value)


class ContextPosition(LLMScorer):
    name = "context_position"

    def __init__(
        self, model: str | None = None, *, context: Sequence[str] | None = None, scale: float = 1.0, **options: Any
    ) -> None:
        super().__init__(model, **options)
        if scale <= 0:
            raise ScorerConfigError("scale must be positive")
        self.context = _context_list(context)
        self.scale = float(scale)

    def _items(self, trajectory: Trajectory) -> tuple[list[str], list[dict[str, Any]], str]:
        """The context texts, a description of each (where it came from), and the source."""
        if self.context is not None:
            return self.context, [{"index": i} for i in range(len(self.context))], "options"
        texts: list[str] = []
        meta: list[dict[str, Any]] = []
        for retrieval in trajectory.retrievals:  # call order; documents in retrieved order
            for doc in retrieval.documents:
                text = doc.content if doc.content is not None else as_text(doc.metadata or doc.id)
                meta.append(
                    {"index": len(texts), "retrieval_span_id": retrieval.span_id, "document_id": doc.id}
                )
                texts.append(text)
        return texts, meta, "retrievals"

    async def _ascore(self, trajectory: Trajectory, usage: JudgeUsage) -> Score:
        texts, meta, source = self._items(trajectory)
        if not texts:
            return Score(
                name=self.name,
                value=None,
                label=LABEL_NO_CONTEXT,
                explanation="The run has no context to judge (no retrieval documents and no context option).",
                details={"context_source": source, "total": 0},
            )
        blocks = self.blocks()
        blocks.add("user_request", trajectory.input or "")
        blocks.add("agent_response", trajectory.output or "")
        for i, text in enumerate(texts, start=1):
            blocks.add(f"context_{i}", text)
        user = (
            f"{blocks.render()}\n\n"
            f"There are {len(texts)} context items (context_1 … context_{len(texts)}), in retrieved order. "
            f"Return exactly {len(texts)} verdicts, in that order."
        )
        answer = await self.judge.ask(
            system=SYSTEM,
            user=user,
            output=ContextAnswer,
            name="context_position",
            check=lambda a: expect_count(a.verdicts, len(texts), "verdicts"),
            usage=usage,
        )
        relevant = [v.verdict == "yes" for v in answer.verdicts]
        scores = position_scores(relevant, self.scale)
        value = scores["score"]
        hits = sum(relevant)
        return Score(
            name=self.name,
            value=value,
            label=fraction_label(value, self.scale),
            explanation=_reason(value, relevant, scores["ideal_position_score"]),
            details={
                "context_source": source,
                "total": len(relevant),
                "relevant": hits,
                "ideal_position_score": scores["ideal_position_score"],
                "precision": scores["precision"],
                "scale": self.scale,
                "verdicts": [
                    {**m, "verdict": v.verdict, "reason": v.reason} for m, v in zip(meta, answer.verdicts)
                ],
            },
        )


def _reason(value: float, relevant: list[bool], ideal: float) -> str:
    hits = sum(relevant)
    if not hits:
        return f"The score is {value:g} because none of the {len(relevant)} context items was relevant."
    positions = ", ".join(str(i + 1) for i, ok in enumerate(relevant) if ok)
    where = f"position{'s' if hits > 1 else ''} {positions}"
    order = "the relevant items came first" if ideal >= 1.0 else "relevant items were not placed first"
    return (
        f"The score is {value:g} because {hits} of {len(relevant)} context items "
        f"{'were' if hits > 1 else 'was'} relevant ({where}) and {order}."
    )
