"""What every scorer shares: the ``Score`` it returns, the ``Scorer`` base, scorers by name,
and where expectations (ground truth) come from.

A scorer is a small object with ``name``, ``kind`` and ``score(trajectory) -> Score``. The
judgement lives in ``_score``; ``score`` wraps it so that nothing a scorer does can raise into
the processor or the CLI (docs/design.md, "Failure is not a score"): an unexpected exception becomes
a ``Score`` with no value, label ``error`` and ``error`` set to a short type. Which scorers exist
is ``registry.py``'s; how each is built from its options is the scorer's own (``from_options``).
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from otel_toolscore import semconv
from otel_toolscore.scorers.registry import BY_NAME, CODE_SCORERS, EXPECTATION_SCORERS, ScorerKind
from otel_toolscore.scorers.results import CallResult, read_call_results
from otel_toolscore.trajectory import Trajectory

LABEL_PASS = "pass"
LABEL_FAIL = "fail"
LABEL_SKIPPED = "skipped"
LABEL_ERROR = "error"
LABEL_NO_TOOL_CALLS = "no_tool_calls"
#: ``details.reason`` of a skipped tool_call_validation: no call of the run had a known schema
REASON_NO_TOOL_SCHEMAS = "no_tool_schemas"
#: how tool schemas reach tool_call_validation, for explanations and reports
HOW_TO_SUPPLY_SCHEMAS = (
    "Supply tool schemas: install(tool_schemas=otel_toolscore.tool_schemas(fn, ...)), the tool_schemas "
    "config key, the schemas option, or score --tool-schemas FILE."
)

_MAX_ERROR_MESSAGE = 300


#: how pydantic itself sets an instance's own attributes (``BaseModel.model_construct``)
_setattr = object.__setattr__


class Score(BaseModel):
    """One judgement of one trajectory by one scorer."""

    model_config = ConfigDict(extra="forbid")

    name: str
    #: in [0, scale]; None when no judgement was made (skipped, error, not applicable)
    value: float | None = None
    #: low-cardinality word: pass/fail for binary scores, else documented per scorer
    label: str | None = None
    explanation: str = ""
    #: scorer-specific, JSON-serialisable
    details: dict[str, Any] = Field(default_factory=dict)
    #: None, or a short error type (``error.type`` when emitted)
    error: str | None = None
    #: the scorer's typed per-call results, ``details["tool_calls"]`` being their JSON view;
    #: None for a scorer that writes only JSON (``calls`` reads that back). Not validated
    #: (built by code, not parsed) and not part of ``to_dict``: details already carry it.
    call_results: SkipValidation[tuple[CallResult, ...] | None] = Field(default=None, exclude=True, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "label": self.label,
            "explanation": self.explanation,
            "details": self.details,
            "error": self.error,
        }

    @property
    def calls(self) -> tuple[CallResult, ...]:
        """The per-call results every output reads: the scorer's own, else those its JSON
        details hold (a custom scorer's)."""
        if self.call_results is not None:
            return self.call_results
        return read_call_results(self.details)

    @property
    def outcome(self) -> Literal["scored", "skipped", "error"]:
        """The ``outcome`` attribute of the ``toolscore.evaluations`` counter."""
        if self.error is not None:
            return "error"
        if self.value is None:
            return "skipped"
        return "scored"

    @classmethod
    def of_code(cls, name: str, value: float | None, label: str, explanation: str, details: dict[str, Any],
                call_results: tuple[CallResult, ...]) -> Score:
        """The score a code scorer made, every value of its declared type (``value`` a float):
        the instance ``Score(...)`` gives for them (the same fields, the same ``model_fields_set``),
        without validating what the scorer typed itself (``model_construct``'s way, in a third of
        the time ``Score(...)`` takes). ``details`` becomes the score's own (validation would copy
        it): the scorer keeps no reference to it."""
        score = cls.__new__(cls)
        _setattr(score, "__dict__", {"name": name, "value": value, "label": label, "explanation": explanation,
                                     "details": details, "error": None, "call_results": call_results})
        _setattr(score, "__pydantic_fields_set__", {"name", "value", "label", "explanation", "details", "call_results"})
        _setattr(score, "__pydantic_extra__", None)
        _setattr(score, "__pydantic_private__", None)
        return score

    @classmethod
    def skipped(cls, name: str, reason: str, details: dict[str, Any] | None = None) -> Score:
        """No judgement was possible (missing input, no expectation): never a 0."""
        return cls(
            name=name, value=None, label=LABEL_SKIPPED, explanation=reason, details=details or {}
        )

    @classmethod
    def failed(cls, name: str, exc: BaseException) -> Score:
        """The scorer could not score: the error type and a short message, no value."""
        error_type = error_type_of(exc)
        message = _short(str(exc)) or error_type
        return cls(
            name=name,
            value=None,
            label=LABEL_ERROR,
            explanation=f"Scorer {name} failed: {message}",
            details={"exception": type(exc).__name__},
            error=error_type,
        )


class ScorerConfigError(ValueError):
    """Bad scorer options; raised at construction, to whoever configures the scorer."""


class ScoringError(Exception):
    """A failure while scoring that has a known, low-cardinality ``error.type``."""

    error_type: ClassVar[str] = "scoring_error"


class InvalidExpectationError(ScoringError):
    """A ``toolscore.*`` expectation attribute on the run span could not be read."""

    error_type = "invalid_expectation"


def error_type_of(exc: BaseException) -> str:
    """Known failures carry their own type; anything else is named by its class."""
    return getattr(exc, "error_type", None) or type(exc).__name__


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_ERROR_MESSAGE else text[: _MAX_ERROR_MESSAGE - 1] + "…"


class Scorer(ABC):
    """Base of all scorers. Subclasses set ``name``/``kind`` and implement ``_score``."""

    name: ClassVar[str]
    kind: ClassVar[ScorerKind]

    def score(self, trajectory: Trajectory) -> Score:
        """Judge one trajectory. Never raises: failures come back as an error ``Score``."""
        try:
            result = self._score(trajectory)
            if not self._details_are_json(result):
                _check_json_serialisable(result.details)
            return result
        except Exception as exc:  # noqa: BLE001 - the contract is "never raise into the caller"
            return Score.failed(self.name, exc)

    __call__ = score

    @abstractmethod
    def _score(self, trajectory: Trajectory) -> Score:
        """The judgement itself; may raise, ``score`` turns that into an error score."""

    def _details_are_json(self, result: Score) -> bool:
        """True only when ``result`` (what ``_score`` just returned) has details that are JSON
        by construction: every value one the scorer made, or a value from the trajectory that
        this method saw to be of a JSON type. ``score`` then skips encoding them to find out
        (the cost of that encode is a score's own bookkeeping, paid on every run). False, the
        default: they are encoded."""
        return False

    @classmethod
    def from_options(cls, options: dict[str, Any], inputs: BuildInputs) -> Scorer:
        """The scorer named in the settings (``scorers``, ``--scorer``), built from its
        ``scorer_options`` entry."""
        return cls(**options)

    @classmethod
    def for_default_set(cls, options: dict[str, Any], inputs: BuildInputs) -> Scorer | None:
        """The scorer as one of the default set (no scorer named; code scorers only); None
        leaves it out (its inputs cannot be had)."""
        return cls.from_options(options, inputs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


#: json.dumps(…, allow_nan=False), its encoder built once (public API only: issue 31, BENCHMARKS.md
#: "Private APIs (issue 31)")
_STRICT_ENCODER = json.JSONEncoder(allow_nan=False)


def _check_json_serialisable(details: dict[str, Any]) -> None:
    # Details travel as event attributes and JSON lines; a scorer bug that puts a set or a
    # model object there must surface as a scorer error here, not as an exporter crash later.
    _STRICT_ENCODER.encode(details)


# --- scorers by name ---------------------------------------------------------------------------

_S = TypeVar("_S", bound=type[Scorer])


#: custom scorer classes given to ``register``
_REGISTERED: dict[str, type[Scorer]] = {}


class _ScorerClasses(Mapping[str, "type[Scorer]"]):
    """Scorer classes by name: the registry's built-ins, each imported when first asked for,
    and the custom ones given to ``register``."""

    def __getitem__(self, name: str) -> type[Scorer]:
        registered = _REGISTERED.get(name)
        if registered is not None:
            return registered
        return BY_NAME[name].load()

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*BY_NAME, *_REGISTERED]))

    def __len__(self) -> int:
        return len(BY_NAME.keys() | _REGISTERED.keys())


