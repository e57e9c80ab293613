"""The zero-code way in: ``opentelemetry-instrument python app.py`` with
``OTEL_TOOLSCORE_ENABLED=true`` scores the app's agent runs, with no code change.

``opentelemetry-instrument`` (opentelemetry-instrumentation's ``sitecustomize``) loads the
distro, runs the configurator (which sets the global providers from the ``OTEL_*`` variables),
runs the instrumentors, then calls every ``opentelemetry_post_instrument`` entry point: this
package registers ``hook`` there (pyproject.toml), so install() runs on the providers the
configurator set, as it would in the app after its own set-up. This module imports nothing
else until the switch is on: an app with the package installed and the switch off pays one
environment lookup.
"""

from __future__ import annotations

import logging
import os

#: the switch: an OpenTelemetry boolean ("true", any case, is on; unset or "false" is off)
ENABLED_ENV = "OTEL_TOOLSCORE_ENABLED"

_log = logging.getLogger(__name__)


def hook() -> None:
    """install() when ``OTEL_TOOLSCORE_ENABLED=true``, with the settings of ``OTEL_TOOLSCORE_*``
    and ``OTEL_TOOLSCORE_CONFIG``. Never raises: a problem is logged and the app runs unscored."""
    raw = os.environ.get(ENABLED_ENV, "").strip().lower()
    if raw != "true":
        if raw not in ("", "false"):
            _log.warning("otel-toolscore: %s=%r is not true or false; scoring stays off", ENABLED_ENV, raw)
        return
    try:
        from otel_toolscore.runtime.bootstrap import install

        install()
    except Exception:  # noqa: BLE001 - the app starts whatever scoring's set-up does
        _log.warning("otel-toolscore: %s=true but install() failed; the app runs unscored", ENABLED_ENV,
                     exc_info=True)
