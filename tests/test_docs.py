"""The documentation cites only what is in the repository: every ``docs/<name>.md`` named in the
package, the tests, the benchmarks, the scripts or the README exists, and every section a
citation quotes (``docs/design.md, "Completion"``) is in that file."""

from __future__ import annotations

import re

from tests.support import paths

CITATION = re.compile(r'docs/([\w-]+\.md)(?:,\s+(?:[\w_]+,\s+)?"([^"]+)")?')
SOURCES = [*sorted((paths.REPO / "otel_toolscore").rglob("*.py")), *sorted(paths.TESTS.rglob("*.py")),
           *sorted((paths.REPO / "benchmarks").rglob("*.py")), paths.REPO / "README.md",
           paths.REPO / "BENCHMARKS.md", paths.TESTS / "realworld" / "verdicts.json"]


def _citations() -> list[tuple[str, str, str | None]]:
    found = []
    for source in SOURCES:
        # a citation may run over a line break inside a comment or docstring
        text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", source.read_text(encoding="utf-8"))
        for name, section in CITATION.findall(text):
            found.append((source.relative_to(paths.REPO).as_posix(), name, section or None))
    return found


def test_the_code_cites_the_docs() -> None:
    assert len({name for _, name, _ in _citations()}) >= 4


def test_every_cited_doc_and_section_exists() -> None:
    missing = []
    for source, name, section in _citations():
        doc = paths.REPO / "docs" / name
        if not doc.is_file():
            missing.append(f"{source}: docs/{name}")
        elif section and section.lower() not in doc.read_text(encoding="utf-8").lower():
            missing.append(f'{source}: docs/{name}, "{section}"')
    assert missing == []


def test_nothing_cites_a_file_outside_the_repository() -> None:
    outside = re.compile(r"SCORERS\.md|DESIGN\.md|CONVENTIONS\.md|\.\./shared|/work/shared")
    # where the committed copy comes from, and this test
    allowed = {paths.REPO / "scripts" / "refresh-corpora", paths.CORPORA / "README.md", paths.TESTS / "test_docs.py"}
    offenders = [p.relative_to(paths.REPO).as_posix() for p in [*SOURCES, *sorted((paths.REPO / "docs").glob("*.md"))]
                 if p not in allowed and outside.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
