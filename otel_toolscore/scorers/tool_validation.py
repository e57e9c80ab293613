"""``tool_call_validation``: is each tool call well-formed against its tool's JSON Schema?
(docs/scorers.md, tool_call_validation)

Per call: issues with a severity, a score ``max(0, 1 − Σ weight)`` (critical 1.0, high 0.7,
medium 0.4, low 0.1; with ``strict`` any high/critical issue gives 0) and ``valid`` (no critical
issue). Per trajectory: the mean of the *checked* calls' scores, 2 decimals; 1.0 and label
``no_tool_calls`` without calls; None and label ``skipped`` (``reason`` ``no_tool_schemas``)
when no call could be checked.

Where a call's schema comes from, first found wins (``schema_source``): the ``schemas`` option
(``option``), the definitions offered to the model (``offered``: the requesting LLM call's, else
the run's), the schema the framework recorded on the tool's own span (``tool_span``: the call's
own span, else another span of the same tool in the run). No schema is no penalty: a call with
no schema, in a request whose offered tool list was not recorded, is *unchecked* (no issue, no
score of its own) unless a check that needs no schema finds an issue in it (missing name,
arguments not JSON or missing, missing result, a loop).

Decisions of this implementation (docs/scorers.md, tool_call_validation, states their result):

* Trajectory label: ``pass`` when every checked call is valid and none has a high or critical
  issue, else ``fail``.
* A call is checked when a usable schema was applied, or its request's offered tool list was
  recorded (``tool_not_found`` could be asked), or any issue was found in it.
* A schema that is not a valid JSON Schema (or needs an unresolvable ``$ref``) counts as no
  schema; ``details.schema_problems`` says why (and ``unknown_tool`` does, with
  ``require_schemas``). Remote ``$ref``s are never fetched: scoring does no I/O.
* ``unknown_tool`` (only with ``require_schemas``) is not added on top of ``tool_not_found``
  (the invented tool is the finding) nor for a call without a name.
* ``allow_unknown_tools`` (the option before ``require_schemas``) is kept: true turns
  ``require_schemas`` off.
* Absent arguments are accepted as ``{}`` when the tool's schema accepts ``{}`` (tools without
  parameters are often recorded without arguments); otherwise ``missing_arguments``.
* ``tool_misuse``: see ``find_repeated_calls``.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from referencing import Registry

from otel_toolscore.scorers._common import (
    canonical_json,
    clip,
    is_text_or_none,
    json_type,
    small_json,
    step_positions,
    suggestions_of,
)
from otel_toolscore.scorers._schema_check import Check, quick_check
from otel_toolscore.scorers.base import (
    HOW_TO_SUPPLY_SCHEMAS,
    LABEL_FAIL,
    LABEL_NO_TOOL_CALLS,
    LABEL_PASS,
    LABEL_SKIPPED,
    REASON_NO_TOOL_SCHEMAS,
    BuildInputs,
    Score,
    Scorer,
    ScorerConfigError,
    mean2,
    penalised_score,
)
from otel_toolscore.scorers.results import BLOCKING_SEVERITIES, CallResult, Issue, json_view
from otel_toolscore.trajectory import LLMCall, ToolCall, ToolDefinition, Trajectory

SEVERITY_WEIGHTS: dict[str, float] = {"critical": 1.0, "high": 0.7, "medium": 0.4, "low": 0.1}
_MAX_OFFERED_IN_DETAILS = 20
_MAX_ISSUES_PER_CALL = 50

# --- schemas and the validator cache ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the scorer knows about one tool: its schema (None: none known) and deprecation."""

    name: str
    schema: dict[str, Any] | None = None
    deprecated: bool = False
    replaced_by: str | None = None


@dataclass(frozen=True, slots=True)
class CompiledSchema:
    """A ready validator, or why there is none."""

    validator: Validator | None
    problem: str | None = None
    accepts_empty: bool = False
    #: True only for arguments the schema certainly accepts (``_schema_check``); None: no quick test
    quick: Check | None = None


