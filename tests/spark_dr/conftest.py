"""One local Spark session for the whole test run (starting one costs 10-30 s here).

Without pyspark the Spark tests are skipped locally, but fail under CI=true: CI must run them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import pytest

HAVE_SPARK = importlib.util.find_spec("pyspark") is not None


def need_spark() -> None:
    if HAVE_SPARK:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("pyspark is not installed but CI=true: install the test extra (pyspark>=4.0)")
    pytest.skip("pyspark is not installed (pip install 'pyspark>=4.0'); the DR reconciliation needs it")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    need_spark()
    from spark_dr.session import spark_session

    session = spark_session("local[2]", shuffle_partitions=2)
    yield session
    session.stop()