SCORERS: Mapping[str, type[Scorer]] = _ScorerClasses()


def register(cls: _S) -> _S:
    """Make a custom scorer class known by its ``name`` (a class decorator), for the settings'
    ``scorers`` and ``get_scorer``; the built-ins are the registry's."""
    existing = SCORERS.get(cls.name)
    if existing is not None and existing is not cls:
        raise ScorerConfigError(f"scorer name {cls.name!r} already registered by {existing!r}")
    _REGISTERED[cls.name] = cls
    return cls


def scorer_class(name: str) -> type[Scorer]:
    """The class of a scorer by name; ScorerConfigError naming the known ones otherwise."""
    try:
        return SCORERS[name]
    except KeyError:
        known = ", ".join(sorted(SCORERS)) or "none"
        raise ScorerConfigError(f"unknown scorer {name!r} (known: {known})") from None


def get_scorer(name: str, **options: Any) -> Scorer:
    """Build a scorer by name with its options."""
    return scorer_class(name)(**options)


@dataclass(frozen=True)
class BuildInputs:
    """What the settings give every scorer besides its own options."""

    schemas: Mapping[str, Any] | None = None
    allow_unknown_tools: bool = False
    #: scorers that need an expectation read each run's own when configured without one
    per_run_expectations: bool = False
    #: tool_call_validation reports ``unknown_tool`` for a tool with no schema (else: unchecked)
    require_schemas: bool = False


