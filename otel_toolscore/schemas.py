"""Tool schemas the app supplies: from its own tool functions and pydantic models, or from a file.

``tool_call_validation`` checks each call against its tool's JSON Schema; stock instrumentation
(``opentelemetry-instrumentation-openai-v2``, for one) does not record the tools offered to the
model, and without a schema a call is left unchecked. The app knows its tools::

    import otel_toolscore
    otel_toolscore.install(tool_schemas=otel_toolscore.tool_schemas(get_weather, SendEmail))

``tool_schemas`` gives ``{tool name: JSON Schema}``, the shape of the ``tool_schemas`` setting,
the scorer's ``schemas`` option and the ``--tool-schemas FILE`` of ``otel-toolscore score``
(``load_tool_schemas`` reads such a file, JSON or YAML).
"""

from __future__ import annotations

import inspect
import json
import os
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter, create_model

#: a parameter the model does not fill (the framework does): left out of a function's schema
_SKIPPED_PARAMETERS = frozenset({"self", "cls"})
#: the frameworks' context parameters (Pydantic AI ``RunContext``, Strands and ADK ``ToolContext``):
#: the framework passes them, the model never does
_CONTEXT_TYPES = frozenset({"RunContext", "ToolContext", "InvocationContext", "CallbackContext"})


def tool_schemas(*tools: Any, **named: Any) -> dict[str, dict[str, Any]]:
    """``{tool name: JSON Schema}`` for the given tools, each one of:

    * a function (sync or async): named by ``__name__``, its schema built from its signature's
      annotations and defaults, as pydantic validates a call of it (``*args``/``**kwargs`` and
      ``self`` left out; an unannotated parameter accepts anything);
    * a pydantic model class: named by the class, its ``model_json_schema()`` (the shape of
      ``openai.pydantic_function_tool``);
    * a tool definition as the APIs take it (OpenAI ``{"type": "function", "function": {...}}``,
      ``{"name", "parameters"}``, Anthropic ``input_schema``, Bedrock ``toolSpec``), or an object
      with such a ``tool_spec`` (a Strands ``@tool`` function).

    ``name=tool`` keyword arguments name a tool otherwise. Raises ``TypeError`` for anything else.
    """
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        name, schema = _named_schema(tool)
        out[name] = schema
    for name, tool in named.items():
        out[name] = _named_schema(tool)[1]
    return out


def _named_schema(tool: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(tool, type) and issubclass(tool, BaseModel):
        return tool.__name__, tool.model_json_schema()
    spec = getattr(tool, "tool_spec", None)
    if isinstance(spec, Mapping):
        return _definition_schema(spec)
    if isinstance(tool, Mapping):
        return _definition_schema(tool)
    if callable(tool):
        return getattr(tool, "__name__", type(tool).__name__), function_schema(tool)
    raise TypeError(f"cannot make a tool schema of {type(tool).__name__}: give a function, a pydantic "
                    "model class or a tool definition")


def _definition_schema(definition: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    from otel_toolscore.conventions.parsing import tool_definition_from

    found = tool_definition_from(dict(definition))
    if found is None or found.parameters is None:
        raise TypeError("a tool definition needs a name and a JSON Schema (parameters, input_schema, inputSchema)")
    return found.name, found.parameters


def function_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON Schema of the arguments a call of ``fn`` takes, by keyword."""
    target = inspect.unwrap(fn)
    signature = inspect.signature(target)
    try:
        hints = typing.get_type_hints(target)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: read as written
        hints = {}
    fields: dict[str, Any] = {}
    for name, parameter in signature.parameters.items():
        if name in _SKIPPED_PARAMETERS or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        annotation = hints.get(name, parameter.annotation)
        if _is_context(annotation):
            continue
        if annotation is inspect.Parameter.empty or isinstance(annotation, str) or not _has_json_schema(annotation):
            annotation = Any  # (a type JSON Schema cannot describe accepts anything, as unannotated)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (annotation, default)
    model = create_model(  # type: ignore[call-overload]
        getattr(target, "__name__", "tool"), __config__=ConfigDict(arbitrary_types_allowed=True), **fields
    )
    schema: dict[str, Any] = model.model_json_schema()
    schema.pop("title", None)
    return schema


def _is_context(annotation: Any) -> bool:
    origin = typing.get_origin(annotation) or annotation
    return getattr(origin, "__name__", None) in _CONTEXT_TYPES


def _has_json_schema(annotation: Any) -> bool:
    try:
        TypeAdapter(annotation, config=ConfigDict(arbitrary_types_allowed=True)).json_schema()
    except Exception:  # noqa: BLE001 - pydantic's many ways of saying "no schema for this type"
        return False
    return True


def load_tool_schemas(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A JSON or YAML file holding one object: tool name → JSON Schema (or ``{parameters,
    deprecated, replaced_by}``). ``ValueError`` saying what is wrong otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read tool schemas: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"{path}: tool schemas are neither JSON nor YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: tool schemas must be an object of tool name → JSON Schema")
    return data


__all__ = ["function_schema", "load_tool_schemas", "tool_schemas"]
