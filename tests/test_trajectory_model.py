"""The trajectory pieces are plain dataclasses on the hot path, with pydantic at the boundary:
JSON in and out, validation of what a user hands in."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from otel_toolscore import build_trajectories, read_otlp_json
from otel_toolscore.trajectory import LLMCall, Message, Retrieval, ToolCall, ToolCallRequest, Trajectory
from tests.support import paths

TRACES = [f for f in paths.traces(paths.FIXTURES) if f.name not in ("labels.json", "stacks.json")][:40]


@pytest.mark.parametrize("path", TRACES, ids=paths.trace_id)
def test_assembled_trajectories_survive_a_json_round_trip(path: Path) -> None:
    for run in build_trajectories(read_otlp_json(path)):
        again = Trajectory.model_validate_json(run.model_dump_json())
        assert again == run
        assert Trajectory.model_validate(run.model_dump()) == run


def test_steps_come_back_as_their_own_kinds() -> None:
    run = Trajectory(trace_id="t", steps=[
        LLMCall(span_id="l", output_messages=[Message(role="assistant", tool_calls=[ToolCallRequest(id="c", name="f")])]),
        ToolCall(id="c", name="f", arguments={"a": [1, {"b": None}]}, sources=["llm_output"]),
        Retrieval(query="q"),
    ])
    again = Trajectory.model_validate_json(run.model_dump_json())
    assert [type(s) for s in again.steps] == [LLMCall, ToolCall, Retrieval]
    assert again.tool_calls[0].arguments == {"a": [1, {"b": None}]}
    assert again.llm_calls[0].output_messages[0].tool_calls[0].name == "f"


def test_validation_at_the_boundary_rejects_what_the_model_does_not_have() -> None:
    with pytest.raises(ValidationError):
        Message.model_validate({"role": "user", "bogus": 1})
    with pytest.raises(ValidationError):
        Trajectory.model_validate({"trace_id": "t", "steps": [{"type": "nothing"}]})
    with pytest.raises(TypeError):
        Message(role="user", bogus=1)  # type: ignore[call-arg]


def test_model_copy_replaces_fields_and_leaves_the_original() -> None:
    run = Trajectory(trace_id="t", output="a")
    other = run.model_copy(update={"output": "b"})
    assert (run.output, other.output, other.trace_id) == ("a", "b", "t")


def test_the_pieces_are_slotted() -> None:
    # no per-instance dict: cheap to build and to change, as the readers do ~40 times per run
    for piece in (Message(role="user"), ToolCall(), LLMCall(), Trajectory(trace_id="t")):
        assert not hasattr(piece, "__dict__")
