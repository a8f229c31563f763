"""Helpers for config tests: write a broker.xml into a temp dir and load it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

HEADER = '<configuration xmlns="urn:activemq">\n<core xmlns="urn:activemq:core">\n'
FOOTER = "</core>\n</configuration>\n"
FIXTURES = Path(__file__).parent / "fixtures"

WriteConfig = Callable[[str], Path]


@pytest.fixture
def write_config(tmp_path: Path) -> WriteConfig:
    """Wrap `body` in <configuration><core>; the body's first line is line 3 of the file."""
    etc = tmp_path / "etc"
    etc.mkdir()

    def write(body: str) -> Path:
        path = etc / "broker.xml"
        path.write_text(HEADER + body + FOOTER, encoding="utf-8")
        return path

    return write
