"""Our log lines pass the default redaction: every logger of the package carries a filter that
redacts a record's message, arguments and exception text before any handler writes it.

A filter on a logger sees only that logger's own records (not its children's), and each module
makes its logger at import; loggers are one object per name, so ``install`` creates every
module's logger up front (names from the package's files, nothing imported) with the filter on.
The redaction's patterns load with the first record, not with the package.
"""

from __future__ import annotations

import logging
import os


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        from otel_toolscore.redaction import default_redactor

        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: the handler reports it as usual
            return True
        record.msg, record.args = default_redactor(message), None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = default_redactor(record.exc_text)
        return True


FILTER = RedactingFilter()


def install() -> None:
    """The filter on the package's logger and on every module's."""
    root = os.path.dirname(os.path.abspath(__file__))
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        parts = os.path.relpath(folder, root).split(os.sep)
        package = ".".join(["otel_toolscore", *(p for p in parts if p != ".")])
        names = [package] + [f"{package}.{f[:-3]}" for f in files if f.endswith(".py") and f != "__init__.py"]
        for name in names:
            logger = logging.getLogger(name)
            if FILTER not in logger.filters:
                logger.addFilter(FILTER)
