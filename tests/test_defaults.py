"""Defaults an operator relies on without writing them down."""

from __future__ import annotations

import os
from pathlib import Path

from broker_core.server import DEFAULT_GLOBAL_MAX_SIZE, global_max_size
from tests.support.pair import Network


def test_global_max_size_defaults_to_512_mib_or_half_the_memory() -> None:
    half = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    assert DEFAULT_GLOBAL_MAX_SIZE == 512 * 1024 * 1024
    assert global_max_size(-1) == min(512 * 1024 * 1024, half)
    assert global_max_size(0) == 0 and global_max_size(10_000) == 10_000  # configured: as written


def test_a_broker_without_global_max_size_holds_at_most_the_default_in_memory(tmp_path: Path) -> None:
    net = Network(tmp_path)
    net.broker("dc1")
    net.start_all()
    assert net.server("dc1").budget.max_bytes == global_max_size(-1) <= 512 * 1024 * 1024
