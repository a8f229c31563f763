"""``spark.read.format("amqp-mirror-journal").load(dirs)``: journal directories as a DataFrame.

One input partition per journal directory: a journal is read in replay order by one task (the torn-tail
rule makes "where does this journal end" a sequential question), and several directories, given
comma-separated, are read in parallel. Rows are handed to Spark as Arrow record batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from .rows import SCHEMA_DDL

FORMAT = "amqp-mirror-journal"


class JournalPartition(InputPartition):
    def __init__(self, directory: str) -> None:
        super().__init__(directory)
        self.directory = directory


class JournalReader(DataSourceReader):
    def __init__(self, directories: list[str]) -> None:
        self.directories = directories

    def partitions(self) -> list[InputPartition]:
        return [JournalPartition(d) for d in self.directories]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from pathlib import Path

        from .export import arrow_schema, row_batches, to_arrow
        from .rows import journal_rows

        assert isinstance(partition, JournalPartition)
        schema = arrow_schema()
        for batch in row_batches(journal_rows(Path(partition.directory))):
            yield to_arrow(batch, schema)


class JournalDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        path = self.options.get("path") or self.options.get("paths") or ""
        directories = [p for p in str(path).strip("[]").replace('"', "").split(",") if p.strip()]
        if not directories:
            raise ValueError(f"{FORMAT}: give one or more journal directories to load()")
        return JournalReader([d.strip() for d in directories])


def register(spark: Any) -> None:
    spark.dataSource.register(JournalDataSource)
