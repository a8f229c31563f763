"""`--log-format json`: one JSON object a line, its stable id apart, nothing a message holds can split it."""

from __future__ import annotations

import json
import logging
import sys

from amqp_mirror.ops.logs import JsonLinesFormatter


def record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            info = sys.exc_info()
    return logging.LogRecord("broker.connections", logging.INFO, __file__, 1, message, args, info)


def test_a_line_with_an_id() -> None:
    line = JsonLinesFormatter().format(record("AMQ111003: Connected on Server AMQP Connection %s", "DC2"))
    entry = json.loads(line)
    assert entry["id"] == "AMQ111003"
    assert entry["message"] == "AMQ111003: Connected on Server AMQP Connection DC2"
    assert (entry["level"], entry["logger"]) == ("INFO", "broker.connections")
    assert entry["time"].endswith("Z")


def test_no_id_no_field_and_a_newline_stays_inside_the_line() -> None:
    line = JsonLinesFormatter().format(record("user %s failed", "eve\nAMQ999999: forged", exc=True))
    assert "\n" not in line
    entry = json.loads(line)
    assert "id" not in entry
    assert entry["message"] == "user eve\nAMQ999999: forged failed"
    assert "ValueError: boom" in entry["exception"]
