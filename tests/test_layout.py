"""The layout the README's "Where things live" describes: stages import what they need and no more,
the package root loads its public names lazily, and every part of the package is on the map."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import otel_toolscore
from tests.support import paths

PACKAGE = paths.REPO / "otel_toolscore"


def _loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; import json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=paths.REPO)
    return set(json.loads(out.stdout))


def test_the_package_root_loads_nothing_until_a_name_is_used() -> None:
    loaded = {m for m in _loaded_after("import otel_toolscore") if m.startswith("otel_toolscore")}
    # three leaves: the version, the lazy names, the redacting filter on our loggers (no patterns yet)
    assert loaded == {"otel_toolscore", "otel_toolscore._version", "otel_toolscore._lazy", "otel_toolscore._log_redaction"}


def test_reading_spans_loads_no_runtime_outputs_scorers_or_judges() -> None:
    loaded = _loaded_after("import otel_toolscore.conventions, otel_toolscore.assemble")
    ours = {m for m in loaded if m.startswith("otel_toolscore.")}
    assert not {m for m in ours if m.split(".")[1] in ("runtime", "outputs", "scorers", "cli", "demo")}
    assert "litellm" not in loaded


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in otel_toolscore.__all__:
        assert getattr(otel_toolscore, name) is not None, name
    assert set(dir(otel_toolscore)) >= set(otel_toolscore.__all__)


def test_the_readme_map_names_every_part_of_the_package() -> None:
    readme = (paths.REPO / "README.md").read_text()
    section = readme.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"[\w./]+", section))
    missing = []
    for path in sorted(PACKAGE.rglob("*")):
        rel = path.relative_to(PACKAGE)
        if "__pycache__" in rel.parts or path.name in ("__init__.py", "py.typed"):
            continue
        if path.is_dir() or path.suffix == ".py":
            label = f"{rel.with_suffix('').as_posix()}{'/' if path.is_dir() else ''}"
            if not ({label, path.stem, path.name, f"{path.stem}/", rel.as_posix()} & named):
                missing.append(label)
    assert missing == [], f"README 'Where things live' does not name: {missing}"
