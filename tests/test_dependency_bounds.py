"""tests/constraints-min.txt pins exactly the lower bounds pyproject.toml declares for the core
dependencies and the cli and grpc extras, so that scripts/test's .venv-min step (core tests on those versions) tests the
bounds users get, and a bound raised in one place is raised in the other."""

from __future__ import annotations

import re
import sys

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support.paths import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def _lower_bounds() -> dict[str, Version]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    out = {}
    # the core and the extras of other packages' code (cli: typer/rich, grpc: the gRPC exporter)
    extras = project["optional-dependencies"]
    for line in [*project["dependencies"], *extras["cli"], *extras["grpc"]]:
        req = Requirement(line)
        lows = [Version(s.version) for s in req.specifier if s.operator == ">="]
        if lows:
            out[_norm(req.name)] = max(lows)
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (REPO / "tests" / "constraints-min.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[_norm(name)] = Version(version)
    return pins


def test_constraints_min_pins_every_declared_lower_bound() -> None:
    assert _pins() == _lower_bounds()


def test_the_known_broken_versions_are_excluded() -> None:
    bounds = _lower_bounds()
    # import fails with pydantic 2.6/2.7 ("Unable to apply constraint strict") and with
    # pydantic-settings < 2.4; typer 0.12 fails with current click
    assert bounds["pydantic"] >= Version("2.8")
    assert bounds["pydantic-settings"] >= Version("2.4")
    assert bounds["typer"] >= Version("0.13")


def test_scripts_test_runs_the_core_tests_on_the_minimums() -> None:
    script = (REPO / "scripts" / "test").read_text()
    assert "-c tests/constraints-min.txt" in script and ".venv-min/bin/python -m pytest" in script
    for test in re.findall(r"tests/test_\w+\.py", script):
        assert (REPO / test).exists(), test


#: what the hand-written list leaves out of jsonschema's format-nongpl extra, and why (pyproject.toml)
LEFT_OUT_OF_FORMAT_NONGPL = {"rfc3987-syntax"}  # imported by `import jsonschema`: ~0.7 s for every app


def test_the_format_checkers_are_jsonschemas_format_nongpl_extra_but_one() -> None:
    """The core lists jsonschema's ``format-nongpl`` checkers by hand rather than using the extra
    (the one left out costs every instrumented app its import time); the list follows the
    installed jsonschema's extra, so a checker it adds or a bound it raises is not missed."""
    from importlib.metadata import requires

    extra = {}
    for line in requires("jsonschema") or []:
        req = Requirement(line)
        if req.marker is not None and req.marker.evaluate({"extra": "format-nongpl"}) \
                and not req.marker.evaluate({"extra": ""}):
            extra[_norm(req.name)] = req
    assert extra, "jsonschema declares no format-nongpl extra"
    declared = {_norm(Requirement(line).name): Requirement(line)
                for line in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]}
    missing = set(extra) - set(declared) - LEFT_OUT_OF_FORMAT_NONGPL
    assert not missing, f"format-nongpl checkers missing from pyproject.toml's dependencies: {sorted(missing)}"
    for name in set(extra) - LEFT_OUT_OF_FORMAT_NONGPL:
        for spec in extra[name].specifier:
            # every lower bound of the extra's is one of ours too (ours may be higher)
            if spec.operator in (">=", ">"):
                ours = declared[name].specifier
                assert ours and all(Version(spec.version) <= Version(s.version) for s in ours
                                    if s.operator in (">=", ">")), (name, str(spec), str(ours))
    assert not LEFT_OUT_OF_FORMAT_NONGPL & set(declared)
