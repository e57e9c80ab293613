"""``otel-toolscore``: score OTLP trace files from the command line."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from otel_toolscore.assemble import build_trajectories
from otel_toolscore.otlp import OtlpDecodeError, load_otlp
from otel_toolscore.report import ScoredRun, json_lines, junit, table
from otel_toolscore.scorers.base import CODE_SCORERS, ScorerConfigError, build_scorers, run_scorers

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Score AI-agent tool use from the OpenTelemetry spans your app already emits.",
)


class Format(str, Enum):
    table = "table"
    json = "json"
    junit = "junit"


def _fail(message: str, code: int = 2) -> None:
    Console(stderr=True).print(f"[red]otel-toolscore:[/] {message}", highlight=False)
    raise typer.Exit(code)


def _load_schemas(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        _fail(f"{path}: cannot read tool schemas: {exc}")
    if not isinstance(data, dict):
        _fail(f"{path}: tool schemas must be a JSON object of tool name → JSON Schema")
    return data


@app.command()
def score(
    paths: Annotated[list[str], typer.Argument(help="OTLP/JSON, JSON-lines or protobuf files; '-' reads stdin.")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
    scorer: Annotated[
        Optional[list[str]],
        typer.Option("--scorer", "-s", help=f"Scorer to run (repeatable). Default: every code scorer ({', '.join(CODE_SCORERS)})."),
    ] = None,
    expected_tool: Annotated[Optional[str], typer.Option(help="Tool the agent should call.")] = None,
    expected_tool_order: Annotated[
        Optional[str], typer.Option(help="Tools the agent should call, in order: A,B,C.")
    ] = None,
    strict: Annotated[Optional[bool], typer.Option("--strict/--no-strict", help="Strict tool-call accuracy.")] = None,
    tool_schemas: Annotated[
        Optional[Path], typer.Option(help="JSON object: tool name → JSON Schema (or {parameters, deprecated, replaced_by}).")
    ] = None,
    fail_under: Annotated[
        Optional[float], typer.Option(help="Exit 1 when any score is below this value (a CI gate).")
    ] = None,
) -> None:
    """Rebuild every agent run in the given traces and score it."""
    accuracy = {"expected_tool": expected_tool, "expected_tool_order": expected_tool_order, "strict": strict}
    try:
        scorers = build_scorers(scorer or None, {"tool_call_accuracy": accuracy}, schemas=_load_schemas(tool_schemas))
    except (ScorerConfigError, TypeError, ValueError) as exc:
        _fail(str(exc))
    runs: list[ScoredRun] = []
    unattached_problems = 0  # input problems of files that produced no run
    for path in paths:
        try:
            batch = load_otlp(path)
        except OtlpDecodeError as exc:
            _fail(str(exc))
        except OSError as exc:
            _fail(f"{path}: {exc.strerror or exc}")
        trajectories = build_trajectories(batch.spans)
        if trajectories:
            # Decoding problems belong to the file; show them with its first run.
            trajectories[0].problems[:0] = batch.problems
        else:
            unattached_problems += len(batch.problems)
        for traj in trajectories:
            runs.append(ScoredRun(source=path, trajectory=traj, scores=run_scorers(traj, scorers)))
        if not trajectories:
            Console(stderr=True).print(
                f"otel-toolscore: {path}: {len(batch.spans)} spans, no agent run found "
                "(no agent, LLM or tool spans)", highlight=False,
            )
    problems = unattached_problems + sum(len(r.trajectory.problems) for r in runs)
    if fmt is Format.json:
        json_lines(runs, sys.stdout)
    elif fmt is Format.junit:
        junit(runs, sys.stdout, fail_under)
    else:
        table(runs, Console(), problems=problems)
    if fail_under is not None and any(s.value is not None and s.value < fail_under for r in runs for s in r.scores):
        raise typer.Exit(1)


@app.callback()
def _root() -> None:
    """otel-toolscore."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
