"""Hypothesis in CI: derandomized, so a CI run explores exactly the examples a local run with
CI=true explored, and a red CI is a reproducible fact, not a draw. Local runs stay random (and
keep finding new cases, as the hostile-input tests did)."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
