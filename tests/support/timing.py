"""Time bounds for tests that run on a shared, loaded machine (2 vCPUs): they detect hangs, they
do not measure speed (``benchmarks/`` does)."""

from __future__ import annotations

import time
from collections.abc import Callable

#: what the machine may add to a bound; a hang is many times this
MARGIN_S = 4.0


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``condition`` every 10 ms: True as soon as it holds, False once ``timeout`` s passed."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
