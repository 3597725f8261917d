"""Who and why (issue 24), in-process: the trigger in the history log (and old entries without it
still read), the recent rebalances read back from that log at start-up, and what the status page
and /groups show per group: the trigger of each rebalance, per-partition offsets and the filter.
Real sockets on 127.0.0.1 port 0 for the HTTP side; the fake-clock harness drives the core."""

from __future__ import annotations

import asyncio
import itertools
import json
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.events import (
    GroupDeleted,
    RebalanceCause,
    RebalanceCompleted,
    RebalanceStarted,
    RebalanceTrigger,
)
from coordinator.core.messages import (
    CommitPartition,
    CommitTopic,
    JoinGroup,
    OffsetCommit,
    Protocol,
    SyncAssignment,
    SyncGroup,
)
from coordinator.core.topics import TopicCatalog, TopicInfo
from coordinator.serve import http
from coordinator.serve.history import HistoryRecorder, HistorySettings, recent_rebalances
from coordinator.serve.server import Server, ServerOptions
from coordinator.serve.status import RebalanceHistory, RebalanceRecord, render_html
from pipeline.segments import COLUMNS, find_segments, segment_rows
from storage.history import (
    KIND_FIELDS,
    HistoryDecodeError,
    Kind,
    decode_event,
    encode_fields,
)
from storage.history_log import read_segment

C = RebalanceCause
WALL = 1_750_000_000_000
LEAVER = RebalanceTrigger("m-2", "i-2", "client-2", "/10.0.0.2")
TOPIC = RebalanceTrigger(topics=("orders",))


def completed(group: str, generation: int, cause: RebalanceCause, trigger: RebalanceTrigger,
              now_ms: int = 2_000) -> RebalanceCompleted:  # fmt: skip
    return RebalanceCompleted(group, generation, "range", "m-1", 1, cause, 1_000, 1_500, now_ms,
                              trigger)  # fmt: skip


def recorder(directory: Path, clock: list[int], **settings: Any) -> HistoryRecorder:
    return HistoryRecorder(directory, HistorySettings(**settings), clock_ms=lambda: clock[0])


# -- the history log -------------------------------------------------------------------------------


def test_history_entries_carry_the_trigger_of_a_start_and_of_a_completion(tmp_path: Path) -> None:
    clock = [WALL]
    rec = recorder(tmp_path, clock)
    rec.record(RebalanceStarted("g", C.MEMBER_LEFT, "m-2", 1_000, LEAVER))
    rec.record(completed("g", 4, C.MEMBER_LEFT, LEAVER))
    rec.record(RebalanceStarted("g", C.PARTITIONS_ADDED, None, 3_000, TOPIC))
    rec.record(completed("g", 5, C.PARTITIONS_ADDED, TOPIC, 4_000))
    rec.close()
    (ref,) = find_segments([tmp_path])
    events = []
    for entry in read_segment(Path(ref.path)):
        if entry.value is not None and entry.value[1] != Kind.SEGMENT_STARTED:
            events.append(decode_event(entry.key, entry.value, entry.timestamp_ms))
    who = [
        (e.kind.name, e.get("cause"), e.get("member_id"), e.get("group_instance_id"),
         e.get("client_id"), e.get("client_host"), e.get("topics"))
        for e in events if e is not None and e.kind in (Kind.REBALANCE_STARTED,
                                                        Kind.REBALANCE_COMPLETED)
    ]  # fmt: skip
    left = ("member_left", "m-2", "i-2", "client-2", "/10.0.0.2", ())
    topic = ("partitions_added", None, None, "", "", ("orders",))
    assert who == [
        ("REBALANCE_STARTED", *left),
        ("REBALANCE_COMPLETED", *left),
        ("REBALANCE_STARTED", *topic),
        ("REBALANCE_COMPLETED", *topic),
    ]
    # The audit's bulk decoder reads the same columns.
    at = {name: i for i, (name, _) in enumerate(COLUMNS)}
    rows = [r for r in segment_rows(ref) if r[at["event"]] == "rebalance_completed"]
    assert [(r[at["member_id"]], r[at["client_id"]], r[at["topics"]]) for r in rows] == [
        ("m-2", "client-2", []),
        (None, "", ["orders"]),
    ]


