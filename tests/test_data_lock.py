"""One broker per data directory: the second server on it is refused, naming the holder; the lock goes
with the server (a stop) or with its process (any death: it is an open-file-description lock)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker_core.config import load_config
from broker_core.data_lock import DataDirectoryInUse, DataLock
from broker_core.server import Server
from tests.support.broker import BrokerProcess


def test_a_second_lock_on_the_directory_is_refused_until_the_first_goes(tmp_path: Path) -> None:
    first, second = DataLock(tmp_path), DataLock(tmp_path)
    first.acquire()
    with pytest.raises(DataDirectoryInUse) as refused:
        second.acquire()  # the same process: an OFD lock still excludes it
    assert f"process {os.getpid()} on " in str(refused.value) and str(tmp_path / "serverlock.1") in str(
        refused.value
    )
    first.release()
    second.acquire()
    second.release()


def test_a_dead_holder_leaves_no_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from broker_core.data_lock import DataLock; "
         f"DataLock({str(tmp_path)!r}).acquire(); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(DataDirectoryInUse, match=f"process {holder.pid} on "):
            DataLock(tmp_path).acquire()
    finally:
        holder.kill()  # SIGKILL: nothing released it but the kernel
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    lock = DataLock(tmp_path)
    lock.acquire()
    lock.release()


def test_a_server_holds_its_journal_directory_while_it_runs(tmp_path: Path) -> None:
    config, _ = load_config(BrokerProcess(tmp_path, name="locked").write_config())
    first, second = Server(config), Server(config)
    first.start()
    try:
        with pytest.raises(DataDirectoryInUse):
            second.start()
        assert not second.started
    finally:
        first.stop()
    second.start()  # free once the first stopped
    second.stop()