_CACHE_LIMIT = 2048
_cache: OrderedDict[str, CompiledSchema] = OrderedDict()
_cache_lock = threading.Lock()
# An empty registry (the validator adds the draft meta-schemas): a remote $ref is unresolvable
# instead of fetched over the network on the scoring thread.
_NO_REMOTE = Registry()


#: compile_schema's answers by the schema object asked about: the readers share one schema dict
#: per tool definition between runs, so a run's schemas are mostly ones asked about before, and
#: comparing one with a copy of itself costs a fraction of encoding it to look it up by its text.
#: id → (the schema, held so that its id stays its own; from its second time, the schema as it
#: was then, read back from its text, and the answer). The copy catches a schema changed in
#: place since, but for a value made an equal one of another type (1 to 1.0), which only a
#: caller changing a read trajectory could do; a schema that is no JSON never equals its copy.
_by_object: dict[int, tuple[Mapping[str, Any], Any, CompiledSchema | None]] = {}


def compile_schema(schema: Mapping[str, Any]) -> CompiledSchema:
    """A validator for the schema, cached by the schema's canonical JSON text."""
    seen = _by_object.get(id(schema))
    if seen is not None and seen[0] is not schema:
        seen = None
    if seen is not None and seen[2] is not None:
        try:
            if seen[1] == schema:
                return seen[2]
        except Exception:  # noqa: BLE001 - a value that cannot be compared: looked up by its text
            pass
    key = canonical_json(schema)
    compiled = _compile_by_text(key, schema)
    entry: tuple[Mapping[str, Any], Any, CompiledSchema | None] = (schema, None, None)
    if seen is not None:  # asked about again: worth the copy (a schema seen once costs nothing more)
        try:
            entry = (schema, json.loads(key), compiled)
        except (ValueError, RecursionError):  # a repr or a marker, not JSON text
            return compiled
    if len(_by_object) >= _CACHE_LIMIT:
        _by_object.clear()
    _by_object[id(schema)] = entry
    return compiled


def _compile_by_text(key: str, schema: Mapping[str, Any]) -> CompiledSchema:
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    compiled = _compile(dict(schema))
    with _cache_lock:
        _cache[key] = compiled
        if len(_cache) > _CACHE_LIMIT:
            _cache.popitem(last=False)
    return compiled


def _compile(schema: dict[str, Any]) -> CompiledSchema:
    with warnings.catch_warnings():
        # an unknown $schema URI falls back to the default draft; the warning says only that
        warnings.simplefilter("ignore", DeprecationWarning)
        cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        return CompiledSchema(None, f"not a valid JSON Schema: {clip(exc.message)}")
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER, registry=_NO_REMOTE)
    try:
        accepts_empty = not any(True for _ in validator.iter_errors({}))
    except Exception as exc:  # noqa: BLE001 - e.g. an unresolvable $ref: the schema is unusable
        return CompiledSchema(None, f"schema cannot be applied: {clip(str(exc))}")
    return CompiledSchema(validator, None, accepts_empty, quick_check(schema, cls, validator.format_checker))


def spec_from_option(name: str, value: Any) -> ToolSpec:
    """One entry of the ``schemas`` option: a JSON Schema, a ``ToolDefinition``, a dict with
    ``parameters`` (and ``deprecated`` / ``replaced_by``), or None (known tool, no schema)."""
    if value is None:
        return ToolSpec(name)
    if isinstance(value, ToolDefinition):
        return ToolSpec(name, value.parameters, value.deprecated, value.replaced_by)
    if isinstance(value, Mapping):
        # "parameters" is no JSON Schema keyword, so its presence marks a tool definition
        if "parameters" in value:
            parameters = value.get("parameters")
            if parameters is not None and not isinstance(parameters, Mapping):
                raise ScorerConfigError(f"schemas[{name!r}].parameters must be a JSON Schema")
            return ToolSpec(
                name,
                dict(parameters) if parameters is not None else None,
                bool(value.get("deprecated", False)),
                _optional_str(value.get("replaced_by")),
            )
        # a bare schema can still say "deprecated" (a JSON Schema 2019-09+ annotation)
        return ToolSpec(name, dict(value), value.get("deprecated") is True, None)
    raise ScorerConfigError(
        f"schemas[{name!r}] must be a JSON Schema, a ToolDefinition or a dict with 'parameters', "
        f"got {type(value).__name__}"
    )


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def specs_from_trajectory(trajectory: Trajectory) -> dict[str, ToolSpec]:
    """Tool specs offered in the run; a definition with parameters beats one without."""
    specs: dict[str, ToolSpec] = {}
    definitions = list(trajectory.tool_definitions)
    for llm in trajectory.llm_calls:
        definitions.extend(llm.tool_definitions)
    for definition in definitions:
        if not definition.name:
            continue
        current = specs.get(definition.name)
        if current is None or (current.schema is None and definition.parameters is not None):
            specs[definition.name] = ToolSpec(
                definition.name,
                definition.parameters,
                definition.deprecated or (current.deprecated if current else False),
                definition.replaced_by or (current.replaced_by if current else None),
            )
    return specs


