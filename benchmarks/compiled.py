"""What compiling the hot modules with mypyc would give: a measurement in a copy, not a build of the package.

Copies this working tree's ``otel_toolscore/`` (with ``benchmarks/``, ``tests/`` and
``pyproject.toml``) twice into a temporary directory, compiles the modules the scoring worker
spends its time in (``MODULES``) in one copy with mypyc, leaves the other pure Python, and
measures the two in the same sitting:

* ``benchmarks.compare --before <pure copy>`` run in the compiled copy (before/after interleaved
  in one process: ``_score`` per 10-span run, the scorers, build_trajectories, classify, on_end);
* ``benchmarks.throughput --sizes 10`` in each copy, alternated (runs/s/core, cost/floor);
* with ``--check``, the score-identity checks run against the compiled copy:
  ``tests/test_scorer_fixtures.py``, ``tests/test_three_paths.py`` and
  ``python -m tests.realworld.measure``; and ``benchmarks.emit_dump`` (every exported byte) plus
  any ``--dump SCRIPT`` (run as ``SCRIPT OUT`` in each copy) compared between the two copies.
  The tests alone are not enough: they passed while a mypyc int-to-float conversion changed
  96 scores that only a dump showed.

mypyc cannot compile the tree as it is; ``_adapt`` makes five kinds of source change in the copy, none
changing behaviour, and fails loudly if the source they expect has moved:

* ``assemble._last_output``: ``reversed(steps)`` over a ``list[Any]`` crashes mypyc 2.x
  (internal error in ``get_sequence_type``); ``steps[::-1]`` instead;
* ``assemble._Echoes`` (a ``defaultdict`` subclass with an attribute): compiled as a native class,
  setting ``self.unkeyed`` raises ``SystemError: Objects/dictobject.c: bad argument to internal
  function``; it is made a non-native class (``mypyc_attr(native_class=False)``, no ``__slots__``);
* ``number_fact``, ``_grounding._number_fact``, ``_grounding._is_count`` and
  ``tool_results._salient_of_number`` take JSON numbers annotated ``float``: compiled, an int
  argument is converted to a float at the call (mypyc's numeric tower), so ``repr(65)`` becomes
  ``"65.0"`` and a response that writes 65 no longer uses the value (found by the dump compare:
  96 of 7,840 tool_result_verification scores changed; the fixture tests and
  ``tests.realworld.measure`` did not see it); annotated ``int | float`` (boxed) instead;
* ``_grounding._supports_number``: ``x in (None, *_CURRENCY_UNITS)`` (a starred tuple in ``in``)
  crashes it too; the module's equal frozenset ``_AMOUNT_UNITS`` instead;
* ``VerifiedCall`` and ``CheckedCall`` subclass ``results.CallResult``, a slotted dataclass of an
  uncompiled module: a compiled module can only make them non-native classes, and a slotted
  (or even plain) dataclass then fails at import (``mypyc classes can't have __slots__``,
  ``attribute '__dict__' of 'type' objects is not writable``). They move, unchanged, into
  ``scorers/results.py`` (uncompiled). Compiling ``results.py`` instead fails: the subclasses
  narrow ``score: float | None`` to ``float``, which a native class may not.

Measured (main d5528e7, 2 shared vCPUs, CPython 3.11.7, mypy/mypyc 2.4.1, ``MYPYC_OPT_LEVEL=3``):
``_score`` per synthetic 10-span run 0.87x (901 -> 790 µs, medians of 21 interleaved repeats;
per-repeat ratios 0.50-1.49), tool_result_verification 0.76x, tool_call_validation 0.78x,
build_trajectories 0.85x, classify (HTTP) 0.70x; throughput, synthetic 10-span runs, two runs per
copy alternated: 1,321 and 1,406 runs/s/core compiled against 1,026 and 1,152 pure (cost/floor
3.82-3.92 against 4.01-4.59). A second sitting (this script, ``--repeats 7``, machine busier):
``_score`` 0.96x (993 -> 1,004 µs medians; per-repeat ratios 0.75-1.48), tool_result_verification
0.79x; synthetic throughput 1,085 and 1,201 compiled against 930 and 1,082 pure. Outputs identical (emit_dump and a scorer dump of 7,840 scores)
once the int-to-float conversion below is avoided. Far from the target (cost/floor 1.5): what is
left is spent in code mypyc cannot make fast (``Any``-typed attribute dicts and JSON values,
the SDK's uncompiled objects, dataclass and ``lru_cache`` calls, str methods and ``re`` already
in C), and outputs/ and runtime/ (15% of ``_score``) are not compiled here. Two tests of
tests/test_fast_paths.py fail on the compiled copy, by construction: they subclass
``_facts.FactIndex``, and an interpreted class cannot inherit from a compiled one.

Needs gcc, the Python headers (``python3-config --includes``), setuptools and mypy (mypyc) in
the interpreter's environment. The build takes ~1.5-2 min of one core at ``MYPYC_OPT_LEVEL=3``.

    .venv/bin/python -m benchmarks.compiled [--repeats 7] [--check [--dump SCRIPT]] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.paths import REPO

#: where a synthetic run's worker time goes (reading, assembly, the two code scorers that cost)
MODULES = (
    "conventions/_memo.py",
    "conventions/parsing.py",
    "conventions/genai.py",
    "conventions/__init__.py",
    "assemble.py",
    "trajectory.py",
    "scorers/_facts.py",
    "scorers/_grounding.py",
    "scorers/tool_results.py",
    "scorers/tool_validation.py",
)

_COPIED = ("otel_toolscore", "benchmarks", "tests", "pyproject.toml")


def _copy(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True)
    for name in _COPIED:
        if (src / name).is_dir():
            shutil.copytree(src / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "extracted"))
        else:
            shutil.copy2(src / name, dst / name)


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{path}: expected one {old!r}; the source moved, update benchmarks/compiled.py")
    path.write_text(text.replace(old, new))


def _adapt(pkg: Path) -> None:
    """The source changes mypyc needs (see the module docstring); none changes behaviour."""
    _replace(pkg / "assemble.py", "for s in reversed(steps):", "for s in steps[::-1]:")
    _replace(pkg / "assemble.py", "\nclass _Echoes(", "\n@mypyc_attr(native_class=False)\nclass _Echoes(")
    _replace(pkg / "assemble.py", '    __slots__ = ("unkeyed",)\n', "")
    _replace(pkg / "assemble.py", "from __future__ import annotations\n",
             "from __future__ import annotations\n\nfrom mypy_extensions import mypyc_attr\n")
    _replace(pkg / "scorers/_grounding.py", "fact.unit in (None, *_CURRENCY_UNITS)", "fact.unit in _AMOUNT_UNITS")
    # mypyc turns an int passed as ``float`` into a float: repr(65) would become "65.0"
    for module, head in (("scorers/_facts.py", "def number_fact(value: "),
                         ("scorers/_grounding.py", "def _number_fact(value: "),
                         ("scorers/_grounding.py", "def _is_count(key: str | None, value: "),
                         ("scorers/tool_results.py", "def _salient_of_number(leaf: ")):
        _replace(pkg / module, head + "float)", head + "int | float)")
    results = pkg / "scorers/results.py"
    moved = []
    for module, name in (("tool_results.py", "VerifiedCall"), ("tool_validation.py", "CheckedCall")):
        path = pkg / "scorers" / module
        text = path.read_text()
        head = r"@dataclass\(slots=True\)\nclass " + name + r"\(CallResult\):\n"
        m = re.search(head + r"(?:(?:    .*|)\n)*?(?=\n\n\S)", text)
        if m is None:
            raise SystemExit(f"{path}: class {name}(CallResult) not found; update benchmarks/compiled.py")
        moved.append(m.group(0).rstrip("\n"))
        path.write_text(text[:m.start()] + f"from otel_toolscore.scorers.results import {name}  # noqa: E402\n"
                        + text[m.end():])
    results.write_text(results.read_text().rstrip("\n") + "\n\n\n" + "\n\n\n".join(moved) + "\n")


def build(tree: Path) -> float:
    """Compile ``MODULES`` in place in ``tree``; the build's wall seconds."""
    mypyc = Path(sys.executable).with_name("mypyc")
    env = {**os.environ, "MYPYC_OPT_LEVEL": os.environ.get("MYPYC_OPT_LEVEL", "3")}
    t0 = time.perf_counter()
    done = subprocess.run([str(mypyc), *(f"otel_toolscore/{m}" for m in MODULES)], cwd=tree, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    (tree / "mypyc-build.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"mypyc failed ({done.returncode}); see {tree / 'mypyc-build.log'}:\n{done.stdout[-3000:]}")
    # a module left as .py would measure nothing: each must import as an extension
    names = [("otel_toolscore/" + m).removesuffix(".py").removesuffix("/__init__").replace("/", ".") for m in MODULES]
    probe = "import importlib,sys\n" + "".join(
        f"f=importlib.import_module({n!r}).__file__\nassert f.endswith('.so'), f\n" for n in names)
    subprocess.run([sys.executable, "-c", probe], cwd=tree, env=_env(tree), check=True)
    return seconds


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def _run(tree: Path, *args: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=tree, env=_env(tree), capture_output=True, text=True)
    out = done.stdout + done.stderr
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} in {tree} failed:\n{out[-4000:]}")
    return out


def _shown(out: str) -> str:
    return "\n".join(line for line in out.splitlines() if not line.startswith("RESULT "))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="benchmarks.compare --quick --repeats")
    ap.add_argument("--throughput-rounds", type=int, default=2, help="alternated throughput runs per copy")
    ap.add_argument("--check", action="store_true", help="also run the score-identity checks on the compiled copy")
    ap.add_argument("--dump", type=Path, action="append", default=[],
                    help="with --check: a script run in each copy as SCRIPT OUT, the two OUTs compared")
    ap.add_argument("--keep", type=Path, default=None, help="build here (an absent directory) and keep it")
    args = ap.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="toolscore-mypyc-"))
    compiled, plain = root / "compiled", root / "plain"
    _copy(REPO, compiled)
    _copy(REPO, plain)
    _adapt(compiled / "otel_toolscore")
    seconds = build(compiled)
    print(f"mypyc: {len(MODULES)} modules compiled in {seconds:.0f} s (wall) into {compiled}", flush=True)

    print(_shown(_run(compiled, "-m", "benchmarks.compare", "--before", str(plain), "--quick",
                      "--repeats", str(args.repeats))), flush=True)
    for r in range(args.throughput_rounds):
        for name, tree in ((("plain", plain), ("compiled", compiled)) if r % 2 == 0
                           else (("compiled", compiled), ("plain", plain))):
            out = _run(tree, "-m", "benchmarks.throughput", "--quick", "--sizes", "10")
            print(f"throughput, {name}:\n{_shown(out)}", flush=True)
    if args.check:
        print(_run(compiled, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "tests/test_scorer_fixtures.py", "tests/test_three_paths.py").splitlines()[-1])
        print(_shown(_run(compiled, "-m", "tests.realworld.measure")))
        dumps = [("-m", "benchmarks.emit_dump")] + [(str(s),) for s in args.dump]
        for dump in dumps:
            texts = []
            for tree in (plain, compiled):
                dumped = root / f"dump-{tree.name}.txt"
                _run(tree, *dump, str(dumped))
                texts.append(dumped.read_text().replace(str(tree), "<tree>"))
            print(f"{' '.join(dump)}: {'identical' if texts[0] == texts[1] else 'DIFFERENT'}"
                  f" ({len(texts[0].splitlines())} lines)", flush=True)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