def test_entries_written_before_triggers_still_read_with_the_trigger_null() -> None:
    """Issue 24 added fields at the end of REBALANCE_STARTED and REBALANCE_COMPLETED: an entry
    of an older writer ends where they start, and reads with them null."""
    old_start = encode_fields(Kind.REBALANCE_STARTED, ("member_left", None))
    old_done = encode_fields(Kind.REBALANCE_COMPLETED, (3, "range", "m1", 2, "member_left", 5, 9))
    start = decode_event(b"g", old_start, WALL)
    done = decode_event(b"g", old_done, WALL)
    assert start is not None and done is not None
    assert dict(start.fields) == {"cause": "member_left", "member_id": None,
                                  "group_instance_id": None, "client_id": None,
                                  "client_host": None, "topics": None}  # fmt: skip
    assert done.get("generation_id") == 3 and done.get("rebalance_ms") == 9
    assert done.get("member_id") is None and done.get("topics") is None
    assert len(done.fields) == len(KIND_FIELDS[Kind.REBALANCE_COMPLETED])
    # A value cut inside the fields every entry has is still an error, not a shorter entry.
    try:
        decode_event(b"g", old_done[:-3], WALL)
    except HistoryDecodeError:
        pass
    else:
        raise AssertionError("a truncated entry decoded")
    try:
        encode_fields(Kind.REBALANCE_STARTED, ("member_left",))
    except ValueError:
        pass
    else:
        raise AssertionError("an entry without its required fields encoded")


def test_recent_rebalances_reads_back_the_last_ones_of_each_group(tmp_path: Path) -> None:
    clock = [WALL]

    def run(*events: Any) -> None:
        """One coordinator run: each writes a segment of its own (storage.history_log)."""
        rec = recorder(tmp_path, clock)
        for event in events:
            rec.record(event)
        rec.close()

    for generation in range(1, 8):
        clock[0] += 1_000
        trigger = RebalanceTrigger(f"m-{generation}", None, f"c-{generation}", "/h")
        run(completed("busy", generation, C.MEMBER_JOINED, trigger))
    clock[0] += 1_000
    # The old group of this name: its rebalances go with it.
    run(completed("gone", 1, C.MEMBER_JOINED, LEAVER), GroupDeleted("gone"))
    clock[0] += 1_000
    run(
        completed("gone", 1, C.MEMBER_LEFT, LEAVER),  # a new group of the same name
        completed("old", 2, C.PARTITIONS_ADDED, TOPIC),
    )
    cutoff = clock[0] + 1
    clock[0] += 1_000
    run(completed("busy", 99, C.MEMBER_JOINED, LEAVER))  # "this run": after the cutoff

    got = recent_rebalances(tmp_path, 3, before_ms=cutoff)
    assert {g: [e.get("generation_id") for e in es] for g, es in got.items()} == {
        "busy": [5, 6, 7],  # the last three, oldest first
        "gone": [1],
        "old": [2],
    }
    assert got["gone"][0].get("cause") == "member_left"
    assert got["busy"][-1].get("client_id") == "c-7"
    assert got["old"][0].get("topics") == ("orders",)
    # Bounded: with a budget smaller than one segment, only the newest segment is read.
    segments = sorted(tmp_path.glob("*.log"))
    assert len(segments) > 2
    alone = tmp_path / "newest"
    alone.mkdir()
    (alone / segments[-1].name).write_bytes(segments[-1].read_bytes())
    bounded = recent_rebalances(tmp_path, 10, max_bytes=1)
    assert bounded == recent_rebalances(alone, 10)
    assert {g: [e.get("generation_id") for e in es] for g, es in bounded.items()} == {"busy": [99]}


