"""Packaging (issue 18, item 6): the wheel works outside the repository, the core install stays
small and names the extra a feature needs, and the command line reads well in CI logs."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.support.paths import REPO


def test_the_wheel_from_a_clean_venv_outside_the_repository() -> None:
    """scripts/test-wheel: build, core install (footprint, extras named), then demo, score and
    serve --help with the cli and serve extras, all in temporary venvs."""
    proc = subprocess.run([str(REPO / "scripts" / "test-wheel")], capture_output=True, text=True, timeout=900,
                          check=False, env={"PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(Path.home()),
                                            "PYTHON": sys.executable})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and out.rstrip().endswith("test-wheel: ok"), out[-4000:]
    count = int(re.search(r"core install: (\d+) packages", out).group(1))
    assert count <= 42, out  # 51 before the extras split (grpcio, typer, rich and what they pull)
    for extra in ("cli", "grpc", "judge"):
        assert f"pip install 'otel-toolscore[{extra}]'" in out
    assert "score: otel-toolscore: 5 runs from 1 file(s)" in out


def test_version() -> None:
    proc = subprocess.run([sys.executable, "-m", "otel_toolscore.cli", "--version"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == f"otel-toolscore {version('otel-toolscore')}"


@pytest.mark.parametrize("command", [["score", "--help"], ["serve", "--help"], ["demo", "--help"], ["--help"]])
def test_help_is_plain_text_that_loses_no_word_in_a_narrow_log(command: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "otel_toolscore.cli", *command], capture_output=True, text=True,
                          timeout=60, check=False, env={"PATH": "/usr/bin:/bin", "COLUMNS": "80", "TERM": "dumb"})
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout and "╭" not in proc.stdout  # rich's boxes cut text at the width
    if command[0] == "score":
        # every option and scorer name whole, however narrow the log
        for word in ("tool_call_accuracy", "tool_result_verification", "tool_call_appropriateness",
                     "--expected-tool-order", "--fail-under", "--config"):
            assert word in proc.stdout, word


def test_missing_extra_errors_name_the_extra() -> None:
    from otel_toolscore.extras import MissingExtraError, check, require

    with pytest.raises(MissingExtraError, match=r"pip install 'otel-toolscore\[judge\]'"):
        require("litellm_not_installed_here", "judge", "an LLM-judged scorer")
    with pytest.raises(MissingExtraError, match=r"otel-toolscore\[grpc\]"):
        check("grpc_not_installed_here.sub", "grpc", "OTLP over gRPC")
    assert require("json", "core", "json").dumps(1) == "1"
    check("opentelemetry.sdk", "core", "the SDK")  # installed: no error


def test_the_readme_tells_users_what_they_can_install_and_use() -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the test extra installs tomli
        import tomli as tomllib

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    table = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    for extra in extras:
        if extra != "phoenix":  # its own venv, described with the backends
            assert f"| `{extra}` |" in table, extra
    assert "openai 3" in table and "downgrades" in table  # what the judge extra does to an app
    for name in ("def test_weather_agent(toolscore):", "replay_file(", "replay(spans, processor)",
                 "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "Jaeger", "Tempo", "--fail-under"):
        assert name in readme, name
    # the first two commands: set-up with the demo, then the tests
    first = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    assert ".[test,examples]'" in first and "otel-toolscore demo" in first and "./scripts/test" in first
    assert {"cli", "serve", "grpc", "judge"} <= set(re.findall(r"otel-toolscore\[([a-z,]+)\]", " ".join(extras["test"]))[0].split(","))


def test_the_quick_test_command_leaves_out_exactly_the_end_to_end_tests() -> None:
    """./scripts/test --quick runs pytest -m "not e2e": every test under tests/e2e carries the mark
    (tests/conftest.py), no other test does."""
    script = (REPO / "scripts" / "test").read_text()
    assert '"--quick"' in script and "-m \"not e2e\"" in script and ".[test]'" in script
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m", "e2e",
                           "tests"], capture_output=True, text=True, timeout=300, check=False, cwd=REPO)
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert ids and all(line.startswith("tests/e2e/") for line in ids), proc.stdout[-2000:]
    e2e = {p.name for p in (REPO / "tests" / "e2e").glob("test_*.py")}
    assert {line.split("::")[0].rsplit("/", 1)[1] for line in ids} == e2e
