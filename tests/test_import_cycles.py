"""No import cycles in the package (issue 31).

The graph is built from the source, not by importing: each module's imports that run when it is
imported (module level, including under ``try``/``if``) are its edges; imports inside functions are
lazy (they run when called, on a fully imported module) and do not count, nor do imports under
``if TYPE_CHECKING:``, which never run. ``from pkg import name`` is an edge to ``pkg.name`` when
that is a module of the package, else to ``pkg``. A cycle fails the test, named module by module.

Besides: the console-script wrapper (``_console``) is imported by no module, and it alone imports the
CLI module; the scorer registry imports no scorer module and not ``scorers.base``, not even for types.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import otel_toolscore

PACKAGE_DIR = Path(otel_toolscore.__file__).parent
PACKAGE = PACKAGE_DIR.name


def _modules(package_dir: Path = PACKAGE_DIR) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's ``__init__``), every module of the package."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _eager_imports(body: list[ast.stmt], lazy: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of ``body``, with True when it runs only later (in a function, or
    under ``if TYPE_CHECKING:``, never): the statements a module runs when imported are False."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, lazy
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _eager_imports(node.body, True)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _eager_imports(node.body, True)
            yield from _eager_imports(node.orelse, lazy)
        else:
            for field in ("body", "orelse", "finalbody"):
                sub = getattr(node, field, None)
                if isinstance(sub, list):
                    yield from _eager_imports([s for s in sub if isinstance(s, ast.stmt)], lazy)
            for handler in getattr(node, "handlers", ()):
                yield from _eager_imports(handler.body, lazy)
            if isinstance(node, ast.Match):
                for case in node.cases:
                    yield from _eager_imports(case.body, lazy)


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The package's modules the import statement names."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        source = ".".join([*base, *([node.module] if node.module else [])])
    else:
        source = node.module or ""
    out = set()
    for alias in node.names:
        if f"{source}.{alias.name}" in known:
            out.add(f"{source}.{alias.name}")
        elif source in known:
            out.add(source)
    return out


def import_graph(package_dir: Path = PACKAGE_DIR, *, include_lazy: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports when imported (with ``include_lazy``: at all)."""
    modules = _modules(package_dir)
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        edges: set[str] = set()
        for node, lazy in _eager_imports(ast.parse(path.read_text(encoding="utf-8"), str(path)).body):
            if include_lazy or not lazy:
                edges |= _targets(name, is_package, node, known)
        edges.discard(name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan's, iterative),
    as a path ``a -> b -> ... -> a`` through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
    return [_path_through(graph, set(c)) for c in components]


def _path_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A cycle within the component, from its first module (shortest, by breadth-first search)."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle in {sorted(component)}")  # pragma: no cover - a component has one


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_console_script_wrapper_is_imported_by_nothing_and_alone_imports_the_cli() -> None:
    graph = import_graph(include_lazy=True)
    assert f"{PACKAGE}.cli" in graph[f"{PACKAGE}._console"]
    importers_of_cli = {m for m, edges in graph.items() if f"{PACKAGE}.cli" in edges}
    assert importers_of_cli == {f"{PACKAGE}._console"}
    assert not {m for m, edges in graph.items() if f"{PACKAGE}._console" in edges}


def test_the_scorer_registry_knows_names_and_import_paths_only() -> None:
    graph = import_graph(include_lazy=True)
    assert graph[f"{PACKAGE}.scorers.registry"] == set()  # (the classes: importlib, by path, when built)


# --- the check itself, on made-up packages ------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_cycle_is_found_and_named(tmp_path: Path) -> None:
    root = _package(tmp_path, {
        "a.py": "from pkg import b\n",
        "b.py": "try:\n    from .sub.c import thing\nexcept ImportError:\n    pass\n",
        "sub/__init__.py": "",
        "sub/c.py": "import pkg.a\n",
        "d.py": "from pkg.a import x\n",  # into the cycle, not on it
    })
    assert cycles(import_graph(root)) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]


@pytest.mark.parametrize("lazy", [
    "def f():\n    from pkg import a\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n",
])
def test_lazy_and_typing_only_imports_close_no_cycle(tmp_path: Path, lazy: str) -> None:
    root = _package(tmp_path, {"a.py": "from pkg import b\n", "b.py": lazy})
    assert cycles(import_graph(root)) == []
    assert cycles(import_graph(root, include_lazy=True)) == [["pkg.a", "pkg.b", "pkg.a"]]