# --- repeated calls (tool_misuse) ---------------------------------------------------------------


def find_repeated_calls(trajectory: Trajectory) -> dict[int, int]:
    """Calls that repeat an earlier identical call with no new information in between.

    Returns ``{index of the repeat: index of the earlier call}`` (indexes into
    ``trajectory.tool_calls``). Rule: call *i* repeats call *j* when *j* is the latest earlier
    call with the same name and the same arguments (compared as canonical JSON), and between
    them the agent learnt nothing new:

    * no call between *j* and *i* returned an outcome (result or error) not seen before in the
      run; outcomes of calls requested in the same LLM output as *i* do not count, as the model
      could not have seen them when it asked for *i*;
    * no new user message arrived (an LLM request between them carries more user messages than
      any request before *j*).

    The result of *j* itself is no new information for *i*: an identical retry, even after an
    error, is reported (a loop, or a blind retry). Alternating loops (A, B, A, B, …) are caught
    from their second round on, once B's result is no longer new.
    """
    calls = trajectory.tool_calls
    if len(calls) < 2:
        return {}
    # (name, arguments) of each call first: most runs repeat none, and need nothing more. The
    # arguments' text only for a name called more than once: no other call can match it.
    name_counts: dict[str | None, int] = {}
    for call in calls:
        name_counts[call.name] = name_counts.get(call.name, 0) + 1
    earlier: list[int | None] = []
    last_by_key: dict[tuple[str, str], int] = {}
    for i, call in enumerate(calls):
        j = None
        if call.name and name_counts[call.name] > 1:
            key = (call.name, _arguments_key(call))
            j = last_by_key.get(key)
            last_by_key[key] = i
        earlier.append(j)
    if not any(j is not None for j in earlier):
        return {}
    calls, call_positions, llms, llm_positions = step_positions(trajectory)
    new_outcome = _new_outcome_flags(calls)
    user_counts = [_user_message_count(llm) for llm in llms]

    repeats: dict[int, int] = {}
    for i, call in enumerate(calls):
        j = earlier[i]
        if j is None:
            continue
        learnt = any(
            new_outcome[m]
            and (calls[m].llm_span_id is None or calls[m].llm_span_id != call.llm_span_id)
            for m in range(j + 1, i)
        )
        if not learnt and not _new_user_message(
            user_counts, llm_positions, call_positions[j], call_positions[i]
        ):
            repeats[i] = j
    return repeats


def _arguments_key(call: ToolCall) -> str:
    if call.arguments is not None:
        return canonical_json(call.arguments)
    return (call.arguments_raw or "").strip()


def _outcome_key(call: ToolCall) -> str | None:
    if call.error is not None:
        return "error:" + call.error
    if call.has_result:
        return "result:" + canonical_json(call.result)
    return None


def _new_outcome_flags(calls: list[ToolCall]) -> list[bool]:
    seen: set[str] = set()
    flags: list[bool] = []
    for call in calls:
        outcome = _outcome_key(call)
        flags.append(outcome is not None and outcome not in seen)
        if outcome is not None:
            seen.add(outcome)
    return flags


def _user_message_count(llm: LLMCall) -> int:
    return sum(1 for message in llm.input_messages if message.role == "user")


