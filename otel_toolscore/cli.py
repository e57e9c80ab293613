"""``otel-toolscore``: score OTLP trace files from the command line."""

from __future__ import annotations

import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from otel_toolscore.assemble import build_trajectories
from otel_toolscore.extras import MissingExtraError
from otel_toolscore.ingest import OtlpDecodeError, load_otlp
from otel_toolscore.outputs.report import (
    ScoredRun,
    ScoreProgress,
    error_lines,
    gate_lines,
    gate_reasons,
    json_lines,
    junit,
    summary_line,
    table,
)
from otel_toolscore.redaction import default_redactor
from otel_toolscore.scorers.base import ScorerConfigError, build_scorers
from otel_toolscore.scorers.registry import CODE_SCORERS, EXPECTATION_SCORERS, LLM_SCORERS
from otel_toolscore.scorers.run import score_runs
from otel_toolscore.semconv import TOOLSCORE_SCORED

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Score AI-agent tool use from the OpenTelemetry spans your app already emits.",
    # click's plain help: rich's boxes cut option names and help text at 80 columns in CI logs
    # and pipes; plain text wraps and never loses a word
    rich_markup_mode=None,
    context_settings={"max_content_width": 120, "help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)


class Format(str, Enum):
    table = "table"
    json = "json"
    junit = "junit"


#: width of the table when the output is not a terminal (a CI log, a pipe) and COLUMNS is unset:
#: rich's 80 would fold every cell into slivers where nothing limits the width
_PIPE_WIDTH = 200


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(stderr=stderr, width=_PIPE_WIDTH)
    return console


#: ``serve``'s exit status when a stop left accepted data undelivered
SERVE_UNDELIVERED_EXIT = 3


def _fail(message: str, code: int = 2) -> NoReturn:
    # soft_wrap: an error message is one line in a CI log, whatever the width (grep finds it)
    _console(stderr=True).print(f"[red]otel-toolscore:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _load_schemas(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    from otel_toolscore.schemas import load_tool_schemas

    try:
        return load_tool_schemas(path)
    except ValueError as exc:
        _fail(str(exc))


def _read_lines(path: Path, what: str) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        _fail(f"{path}: cannot read {what}: {exc.strerror or exc}")
    return [line.strip() for line in text.splitlines() if line.strip()]


def _load_context(path: Path) -> list[str]:
    """One context item per line, or a JSON list of strings (items with newlines need JSON)."""
    lines = _read_lines(path, "context")
    text = "\n".join(lines)
    if text.startswith("["):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            data = None
        if isinstance(data, list):
            if not all(isinstance(item, str) for item in data):
                _fail(f"{path}: the context JSON list must hold strings")
            return data
    return lines


def _judge_options(
    names: list[str],
    model: str | None,
    api_base: str | None,
    api_key: str | None,
    instructions_file: Path | None,
    context_file: Path | None,
    configured: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """Options of the LLM scorers among ``names``: one shared judge client (one concurrency
    limit and one cache for all of them), plus instructions and context from files. A scorer
    whose ``configured`` options (the settings file) already name a judge model keeps them."""
    configured = configured or {}
    llm = [n for n in names if n in LLM_SCORERS]
    if instructions_file is not None and "prompt_alignment" not in llm:
        _fail("--instructions-file is used by --scorer prompt_alignment only")
    if context_file is not None and "context_position" not in llm:
        _fail("--context-file is used by --scorer context_position only")
    if not llm:
        return {}
    options: dict[str, dict[str, Any]]
    if model:
        from pydantic import SecretStr

        from otel_toolscore.scorers.judge import JudgeClient, JudgeSettings

        judge = JudgeClient(JudgeSettings(model=model, api_base=api_base,
                                          api_key=SecretStr(api_key) if api_key else None))
        # --judge-model replaces the file's judge (its model, base and key), keeps the rest
        judge_keys = {"model", "api_base", "api_key", "judge"}
        options = {name: {**{k: v for k, v in configured.get(name, {}).items() if k not in judge_keys},
                          "judge": judge} for name in llm}
    else:
        unjudged = [n for n in llm if not configured.get(n, {}).get("model") and not configured.get(n, {}).get("judge")]
        if unjudged:
            _fail(f"{', '.join(unjudged)} need a judge: give --judge-model (a litellm model string)")
        options = {name: dict(configured[name]) for name in llm}
    if instructions_file is not None:
        options["prompt_alignment"]["instructions"] = _read_lines(instructions_file, "instructions")
    if context_file is not None:
        options["context_position"]["context"] = _load_context(context_file)
    return options


def _expand_inputs(paths: list[str]) -> list[str]:
    """The files to read: each path as given, a directory as the files under it (sorted, hidden
    files and folders left out, so a .git or an editor's swap file is not read as a trace)."""
    out: list[str] = []
    for path in paths:
        if path != "-" and os.path.isdir(path):
            found = sorted(
                str(p) for p in Path(path).rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not found:
                _console(stderr=True).print(f"otel-toolscore: {escape(path)}: a directory with no files",
                                            highlight=False, soft_wrap=True)
            out.extend(found)
        else:
            out.append(path)
    return out


@app.command()
def score(
    # described in the docstring: typer writes an argument's type beside it (<list[str]>), which reads badly
    paths: Annotated[list[str], typer.Argument(metavar="INPUT", hidden=True, show_default=False)],
    fmt: Annotated[Format, typer.Option("--format", "-f", metavar="table|json|junit", help="Output format.")] = Format.table,
    scorer: Annotated[
        list[str] | None,
        typer.Option(
            "--scorer", "-s", metavar="NAME",
            help=f"Scorer to run (repeatable). Default: every code scorer ({', '.join(CODE_SCORERS)}). "
            f"LLM-judged (need --judge-model): {', '.join(LLM_SCORERS)}.",
        ),
    ] = None,
    expected_tool: Annotated[str | None, typer.Option(metavar="TOOL", help="Tool the agent should call.")] = None,
    expected_tool_order: Annotated[
        str | None, typer.Option(metavar="A,B,C", help="Tools the agent should call, in order: A,B,C.")
    ] = None,
    strict: Annotated[bool | None, typer.Option("--strict/--no-strict", help="Strict tool-call accuracy.")] = None,
    tool_schemas: Annotated[
        Path | None, typer.Option(metavar="FILE", help="JSON or YAML object: tool name → JSON Schema (or "
                                  "{parameters, deprecated, replaced_by}); tool_call_validation checks calls against them.")
    ] = None,
    require_schemas: Annotated[
        bool, typer.Option("--require-schemas", help="tool_call_validation: a tool with no known schema is an "
                           "unknown_tool issue (default: the call is unchecked, no penalty).")
    ] = False,
    fail_under: Annotated[
        float | None, typer.Option(metavar="X", help="A CI gate: exit 1 when a score is below X, when a score is an "
                                   "error (a scorer failed, the judge was unreachable; see --allow-errors), or when "
                                   "nothing was judged (no run read, every score skipped). Skipped scores "
                                   "(skipped, not_applicable, no_context; e.g. no tool schemas) neither pass nor fail.")
    ] = None,
    allow_errors: Annotated[
        bool, typer.Option("--allow-errors", help="With --fail-under: error scores do not fail the gate (they are "
                           "still counted, shown and in the JUnit report as errors); a gate that judged nothing "
                           "still fails.")
    ] = False,
    judge_model: Annotated[
        str | None, typer.Option(metavar="MODEL", help="litellm model string of the judge, e.g. openai/gpt-4o-mini.")
    ] = None,
    judge_api_base: Annotated[str | None, typer.Option(metavar="URL", help="Base URL of the judge's API.")] = None,
    judge_api_key: Annotated[
        str | None, typer.Option(metavar="KEY", help="Judge API key (default: the provider's usual env var, e.g. OPENAI_API_KEY).")
    ] = None,
    instructions_file: Annotated[
        Path | None, typer.Option(metavar="FILE", help="prompt_alignment: instructions, one per line (default: the run's system instructions).")
    ] = None,
    context_file: Annotated[
        Path | None, typer.Option(metavar="FILE", help="context_position: context items, one per line or a JSON list (default: the run's retrieved documents).")
    ] = None,
    skip_scored: Annotated[
        bool, typer.Option("--skip-scored", help="Leave out runs whose agent span carries toolscore.scored "
                           "(scored already by install() or serve). Default: rescore them.")
    ] = False,
    show_secrets: Annotated[
        bool, typer.Option("--show-secrets", help="Print the runs' values raw, secrets included (keys, tokens, "
                           "passwords, emails, card numbers), for local debugging. Default: every output of this "
                           "command (table, JSON lines, JUnit, the lines on stderr) is redacted.")
    ] = False,
    config: Annotated[Path | None, typer.Option(
        metavar="FILE",
        help="YAML settings file, the one the app and the sidecar read (default: $OTEL_TOOLSCORE_CONFIG): its "
        "scorers, scorer_options, tool_schemas, require_schemas, allow_unknown_tools and rules apply; options given here win. "
        "OTEL_TOOLSCORE_* variables apply too.")] = None,
) -> None:
    """Rebuild every agent run in the given traces and score it.

    INPUT: trace files, directories (every file under them, hidden ones left out) or '-' for
    stdin. Read: OTLP/JSON ExportTraceServiceRequest documents, JSON lines of them (the
    Collector's file exporter), OTLP protobuf, traces saved from Jaeger (UI "Download JSON",
    /api/traces, /api/v3/traces) and Tempo (/api/traces/{id}, /api/v2/traces/{id}), each
    optionally gzip-compressed (.gz). The format is recognised from the content, not the name.
    """
    from otel_toolscore.config import ConfigError, load_settings
    from otel_toolscore.runtime.engine import apply_rules

    try:
        # The app's and the sidecar's own settings, so that a CI replay scores as production does.
        settings = load_settings(config)
    except ConfigError as exc:
        _fail(str(exc))
    expectation = {"expected_tool": expected_tool, "expected_tool_order": expected_tool_order, "strict": strict}
    options: dict[str, dict[str, Any]] = {name: dict(opts) for name, opts in settings.scorer_options.items()}
    for name in EXPECTATION_SCORERS:
        options.setdefault(name, {}).update({k: v for k, v in expectation.items() if v is not None})
    names = scorer or settings.scorers
    try:
        options.update(
            _judge_options(names or [], judge_model, judge_api_base, judge_api_key, instructions_file, context_file,
                           options)
        )
        schemas = _load_schemas(tool_schemas) if tool_schemas is not None else settings.tool_schemas
        scorers = build_scorers(names or None, options, schemas=schemas,
                                allow_unknown_tools=settings.allow_unknown_tools,
                                require_schemas=require_schemas or settings.require_schemas)
    except (ScorerConfigError, MissingExtraError, TypeError, ValueError) as exc:
        _fail(str(exc))
    runs: list[ScoredRun] = []
    unattached_problems = 0  # input problems of files that produced no run
    inputs = _expand_inputs(paths)
    # A bar on stderr when it is a terminal and the work takes a while (LLM judges, big files).
    with ScoreProgress() as progress:
        progress.stage("reading", len(inputs))
        for path in inputs:
            try:
                batch = load_otlp(path)
            except OtlpDecodeError as exc:
                _fail(str(exc))
            except OSError as exc:
                _fail(f"{path}: {exc.strerror or exc}")
            trajectories = found = build_trajectories(batch.spans)
            if skip_scored:
                # Replaying saved traces is this command's job, so by default it rescores runs
                # that carry the mark; --skip-scored honours it as the processor and serve do.
                kept = [t for t in trajectories if t.expectations.get(TOOLSCORE_SCORED) is not True]
                if len(kept) < len(trajectories):
                    _console(stderr=True).print(
                        f"otel-toolscore: {escape(path)}: {len(trajectories) - len(kept)} run(s) already scored "
                        "(toolscore.scored), skipped", highlight=False, soft_wrap=True,
                    )
                trajectories = kept
            if trajectories:
                # Decoding problems belong to the file; show them with its first run.
                trajectories[0].problems[:0] = batch.problems
            else:
                unattached_problems += len(batch.problems)
            for traj in trajectories:
                apply_rules(traj, settings.rules)
                runs.append(ScoredRun(source=path, trajectory=traj, scores=[]))
            if not found:
                _console(stderr=True).print(
                    f"otel-toolscore: {escape(path)}: {len(batch.spans)} spans, no agent run found "
                    "(no agent, LLM or tool spans)", highlight=False, soft_wrap=True,
                )
            progress.advance()
        progress.stage("scoring", len(runs) * len(scorers))
        for run, scores in zip(runs, score_runs([r.trajectory for r in runs], scorers, progress.advance)):
            run.scores = scores
    problems = unattached_problems + sum(len(r.trajectory.problems) for r in runs)
    files = len(inputs)
    redact = None if show_secrets else default_redactor
    if fmt is Format.json:
        json_lines(runs, sys.stdout, redact=redact)
    elif fmt is Format.junit:
        junit(runs, sys.stdout, fail_under, files=files, allow_errors=allow_errors, redact=redact)
    else:
        table(runs, _console(), problems=problems, fail_under=fail_under, files=files, allow_errors=allow_errors,
              redact=redact)
    if fmt is not Format.table:  # the table prints its own; beside JSON/XML on stdout, lines for CI logs
        sys.stderr.write("\n".join([summary_line(runs, problems, fail_under, files=files, allow_errors=allow_errors,
                                                  redact=redact),
                                    *error_lines(runs, redact=redact), *gate_lines(runs, fail_under, redact=redact)])
                         + "\n")
    if gate_reasons(runs, fail_under, files=files, allow_errors=allow_errors):
        raise typer.Exit(1)


def _print_version(value: bool) -> None:
    if value:
        from otel_toolscore._version import __version__

        print(f"otel-toolscore {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool | None, typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print the version and exit.")] = None,
) -> None:
    """otel-toolscore."""


@app.command()
def serve(
    upstream: Annotated[str | None, typer.Option(
        metavar="URL",         help="OTLP endpoint for spans, scores, logs and metrics (default: $OTEL_EXPORTER_OTLP_ENDPOINT).")] = None,
    upstream_protocol: Annotated[str | None, typer.Option(
        metavar="PROTOCOL",         help="grpc or http/protobuf (default: $OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf).")] = None,
    upstream_header: Annotated[list[str] | None, typer.Option(
        metavar="KEY=VALUE",         help="KEY=VALUE header sent upstream (repeatable; default: $OTEL_EXPORTER_OTLP_HEADERS).")] = None,
    host: Annotated[str, typer.Option(metavar="ADDRESS", help="Address to listen on (loopback by default).")] = "127.0.0.1",
    grpc_port: Annotated[int, typer.Option(metavar="PORT", help="OTLP/gRPC port; 0 picks a free one.")] = 4317,
    http_port: Annotated[int, typer.Option(metavar="PORT", help="OTLP/HTTP port; 0 picks a free one.")] = 4318,
    grpc: Annotated[bool, typer.Option("--grpc/--no-grpc", help="Serve OTLP/gRPC.")] = True,
    http: Annotated[bool, typer.Option("--http/--no-http", help="Serve OTLP/HTTP.")] = True,
    max_request_bytes: Annotated[int, typer.Option(metavar="BYTES", help="Largest request, compressed or not (413 above).")] = 8 << 20,
    max_concurrent_requests: Annotated[int, typer.Option(metavar="N", help="Requests/RPCs handled at once.")] = 64,
    max_queued_spans: Annotated[int, typer.Option(
        metavar="N",         help="Spans waiting for the upstream before requests get 503/UNAVAILABLE.")] = 20_000,
    auth_token: Annotated[str | None, typer.Option(
        metavar="TOKEN",         envvar="OTEL_TOOLSCORE_AUTH_TOKEN", help="Require 'Authorization: Bearer TOKEN'.")] = None,
    forward_signals: Annotated[bool, typer.Option(
        "--forward-signals/--no-forward-signals", help="Pass OTLP logs and metrics upstream unchanged.")] = True,
    scorer: Annotated[list[str] | None, typer.Option("--scorer", "-s", metavar="NAME", help="Scorer to run (repeatable).")] = None,
    config: Annotated[Path | None, typer.Option(metavar="FILE", help="YAML settings file (default: $OTEL_TOOLSCORE_CONFIG).")] = None,
    decision_wait: Annotated[float | None, typer.Option(
        metavar="SECONDS",         help="Seconds a trace must be quiet after its root arrived before it is scored.")] = None,
    hold_timeout: Annotated[float | None, typer.Option(
        metavar="SECONDS",         help="Longest hold of an agent span, seconds; must exceed the decision wait (default: decision wait + 5; "
        "a hold_timeout from the settings file or environment, the app's bound, counts from the end of the "
        "decision wait).")] = None,
    queue_dir: Annotated[Path | None, typer.Option(
        metavar="DIR", help="Keep accepted requests on disk (SQLite) until delivered; on start, deliver what is "
        "there first (default: the setting serve_queue_dir; unset: in memory).")] = None,
    queue_max_bytes: Annotated[int | None, typer.Option(
        metavar="BYTES", help="The on-disk queue's bound; a request over it gets 503/UNAVAILABLE "
        "(default: the setting serve_queue_max_bytes, 1 GiB).")] = None,
    stop_timeout: Annotated[float, typer.Option(
        metavar="SECONDS", help="On SIGTERM/SIGINT, how long to keep delivering what was accepted before giving "
        "up (exit status 3 then).")] = 30.0,
    log_level: Annotated[str, typer.Option(metavar="LEVEL", help="debug, info, warning or error.")] = "warning",
) -> None:
    """Receive OTLP from agents in any language, score their runs, forward everything upstream.

    Exit status: 0 after a stop that delivered everything, 2 on bad settings or a port in use, 3
    when a stop left accepted data undelivered (the counts are printed)."""
    import logging

    from otel_toolscore.config import ConfigError
    from otel_toolscore.runtime.serve import ServerAddresses, ToolScoreServer, parse_header_items

    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.WARNING),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        headers = parse_header_items(upstream_header or [])
        server = ToolScoreServer(
            upstream, upstream_protocol=upstream_protocol, upstream_headers=headers or None, host=host,
            grpc_port=grpc_port if grpc else None, http_port=http_port if http else None,
            max_request_bytes=max_request_bytes, max_concurrent_requests=max_concurrent_requests,
            max_queued_spans=max_queued_spans, auth_token=auth_token, forward_signals=forward_signals,
            scorers=scorer or None, config_file=config, decision_wait=decision_wait, hold_timeout=hold_timeout,
            queue_dir=queue_dir, queue_max_bytes=queue_max_bytes,
        )
    except (ConfigError, MissingExtraError) as exc:
        _fail(str(exc))

    def started(addresses: ServerAddresses) -> None:
        if addresses.grpc_endpoint:
            print(f"otel-toolscore serve: OTLP/gRPC on {addresses.grpc_endpoint}", flush=True)
        if addresses.http_endpoint:
            print(f"otel-toolscore serve: OTLP/HTTP on {addresses.http_endpoint}", flush=True)
        if server.upstream is not None:
            print(f"otel-toolscore serve: forwarding to {server.upstream.url} ({server.upstream.protocol})", flush=True)

    from otel_toolscore.runtime._own_process import tune_gc

    tune_gc()  # this process is the sidecar's alone
    try:
        server.serve_forever(on_started=started, stop_timeout=stop_timeout)
    except (OSError, MissingExtraError) as exc:
        _fail(str(exc))
    print(f"otel-toolscore serve: stopped ({server.stats['spans']} spans received)", flush=True)
    left = server.undelivered_total()
    if left:
        # an orchestrator (or a person) must see that the stop lost data, not a clean exit
        by_signal = ", ".join(f"{n} {signal_name} ({reason})"
                              for (signal_name, reason), n in sorted(server.undelivered.items()))
        _fail(f"serve stopped with {left} accepted items undelivered to the upstream: {by_signal}",
              code=SERVE_UNDELIVERED_EXIT)


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="Where the OTLP/JSON files go.")] = Path("toolscore-demo"),
    otlp_endpoint: Annotated[
        str | None, typer.Option(metavar="URL", help="Send spans, events and metrics over OTLP/HTTP to this base URL instead of files.")
    ] = None,
    phoenix: Annotated[bool, typer.Option("--phoenix", help="Start a local Arize Phoenix and send it the traces too.")] = False,
    instrumentation: Annotated[
        str, typer.Option(metavar="NAME", help="auto (openai-v2 when installed, else built-in), openai-v2, openinference or builtin.")
    ] = "auto",
    keep_running: Annotated[
        bool | None, typer.Option("--keep-running/--no-keep-running", help="Keep Phoenix up afterwards (default: on a terminal).")
    ] = None,
) -> None:
    """Run an instrumented example agent against a scripted local model, score its runs, show the result."""
    from otel_toolscore.demo import DemoOptions, run_demo

    options = DemoOptions(out=out, otlp_endpoint=otlp_endpoint, phoenix=phoenix,
                          instrumentation=instrumentation, keep_running=keep_running)
    raise typer.Exit(run_demo(options))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
