"""The test factory itself builds what the scorer tests think it builds."""

from __future__ import annotations

from tests.support.trajectory_factory import make_call, make_trajectory, names


def test_make_trajectory_keeps_call_order_and_fields() -> None:
    trajectory = make_trajectory(
        [("a", {"x": 1}, {"ok": True}), ("b", None), ("c", "not json", None, "boom")]
    )
    assert names(trajectory) == ["a", "b", "c"]
    a, b, c = trajectory.tool_calls
    assert a.arguments == {"x": 1} and a.arguments_raw == '{"x": 1}' and a.has_result
    assert b.arguments is None and b.arguments_raw is None and not b.has_result
    assert c.arguments is None and c.arguments_error and c.error == "boom"


def test_make_call_reads_json_text_arguments() -> None:
    assert make_call("t", '{"q": "x"}').arguments == {"q": "x"}
    assert make_call("t", "[1, 2]").arguments_error is not None