def _new_user_message(
    user_counts: list[int], llm_positions: list[int], start: int, end: int
) -> bool:
    before = max(
        (count for count, pos in zip(user_counts, llm_positions, strict=True) if pos < start),
        default=0,
    )
    between = max(
        (count for count, pos in zip(user_counts, llm_positions, strict=True) if start < pos < end),
        default=0,
    )
    return between > before


# --- the scorer ---------------------------------------------------------------------------------


#: where a checked call's schema came from (``schema_source`` in its details)
SOURCE_OPTION, SOURCE_OFFERED, SOURCE_TOOL_SPAN = "option", "offered", "tool_span"
_NAMES_IN_EXPLANATION = 3


class ToolCallValidation(Scorer):
    """Schema and shape checks of every tool call; see the module docstring."""

    name = "tool_call_validation"
    kind = "code"

    def __init__(
        self,
        schemas: Mapping[str, Any] | None = None,
        *,
        require_schemas: bool = False,
        allow_unknown_tools: bool = False,
        strict: bool = False,
    ) -> None:
        if schemas is not None and not isinstance(schemas, Mapping):
            raise ScorerConfigError("schemas must map tool names to JSON Schemas")
        self.specs: dict[str, ToolSpec] = {
            str(name): spec_from_option(str(name), value) for name, value in (schemas or {}).items()
        }
        # compiled once here so the first trajectory pays nothing and bad schemas show early, and
        # kept with their spec: a run asks for each by its spec, not by its text (encoded to ask)
        self._compiled: dict[int, tuple[ToolSpec, CompiledSchema]] = {
            id(spec): (spec, compile_schema(spec.schema)) for spec in self.specs.values() if spec.schema is not None
        }
        self.allow_unknown_tools = bool(allow_unknown_tools)
        #: ``unknown_tool`` for a call whose tool has no schema anywhere (off: such a call is unchecked)
        self.require_schemas = bool(require_schemas) and not self.allow_unknown_tools
        self.strict = bool(strict)

    def __getstate__(self) -> dict[str, Any]:
        # The compiled validators do not pickle (jsonschema keeps local functions) and are keyed by
        # ids that a copy does not share: ``scoring="process"`` sends the scorer without them, and
        # the scoring process compiles its own.
        state = self.__dict__.copy()
        state.pop("_compiled", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._compiled = {
            id(spec): (spec, compile_schema(spec.schema)) for spec in self.specs.values() if spec.schema is not None
        }

    @classmethod
    def from_options(cls, options: dict[str, Any], inputs: BuildInputs) -> ToolCallValidation:
        """The settings' tool schemas unless its options give its own."""
        options.setdefault("schemas", inputs.schemas)
        options.setdefault("allow_unknown_tools", inputs.allow_unknown_tools)
        options.setdefault("require_schemas", inputs.require_schemas)
        return cls(**options)

    @classmethod
    def for_default_set(cls, options: dict[str, Any], inputs: BuildInputs) -> ToolCallValidation:
        # The default set has always built it from the settings' schemas alone, leaving its
        # scorer_options entry unread (the other code scorers read theirs): kept, because reading
        # it would change what an existing configuration scores.
        return cls(schemas=inputs.schemas, allow_unknown_tools=inputs.allow_unknown_tools,
                   require_schemas=inputs.require_schemas)

    def _score(self, trajectory: Trajectory) -> Score:
        calls = trajectory.tool_calls
        if not calls:
            return Score.of_code(
                name=self.name,
                value=1.0,
                label=LABEL_NO_TOOL_CALLS,
                explanation="No tool calls to validate.",
                details={"tool_calls": [], "issue_counts": {}, "checked_calls": 0, "unchecked_calls": 0,
                         "reason": None},
                call_results=(),
            )
        offered_specs = specs_from_trajectory(trajectory)
        # the schemas recorded on tool spans, by tool: also for a call of that tool without a
        # span of its own (rejected before it ran)
        span_schemas: dict[str, dict[str, Any]] = {}
        for call in calls:
            if call.schema is not None and call.name:
                span_schemas.setdefault(call.name.strip(), call.schema)
        # (only a call that does not say which tools its request offered needs the requests')
        offered_by_llm = (
            {
                llm.span_id: [d.name for d in llm.tool_definitions]
                for llm in trajectory.llm_calls
                if llm.span_id and llm.tool_definitions
            }
            if any(call.offered_tools is None and call.llm_span_id for call in calls)
            else {}
        )
        repeats = find_repeated_calls(trajectory)
        run = _RunSchemas(offered_specs, span_schemas, offered_by_llm)
        reports = [
            self._check_call(call, run, repeats.get(index), index)
            for index, call in enumerate(calls)
        ]
        return self._summarise(reports, run.problems)

    def _details_are_json(self, result: Score) -> bool:
        # This class's own details (a subclass may write others) about calls without issues hold
        # nothing from the trajectory but each call's id and name: text or None, they are JSON.
        # (An issue copies values from the call and its schema, and a schema problem quotes the
        # schema: those details are encoded.)
        if type(self) is not ToolCallValidation or result.call_results is None or "schema_problems" in result.details:
            return False
        return all(not r.issues and is_text_or_none(r.call_id) and is_text_or_none(r.name)
                   for r in result.call_results)

    # one call ---------------------------------------------------------------------------------

    def _check_call(self, call: ToolCall, run: _RunSchemas, repeat_of: int | None, index: int) -> CheckedCall:
        issues: list[Issue] = []
        name = call.name.strip() if isinstance(call.name, str) else None
        compiled: CompiledSchema | None = None
        source: str | None = None
        offered_recorded = False
        if not name:
            issues.append(_issue_missing_name())
        else:
            compiled, source, offered_recorded = self._tool_issues(call, name, run, issues)
        issues.extend(_argument_issues(call, compiled))
        if not call.has_result and call.error is None:
            issues.append(_issue_missing_result())
        if repeat_of is not None:
            issues.append(_issue_misuse(name or "", repeat_of))
        checked = compiled is not None or offered_recorded or bool(issues)
        if not checked:  # no schema, no offered list, nothing found: no judgement on the call
            return CheckedCall(index, call.id, call.name, call.span_id, None, checked=False)
        if not issues:  # the common case: what the general path below gives for no issue
            return CheckedCall(index, call.id, call.name, call.span_id, 1.0, schema_source=source)
        issues = issues[:_MAX_ISSUES_PER_CALL]

        severities = [issue.severity for issue in issues]
        if self.strict and BLOCKING_SEVERITIES.intersection(severities):
            call_score = 0.0
        else:
            call_score = penalised_score(severities, SEVERITY_WEIGHTS)
        return CheckedCall.of(
            call, index, score=call_score, issues=tuple(issues),
            valid="critical" not in severities, suggestions=tuple(suggestions_of(issues)),
            schema_source=source,
        )

    def _tool_issues(
        self, call: ToolCall, name: str, run: _RunSchemas, issues: list[Issue]
    ) -> tuple[CompiledSchema | None, str | None, bool]:
        """Tool-level issues (not offered, unknown, deprecated); returns the usable schema, where
        it came from, and whether the request's offered tool list was recorded."""
        offered = call.offered_tools
        if offered is None and call.llm_span_id:
            offered = run.offered_by_llm.get(call.llm_span_id)
        not_offered = offered is not None and name not in offered
        if not_offered:
            issues.append(_issue_not_found(name, offered or []))

        found = run.memo.get(name)
        compiled, source = found if found is not None else self._schema_for(name, run)
        own = call.schema
        if own is not None and source != SOURCE_OPTION and source != SOURCE_OFFERED \
                and own is not run.span_schemas.get(name):
            # this call's own span recorded a schema other than the first one seen for the tool
            usable = self._usable(compile_schema(own), name, run)
            if usable is not None:
                compiled, source = usable, SOURCE_TOOL_SPAN
        if compiled is None and self.require_schemas and not not_offered:
            issues.append(_issue_unknown(name, run.problems.get(name), self.strict))
        spec = self.specs.get(name) or run.offered_specs.get(name)
        if spec is not None and spec.deprecated:
            issues.append(_issue_deprecated(name, spec.replaced_by))
        return compiled, source if compiled is not None else None, offered is not None

    def _schema_for(self, name: str, run: _RunSchemas) -> tuple[CompiledSchema | None, str | None]:
        """The usable schema of a tool and its source, first found wins (once per tool per run)."""
        found: tuple[CompiledSchema | None, str | None] = (None, None)
        option = self._option_schema(name)
        if option is not None and self._usable(option, name, run) is not None:
            found = (option, SOURCE_OPTION)
        else:
            for source, schema in ((SOURCE_OFFERED, _spec_schema(run.offered_specs.get(name))),
                                   (SOURCE_TOOL_SPAN, run.span_schemas.get(name))):
                usable = self._usable(compile_schema(schema), name, run) if schema is not None else None
                if usable is not None:
                    found = (usable, source)
                    break
        run.memo[name] = found
        return found

    def _option_schema(self, name: str) -> CompiledSchema | None:
        spec = self.specs.get(name)
        if spec is None or spec.schema is None:
            return None
        mine = self._compiled.get(id(spec))
        return mine[1] if mine is not None and mine[0] is spec else compile_schema(spec.schema)

    @staticmethod
    def _usable(compiled: CompiledSchema, name: str, run: _RunSchemas) -> CompiledSchema | None:
        if compiled.validator is None:
            run.problems.setdefault(name, compiled.problem or "unusable schema")
            return None
        return compiled

    # trajectory -------------------------------------------------------------------------------

    def _summarise(self, reports: list[CheckedCall], problems: Mapping[str, str]) -> Score:
        counts: dict[str, int] = {}
        passed = True
        bad = 0  # calls with issues (a call without any is valid and not blocking)
        checked: list[float] = []
        for report in reports:
            if report.score is not None:
                checked.append(report.score)
            if report.issues:
                bad += 1
                for issue in report.issues:
                    counts[issue.type] = counts.get(issue.type, 0) + 1
                if passed and not (report.valid and not report.blocking):
                    passed = False
        unchecked = len(reports) - len(checked)
        details: dict[str, Any] = {
            "tool_calls": json_view(reports), "issue_counts": counts,
            "checked_calls": len(checked), "unchecked_calls": unchecked, "reason": None,
        }
        if problems:
            details["schema_problems"] = dict(problems)
        if not checked:
            details["reason"] = REASON_NO_TOOL_SCHEMAS
            names = sorted({report.name for report in reports if report.name})
            shown = ", ".join(names[:_NAMES_IN_EXPLANATION]) + (", …" if len(names) > _NAMES_IN_EXPLANATION else "")
            return Score.of_code(
                name=self.name,
                value=None,
                label=LABEL_SKIPPED,
                # (the how-to first: an emitted explanation is cut at explanation_max_chars, 256)
                explanation=f"No tool call could be checked: the offered tools were not recorded and no "
                f"schema is known. {HOW_TO_SUPPLY_SCHEMAS} (Tools: {shown}.)",
                details=details,
                call_results=tuple(reports),
            )
        value = mean2(checked)
        tail = f" ({unchecked} unchecked: no schema known)" if unchecked else ""
        if not counts:
            explanation = f"All {len(checked)} checked tool call(s) are valid against their schemas{tail}."
        else:
            top = ", ".join(f"{kind} ×{n}" for kind, n in sorted(counts.items()))
            explanation = f"{bad} of {len(checked)} checked tool call(s) have issues: {top}{tail}."
        return Score.of_code(
            name=self.name,
            value=value,
            label=LABEL_PASS if passed else LABEL_FAIL,
            explanation=explanation,
            details=details,
            call_results=tuple(reports),
        )


def _spec_schema(spec: ToolSpec | None) -> dict[str, Any] | None:
    return spec.schema if spec is not None else None


@dataclass(slots=True)
class _RunSchemas:
    """What one run offers and records of its tools, and what was worked out of it."""

    offered_specs: Mapping[str, ToolSpec]
    span_schemas: Mapping[str, dict[str, Any]]
    offered_by_llm: Mapping[str, list[str]]
    #: tool name -> (its usable schema, where it came from): one look-up per tool per run
    memo: dict[str, tuple[CompiledSchema | None, str | None]] = field(default_factory=dict)
    #: tool name -> why a schema known for it could not be used
    problems: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class CheckedCall(CallResult):
    """One call as tool_call_validation checked it (``score`` None: unchecked)."""

    score: float | None = 1.0
    #: no critical issue: the call could be made as recorded
    valid: bool = True
    suggestions: tuple[str, ...] = ()
    #: a schema, an offered tool list or a finding: the call counts in the run's score
    checked: bool = True
    #: where the schema applied came from: option, offered, tool_span; None: no schema
    schema_source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.call_id,
            "name": self.name,
            "checked": self.checked,
            "schema_source": self.schema_source,
            "score": self.score,
            "valid": self.valid,
            "issues": [issue.to_dict() for issue in self.issues],
            "suggestions": list(self.suggestions),
        }


