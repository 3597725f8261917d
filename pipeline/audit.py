"""The rebalance audit: history events -> Parquet tables and an HTML report.

    spark = spark_session("local[*]")
    summary = run_audit(spark, ["./data"], "./audit")

Output (each table a Parquet directory under `out`):
- `events`: the decoded history, one row per event (pipeline/segments.py COLUMNS). Decoding is the
  expensive (Python) step, so it is done once; every other table is derived from this one.
- `rebalances`: one row per completed rebalance: group, its type (classic, or consumer: a KIP-848
  group, whose rebalance is a group epoch bump until every member reconciled, the epoch as the
  generation, the server assignor as the protocol, join_ms until the target assignment was
  computed), generation, cause, what triggered it (the
  member: id, client id, host, instance id; or the topics of a topic change), start, end,
  duration, join and sync phases, restarts (a rebalance re-triggered before it completed counts
  once, from its first start), members before and after. The trigger is the one the completion
  records (history written since issue 24); for older history, the last start's member, with the
  client, host and instance id of that member's join.
- `member_sessions`: one row per member id: client, host, instance id, joined, left, how it left
  (left, expired, fenced, not_rejoined, sync_expired, max_size; null while still a member), how
  many rebalances it triggered.
- `group_daily`: per group per day (UTC): rebalances, total and longest time rebalancing, joins,
  leaves, churn (joins + leaves), abnormal leaves, distinct members, commits.
- `report.html` (pipeline/report.py): self-contained, opens from the file system.

Every table keeps `coordinator_id`: two coordinators may serve groups of the same name. A sidecar
fleet is ONE coordinator (its history topic's id, pipeline/topic.py), whichever members wrote a
group's events; `events`, `rebalances` and `member_sessions` also name the coordinator process
that wrote the row (`written_by`: the member; for a history directory its coordinator).
Events are ordered by their log offset within a coordinator (timestamps can tie): a segment's
offsets, or the topic partition's, which holds all of a group's events.
The input is history directories, a fleet's history topic (`topic_ranges`, planned on the driver
by pipeline/topic.py's `plan`), or both: the tables are the same whatever the source.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from coordinator.security.client import PLAINTEXT, ClientSecurity
from pipeline import report, report_data
from pipeline.columns import ABNORMAL, KEY
from pipeline.source import FORMAT, HistoryDataSource
from pipeline.topic import TopicRange, ranges_to_json

TABLES = ("events", "rebalances", "member_sessions", "group_daily")


# The driver JVM's logging from its first line: Spark's default profile prints four lines (the
# profile's name, "Setting default log level" twice, a native-hadoop WARN) before setLogLevel
# ("ERROR", below) can run. Spark says the level only when it changes a root level other than
# WARN, so the root starts at WARN and the native-hadoop notice is silenced. (The JVM's own
# "Using incubator modules" line comes from the java launcher, before any logging.)
_LOG4J2 = """rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
"""


def _quiet_log4j2() -> str:
    path = Path(tempfile.gettempdir()) / "groupcoord-audit-log4j2.properties"
    if not path.is_file() or path.read_text() != _LOG4J2:
        path.write_text(_LOG4J2)
    return f"-Dlog4j2.configurationFile=file:{path}"


def spark_session(master: str = "local[*]", conf: dict[str, str] | None = None) -> SparkSession:
    """A session set up for this machine: the worker Python is this interpreter (it has
    groupcoord and pyarrow), a local master binds to loopback, UTC everywhere, no UI."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local = master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers import pipeline/ and storage/ from this checkout, wherever they run.
        root = str(Path(__file__).resolve().parent.parent)
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if root not in paths:
            os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    builder = (
        SparkSession.builder.master(master)
        .appName("groupcoord-audit")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.shuffle.partitions", "16")
        .config("spark.driver.extraJavaOptions", _quiet_log4j2())
    )
    if local:
        builder = builder.config("spark.driver.host", "127.0.0.1")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not local:
        _ship_code(spark)
    spark.dataSource.register(HistoryDataSource)
    return spark


