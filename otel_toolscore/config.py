"""Settings from code, the environment (``OTEL_TOOLSCORE_*``) and a YAML file.

Precedence, highest first: keyword arguments > environment > YAML file > defaults. The three
sources are pydantic-settings sources (``settings_customise_sources``), so the environment is
parsed by pydantic-settings itself: names are case-insensitive, lists and dicts are JSON, and
dict-valued settings (``scorer_options``, ``sample_rates``) from several sources are
deep-merged key by key, as pydantic-settings does. Every problem surfaces as one
``ConfigError`` naming where the bad value came from (argument, variable, or file and key).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Annotated, Any, Literal

import yaml
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

ENV_PREFIX = "OTEL_TOOLSCORE_"
#: the YAML file read when ``load_settings`` is not given one
CONFIG_FILE_ENV = "OTEL_TOOLSCORE_CONFIG"


class ConfigError(ValueError):
    """Settings that cannot be loaded: unreadable file, unknown key, invalid value."""


# --- rules ------------------------------------------------------------------------------------


def _compile(pattern: str | None, field: str) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression for {field} {pattern!r}: {exc}") from None


class Rule(BaseModel):
    """Config-file expectation: runs whose agent name / input match get this expectation."""

    model_config = ConfigDict(extra="forbid")

    #: regex, must match the whole agent name
    agent: str | None = None
    #: regex, searched anywhere in the run's input text
    input_pattern: str | None = None
    expected_tool: str | None = None
    expected_tool_order: list[str] | None = None
    strict: bool | None = None

    # Compiled once per rule: rules are matched on every run, on the worker thread.
    _agent_re: re.Pattern[str] | None = PrivateAttr(default=None)
    _input_re: re.Pattern[str] | None = PrivateAttr(default=None)

    @field_validator("agent", "input_pattern")
    @classmethod
    def _valid_regex(cls, value: str | None, info: ValidationInfo) -> str | None:
        # Compiling here makes a bad pattern a load-time error naming the key, not a
        # per-run failure on the worker thread.
        _compile(value, info.field_name or "pattern")
        return value

    @field_validator("expected_tool", mode="before")
    @classmethod
    def _tool_name(cls, value: Any) -> Any:
        return value.strip() or None if isinstance(value, str) else value

    @field_validator("expected_tool_order", mode="before")
    @classmethod
    def _tool_order(cls, value: Any) -> Any:
        # "a,b,c" is the natural spelling in an environment variable or a one-line YAML value.
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, (list, tuple)):
            names = [item.strip() if isinstance(item, str) else item for item in value]
            names = [item for item in names if item != ""]
            return names or None
        return value

    @model_validator(mode="after")
    def _compiled(self) -> Rule:
        if not (self.expected_tool or self.expected_tool_order):
            # A rule that sets no expectation would silently do nothing.
            raise ValueError("a rule needs expected_tool or expected_tool_order")
        self._agent_re = _compile(self.agent, "agent")
        self._input_re = _compile(self.input_pattern, "input_pattern")
        return self

    def matches(self, agent_name: str | None, input_text: str | None) -> bool:
        """True when every matcher the rule has matches; a rule with none matches every run."""
        if self._agent_re is not None and (
            agent_name is None or self._agent_re.fullmatch(agent_name) is None
        ):
            return False
        return self._input_re is None or (
            input_text is not None and self._input_re.search(input_text) is not None
        )


# --- settings ---------------------------------------------------------------------------------

PositiveSeconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Rate = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Size = Annotated[int, Field(ge=1)]

# The YAML data load_settings already read (and checked), handed to the source below; a
# context variable because settings_customise_sources is a classmethod with no per-call input.
_yaml_data: ContextVar[Mapping[str, Any] | None] = ContextVar("_toolscore_yaml", default=None)


class _YamlFileSource(PydanticBaseSettingsSource):
    """The YAML file, below the environment: what load_settings read, else the file named by
    $OTEL_TOOLSCORE_CONFIG (so constructing ToolScoreSettings directly reads it too)."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        data = _yaml_data.get()
        if data is None:
            path = os.environ.get(CONFIG_FILE_ENV)
            data = read_config_file(path) if path else {}
        self._data = dict(data)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


class ToolScoreSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, case_sensitive=False, extra="forbid", validate_default=True
    )

    #: s after the agent span ended before scoring without waiting for open children
    #: (0: never wait for them)
    completion_grace: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.5
    #: s, upper bound on holding the agent span
    hold_timeout: PositiveSeconds = 2.0
    max_pending_traces: Size = 10_000
    max_spans_per_trace: Size = 5_000
    trace_ttl: PositiveSeconds = 300.0
    queue_size: Size = 2_048
    #: sidecar: quiet time after a root span before scoring
    decision_wait: PositiveSeconds = 2.0
    #: sidecar: the on-disk queue's directory (SQLite); unset: the buffer is in memory
    serve_queue_dir: str | None = None
    #: sidecar: bytes of accepted requests the on-disk queue holds before pushing back
    serve_queue_max_bytes: Size = 1 << 30
    #: sidecar: distinct app service names put on its evaluation events; beyond, "_other"
    serve_max_app_services: Size = 100
    #: where code scorers run: "thread" (a worker thread of the app's process) or "process" (a
    #: child process, off the app's GIL; runtime/_scoring_process.py)
    scoring: Literal["thread", "process"] = "thread"
    #: s that shutdown() waits for scoring in flight before forwarding what is held, unscored
    shutdown_timeout: PositiveSeconds = 5.0
    #: runs being judged by LLM scorers at once; beyond it a run's LLM scoring is dropped (counted)
    llm_max_inflight: Size = 256
    explanation_max_chars: Size = 256
    #: explanations (which may quote the run's arguments and results) on emitted scores; off: none
    explanations: bool = True
    #: explanations pass the default redaction (keys, tokens, URL passwords, emails, card numbers)
    redact_explanations: bool = True
    span_attributes: bool = True
    #: a gen_ai.evaluation.result event per score: true (every score, the default), false (none),
    #: "unattached" (only the scores the agent span does not carry, as ``evaluation_spans``; the
    #: tool calls' own events still go out: no attribute carries them)
    events: bool | Literal["unattached"] = True
    #: which tool calls get a gen_ai.evaluation.result event of their own (with ``events`` true or
    #: "unattached"): "issues" (calls with an issue or a score below 1), "all", "none"
    call_events: Literal["issues", "all", "none"] = "issues"
    #: one span per score, child of the agent span: "unattached" (scores the agent span does not
    #: carry: LLM-judged ones, which come after it left, and code scores whose span left before
    #: them), true (every score: Arize Phoenix shows them as evaluations), false (none)
    evaluation_spans: bool | Literal["unattached"] = "unattached"
    metrics: bool = True
    #: None: every code scorer whose inputs the run has
    scorers: list[str] | None = None
    #: per scorer name
    scorer_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: per scorer name, 0..1; a scorer not listed gets default_sample_rate
    sample_rates: dict[str, Rate] = Field(default_factory=dict)
    default_sample_rate: Rate = 1.0
    rules: list[Rule] = Field(default_factory=list)
    #: tool name -> JSON Schema (or {parameters, deprecated, replaced_by}) for tool_call_validation,
    #: or the path of a JSON/YAML file of them; ``otel_toolscore.tool_schemas(fn, Model)`` makes one
    tool_schemas: dict[str, Any] | None = None
    #: tool_call_validation: a tool with no known schema is an ``unknown_tool`` issue (else unchecked)
    require_schemas: bool = False
    #: the option before require_schemas: true turns require_schemas off
    allow_unknown_tools: bool = False

    @field_validator("tool_schemas", mode="before")
    @classmethod
    def _tool_schemas_file(cls, value: Any) -> Any:
        if isinstance(value, (str, os.PathLike)):
            from otel_toolscore.schemas import load_tool_schemas

            return load_tool_schemas(value)
        return value

    @field_validator("scorers", mode="before")
    @classmethod
    def _scorer_names(cls, value: Any) -> Any:
        # pydantic-settings hands over the raw string when it is not JSON: accept "a,b".
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # No .env or secrets directory: the three documented sources only, in precedence order.
        return init_settings, env_settings, _YamlFileSource(settings_cls)

    def sample_rate_for(self, scorer: str) -> float:
        return self.sample_rates.get(scorer, self.default_sample_rate)


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The YAML file as a mapping of known top-level keys; ConfigError otherwise."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot be read: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path}: not valid YAML: {exc}") from None
    if data is None:  # an empty file is an empty configuration
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping, got {type(data).__name__}")
    known = ToolScoreSettings.model_fields
    for key in data:
        if key not in known:
            raise ConfigError(
                f"config file {path}: unknown key {key!r} (known: {', '.join(sorted(known))})"
            )
    return data


def load_settings(
    config_file: str | os.PathLike[str] | None = None, **overrides: Any
) -> ToolScoreSettings:
    """Settings from keyword overrides (None ignored) > environment > YAML file > defaults.

    The YAML file is ``config_file``, else ``$OTEL_TOOLSCORE_CONFIG``, else none.
    """
    path = config_file if config_file is not None else os.environ.get(CONFIG_FILE_ENV) or None
    data = read_config_file(path) if path is not None else {}
    given = {key: value for key, value in overrides.items() if value is not None}
    token = _yaml_data.set(data)
    try:
        return ToolScoreSettings(**given)
    except ValidationError as exc:
        problems = "; ".join(
            f"{_origin(error['loc'], given, data, path)}: {_where(error['loc'])}: {error['msg']}"
            for error in exc.errors()
        )
        raise ConfigError(f"invalid settings: {problems}") from None
    except SettingsError as exc:  # an environment value pydantic-settings could not decode
        raise ConfigError(f"environment: {exc}") from None
    finally:
        _yaml_data.reset(token)


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(settings)"


def _origin(
    loc: tuple[int | str, ...],
    given: Mapping[str, Any],
    data: Mapping[str, Any],
    path: str | os.PathLike[str] | None,
) -> str:
    """Which source a bad value came from: the highest-precedence one that sets its field."""
    field = str(loc[0]) if loc else ""
    if field in given:
        return "argument"
    variable = ENV_PREFIX + field.upper()
    if any(name.upper() == variable for name in os.environ):
        return f"environment variable {variable}"
    if field in data:
        return f"config file {path}"
    return "default"


# --- sampling ---------------------------------------------------------------------------------


def sampled(trace_id: int, rate: float) -> bool:
    """The SDK's TraceIdRatioBased decision for ``trace_id`` at ``rate``.

    Same bound and same 64 low-order bits as the sampler, so every process decides alike for
    a trace and the traces kept at a lower rate are a subset of those kept at a higher one.
    """
    return trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < sample_bound(rate)


def sample_bound(rate: float) -> int:
    """``sampled(trace_id, rate)`` is ``trace_id & TRACE_ID_LIMIT < sample_bound(rate)``: the
    bound once, for a decision made on every span."""
    if math.isnan(rate) or not 0.0 <= rate <= 1.0:
        raise ValueError(f"sample rate must be in [0, 1], got {rate!r}")
    bound: int = TraceIdRatioBased.get_bound_for_rate(rate)
    return bound


#: the bits of a trace id that the sampling decision looks at
TRACE_ID_LIMIT: int = TraceIdRatioBased.TRACE_ID_LIMIT