# --- argument checks ------------------------------------------------------------------------


def _argument_issues(call: ToolCall, compiled: CompiledSchema | None) -> list[Issue]:
    raw = call.arguments_raw.strip() if isinstance(call.arguments_raw, str) else ""
    if call.arguments is None and not raw:
        if compiled is not None and compiled.accepts_empty:
            return []  # a tool without required parameters, recorded with no arguments
        return [_issue_missing_arguments()]
    if call.arguments_error is not None or not isinstance(call.arguments, dict):
        return [_issue_invalid_arguments(call, raw)]
    if compiled is None or compiled.validator is None:
        return []
    if compiled.quick is not None and compiled.quick(call.arguments):
        return []  # certainly valid: no error for the validator to find and word
    return schema_issues(compiled.validator, call.arguments)


def schema_issues(validator: Validator, arguments: dict[str, Any]) -> list[Issue]:
    """jsonschema errors → issues: ``required`` → missing_required_param (one per missing
    property, dotted path including its name), ``type`` → type_mismatch, the rest →
    schema_violation with the validator's message."""
    issues: list[Issue] = []
    seen_missing: set[str] = set()
    for error in validator.iter_errors(arguments):
        if error.validator == "required":
            issues.extend(_missing_required(error, seen_missing))
        elif error.validator == "type":
            issues.append(_type_mismatch(error))
        else:
            issues.append(_schema_violation(error))
    return issues


