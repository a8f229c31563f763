"""The collector pause used while replaying a journal (broker start, DR reader)."""

from __future__ import annotations

import gc

import pytest

from broker_core.journal.collector import collector_paused


def test_paused_inside_and_restored_after_even_on_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: the inner one must not turn it back on
            pass
        assert not gc.isenabled()
        raise RuntimeError("replay failed")
    assert gc.isenabled()


def test_a_caller_that_turned_it_off_keeps_it_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