def default_code_scorers(
    options: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    expected_tool: str | None = None,
    expected_tool_order: Sequence[str] | str | None = None,
    strict: bool | None = None,
    per_run_expectations: bool = False,
    schemas: Mapping[str, Any] | None = None,
    allow_unknown_tools: bool = False,
    require_schemas: bool = False,
) -> list[Scorer]:
    """Every code scorer whose inputs are available, with its ``options`` entry.

    A scorer that needs an expectation (``tool_call_accuracy``) is built when one is given
    (``expected_tool``/``expected_tool_order``, or in its options), or, with
    ``per_run_expectations=True``, in the mode that reads each run's ``toolscore.*`` attributes
    (runs without them are ``skipped``); otherwise it is left out.
    """
    by_name = {name: dict(opts) for name, opts in (options or {}).items()}
    expectation = {"expected_tool": expected_tool, "expected_tool_order": expected_tool_order, "strict": strict}
    for name in EXPECTATION_SCORERS:
        by_name.setdefault(name, {}).update({k: v for k, v in expectation.items() if v is not None})
    inputs = BuildInputs(schemas, allow_unknown_tools, per_run_expectations, require_schemas)
    built = (scorer_class(name).for_default_set(by_name.get(name, {}), inputs) for name in CODE_SCORERS)
    return [scorer for scorer in built if scorer is not None]


# --- expectations -------------------------------------------------------------------------------

ExpectationSource = Literal["options", "trajectory"]


@dataclass(frozen=True)
class Expectations:
    expected_tool: str | None
    expected_tool_order: tuple[str, ...] | None
    strict: bool
    #: where the expected tool/order came from; None when there is none
    source: ExpectationSource | None

    @property
    def present(self) -> bool:
        return bool(self.expected_tool) or bool(self.expected_tool_order)


