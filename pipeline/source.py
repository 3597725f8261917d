"""The history log as a Spark data source (PySpark's Python Data Source API, Spark 4).

    spark.dataSource.register(HistoryDataSource)
    events = (spark.read.format("groupcoord_history")
              .option("paths", json.dumps(["/data/a", "/data/b"])).load())

One Spark input partition per segment file, so reading scales with the cluster: a segment is
decoded where its task runs (the files must be readable there: a shared or copied directory).
Batches go to Spark as Arrow record batches, not row by row.

Options (all optional except `paths`): `paths` a JSON list of directories (pipeline/segments.py
says what a path may be); `groups` a JSON list of group ids to keep; `since_ms` / `until_ms`
bounds on the event time (epoch ms, [since, until)); `timezone` the session time zone.
The filters are applied while reading, before an entry's value is even decoded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline.segments import SCHEMA_DDL, SegmentRef, find_segments, segment_batches

FORMAT = "groupcoord_history"


class SegmentPartition(InputPartition):
    def __init__(self, ref: SegmentRef | None) -> None:
        super().__init__(ref)
        self.ref = ref


def _int_option(options: dict[str, str], name: str) -> int | None:
    raw = options.get(name)
    return None if raw in (None, "") else int(str(raw))


class HistoryReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.paths: list[str] = json.loads(options.get("paths") or "[]")
        groups = options.get("groups")
        self.groups = frozenset(json.loads(groups)) if groups else None
        self.since_ms = _int_option(options, "since_ms")
        self.until_ms = _int_option(options, "until_ms")
        self.timezone = options.get("timezone") or "UTC"

    def partitions(self) -> list[SegmentPartition]:
        refs = find_segments(self.paths, self.since_ms)
        # Biggest first: the long tasks start early and the small ones fill in behind them.
        refs.sort(key=lambda r: -r.size_bytes)
        return [SegmentPartition(r) for r in refs] or [SegmentPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        ref = getattr(partition, "ref", None)
        if ref is None:
            return iter(())
        return segment_batches(
            ref,
            timezone=self.timezone,
            groups=self.groups,
            since_ms=self.since_ms,
            until_ms=self.until_ms,
        )


class HistoryDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: StructType) -> HistoryReader:
        return HistoryReader(dict(self.options))
