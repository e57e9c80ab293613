"""Public names loaded on first use (PEP 562), for the packages that re-export their modules' names:
importing a package, or one of its modules, does not load every other module it re-exports."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def exports(
    package: str, names: Mapping[str, str], namespace: dict[str, Any], *, submodules: tuple[str, ...] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``names`` maps a public name to the module
    that defines it; ``submodules`` are public names that are the package's own modules."""

    def get(name: str) -> Any:
        if name in submodules:
            return import_module(f"{package}.{name}")
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def listing() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return get, listing
