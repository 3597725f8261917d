"""What the HTML report shows, computed with Spark from the audit tables and collected as plain
Python values (small: aggregates and top-N lists), so pipeline/report.py renders without Spark.

The dict returned by `collect` is the report's whole input; its keys are documented in
pipeline/report.py.
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.columns import ABNORMAL, KEY

TOP_GROUPS = 8  # series in the timeline; the rest are summed into one
TOP_ROWS = 15
# Timeline bin widths to choose from (ms): the smallest giving at most MAX_BINS bins.
BIN_CHOICES_MS = (
    1_000,
    10_000,
    60_000,
    300_000,
    900_000,
    3_600_000,
    6 * 3_600_000,
    86_400_000,
    7 * 86_400_000,
)
MAX_BINS = 72
# Duration histogram edges (ms): roughly logarithmic, in units a reader thinks in.
DURATION_EDGES_MS = (0, 10, 30, 100, 300, 1_000, 3_000, 10_000, 30_000, 60_000, 300_000)


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def choose_bin_ms(span_ms: int) -> int:
    for width in BIN_CHOICES_MS:
        if span_ms // width < MAX_BINS:
            return width
    return BIN_CHOICES_MS[-1]


def collect(
    events: DataFrame, rebalances: DataFrame, sessions: DataFrame, daily: DataFrame
) -> dict[str, Any]:
    totals = _rows(
        events.agg(
            F.count(F.lit(1)).alias("events"),
            F.countDistinct("coordinator_id").alias("coordinators"),
            F.countDistinct("coordinator_id", "group_id").alias("groups"),
            F.min(F.unix_millis(F.col("ts"))).alias("first_ms"),
            F.max(F.unix_millis(F.col("ts"))).alias("last_ms"),
        )
    )[0]
    rb_totals = _rows(
        rebalances.agg(
            F.count(F.lit(1)).alias("rebalances"),
            F.coalesce(F.sum("duration_ms"), F.lit(0)).alias("rebalancing_ms"),
            F.percentile_approx("duration_ms", [0.5, 0.9, 0.99]).alias("pct"),
            F.max("duration_ms").alias("max_ms"),
        )
    )[0]
    session_totals = _rows(
        sessions.agg(
            F.count(F.lit(1)).alias("sessions"),
            F.coalesce(F.sum(F.col("how_left").isin(*ABNORMAL).cast("long")), F.lit(0)).alias(
                "abnormal_leaves"
            ),
        )
    )[0]
    pct = rb_totals.pop("pct") or [None, None, None]
    totals.update(rb_totals)
    totals.update(session_totals)
    totals.update(p50_ms=pct[0], p90_ms=pct[1], p99_ms=pct[2])
    multi = (totals["coordinators"] or 0) > 1
    return {
        "generated_ms": time.time_ns() // 1_000_000,
        "totals": totals,
        "timeline": _timeline(rebalances, totals, multi),
        "durations": _durations(rebalances),
        "causes": _rows(
            rebalances.groupBy("cause")
            .agg(F.count(F.lit(1)).alias("count"), F.sum("duration_ms").alias("total_ms"))
            .orderBy(F.desc("count"), "cause")
        ),
        "clients": _clients(sessions),
        "groups": _rows(
            daily.groupBy(*KEY)
            .agg(
                F.sum("rebalances").alias("rebalances"),
                F.sum("rebalancing_ms").alias("rebalancing_ms"),
                F.sum("churn").alias("churn"),
                F.sum("abnormal_leaves").alias("abnormal_leaves"),
                F.max("distinct_members").alias("max_daily_members"),
                F.sum("commits").alias("commits"),
            )
            .orderBy(F.desc("rebalances"), F.desc("churn"), *KEY)
            .limit(TOP_ROWS)
        ),
        "slowest": _rows(
            rebalances.select(
                *KEY,
                "generation_id",
                "cause",
                "trigger_member_id",
                "trigger_client_id",
                "trigger_client_host",
                "trigger_topics",
                F.unix_millis(F.col("start")).alias("start_ms"),
                "duration_ms",
                "restarts",
                "members_before",
                "members_after",
            )
            .orderBy(F.desc("duration_ms"))
            .limit(10)
        ),
        "multi_coordinator": multi,
    }


def _label(multi: bool) -> Any:
    if not multi:
        return F.col("group_id")
    return F.concat(F.col("group_id"), F.lit(" @ "), F.substring("coordinator_id", 1, 8))


def _timeline(rebalances: DataFrame, totals: dict[str, Any], multi: bool) -> dict[str, Any]:
    first, last = totals.get("first_ms"), totals.get("last_ms")
    if first is None or last is None:
        return {"bin_ms": BIN_CHOICES_MS[0], "series": {}}
    width = choose_bin_ms(int(last) - int(first))
    binned = rebalances.select(
        _label(multi).alias("label"),
        (F.floor(F.unix_millis(F.col("end")) / width) * width).cast("long").alias("bin"),
    )
    top = [
        r["label"]
        for r in _rows(
            binned.groupBy("label").count().orderBy(F.desc("count"), "label").limit(TOP_GROUPS)
        )
    ]
    counted = (
        binned.withColumn(
            "label",
            F.when(F.col("label").isin(*top), F.col("label")).otherwise(F.lit("(other groups)")),
        )
        .groupBy("label", "bin")
        .count()
        .orderBy("label", "bin")
    )
    series: dict[str, list[list[int]]] = {label: [] for label in top}
    for r in _rows(counted):
        series.setdefault(r["label"], []).append([int(r["bin"]), int(r["count"])])
    return {"bin_ms": width, "first_ms": int(first), "last_ms": int(last), "series": series}


def _durations(rebalances: DataFrame) -> list[list[Any]]:
    edges = DURATION_EDGES_MS
    bucket = F.lit(len(edges) - 1)
    for i in range(len(edges) - 1, 0, -1):
        bucket = F.when(F.col("duration_ms") < edges[i], F.lit(i - 1)).otherwise(bucket)
    counts = {
        int(r["bucket"]): int(r["count"])
        for r in _rows(rebalances.select(bucket.alias("bucket")).groupBy("bucket").count())
    }
    out: list[list[Any]] = []
    for i, low in enumerate(edges):
        high = edges[i + 1] if i + 1 < len(edges) else None
        out.append([low, high, counts.get(i, 0)])
    return out


def _clients(sessions: DataFrame) -> list[dict[str, Any]]:
    left = F.col("how_left").isNotNull().cast("long")
    abnormal = F.col("how_left").isin(*ABNORMAL).cast("long")
    return _rows(
        sessions.withColumn("client", F.coalesce("client_id", F.lit("(unknown)")))
        .groupBy("client")
        .agg(
            F.count(F.lit(1)).alias("sessions"),
            F.sum(left).alias("leaves"),
            F.sum(abnormal).alias("abnormal"),
            F.sum("rebalances_triggered").alias("triggered"),
            F.countDistinct("client_host").alias("hosts"),
            F.countDistinct(*KEY).alias("groups"),
        )
        .withColumn("churn", F.col("sessions") + F.col("leaves"))
        .orderBy(F.desc("churn"), F.desc("abnormal"), "client")
        .limit(TOP_ROWS)
    )
