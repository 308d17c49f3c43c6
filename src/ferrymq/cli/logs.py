"""How the servers log: a level, and plain lines for people or JSON lines for log collectors."""

from __future__ import annotations

import json
import logging
import sys
import time

LEVELS = ("debug", "info", "warning", "error")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLines(logging.Formatter):
    """One JSON object a line: time (ISO 8601, UTC), level, logger, message, and the traceback if any."""

    converter = time.gmtime  # type: ignore[assignment]  # UTC: the "Z" in the time

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


chosen = ("info", "text")  # what `ferrymq --log-level --log-format` asked for; servers apply it


def configure_logging(level: str = "info", form: str = "text") -> None:
    """Send every log record at `level` and above to stderr, as text or JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if form == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