def _ship_code(spark: SparkSession) -> None:
    """On a cluster, executors need our pure-Python packages: send them as one zip."""
    root = Path(__file__).resolve().parent.parent
    fd, name = tempfile.mkstemp(prefix="groupcoord-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(name, "w") as zf:
        # coordinator.security: the brokers' security settings (coordinator.security.client).
        zf.write(root / "coordinator" / "__init__.py", "coordinator/__init__.py")
        for package in ("pipeline", "storage", "coordinator/security"):
            for path in (root / package).rglob("*.py"):
                zf.write(path, path.relative_to(root).as_posix())
    spark.sparkContext.addPyFile(name)


def read_events(
    spark: SparkSession,
    paths: list[str],
    *,
    groups: list[str] | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    topic_ranges: list[TopicRange] | None = None,
    security: ClientSecurity = PLAINTEXT,
) -> DataFrame:
    reader = (
        spark.read.format(FORMAT)
        .option("paths", json.dumps([str(Path(p).resolve()) for p in paths]))
        .option("timezone", spark.conf.get("spark.sql.session.timeZone") or "UTC")
    )
    if topic_ranges:
        reader = reader.option("topic_ranges", ranges_to_json(topic_ranges))
        if security is not PLAINTEXT:
            settings, password = security.to_options()
            reader = reader.option("security", settings).option("security_password", password)
    if groups:
        reader = reader.option("groups", json.dumps(sorted(set(groups))))
    if since_ms is not None:
        reader = reader.option("since_ms", str(since_ms))
    if until_ms is not None:
        reader = reader.option("until_ms", str(until_ms))
    return reader.load()


def _ms(column: str) -> Any:
    return F.unix_millis(F.col(column))


def rebalances(events: DataFrame) -> DataFrame:
    by_offset = Window.partitionBy(*KEY).orderBy("offset")
    steps = events.filter(F.col("event").isin("rebalance_started", "rebalance_completed"))
    done_flag = (F.col("event") == "rebalance_completed").cast("int")
    # seq = completions before this row: a start belongs to the next completion with its seq.
    steps = steps.withColumn(
        "seq",
        F.coalesce(
            F.sum(done_flag).over(by_offset.rowsBetween(Window.unboundedPreceding, -1)), F.lit(0)
        ),
    )
    start_info = F.struct("offset", "ts", "member_id")
    starts = (
        steps.filter(F.col("event") == "rebalance_started")
        .groupBy(*KEY, "seq")
        .agg(
            F.min(start_info).alias("first"),
            F.max(start_info).alias("last"),
            F.count(F.lit(1)).alias("starts"),
        )
    )
    done = steps.filter(F.col("event") == "rebalance_completed").select(
        *KEY,
        "seq",
        "offset",
        "generation_id",
        "cause",
        "protocol_name",
        "leader",
        "members",
        "join_ms",
        "rebalance_ms",
        F.col("ts").alias("end"),
        "written_by",
        # The trigger the completion records (null in history written before it did).
        F.col("member_id").alias("c_member_id"),
        F.col("group_instance_id").alias("c_instance"),
        F.nullif(F.col("client_id"), F.lit("")).alias("c_client"),
        F.nullif(F.col("client_host"), F.lit("")).alias("c_host"),
        F.col("topics").alias("c_topics"),
        # KIP-848 consumer groups (issue 23) say "consumer"; history before them says nothing.
        F.coalesce(F.col("group_type"), F.lit("classic")).alias("group_type"),
    )
    created = (
        events.filter(F.col("event") == "group_created")
        .groupBy(*KEY)
        .agg(F.min("offset").alias("created_offset"))
    )
    clients = (
        events.filter(F.col("event") == "member_joined")
        .groupBy(*KEY, "member_id")
        .agg(
            F.first("client_id").alias("j_client"),
            F.first("client_host").alias("j_host"),
            F.first("group_instance_id").alias("j_instance"),
        )
        .withColumnRenamed("member_id", "trigger_member_id")
    )
    out = done.join(starts, [*KEY, "seq"], "left").join(created, KEY, "left")
    end_ms = _ms("end")
    start_ms = F.coalesce(
        F.unix_millis(F.col("first.ts")), end_ms - F.coalesce(F.col("rebalance_ms"), F.lit(0))
    )
    previous = F.lag("members").over(Window.partitionBy(*KEY).orderBy("offset"))
    out = out.select(
        *KEY,
        "group_type",
        "generation_id",
        "cause",
        F.coalesce("c_member_id", "last.member_id").alias("trigger_member_id"),
        "c_instance",
        "c_client",
        "c_host",
        F.when(F.size("c_topics") > 0, F.col("c_topics")).alias("trigger_topics"),
        "protocol_name",
        "leader",
        F.timestamp_millis(start_ms).alias("start"),
        "end",
        # The wall-clock span covers restarts; the core's own (monotonic) rebalance_ms is a floor,
        # so a wall-clock step between two history rows never makes a rebalance shorter than its
        # join phase.
        F.greatest(end_ms - start_ms, F.col("rebalance_ms")).alias("duration_ms"),
        "join_ms",
        (F.col("rebalance_ms") - F.col("join_ms")).alias("sync_ms"),
        F.greatest(F.coalesce(F.col("starts"), F.lit(1)) - 1, F.lit(0)).alias("restarts"),
        F.coalesce(previous, F.when(F.col("created_offset") < F.col("offset"), F.lit(0))).alias(
            "members_before"
        ),
        F.col("members").alias("members_after"),
        "written_by",
    )
    out = out.join(clients, [*KEY, "trigger_member_id"], "left")
    return out.select(
        *KEY,
        "group_type",
        "generation_id",
        "cause",
        "trigger_member_id",
        F.coalesce("c_client", "j_client").alias("trigger_client_id"),
        F.coalesce("c_host", "j_host").alias("trigger_client_host"),
        F.coalesce("c_instance", "j_instance").alias("trigger_group_instance_id"),
        "trigger_topics",
        "protocol_name",
        "leader",
        "start",
        "end",
        "duration_ms",
        "join_ms",
        "sync_ms",
        "restarts",
        "members_before",
        "members_after",
        "written_by",
    )


def member_sessions(events: DataFrame) -> DataFrame:
    member = [*KEY, "member_id"]
    joined = events.filter(F.col("event") == "member_joined").select(
        *member,
        F.col("group_instance_id").alias("j_instance"),
        F.col("client_id").alias("j_client"),
        F.col("client_host").alias("j_host"),
        F.col("ts").alias("joined"),
        F.col("written_by").alias("j_writer"),
    )
    left = events.filter(F.col("event") == "member_left").select(
        *member,
        F.col("group_instance_id").alias("l_instance"),
        F.col("client_id").alias("l_client"),
        F.col("client_host").alias("l_host"),
        F.col("ts").alias("left"),
        F.col("reason").alias("how_left"),
        F.col("written_by").alias("l_writer"),
    )
    triggered = (
        events.filter((F.col("event") == "rebalance_started") & F.col("member_id").isNotNull())
        .groupBy(*member)
        .agg(F.count(F.lit(1)).alias("rebalances_triggered"))
    )
    empty = F.lit("")
    sessions = joined.join(left, member, "full_outer").join(triggered, member, "left")
    return sessions.select(
        *member,
        F.coalesce("j_client", F.nullif("l_client", empty)).alias("client_id"),
        F.coalesce("j_host", F.nullif("l_host", empty)).alias("client_host"),
        F.coalesce("j_instance", "l_instance").alias("group_instance_id"),
        "joined",
        "left",
        "how_left",
        (_ms("left") - _ms("joined")).alias("duration_ms"),
        F.coalesce("rebalances_triggered", F.lit(0)).alias("rebalances_triggered"),
        F.coalesce("j_writer", "l_writer").alias("written_by"),
    )


def group_daily(events: DataFrame, rebalances: DataFrame, sessions: DataFrame) -> DataFrame:
    day = [*KEY, "day"]
    rb = (
        rebalances.withColumn("day", F.to_date("end"))
        .groupBy(*day)
        .agg(
            F.count(F.lit(1)).alias("rebalances"),
            F.sum("duration_ms").alias("rebalancing_ms"),
            F.max("duration_ms").alias("longest_rebalance_ms"),
        )
    )
    is_join = (F.col("event") == "member_joined").cast("long")
    is_leave = (F.col("event") == "member_left").cast("long")
    churn = (
        events.filter(F.col("event").isin("member_joined", "member_left"))
        .withColumn("day", F.to_date("ts"))
        .groupBy(*day)
        .agg(
            F.sum(is_join).alias("joins"),
            F.sum(is_leave).alias("leaves"),
            F.sum(F.col("reason").isin(*ABNORMAL).cast("long")).alias("abnormal_leaves"),
        )
        .withColumn("churn", F.col("joins") + F.col("leaves"))
    )
    commits = (
        events.filter(F.col("event") == "offsets_committed")
        .withColumn("day", F.to_date("ts"))
        .groupBy(*day)
        .agg(F.sum("commits").alias("commits"), F.sum("partitions").alias("committed_partitions"))
    )
    # A session counts on every day it overlaps; open ends reach the edge of the data.
    bounds = events.agg(
        F.to_date(F.min("ts")).alias("first_day"), F.to_date(F.max("ts")).alias("last_day")
    )
    members = (
        sessions.crossJoin(bounds)
        .withColumn(
            "day",
            F.explode(
                F.sequence(
                    F.coalesce(F.to_date("joined"), F.col("first_day")),
                    F.greatest(
                        F.coalesce(F.to_date("left"), F.col("last_day")),
                        F.coalesce(F.to_date("joined"), F.col("first_day")),
                    ),
                )
            ),
        )
        .groupBy(*day)
        .agg(F.countDistinct("member_id").alias("distinct_members"))
    )
    out = (
        rb.join(churn, day, "full_outer")
        .join(members, day, "full_outer")
        .join(commits, day, "full_outer")
    )
    counts = [
        "rebalances",
        "rebalancing_ms",
        "longest_rebalance_ms",
        "joins",
        "leaves",
        "churn",
        "abnormal_leaves",
        "distinct_members",
        "commits",
        "committed_partitions",
    ]
    return out.select(*day, *[F.coalesce(c, F.lit(0)).cast("long").alias(c) for c in counts])


class NoEvents(Exception):
    """The inputs (with the filters) hold no event."""


@dataclass
class AuditSummary:
    out: str
    events: int
    rebalances: int
    member_sessions: int
    group_days: int
    seconds: float
    tables: dict[str, str] = field(default_factory=dict)
    report: str | None = None


def run_audit(
    spark: SparkSession,
    paths: list[str],
    out: str | Path,
    *,
    groups: list[str] | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    write_report: bool = True,
    topic_ranges: list[TopicRange] | None = None,
    inputs: list[str] | None = None,
    require_events: bool = False,
    security: ClientSecurity = PLAINTEXT,
) -> AuditSummary:
    """`require_events`: no event read is NoEvents, and nothing stays written (the CLI's rule for
    filters that match nothing, for a source it cannot check before Spark reads it)."""
    started = time.monotonic()
    out_dir = Path(out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = {name: str(out_dir / name) for name in TABLES}
    raw = read_events(
        spark,
        paths,
        groups=groups,
        since_ms=since_ms,
        until_ms=until_ms,
        topic_ranges=topic_ranges,
        security=security,
    )
    raw.write.mode("overwrite").parquet(tables["events"])
    events = spark.read.parquet(tables["events"])
    if require_events and events.isEmpty():
        shutil.rmtree(tables["events"], ignore_errors=True)
        raise NoEvents(tables["events"])
    rb = rebalances(events)
    rb.orderBy(*KEY, "end", "generation_id").write.mode("overwrite").parquet(tables["rebalances"])
    rb = spark.read.parquet(tables["rebalances"])
    ms = member_sessions(events)
    ms.orderBy(*KEY, "joined", "member_id").write.mode("overwrite").parquet(
        tables["member_sessions"]
    )
    ms = spark.read.parquet(tables["member_sessions"])
    daily = group_daily(events, rb, ms)
    daily.orderBy(*KEY, "day").write.mode("overwrite").parquet(tables["group_daily"])
    daily = spark.read.parquet(tables["group_daily"])
    summary = AuditSummary(
        str(out_dir),
        events.count(),
        rb.count(),
        ms.count(),
        daily.count(),
        0.0,
        tables,
    )
    if write_report:
        data = report_data.collect(events, rb, ms, daily)
        data["filters"] = {
            "groups": sorted(groups or []),
            "since_ms": since_ms,
            "until_ms": until_ms,
        }
        data["inputs"] = inputs or [str(Path(p).resolve()) for p in paths]
        path = out_dir / "report.html"
        path.write_text(report.render(data), encoding="utf-8")
        summary.report = str(path)
    summary.seconds = time.monotonic() - started
    return summary