def dotted(path: Any, *extra: str) -> str | None:
    parts = [str(part) for part in path] + list(extra)
    return ".".join(parts) if parts else None


def _missing_required(error: ValidationError, seen: set[str]) -> list[Issue]:
    instance = error.instance if isinstance(error.instance, dict) else {}
    required = error.validator_value if isinstance(error.validator_value, list) else []
    issues = []
    for prop in required:
        if not isinstance(prop, str) or prop in instance:
            continue
        path = dotted(error.absolute_path, prop) or prop
        if path in seen:  # jsonschema reports each missing property once per "required" error
            continue
        seen.add(path)
        issues.append(
            Issue(
                "missing_required_param",
                "high",
                f"required parameter {path!r} is missing",
                path=path,
                expected=prop,
                actual=None,
                suggestion=f"add required parameter {path!r}",
            )
        )
    return issues


def _type_mismatch(error: ValidationError) -> Issue:
    path = dotted(error.absolute_path)
    expected = small_json(error.validator_value)
    actual = json_type(error.instance)
    where = repr(path) if path else "the arguments"
    return Issue(
        "type_mismatch",
        "high",
        f"{where} should be {_type_words(expected)}, got {actual}",
        path=path,
        expected=expected,
        actual=actual,
        suggestion=f"give {where} a value of type {_type_words(expected)}",
    )


