"""Where the tests' inputs are, in one place. ``SHARED`` is the project's shared data beside the
repository (``../shared``, read-only): the fixture traces of every stack and the
real-conversation corpus. Tests that need it skip when it is not there."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
#: the apps and clients that tests run in a process of their own
DATA = TESTS / "data"
EXAMPLES = REPO / "examples"
#: the bundled example traces (OTLP JSON, one request per line)
SAMPLE = EXAMPLES / "traces" / "sample.jsonl"
#: this repository's own captures (``tests/conformance/generator.py``), one folder per stack
CAPTURES = TESTS / "conformance" / "captures"

SHARED = REPO.parent / "shared"
#: one folder per instrumentation stack, ``labels.json`` beside them
FIXTURES = SHARED / "fixtures" / "traces"
REALWORLD = SHARED / "realworld"


def traces(corpus: Path, pattern: str = "*/*.json") -> list[Path]:
    """A corpus's trace files (``FIXTURES`` or ``CAPTURES``), sorted, so that parametrized ids
    keep their order; none when the corpus is absent. A stack's ``pending.json`` (what its
    captures still lack, for the conformance test) is not a trace."""
    return sorted(p for p in corpus.glob(pattern) if p.name != "pending.json")


def trace_id(path: Path) -> str:
    """A trace file's test id: ``<stack>/<scenario>``."""
    return f"{path.parent.name}/{path.stem}"