def test_restore_puts_old_rebalances_before_the_new_ones_and_keeps_the_last_n() -> None:
    history = RebalanceHistory(lambda: WALL / 1000, per_group=3)
    history(completed("g", 10, C.MEMBER_LEFT, LEAVER))
    old = [RebalanceRecord(n, "member_joined", 1, "range", 5, 2, 3, WALL / 1000) for n in (7, 8, 9)]
    assert history.restore({"g": old, "h": old[:1]}) == 3
    assert [r.generation_id for r in history.completed["g"]] == [8, 9, 10]
    assert history.completed["g"][-1].trigger == LEAVER
    assert [r.generation_id for r in history.completed["h"]] == [7]


# -- the page and /groups --------------------------------------------------------------------------


def new_server() -> Server:
    ids = itertools.count()
    options = ServerOptions(port=0, coordinator=CoordinatorConfig(initial_rebalance_delay_ms=0))
    catalog = TopicCatalog((TopicInfo("orders", uuid.UUID(int=1), 4),))
    return Server(options, catalog, lambda p: f"{p}-{next(ids)}")


async def get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        response = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


async def test_groups_json_shows_offsets_end_offsets_lag_and_the_trigger(tmp_path: Path) -> None:
    """Standalone: the end offset is what this server's own ListOffsets answers (0: it stores
    no records), so the lag reads 0 (coordinator.broker.answers)."""
    server = new_server()
    obs = await http.start_http(server, "127.0.0.1", 0)
    await server.start()
    assert obs.port and server.runtime is not None
    try:
        runtime = server.runtime
        commit = OffsetCommit("simple", -1, "", None, -1, (
            CommitTopic("orders", (CommitPartition(1, 42, -1, ""),
                                   CommitPartition(3, 7, -1, None))),
        ), 8)  # fmt: skip
        runtime.submit(runtime.new_reply_to(), commit)
        join = JoinGroup("joined <g>", 30000, 30000, "", None, "consumer",
                         (Protocol("range", b""),), None, "<b>who</b>", "/10.9.8.7", 3)  # fmt: skip
        runtime.submit(runtime.new_reply_to(), join)

        async def answered() -> dict[str, Any]:
            for _ in range(500):
                status, body = await get(obs.port, "/groups/simple")  # type: ignore[arg-type]
                if status == 200 and json.loads(body)["offsets"]:
                    return dict(json.loads(body))
                await asyncio.sleep(0.01)
            raise AssertionError("the commit never showed")

        group = await answered()
        rows = [(o["topic"], o["partition"], o["committed_offset"], o["end_offset"], o["lag"])
                for o in group["offsets"]]  # fmt: skip
        assert rows == [("orders", 1, 42, 0, 0), ("orders", 3, 7, 0, 0)]
        # Sidecar mode: the lag tracker's measurement (a partition it did not measure: unknown),
        # or nothing at all without --metrics-per-group.
        obs.status.end_offsets = lambda tps: {("orders", 1): 50}
        group = await answered()
        lags = [(o["end_offset"], o["lag"]) for o in group["offsets"]]
        assert lags == [(50, 8), (None, None)]
        obs.status.end_offsets = None
        group = await answered()
        assert [(o["end_offset"], o["lag"]) for o in group["offsets"]] == [(None, None)] * 2

        quoted = urllib.parse.quote("joined <g>", safe="")

        async def joined_group(ready: Any) -> dict[str, Any]:
            for _ in range(500):
                status, body = await get(obs.port, f"/groups/{quoted}")  # type: ignore[arg-type]
                found = json.loads(body) if status == 200 else {}
                if ready(found):
                    return dict(found)
                await asyncio.sleep(0.01)
            raise AssertionError(f"never: {found}")

        # In CompletingRebalance: the rebalance in progress names the joiner already.
        joined = await joined_group(lambda g: g.get("state") == "CompletingRebalance")
        member_id = joined["members"][0]["member_id"]
        assert joined["rebalancing"]["cause"] == "member_joined"
        assert joined["rebalancing"]["trigger"]["member_id"] == member_id
        sync = SyncGroup("joined <g>", joined["generation_id"], member_id, None, "consumer",
                         "range", (SyncAssignment(member_id, b""),), 3)  # fmt: skip
        runtime.submit(runtime.new_reply_to(), sync)
        joined = await joined_group(lambda g: g.get("rebalances"))
        (rebalance,) = joined["rebalances"]
        trigger = rebalance["trigger"]
        assert rebalance["cause"] == "member_joined"
        assert (trigger["client_id"], trigger["client_host"]) == ("<b>who</b>", "/10.9.8.7")
        assert trigger["member_id"] == joined["members"][0]["member_id"]

        status, page = await get(obs.port, "/?q=%22%3E%3Cb%3E")  # the filter text is reflected
        assert status == 200
        assert b'value="&quot;&gt;&lt;b&gt;"' in page and b'"><b>' not in page
        assert b"&lt;b&gt;who&lt;/b&gt; @ /10.9.8.7" in page  # "triggered by", escaped
        assert b"<b>who" not in page
    finally:
        await server.stop()
        await obs.close()