def _type_words(expected: Any) -> str:
    if isinstance(expected, list):
        return " or ".join(str(t) for t in expected)
    return str(expected)


def _schema_violation(error: ValidationError) -> Issue:
    path = dotted(error.absolute_path)
    keyword = str(error.validator)
    instance = error.instance
    actual = small_json(instance) if not isinstance(instance, (dict, list)) else json_type(instance)
    return Issue(
        "schema_violation",
        "high",
        f"{path}: {clip(error.message)} ({keyword})"
        if path
        else f"{clip(error.message)} ({keyword})",
        path=path,
        expected=small_json(error.validator_value) if keyword != "$ref" else None,
        actual=actual,
        suggestion=_violation_suggestion(keyword, path, error.validator_value),
    )


def _violation_suggestion(keyword: str, path: str | None, expected: Any) -> str:
    where = repr(path) if path else "the arguments"
    if keyword == "format":
        return f"give {where} a valid {expected}"
    if keyword == "enum":
        return f"use one of {small_json(expected)} for {where}"
    if keyword == "const":
        return f"set {where} to {small_json(expected)}"
    if keyword in ("additionalProperties", "unevaluatedProperties"):
        return f"remove properties the schema does not define from {where}"
    if keyword == "pattern":
        return f"make {where} match the pattern {expected!r}"
    if keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        return f"keep {where} within the allowed range ({keyword} {expected})"
    if keyword in ("minLength", "maxLength", "minItems", "maxItems"):
        return f"fix the length of {where} ({keyword} {expected})"
    return f"make {where} satisfy '{keyword}'"


