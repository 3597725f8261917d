"""`groupcoord audit`: run the rebalance audit over one or more coordinators' history.

    groupcoord audit --data-dir ./data [--data-dir ./other ...] --out ./audit
                     [--master local[*]] [--since 2024-05-01|24h] [--until ...] [--group G ...]
    groupcoord audit --bootstrap-server kafka:9092 [--history-topic T] [--data-dir ...] ...

The history is read from directories (--data-dir), from a sidecar fleet's history topic on its
upstream cluster (--bootstrap-server; the offsets to read are chosen here, on the driver, before
Spark starts: pipeline/topic.py), or both (their union).

PySpark is imported only when the command runs, so the rest of groupcoord works without the
`pipeline` extra. Exit codes: 0 done, 2 bad arguments, unreachable brokers or PySpark missing,
1 the job failed or the filters (--group, --since, --until) matched no event (then nothing is
written: an empty report reads like a quiet history, not like a typo). Directories are checked
for a match before Spark starts; a topic only as Spark reads it (its events table is then
removed again).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from coordinator.security.client import PLAINTEXT, ClientSecurity

_RELATIVE = re.compile(r"^(\d+)\s*(s|m|min|h|d|w)$")
_UNIT_MS = {
    "s": 1_000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
}


def parse_time(text: str, now_ms: int | None = None) -> int:
    """Epoch ms from an ISO date/time (UTC unless it says otherwise) or an age ('90m', '24h',
    '7d': that long before now)."""
    value = text.strip()
    match = _RELATIVE.match(value)
    if match:
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        return now - int(match.group(1)) * _UNIT_MS[match.group(2)]
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"expected an ISO date/time (2024-05-01, 2024-05-01T12:00Z) or an age (30m, 24h, 7d), "
            f"got {text!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        "audit",
        help="rebalance audit: Spark job over the history logs -> Parquet tables + HTML report",
        description="Read the history of one or more coordinators and write the tables "
        "rebalances, member_sessions, group_daily (and events) as Parquet, plus report.html.",
    )
    p.add_argument(
        "--data-dir",
        action="append",
        default=None,
        metavar="DIR",
        help="a coordinator's data dir, its history dir, or a directory above many "
        "(repeatable; default ./data, unless --bootstrap-server is given)",
    )
    p.add_argument(
        "--bootstrap-server",
        default=None,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="a sidecar fleet's upstream cluster: read its history topic",
    )
    p.add_argument(
        "--command-config",
        default=None,
        metavar="FILE",
        help="with --bootstrap-server, a secured cluster: client properties as Kafka's tools "
        "take them (security.protocol, sasl.mechanism, sasl.jaas.config, a PEM truststore)",
    )
    p.add_argument(
        "--history-topic",
        default=None,
        metavar="TOPIC",
        help="with --bootstrap-server: the fleet's --history-topic (__groupcoord_history)",
    )
    p.add_argument(
        "--offsets-per-task",
        default=250_000,
        type=int,
        metavar="N",
        help="with --bootstrap-server: offsets of a topic partition read by one Spark task",
    )
    p.add_argument("--out", default="./audit", metavar="DIR", help="output directory (./audit)")
    p.add_argument(
        "--master", default="local[*]", help="Spark master URL (local[*]; spark://HOST:PORT, ...)"
    )
    p.add_argument("--since", default=None, help="only events at or after: ISO time or age (24h)")
    p.add_argument("--until", default=None, help="only events before: ISO time or age")
    p.add_argument(
        "--group",
        action="append",
        default=None,
        metavar="GROUP",
        help="only this group (repeatable)",
    )
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting"
    )
    p.add_argument("--no-report", action="store_true", help="write the tables only")
    return p


# A sidecar fleet writes its history to a topic on the upstream cluster, not to DATA_DIR: an
# audit of a fleet pod's data directory finds nothing, and the way to its history is this flag.
FLEET_HINT = (
    "a sidecar fleet keeps its history on the upstream cluster's --history-topic: "
    "read it with --bootstrap-server HOST:PORT"
)


def _filters_match_nothing(
    args: argparse.Namespace, segments: list[Any], since_ms: int | None, until_ms: int | None
) -> str | None:
    """Why the filters select no event (None: some event matches, or there is no filter). Reads
    the segments up to the first match, before Spark starts; the groups the history does hold
    are listed (and the closest named) only when nothing matched."""
    if not (args.group or since_ms is not None or until_ms is not None) or not segments:
        return None
    from pipeline.segments import segment_rows

    groups = None if not args.group else frozenset(args.group)
    for ref in segments:
        for _ in segment_rows(ref, groups=groups, since_ms=since_ms, until_ms=until_ms):
            return None
    text = f"no event matches {_shown_filters(args)} in {len(segments)} history segment(s)"
    if not groups:
        return text + "; nothing written"
    present = sorted(
        {row[4] for ref in segments for row in segment_rows(ref, since_ms=since_ms,
                                                             until_ms=until_ms)}
    )  # fmt: skip
    hints = [m for g in groups for m in difflib.get_close_matches(g, present, n=1)]
    text += f"; groups in that history: {', '.join(present[:10]) or 'none'}"
    text += f" (and {len(present) - 10} more)" if len(present) > 10 else ""
    text += f"; did you mean {', '.join(hints)}?" if hints else ""
    return text + "; nothing written"


def _filtered(args: argparse.Namespace, since_ms: int | None, until_ms: int | None) -> bool:
    return bool(args.group) or since_ms is not None or until_ms is not None


def _shown_filters(args: argparse.Namespace) -> str:
    shown = [f"--group {g}" for g in args.group or []]
    shown += [f"--{name} {value}" for name in ("since", "until")
              if (value := getattr(args, name)) is not None]  # fmt: skip
    return " ".join(shown)


def _security(args: argparse.Namespace) -> ClientSecurity | int:
    """--command-config read (PLAINTEXT without it), or the exit code."""
    if not args.command_config:
        return PLAINTEXT
    from coordinator.tools import command_config

    warnings: list[str] = []
    try:
        security = command_config.load(args.command_config, warnings)
    except command_config.CommandConfigError as exc:
        print(f"groupcoord audit: {exc}", file=sys.stderr)
        return 2
    for warning in warnings:
        print(f"groupcoord audit: {warning}", file=sys.stderr)
    return security


def _plan_topic(
    args: argparse.Namespace, since_ms: int | None, security: ClientSecurity
) -> tuple[list[Any] | None, str | None] | int:
    """(the topic's ranges, the topic as the report names it), (None, None) without
    --bootstrap-server, or the exit code (the brokers unreachable, the topic missing)."""
    if not args.bootstrap_server:
        return None, None
    from pipeline.topic import TopicUnavailable, plan
    from storage.history import HISTORY_TOPIC

    topic = args.history_topic or HISTORY_TOPIC
    try:  # before Spark starts, as for directories: one line, not a stack trace
        ranges = plan(
            args.bootstrap_server,
            topic,
            since_ms=since_ms,
            max_offsets=args.offsets_per_task,
            security=security,
        )
    except TopicUnavailable as exc:
        print(f"groupcoord audit: --bootstrap-server: {exc}", file=sys.stderr)
        return 2
    return ranges, f"topic {topic} on {args.bootstrap_server}"


def _parse(args: argparse.Namespace) -> tuple[int | None, int | None, dict[str, str]] | int:
    """(since_ms, until_ms, Spark conf), or the exit code of a bad argument."""
    try:
        since_ms = None if args.since is None else parse_time(args.since)
        until_ms = None if args.until is None else parse_time(args.until)
        conf = {}
        for item in args.conf:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ValueError(f"--conf: expected KEY=VALUE, got {item!r}")
            conf[key.strip()] = value.strip()
    except ValueError as exc:
        print(f"groupcoord audit: {exc}", file=sys.stderr)
        return 2
    problem = None
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        problem = "--until must be after --since"
    elif args.history_topic and not args.bootstrap_server:
        problem = "--history-topic needs --bootstrap-server"
    elif args.offsets_per_task < 1:
        problem = "--offsets-per-task must be >= 1"
    if problem is not None:
        print(f"groupcoord audit: {problem}", file=sys.stderr)
        return 2
    return since_ms, until_ms, conf


def run(args: argparse.Namespace) -> int:
    parsed = _parse(args)
    if isinstance(parsed, int):
        return parsed
    since_ms, until_ms, conf = parsed
    data_dirs = args.data_dir or ([] if args.bootstrap_server else ["./data"])
    from pipeline.segments import find_segments

    try:  # before Spark starts: a wrong path is one line, not a JVM stack trace
        segments = find_segments(data_dirs)
    except OSError as exc:
        print(f"groupcoord audit: --data-dir: {exc}", file=sys.stderr)
        return 2
    if data_dirs and not segments:
        print(
            f"groupcoord audit: no history segments under {', '.join(data_dirs)}"
            + ("" if args.bootstrap_server else f"; {FLEET_HINT}"),
            file=sys.stderr,
        )
    security = _security(args)
    if isinstance(security, int):
        return security
    planned = _plan_topic(args, since_ms, security)
    if isinstance(planned, int):
        return planned
    ranges, topic_input = planned
    if topic_input is None:
        unmatched = _filters_match_nothing(args, segments, since_ms, until_ms)
    elif not ranges and not segments and _filtered(args, since_ms, until_ms):
        unmatched = f"no event matches {_shown_filters(args)} in {topic_input}; nothing written"
    else:
        unmatched = None
    if unmatched is not None:
        hint = f" ({FLEET_HINT})" if topic_input is None else ""
        print(f"groupcoord audit: {unmatched}{hint}", file=sys.stderr)
        return 1
    try:
        from pipeline.audit import NoEvents, run_audit, spark_session
    except ImportError as exc:
        print(
            f"groupcoord audit: PySpark is not installed ({exc}); "
            "install the pipeline extra (about 660 MB; the audit also needs Java 17+): "
            "from a clone of groupcoord, .venv/bin/pip install -e '.[pipeline]'",
            file=sys.stderr,
        )
        return 2
    from pyspark import SparkContext

    # Never stop a Spark a caller started (the session is per process, whatever the thread).
    owned = SparkContext._active_spark_context is None
    spark = spark_session(args.master, conf)
    inputs = [str(Path(p).resolve()) for p in data_dirs]
    try:
        summary = run_audit(
            spark,
            data_dirs,
            args.out,
            groups=args.group,
            since_ms=since_ms,
            until_ms=until_ms,
            write_report=not args.no_report,
            topic_ranges=ranges,
            inputs=inputs if topic_input is None else [*inputs, topic_input],
            require_events=topic_input is not None and _filtered(args, since_ms, until_ms),
            security=security,
        )
    except NoEvents:
        where = topic_input if not segments else f"{topic_input} and {len(segments)} segment(s)"
        print(
            f"groupcoord audit: no event matches {_shown_filters(args)} in {where}; "
            "nothing written",
            file=sys.stderr,
        )
        return 1
    finally:
        if owned:
            spark.stop()
    print(
        f"audited {summary.events} events in {summary.seconds:.1f} s: "
        f"{summary.rebalances} rebalances, {summary.member_sessions} member sessions, "
        f"{summary.group_days} group-days"
    )
    for name, path in summary.tables.items():
        print(f"  {name:16} {path}")
    if summary.report:
        print(f"  {'report':16} {summary.report}")
    return 0
