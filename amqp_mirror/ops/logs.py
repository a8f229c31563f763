"""Log lines as JSON, one object a line, for log shippers (`amqp-mirror run --log-format json`).

Each line has `time` (ISO 8601, UTC), `level`, `logger`, `message` and, when the message begins with
one, its stable `id` (`AMQ111003`, Artemis's where it has one, ours in the AMQ95xxxx range otherwise,
and MIR1xx for what a mirror target refuses: docs/operations.md lists them); a traceback comes as
`exception`, inside the same line.
"""

from __future__ import annotations

import json
import logging
import re
import time

_ID = re.compile(r"^(AMQ\d{6}|MIR\d{3}):\s*")


class JsonLinesFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
        }
        found = _ID.match(message)
        if found:
            entry["id"] = found.group(1)
        entry["message"] = message
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)  # json escapes every control character: one line
