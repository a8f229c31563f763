"""The Spark session for the DR job: local[2] unless told otherwise, small shuffles, our data source."""

from __future__ import annotations

import os
import sys
from typing import Any


def spark_session(
    master: str | None = "local[2]", shuffle_partitions: int = 4, app: str = "amqp-mirror-dr"
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
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from .datasource import register

    register(spark)
    return spark