# --- issue constructors (one place for each message and suggestion) ----------------------------


def _issue_missing_name() -> Issue:
    return Issue(
        "missing_tool_name",
        "critical",
        "the tool call has no tool name",
        suggestion="record the tool name of the call",
    )


def _issue_not_found(name: str, offered: list[str]) -> Issue:
    shown = offered[:_MAX_OFFERED_IN_DETAILS]
    return Issue(
        "tool_not_found",
        "high",
        f"tool {name!r} was not offered to the model in that request",
        expected=shown,
        actual=name,
        suggestion=(
            f"call one of the offered tools ({', '.join(shown)})"
            if shown
            else "call only offered tools"
        ),
    )


def _issue_unknown(name: str, problem: str | None, strict: bool) -> Issue:
    why = f": {problem}" if problem else ""
    return Issue(
        "unknown_tool",
        "high" if strict else "medium",
        f"no usable JSON Schema is known for tool {name!r}{why}",
        actual=name,
        suggestion=f"provide a JSON Schema for {name!r} (the schemas option, tool_schemas setting or "
        "--tool-schemas FILE)",
    )


def _issue_deprecated(name: str, replaced_by: str | None) -> Issue:
    return Issue(
        "deprecated_tool",
        "medium",
        f"tool {name!r} is deprecated" + (f"; use {replaced_by!r}" if replaced_by else ""),
        expected=replaced_by,
        actual=name,
        suggestion=(
            f"use {replaced_by!r} instead (deprecated)"
            if replaced_by
            else f"stop using deprecated tool {name!r}"
        ),
    )


def _issue_missing_arguments() -> Issue:
    return Issue(
        "missing_arguments",
        "high",
        "the call has no arguments at all",
        expected="object",
        actual=None,
        suggestion="pass the arguments as a JSON object",
    )


def _issue_invalid_arguments(call: ToolCall, raw: str) -> Issue:
    reason = (
        call.arguments_error or f"arguments are a JSON {json_type(call.arguments)}, not an object"
    )
    return Issue(
        "invalid_arguments",
        "high",
        reason,
        expected="object",
        actual=clip(raw) if raw else small_json(call.arguments),
        suggestion="send the arguments as a valid JSON object",
    )


def _issue_missing_result() -> Issue:
    return Issue(
        "missing_result",
        "medium",
        "no result and no error were recorded for the call",
        suggestion="record the tool result (or its error) on the tool span or in the next request",
    )


def _issue_misuse(name: str, earlier: int) -> Issue:
    return Issue(
        "tool_misuse",
        "medium",
        f"repeats call #{earlier} to {name!r} with the same arguments and no new information",
        expected=None,
        actual=earlier,
        suggestion="reuse the earlier result instead of repeating the identical call",
    )


__all__ = [
    "SEVERITY_WEIGHTS",
    "CompiledSchema",
    "ToolCallValidation",
    "ToolSpec",
    "compile_schema",
    "find_repeated_calls",
    "schema_issues",
    "spec_from_option",
]
