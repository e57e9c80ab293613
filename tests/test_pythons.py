"""The core tests on Python 3.10 (the oldest requires-python admits) and the newest CPython
installed here (issue 18, item 6): scripts/test-pythons, each in a venv of its own."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support.paths import REPO


def test_core_tests_pass_on_the_oldest_and_newest_python() -> None:
    proc = subprocess.run([str(REPO / "scripts" / "test-pythons")], capture_output=True, text=True, timeout=1800,
                          check=False)
    out = proc.stdout + proc.stderr
    if proc.returncode == 2 and "no Python 3.10" in out:
        pytest.skip("no Python 3.10 or newer CPython on this machine (pyenv or PATH)")
    assert proc.returncode == 0, out[-6000:]
    versions = re.findall(r"test-pythons: Python (3\.\d+) passed", out)
    assert "3.10" in versions, out[-2000:]
    assert len(versions) >= 2 or versions == ["3.10"], versions  # and the newest, when it is not 3.10
