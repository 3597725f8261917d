"""The rebalance audit (issue 7): Spark in local mode over real history logs.

One SparkSession for the whole module (its start-up is the slow part). Two tests:
- hand-written history pins every derived column (restarts, members before/after, sessions whose
  start is not in the data, per-day counts across midnight) and the --group/--since filters;
- the issue's scenario with real clients against two real coordinators: three joins, a clean
  leave, a member killed with SIGKILL, a partition increase; then `groupcoord audit` over both data
  dirs, checked against what happened, against each coordinator audited alone (the union), and
  the HTML report loaded in headless Chromium.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.segments import find_segments, segment_rows
from storage.history import Kind, encode_fields
from storage.history_log import HistoryLog
from tests.support.realclients import (
    PARTITIONS,
    assert_stable_and_described,
    explain_members,
    partition_of,
    wait_until,
)

pyspark = pytest.importorskip("pyspark")

from pipeline import audit  # noqa: E402  (needs pyspark)

# Spark (local[2] in one driver JVM) loads the whole machine: its tests run in the "heavy" group,
# one after another on one worker (tests/conftest.py, "parallel runs"), which also starts the
# package's driver JVM and the session's standalone cluster once, not once per worker.
pytestmark = pytest.mark.xdist_group("heavy")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = audit.spark_session("local[2]", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()  # the JVM stays for the package's next session (tests/pipeline/conftest.py)


def tables(spark: Any, paths: list[str], **filters: Any) -> dict[str, list[dict[str, Any]]]:
    """The three derived tables, computed in memory (no Parquet), as lists of dicts."""
    events = audit.read_events(spark, paths, **filters).cache()
    rb = audit.rebalances(events).cache()
    ms = audit.member_sessions(events).cache()
    daily = audit.group_daily(events, rb, ms)

    def rows(df: Any, *order: str) -> list[dict[str, Any]]:
        return [r.asDict() for r in df.orderBy(*order).collect()]

    return {
        "rebalances": rows(rb, "coordinator_id", "group_id", "end"),
        "member_sessions": rows(ms, "coordinator_id", "group_id", "member_id"),
        "group_daily": rows(daily, "coordinator_id", "group_id", "day"),
    }


# -- hand-written history ------------------------------------------------------------------------

DAY2 = 1_735_776_000_000  # 2025-01-02T00:00:00Z
T0 = DAY2 - 60_000  # one minute before midnight


def _write(directory: Path, rows: list[tuple[int, str, Kind, tuple[Any, ...]]]) -> str:
    log = HistoryLog(directory, retention_ms=2**62, retention_bytes=2**62, segment_bytes=1 << 20)
    log.append((ts, g.encode(), encode_fields(k, f)) for ts, g, k, f in rows)
    log.close()
    return log.coordinator_id


HAND = [
    (T0, "g", Kind.GROUP_CREATED, ()),
    (T0, "g", Kind.MEMBER_JOINED, ("m1", None, "c1", "/h1")),
    (T0, "g", Kind.REBALANCE_STARTED, ("member_joined", "m1")),
    (T0 + 100, "g", Kind.JOIN_PHASE_COMPLETED, (1, "range", 1, 100)),
    (T0 + 150, "g", Kind.REBALANCE_COMPLETED, (1, "range", "m1", 1, "member_joined", 100, 150)),
    (T0 + 10_000, "g", Kind.MEMBER_JOINED, ("m2", None, "c2", "/h2")),
    (T0 + 10_000, "g", Kind.REBALANCE_STARTED, ("member_joined", "m2")),
    (T0 + 11_000, "g", Kind.JOIN_PHASE_COMPLETED, (2, "range", 2, 1000)),
    # m3 joins while the group completes generation 2: the rebalance restarts.
    (T0 + 11_500, "g", Kind.MEMBER_JOINED, ("m3", "i3", "c3", "/h3")),
    (T0 + 11_500, "g", Kind.REBALANCE_STARTED, ("member_joined", "m3")),
    (T0 + 12_000, "g", Kind.JOIN_PHASE_COMPLETED, (3, "range", 3, 500)),
    (T0 + 12_200, "g", Kind.REBALANCE_COMPLETED, (3, "range", "m1", 3, "member_joined", 500, 700)),
    # After midnight: m1 leaves cleanly, m2's session expires.
    (T0 + 120_000, "g", Kind.MEMBER_LEFT, ("m1", None, "c1", "/h1", "left")),
    (T0 + 120_000, "g", Kind.REBALANCE_STARTED, ("member_left", None)),
    (T0 + 120_300, "g", Kind.REBALANCE_COMPLETED, (4, "range", "m2", 2, "member_left", 200, 300)),
    (DAY2, "g", Kind.OFFSETS_COMMITTED, (5, 10, 60_000)),
    (T0 + 200_000, "g", Kind.MEMBER_LEFT, ("m2", None, "c2", "/h2", "expired")),
    (T0 + 200_000, "g", Kind.REBALANCE_STARTED, ("session_expired", "m2")),
    (T0 + 200_050, "g", Kind.REBALANCE_COMPLETED, (5, "range", "m3", 1, "session_expired", 30, 50)),
    # Group h existed before the history starts: no creation, no join for m9.
    (T0 + 300_000, "h", Kind.REBALANCE_COMPLETED, (7, "range", "m8", 2, "member_left", 300, 400)),
    (T0 + 310_000, "h", Kind.MEMBER_LEFT, ("m9", "i9", "", "", "fenced")),
]
# History as groupcoord writes it since issue 24: every rebalance names its trigger, in its start
# and its completion (above, the older form without them, which must still read).
NEW = [
    (T0 + 400_000, "k", Kind.REBALANCE_COMPLETED, (1, "range", "k1", 2, "member_joined", 5, 9)),
    (T0 + 410_000, "k", Kind.MEMBER_LEFT, ("k2", "ik2", "kc2", "/hk2", "left")),
    (T0 + 410_000, "k", Kind.REBALANCE_STARTED, ("member_left", "k2", "ik2", "kc2", "/hk2", ())),
    (
        T0 + 410_100,
        "k",
        Kind.REBALANCE_COMPLETED,
        (2, "range", "k1", 1, "member_left", 50, 100, "k2", "ik2", "kc2", "/hk2", ()),
    ),
    (T0 + 420_000, "k", Kind.METADATA_CHANGED, (("orders",),)),
    (
        T0 + 420_000,
        "k",
        Kind.REBALANCE_STARTED,
        ("partitions_added", None, None, "", "", ("orders",)),
    ),
    (
        T0 + 420_100,
        "k",
        Kind.REBALANCE_COMPLETED,
        (3, "range", "k1", 1, "partitions_added", 50, 100, None, None, "", "", ("orders",)),
    ),
]


def test_derived_tables_from_handwritten_history(spark: Any, tmp_path: Path) -> None:
    cid = _write(tmp_path / "history", HAND + NEW)
    got = tables(spark, [str(tmp_path)])
    triggers = [
        (
            r["generation_id"],
            r["cause"],
            r["trigger_member_id"],
            r["trigger_client_id"],
            r["trigger_client_host"],
            r["trigger_group_instance_id"],
            r["trigger_topics"],
        )
        for r in got["rebalances"]
        if r["group_id"] == "k"
    ]
    assert triggers == [
        (1, "member_joined", None, None, None, None, None),  # an old entry: nothing recorded
        (2, "member_left", "k2", "kc2", "/hk2", "ik2", None),  # the member that left
        (3, "partitions_added", None, None, None, None, ["orders"]),  # the topic, no member
    ]
    got = {name: [r for r in rows if r["group_id"] != "k"] for name, rows in got.items()}

    rb = [
        (
            r["group_id"],
            r["generation_id"],
            r["cause"],
            r["trigger_member_id"],
            r["trigger_client_id"],
            r["duration_ms"],
            r["restarts"],
            r["members_before"],
            r["members_after"],
        )
        for r in got["rebalances"]
    ]
    assert rb == [
        ("g", 1, "member_joined", "m1", "c1", 150, 0, 0, 1),
        ("g", 3, "member_joined", "m3", "c3", 2_200, 1, 1, 3),  # from the first start
        ("g", 4, "member_left", None, None, 300, 0, 3, 2),
        ("g", 5, "session_expired", "m2", "c2", 50, 0, 2, 1),
        ("h", 7, "member_left", None, None, 400, 0, None, 2),  # before: unknown
    ]
    assert {r["coordinator_id"] for r in got["rebalances"]} == {cid}
    assert got["rebalances"][1]["sync_ms"] == 200 and got["rebalances"][1]["join_ms"] == 500

    sessions = [
        (
            r["group_id"],
            r["member_id"],
            r["client_id"],
            r["client_host"],
            r["group_instance_id"],
            r["joined"] is not None,
            r["how_left"],
            r["rebalances_triggered"],
        )
        for r in got["member_sessions"]
    ]
    assert sessions == [
        ("g", "m1", "c1", "/h1", None, True, "left", 1),
        ("g", "m2", "c2", "/h2", None, True, "expired", 2),
        ("g", "m3", "c3", "/h3", "i3", True, None, 1),
        ("h", "m9", None, None, "i9", False, "fenced", 0),
    ]
    assert got["member_sessions"][0]["duration_ms"] == 120_000

    daily = {(r["group_id"], str(r["day"])): r for r in got["group_daily"]}
    assert set(daily) == {
        ("g", "2025-01-01"),
        ("g", "2025-01-02"),
        ("h", "2025-01-01"),
        ("h", "2025-01-02"),
    }
    g1, g2 = daily["g", "2025-01-01"], daily["g", "2025-01-02"]
    assert (g1["rebalances"], g1["rebalancing_ms"], g1["longest_rebalance_ms"]) == (2, 2_350, 2_200)
    assert (g1["joins"], g1["leaves"], g1["churn"], g1["distinct_members"]) == (3, 0, 3, 3)
    assert (g2["rebalances"], g2["joins"], g2["leaves"], g2["abnormal_leaves"]) == (2, 0, 2, 1)
    assert (g2["distinct_members"], g2["commits"], g2["committed_partitions"]) == (3, 5, 10)
    # m9 was a member from before the data until it was fenced: counted on both days.
    assert daily["h", "2025-01-01"]["distinct_members"] == 1
    assert daily["h", "2025-01-02"]["abnormal_leaves"] == 1

    # The filters, applied while reading: only group g, only from midnight on.
    late = tables(spark, [str(tmp_path)], groups=["g"], since_ms=DAY2)
    assert {r["group_id"] for t in late.values() for r in t} == {"g"}
    assert [r["generation_id"] for r in late["rebalances"]] == [4, 5]
    assert late["rebalances"][0]["members_before"] is None  # generation 3 is outside the window


def test_consumer_group_rebalances_in_the_audit(spark: Any, tmp_path: Path) -> None:
    """A KIP-848 group's history as the coordinator writes it (issue 23; the events of
    tests/core/test_consumer_events.py): its epoch bumps are rebalances of type consumer."""
    from tests.core.test_consumer_events import G, history_rows

    _write(tmp_path / "history", [*HAND, *history_rows(T0)])
    got = tables(spark, [str(tmp_path)])
    rb = [
        (
            r["group_type"],
            r["generation_id"],
            r["cause"],
            r["trigger_member_id"],
            r["trigger_client_id"],
            r["protocol_name"],
            r["duration_ms"],
            r["join_ms"],
            r["members_before"],
            r["members_after"],
        )
        for r in got["rebalances"]
        if r["group_id"] == G
    ]
    assert rb == [
        # A new consumer group starts at epoch 1, as in Kafka 4.4: its first bump is 2.
        ("consumer", 2, "member_joined", "m1", "client-m1", "uniform", 0, 0, 0, 1),
        ("consumer", 3, "member_joined", "m2", "client-m2", "uniform", 300, 0, 1, 2),
        ("consumer", 4, "member_left", "m2", "client-m2", "uniform", 100, 100, 2, 1),
        ("consumer", 5, "session_expired", "m1", "client-m1", "uniform", 0, 0, 1, 0),
    ]
    assert {r["group_type"] for r in got["rebalances"] if r["group_id"] == "g"} == {"classic"}
    sessions = {r["member_id"]: r["how_left"] for r in got["member_sessions"] if r["group_id"] == G}
    assert sessions == {"m1": "expired", "m2": "left"}


# -- the scenario with real clients --------------------------------------------------------------

KIND = "confluent"
GROUP = "audited"
SESSION_MS = 4_000


def history_events(data_dir: Path) -> list[list[Any]]:
    return [row for ref in find_segments([data_dir]) for row in segment_rows(ref)]


def completed(data_dir: Path, group: str) -> list[str]:
    return [
        r[6] for r in history_events(data_dir) if r[4] == group and r[5] == "rebalance_completed"
    ]


async def wait_history(
    data_dir: Path, group: str, causes: list[str], what: str, then_maybe: tuple[str, ...] = ()
) -> None:
    """History reaches the disk within the flush interval: wait for the expected completions.
    `then_maybe`: rebalances that may follow them (a client's own, racing the test)."""
    allowed = [*causes, *then_maybe]

    def seen() -> bool:
        got = completed(data_dir, group)
        assert got == allowed[: len(got)], f"unexpected rebalances {got}, expected {causes}"
        return len(got) >= len(causes)

    await wait_until(seen, 30, what, explain=lambda: f"history: {completed(data_dir, group)}")


def increase_partitions(bootstrap: str, topic: str, total: int) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_partitions([NewPartitions(topic, total)]).values():
        future.result(30)


def svg_bars(dom: str, chart_id: str) -> int:
    match = re.search(rf'<svg[^>]*id="{chart_id}".*?</svg>', dom, re.S)
    assert match, f"no svg#{chart_id} in the DOM"
    return len(re.findall(r'<rect[^>]*class="bar"', match.group(0)))


@pytest.mark.clients
async def test_audit_of_a_scripted_scenario_on_two_coordinators(
    request: pytest.FixtureRequest, server: Any, members: Any, tmp_path: Path
) -> None:
    a = server(topics={"orders": PARTITIONS})
    b = server(topics={"orders": PARTITIONS})
    opts = {"group": GROUP, "topic": "orders", "session_timeout_ms": SESSION_MS}
    other = await members(KIND, "other-1", bootstrap=b.bootstrap, **opts)
    ms = []
    for name in ("audit-1", "audit-2", "audit-3"):
        ms.append(await members(KIND, name, bootstrap=a.bootstrap, **opts))
        await assert_stable_and_described(a, GROUP, ms)
    m1, m2, m3 = ms
    await m1.close()  # LeaveGroup
    await assert_stable_and_described(a, GROUP, [m2, m3])
    m2.kill()  # kill -9: no LeaveGroup, its session expires
    await m2.proc.wait()
    await wait_until(
        lambda: partition_of([m3], PARTITIONS),
        SESSION_MS / 1000 + 20,
        "the survivor to own every partition",
        explain=lambda: explain_members(ms, a),
    )
    expected = ["member_joined"] * 3 + ["member_left", "session_expired"]
    await wait_history(a.data_dir, GROUP, expected, "the expiry rebalance in the history")
    await asyncio.to_thread(increase_partitions, a.bootstrap, "orders", PARTITIONS + 4)
    expected.append("partitions_added")  # the cause names the kind of topic change
    # librdkafka's leader may rejoin once more if it computed that assignment before its own
    # metadata showed the new partitions (seen once on a loaded machine): its rebalance, not ours.
    client_rejoin = ("leader_rejoined",)
    await wait_history(
        a.data_dir, GROUP, expected, "the partition-increase rebalance", then_maybe=client_rejoin
    )
    await wait_history(b.data_dir, GROUP, ["member_joined"], "coordinator b's first rebalance")
    await other.close()
    await wait_history(b.data_dir, GROUP, ["member_joined", "member_left"], "b emptied")
    for broker in (a, b):  # SIGTERM: a graceful stop closes (and fsyncs) the history
        broker.proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(broker.proc.wait, 30) == 0, broker.log_tail()
    # (audit-3 stays a member; the members fixture kills it.)
    extra = completed(a.data_dir, GROUP)[len(expected) :]
    assert extra in ([], list(client_rejoin)), extra
    expected += extra

    spark = request.getfixturevalue("spark")
    out = tmp_path / "audit"
    from coordinator.cli import main

    argv = ["audit", "--data-dir", str(a.data_dir), "--data-dir", str(b.data_dir)]
    assert await asyncio.to_thread(main, [*argv, "--out", str(out)]) == 0
    read = {
        name: [r.asDict() for r in spark.read.parquet(str(out / name)).collect()]
        for name in ("rebalances", "member_sessions", "group_daily", "events")
    }
    cids = {r["coordinator_id"] for r in read["events"]}
    assert len(cids) == 2

    # Coordinator a: exactly the expected rebalances, in order, with their causes.
    a_cid = next(iter(find_segments([a.data_dir]))).coordinator_id
    rb = sorted(
        (r for r in read["rebalances"] if r["coordinator_id"] == a_cid),
        key=lambda r: r["generation_id"],
    )
    assert [(r["generation_id"], r["cause"]) for r in rb] == list(enumerate(expected, start=1))
    assert [(r["members_before"], r["members_after"]) for r in rb] == [
        (0, 1),
        (1, 2),
        (2, 3),
        (3, 2),
        (2, 1),
        (1, 1),
        *[(1, 1)] * len(extra),
    ]
    ids = {m.name: m.member_id for m in ms}
    assert [r["trigger_member_id"] for r in rb[:3]] == [
        ids["audit-1"],
        ids["audit-2"],
        ids["audit-3"],
    ]
    assert [r["trigger_client_id"] for r in rb[:3]] == ["audit-1", "audit-2", "audit-3"]
    assert rb[4]["trigger_member_id"] == ids["audit-2"]  # the killed member's expiry
    # The leave names the member that left (issue 24: it read "-" before), with its client.
    leave = rb[3]
    assert leave["cause"] == "member_left"
    assert (leave["trigger_member_id"], leave["trigger_client_id"]) == (ids["audit-1"], "audit-1")
    assert leave["trigger_client_host"] == "/127.0.0.1"
    assert (rb[4]["trigger_client_id"], rb[4]["trigger_client_host"]) == ("audit-2", "/127.0.0.1")
    assert (rb[5]["trigger_member_id"], rb[5]["trigger_topics"]) == (None, ["orders"])
    for r in rb:  # plausible: ordered, and well within the rebalance timeout
        assert r["start"] <= r["end"], r
        assert 0 <= r["duration_ms"] < 20_000, r
        assert 0 <= r["join_ms"] <= r["duration_ms"], r
        assert r["protocol_name"] == "range" and r["leader"], r

    a_events = [r for r in read["events"] if r["coordinator_id"] == a_cid]
    kinds = [r["event"] for r in a_events]
    assert kinds.count("group_created") == 1 and kinds.count("member_joined") == 3
    assert [r["protocol_name"] for r in a_events if r["event"] == "protocol_selected"] == ["range"]
    assert [r["topics"] for r in a_events if r["event"] == "metadata_changed"] == [["orders"]]
    days = [r for r in read["group_daily"] if r["coordinator_id"] == a_cid]
    total = {k: sum(r[k] for r in days) for k in ("rebalances", "joins", "leaves", "churn")}
    assert total == {"rebalances": 6 + len(extra), "joins": 3, "leaves": 2, "churn": 5}
    assert sum(r["abnormal_leaves"] for r in days) == 1
    if len(days) == 1:  # (a run across midnight UTC splits the day)
        assert days[0]["distinct_members"] == 3

    sessions = {r["client_id"]: r for r in read["member_sessions"] if r["coordinator_id"] == a_cid}
    assert {k: v["how_left"] for k, v in sessions.items()} == {
        "audit-1": "left",
        "audit-2": "expired",
        "audit-3": None,  # still a member when the coordinator stopped
    }
    for name, row in sessions.items():
        assert row["member_id"] == ids[name] and row["client_host"] == "/127.0.0.1"
        assert row["joined"] is not None
    left = sessions["audit-2"]["left"] - sessions["audit-2"]["joined"]
    assert left.total_seconds() > SESSION_MS / 1000  # expired: at least a session after joining

    # Two coordinators together give the union of each audited alone.
    def row_key(r: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in r.items()))

    def keyed(t: dict[str, list[dict[str, Any]]], name: str) -> set[tuple[Any, ...]]:
        return {row_key(r) for r in t[name]}

    alone = [tables(spark, [str(d)]) for d in (a.data_dir, b.data_dir)]
    both = tables(spark, [str(a.data_dir), str(b.data_dir)])
    for name in ("rebalances", "member_sessions", "group_daily"):
        assert keyed(both, name) == keyed(alone[0], name) | keyed(alone[1], name), name
        assert keyed(alone[0], name).isdisjoint(keyed(alone[1], name)), name
    assert keyed(both, "rebalances") == {row_key(r) for r in read["rebalances"]}

    # The report: a self-contained page with its plots, as a browser renders it.
    report = out / "report.html"
    text = report.read_text()
    assert "<script" not in text and "http://" not in text.replace('xmlns="http://www.w3.org', "")
    from tests.support.browser import BrowserMissing, dump_dom

    try:
        dom = await asyncio.to_thread(dump_dom, report.as_uri())
    except BrowserMissing as exc:
        pytest.skip(str(exc))
    assert svg_bars(dom, "chart-timeline") >= 2  # one series per coordinator's group
    assert svg_bars(dom, "chart-durations") >= 1
    # member_joined, member_left, expired, metadata; and the client's own rejoin, if it happened
    assert svg_bars(dom, "chart-causes") == 4 + len(set(extra))
    assert svg_bars(dom, "chart-clients") >= 4
    for text_seen in ("audit-2", "session_expired", "partitions_added", "Rebalance audit"):
        assert text_seen in dom
    slowest = re.search(r'<table[^>]*id="table-slowest".*?</table>', dom, re.S)
    assert slowest, "no slowest-rebalances table"
    assert "audit-1 @ /127.0.0.1" in slowest.group(0)  # who left, in "triggered by"
    assert "topic orders" in slowest.group(0)