def test_the_page_marks_unknown_end_offsets_and_escapes_every_name() -> None:
    hostile = '<img src=x onerror="alert(1)">'
    group = {
        "group_id": hostile, "state": "Stable", "protocol_type": "consumer", "protocol": "range",
        "generation_id": 3, "leader": "m1", "pending_members": 0, "extra": {},
        "members": [{"member_id": "m1", "group_instance_id": None, "client_id": hostile,
                     "client_host": "/h", "session_timeout_ms": 1, "leader": True,
                     "assignment": {hostile: [0]}}],
        "rebalancing": {"cause": "member_left", "since": "2025-01-01T00:00:00Z",
                        "trigger": {"member_id": "m9", "group_instance_id": hostile,
                                    "client_id": hostile, "client_host": "/h9", "topics": []}},
        "offsets": [{"topic": hostile, "partition": 0, "committed_offset": 5, "end_offset": None,
                     "lag": None, "member_id": "m1"}],
        "rebalances": [{"generation_id": 3, "cause": "partitions_added", "members": 1,
                        "protocol": "range", "duration_ms": 5, "join_ms": 2, "sync_ms": 3,
                        "completed_at": "2025-01-01T00:00:00Z",
                        "trigger": {"member_id": None, "group_instance_id": None,
                                    "client_id": "", "client_host": "", "topics": [hostile]}}],
    }  # fmt: skip
    summary = {"ready": True, "connections": 0, "advertised": "127.0.0.1:9092"}
    page = render_html(summary, [group], 0.0)
    assert "<img" not in page
    assert page.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") >= 6
    assert "<td class=num>5</td><td class=num>-</td><td class=num>-</td>" in page
    assert "topic &lt;img" in page  # a topic change names the topic
    assert 'data-group="&lt;img src=x onerror=&quot;alert(1)&quot;&gt;"' in page


def test_the_page_keeps_the_last_n_rebalances_of_a_group() -> None:
    """Every one up to N, then the last N (a slice from a negative start once kept only 4)."""
    history = RebalanceHistory(lambda: WALL / 1000, per_group=10)
    for generation in range(1, 8):
        history(completed("g", generation, C.MEMBER_JOINED, LEAVER))
    assert [r.generation_id for r in history.completed["g"]] == list(range(1, 8))
    for generation in range(8, 13):
        history(completed("g", generation, C.MEMBER_JOINED, LEAVER))
    assert [r.generation_id for r in history.completed["g"]] == list(range(3, 13))