def parse_tool_order(value: Any) -> tuple[str, ...] | None:
    """A tool order from an option or an attribute: a list/tuple, a comma-separated string, or
    a JSON array string. Empty → None (no order expectation)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                decoded = json.loads(text)
            except ValueError:
                decoded = None
            if isinstance(decoded, list):
                return parse_tool_order(decoded)
        items = [part.strip() for part in text.split(",")]
    elif isinstance(value, (list, tuple)):
        items = []
        for item in value:
            if not isinstance(item, str):
                raise InvalidExpectationError(
                    f"expected tool order must hold tool names, got {type(item).__name__}"
                )
            items.append(item.strip())
    else:
        raise InvalidExpectationError(
            f"expected tool order must be a list or a comma-separated string, "
            f"got {type(value).__name__}"
        )
    names = tuple(item for item in items if item)
    return names or None


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})


def parse_bool(value: Any) -> bool | None:
    """``toolscore.strict`` as a bool: bools, 0/1, or "true"/"false" (any case); None stays None."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and not math.isnan(value) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise InvalidExpectationError(f"cannot read {value!r} as true/false")


def parse_expected_tool(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidExpectationError(
            f"expected tool must be a tool name, got {type(value).__name__}"
        )
    return value.strip() or None


def resolve_expectations(
    trajectory: Trajectory | None,
    expected_tool: str | None = None,
    expected_tool_order: Sequence[str] | str | None = None,
    strict: bool | str | None = None,
) -> Expectations:
    """The expectation for one run: the scorer's arguments first, else the run span's
    ``toolscore.expected_tool`` / ``toolscore.expected_tool_order`` / ``toolscore.strict``.

    The expected tool and order are taken together from one source (never one from the options
    and the other from the trajectory). ``strict`` given as an argument always wins; otherwise
    the trajectory's ``toolscore.strict`` applies only to the trajectory's own expectation, so an
    attribute set by the app cannot silently tighten an expectation configured elsewhere.
    """
    option_tool = parse_expected_tool(expected_tool)
    option_order = parse_tool_order(expected_tool_order)
    option_strict = parse_bool(strict)
    if option_tool or option_order:
        return Expectations(option_tool, option_order, bool(option_strict), "options")

    attrs = trajectory.expectations if trajectory is not None else {}
    run_tool = parse_expected_tool(attrs.get(semconv.TOOLSCORE_EXPECTED_TOOL))
    run_order = parse_tool_order(attrs.get(semconv.TOOLSCORE_EXPECTED_TOOL_ORDER))
    if not (run_tool or run_order):
        return Expectations(None, None, bool(option_strict), None)
    run_strict = option_strict
    if run_strict is None:
        run_strict = parse_bool(attrs.get(semconv.TOOLSCORE_STRICT))
    return Expectations(run_tool, run_order, bool(run_strict), "trajectory")


# --- small shared helpers -------------------------------------------------------------------


def penalised_score(severities: Iterable[str], weights: Mapping[str, float]) -> float:
    """``max(0, 1 − Σ weight)``, rounded to 2 decimals only to drop float noise (weights are
    tenths, so no real information is lost)."""
    total = sum(weights.get(severity, 0.0) for severity in severities)
    return round(max(0.0, 1.0 - total), 2)


def mean2(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 2)


def build_scorers(
    names: Sequence[str] | None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    schemas: Mapping[str, Any] | None = None,
    allow_unknown_tools: bool = False,
    require_schemas: bool = False,
) -> list[Scorer]:
    """Scorers by name with their options, as the CLI and the processor configure them.

    Without names: every code scorer whose inputs a run can have (``default_code_scorers``),
    those that need an expectation reading each run's own. A scorer named without an
    expectation option reads them per run too (runs without one are skipped).
    """
    options = options or {}
    if not names:
        return default_code_scorers(options, per_run_expectations=True, schemas=schemas,
                                    allow_unknown_tools=allow_unknown_tools, require_schemas=require_schemas)
    inputs = BuildInputs(schemas, allow_unknown_tools, per_run_expectations=True, require_schemas=require_schemas)
    return [scorer_class(name).from_options(dict(options.get(name, {})), inputs) for name in names]
