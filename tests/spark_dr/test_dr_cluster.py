"""The DR job as an operator runs it (``amqp-mirror reconcile`` in a process of its own): on
``local[*]`` with a quiet terminal and a heartbeat, and on a real Spark standalone cluster (a master and
two workers on loopback, started from the ``pyspark`` installation), where it gives the same result,
both from Parquet exports and with the journals read by the data source in the cluster's executors.

The input is a pair of journals from ``bench/dr_generate.py`` (our journal format, written by the
broker's codec) with its truth: every class's count is known.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.dr_generate import generate
from tests.spark_dr.conftest import need_spark
from tests.support.broker import REPO
from tests.support.spark_cluster import StandaloneCluster, loopback_env

pytestmark = pytest.mark.timeout(600)

PROGRESS = re.compile(r"^\[\s*(\d+\.\d)s\] \S")
HEARTBEAT = 1.0  # seconds of silence before a progress line says what is going on


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    need_spark()
    root = tmp_path_factory.mktemp("pair")
    return root, generate(root, 20_000, queues=4)


def reconcile(pair: Path, out: Path, master: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "amqp_mirror", "reconcile", str(pair / "dc1"), str(pair / "dc2"),
            "--out", str(out), "--master", master, "--heartbeat", str(HEARTBEAT), "--broker", "amqp://dc2:5672",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.executor.memory=1g", *extra]  # fmt: skip
    env = dict(loopback_env(), PYTHONPATH=str(REPO))
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=500, check=False)


def comparable(out: Path) -> dict[str, Any]:
    """What a run found, without what differs between runs (timings, paths, when it ran)."""
    result: dict[str, Any] = json.loads((out / "reconciliation.json").read_text())
    for key in ("timing", "seconds", "generated_at_ms"):
        result.pop(key)
    for info in result["sides"].values():
        info.pop("path")
    result["repair"] = {k: v for k, v in result["repair"].items() if k not in ("plan", "command")}
    result["by_address"].sort(key=lambda r: (r["address"], r["class"], r["side"] or ""))
    result["diverged"].sort(key=lambda d: (d["identity_broker"], d["identity_id"], d["queue"]))
    return result


@pytest.fixture(scope="module")
def local(pair: tuple[Path, dict[str, int]], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("local")
    return out, reconcile(pair[0], out, "local[*]")


def test_on_local_the_terminal_shows_progress_a_heartbeat_and_the_summary_only(
    pair: tuple[Path, dict[str, int]], local: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    out, run = local
    assert run.returncode == 3, run.stderr  # the survivor needs a repair
    lines = run.stderr.splitlines()
    noise = [line for line in lines if not PROGRESS.match(line)]
    assert noise == [], "Spark's start-up output reached the terminal"
    times = [float(PROGRESS.match(line).group(1)) for line in lines]  # type: ignore[union-attr]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert max(gaps) < HEARTBEAT + 2.0, f"a silence of {max(gaps):.1f} s"
    beats = [line for line in lines if re.search(r"Spark job \d+: \d+/\d+ tasks done", line)]
    assert beats, "no line from Spark's status tracker"
    assert "log4j" in (out / "spark.log").read_text(), "Spark's own output went to its log"
    assert run.stdout.startswith("DR reconciliation DC1 vs DC2")
    assert "amqp-mirror repair --plan" in run.stdout and "--broker amqp://dc2:5672" in run.stdout
    counts = json.loads((out / "reconciliation.json").read_text())["counts"]
    truth = {k: v for k, v in pair[1].items() if k != "total"}
    assert counts == {**truth, "not_mirrored": 0}  # the generated pair mirrors everything


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    need_spark()
    spark_cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    spark_cluster.start()
    try:
        yield spark_cluster
    finally:
        spark_cluster.stop()


@pytest.mark.parametrize("read", ["export", "data source"])
def test_a_standalone_cluster_gives_the_local_result(
    pair: tuple[Path, dict[str, int]], local: tuple[Path, subprocess.CompletedProcess[str]],
    cluster: StandaloneCluster, tmp_path: Path, read: str,
) -> None:  # fmt: skip
    """Exported to Parquet first (pass 2 on the driver, which sees the files) or read by the data source
    in the executors (a task per journal; pass 2 on the cluster): the result is the local one."""
    extra = ["--no-export"] if read == "data source" else []
    run = reconcile(pair[0], tmp_path / "out", cluster.url, *extra)
    assert run.returncode == 3, run.stderr[-3000:]
    assert comparable(tmp_path / "out") == comparable(local[0])
    apps = cluster.log("master").count("Registered app amqp-mirror-dr")
    assert apps >= 1, "the job did not run on the cluster"
    executors = sum("Asked to launch executor" in cluster.log(f"worker-{n}") for n in (1, 2))
    assert executors == 2, "both workers ran executors"
