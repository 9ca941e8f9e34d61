"""Log output: human text or one JSON object per line, chosen by ``--log-format``.

Why JSON: the controller runs in a pod; log pipelines index fields, not prose. Messages are
constant ("became leader", "reconcile failed") and values travel in ``extra`` (house style), so in
JSON mode every ``extra`` key becomes a top-level field and in text mode they are appended as
``key=value``. Library modules never configure logging; only the CLI calls :func:`configure`.
"""

from __future__ import annotations

import datetime
import enum
import json
import logging
import sys
from typing import Any, TextIO

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys() | {"message", "asctime"}
)


class LogFormat(enum.StrEnum):
    TEXT = "text"
    JSON = "json"


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {
        k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")
    }


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "msg", ...extra, "exc"?}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in extra_fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time level logger: msg key=value ...``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = extra_fields(record)
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        return line


def configure(fmt: LogFormat, *, level: int = logging.INFO, stream: TextIO | None = None) -> None:
    """Route the root logger to ``stream`` (stderr) in ``fmt``; replaces earlier handlers."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt is LogFormat.JSON else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # The client logs every request at DEBUG and urllib3 warns on retries; keep them quiet.
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.ERROR)
