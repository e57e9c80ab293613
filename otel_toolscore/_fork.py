"""The package's one at-fork hook: parts that keep threads or locks register what a fork needs.

``os.register_at_fork`` has no unregister, so per-object hooks (a processor) are held weakly here
and die with their object; module-level ones (the judges' fork fence) are held strongly.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

Hook = Callable[[], None]
_before: list[Hook] = []
_after_in_parent: list[Hook] = []
_after_in_child: list[Hook] = []


def register(before: Hook | None = None, after_in_parent: Hook | None = None, after_in_child: Hook | None = None) -> None:
    """Like ``os.register_at_fork``, for the life of the process."""
    for hooks, hook in ((_before, before), (_after_in_parent, after_in_parent), (_after_in_child, after_in_child)):
        if hook is not None:
            hooks.append(hook)


_weak_in_child: list[weakref.WeakMethod[Callable[[], Any]]] = []


def reinit_in_child(method: Callable[[], Any]) -> None:
    """Call a bound method in a forked child for as long as its object lives."""
    _weak_in_child[:] = [ref for ref in _weak_in_child if ref() is not None]  # the dead go
    _weak_in_child.append(weakref.WeakMethod(method))


def _in_child() -> None:
    _run(_after_in_child, "after")
    _run([m for m in (ref() for ref in list(_weak_in_child)) if m is not None], "after")


def _run(hooks: list[Hook], when: str) -> None:
    for hook in list(hooks):
        try:
            hook()
        except Exception:  # an at-fork hook must never stop a fork (it is only printed)
            logger.warning("otel-toolscore: a hook %s fork failed", when, exc_info=True)


if hasattr(os, "register_at_fork"):
    # ``before`` hooks run in reverse order of registration, as ``os.register_at_fork``'s do
    os.register_at_fork(
        before=lambda: _run(_before[::-1], "before"),
        after_in_parent=lambda: _run(_after_in_parent, "after"),
        after_in_child=_in_child,
    )
