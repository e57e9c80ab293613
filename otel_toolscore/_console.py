"""The ``otel-toolscore`` console script's entry point: the command line when the ``cli`` extra is
installed, else one line saying how to install it.

Its own module, imported by nothing in the package: it is the one place that imports the CLI
module, and only when the script runs (``extras``, which the judge, the sidecar and the demo
import, once held it and so closed an import cycle through ``cli``; tests/test_import_cycles.py).
"""

from __future__ import annotations

import sys

from otel_toolscore.extras import MissingExtraError, require


def run_cli() -> None:
    """Run the command line; without the ``cli`` extra, say which ``pip install`` adds it (exit
    status 2, as for a usage error)."""
    try:
        require("typer", "cli", "the otel-toolscore command")
        require("rich", "cli", "the otel-toolscore command")
    except MissingExtraError as exc:
        sys.stderr.write(f"otel-toolscore: {exc}\n")
        raise SystemExit(2) from None
    from otel_toolscore.cli import main

    main()
