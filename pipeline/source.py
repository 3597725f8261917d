"""The history log as a Spark data source (PySpark's Python Data Source API, Spark 4).

    spark.dataSource.register(HistoryDataSource)
    events = (spark.read.format("groupcoord_history")
              .option("paths", json.dumps(["/data/a", "/data/b"])).load())

One Spark input partition per segment file, and per offset range of a fleet's history topic
(pipeline/topic.py), so reading scales with the cluster: a segment is decoded where its task runs
(the files must be readable there: a shared or copied directory), and a range is fetched from the
brokers by the task that decodes it. Batches go to Spark as Arrow record batches, not row by row.

Options (all optional): `paths` a JSON list of directories (pipeline/segments.py says what a path
may be); `topic_ranges` the ranges to read, as pipeline/topic.py's `plan` chose them on the driver
(`ranges_to_json`); `groups` a JSON list of group ids to keep; `since_ms` / `until_ms` bounds on
the event time (epoch ms, [since, until)); `timezone` the session time zone. The filters are
applied while reading, before an entry's value is even decoded. Both sources give the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from coordinator.security.client import ClientSecurity
from pipeline.segments import (
    SCHEMA_DDL,
    SegmentRef,
    find_segments,
    record_batches,
    segment_batches,
)
from pipeline.topic import TopicRange, range_rows, ranges_from_json

FORMAT = "groupcoord_history"


_BYTES_PER_RECORD = 64  # a range's size estimate, to order it among the segments


class SegmentPartition(InputPartition):
    def __init__(self, ref: SegmentRef | TopicRange | None) -> None:
        super().__init__(ref)
        self.ref = ref


def _size(ref: SegmentRef | TopicRange) -> int:
    if isinstance(ref, SegmentRef):
        return ref.size_bytes
    return (ref.end - ref.start) * _BYTES_PER_RECORD


def _int_option(options: dict[str, str], name: str) -> int | None:
    raw = options.get(name)
    return None if raw in (None, "") else int(str(raw))


class HistoryReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.paths: list[str] = json.loads(options.get("paths") or "[]")
        self.ranges = ranges_from_json(options.get("topic_ranges") or "[]")
        groups = options.get("groups")
        self.groups = frozenset(json.loads(groups)) if groups else None
        self.since_ms = _int_option(options, "since_ms")
        self.until_ms = _int_option(options, "until_ms")
        self.timezone = options.get("timezone") or "UTC"
        # The brokers' security (--command-config): the password under its own key, which
        # Spark's default spark.redaction.regex hides from its UI and plans.
        self.security = ClientSecurity.from_options(
            options.get("security") or "", options.get("security_password") or ""
        )

    def partitions(self) -> list[SegmentPartition]:
        refs: list[SegmentRef | TopicRange] = [*find_segments(self.paths, self.since_ms)]
        refs += self.ranges
        # Biggest first: the long tasks start early and the small ones fill in behind them.
        refs.sort(key=lambda r: -_size(r))
        return [SegmentPartition(r) for r in refs] or [SegmentPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        ref = getattr(partition, "ref", None)
        if ref is None:
            return iter(())
        if isinstance(ref, TopicRange):
            rows = range_rows(
                ref,
                groups=self.groups,
                since_ms=self.since_ms,
                until_ms=self.until_ms,
                security=self.security,
            )
            return record_batches(rows, timezone=self.timezone)
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
