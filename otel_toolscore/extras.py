"""Optional dependencies: which extra brings what, and a clear error when one is missing.

The core install is what an instrumented app needs (the SDK, OTLP over HTTP, pydantic, the
JSON Schema validator, PyYAML). The command line, the sidecar's gRPC receiver, OTLP over gRPC and
LLM judges are extras, so that an app does not carry grpcio, typer, rich or litellm it never
uses. Code that needs one calls ``require`` where it starts using it, and the user reads which
``pip install`` fixes it instead of "No module named 'litellm'".
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: the distribution name users install
DISTRIBUTION = "otel-toolscore"


class MissingExtraError(ImportError):
    """A feature was used whose optional dependencies are not installed."""

    def __init__(self, extra: str, feature: str, missing: str) -> None:
        self.extra = extra
        self.missing = missing
        super().__init__(
            f"{feature} needs the '{extra}' extra ({missing} is not installed): "
            f"pip install '{DISTRIBUTION}[{extra}]'",
            name=missing,
        )


def install_command(extra: str) -> str:
    """The ``pip install`` that adds ``extra`` to this installation: ``pip install -e '<checkout>[extra]'``
    when the code runs from a checkout (editable install or the source tree: a pyproject.toml
    beside the package), else ``pip install 'otel-toolscore[extra]'`` (a wheel from an index)."""
    from pathlib import Path

    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and not {"site-packages", "dist-packages"} & set(checkout.parts):
        return f"pip install -e '{checkout}[{extra}]'"
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def require(module: str, extra: str, feature: str) -> ModuleType:
    """``module`` imported, or ``MissingExtraError`` naming the extra that provides it.

    Only a missing ``module`` (or a package above it) becomes the extra's error: an ImportError
    raised inside an installed module is a real bug and keeps its own message.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            raise MissingExtraError(extra, feature, exc.name) from None
        raise


def check(module: str, extra: str, feature: str) -> None:
    """Like ``require`` without importing (litellm takes seconds to import): for constructors
    that should fail at configuration time, not on the first use."""
    import importlib.util

    top = module.split(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None and importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package of module is missing
        found = False
    if not found:
        raise MissingExtraError(extra, feature, module)

