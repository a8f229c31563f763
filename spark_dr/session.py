"""The Spark session for the DR job: local[2] unless told otherwise, small shuffles, our data source.

Spark's own output (the launcher's and the JVM's log lines, Java's warnings) is not the operator's:
given a ``log_file``, the JVM that Spark starts for this session gets it as its standard output and
error, for its whole life (and so do the Python workers it starts), while this process keeps its own
terminal. Under spark-submit the JVM is already running, and its output is spark-submit's business.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def spark_session(
    master: str | None = "local[2]",
    shuffle_partitions: int = 4,
    app: str = "amqp-mirror-dr",
    log_file: Path | None = None,
    conf: dict[str, str] | None = None,
) -> Any:
    """Create (or reuse) a session; ``master=None`` leaves it to spark-submit."""
    from pyspark.sql import SparkSession

    if master and master.startswith("local"):
        # local Python workers (our data source, Arrow batches) must run the driver's interpreter, which
        # has our packages: left alone, Spark starts whatever `python3` is first on PATH. A cluster's
        # executors are told by PYSPARK_PYTHON, as usual.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    builder = (
        builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "2g")
        # count and max of a whole Parquet file from its footers (a journal's extent)
        .config("spark.sql.parquet.aggregatePushdown", "true")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    with _output_to(log_file):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN" if log_file else "ERROR")
    from .datasource import register

    register(spark)
    return spark


@contextmanager
def _output_to(log_file: Path | None) -> Iterator[None]:
    """Standard output and error (the file descriptors) pointed at ``log_file`` while a child (the
    JVM) starts and inherits them; meanwhile this process's own ``sys.stdout`` and ``sys.stderr``
    write to copies of the originals (the progress lines and the heartbeat keep the terminal), and
    afterwards everything is as it was."""
    if log_file is None:
        yield
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    streams = sys.stdout, sys.stderr
    saved = os.dup(1), os.dup(2)
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        sys.stdout = os.fdopen(os.dup(saved[0]), "w", buffering=1)
        sys.stderr = os.fdopen(os.dup(saved[1]), "w", buffering=1)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            if stream not in streams:
                stream.close()
        sys.stdout, sys.stderr = streams
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)
