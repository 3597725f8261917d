"""Issue 5 in-process: the metrics fed from events and request stats, the log hooks, the HTTP
endpoint's behaviour (readiness while the log loads, HEAD/POST/keep-alive, escaping), and the
ConsumerProtocolAssignment decoder. Real sockets on 127.0.0.1 port 0; no client processes."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import wire
from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.events import (
    GroupCreated,
    JoinPhaseCompleted,
    LeaveReason,
    MemberJoined,
    MemberLeft,
    OffsetsCommitted,
    OffsetsDeleted,
    OffsetsExpired,
    RebalanceCause,
    RebalanceCompleted,
    RebalanceStarted,
)
from coordinator.core.messages import ErrorCode, Heartbeat, HeartbeatResult, JoinGroup, Protocol
from coordinator.core.topics import TopicCatalog, TopicInfo
from coordinator.serve import http, metrics
from coordinator.serve.journal import DiskJournal
from coordinator.serve.server import Server, ServerOptions
from coordinator.serve.status import FILTER_SCRIPT
from protocol.consumer import assignment_partitions as decode_assignment
from storage.disk import DiskLog


def new_server(journal: Any = None) -> Server:
    ids = itertools.count()
    options = ServerOptions(port=0, coordinator=CoordinatorConfig(initial_rebalance_delay_ms=0))
    return Server(options, TopicCatalog(()), lambda p: f"{p}-{next(ids)}", journal=journal)


def sample(m: metrics.Metrics, name: str, **labels: str) -> float:
    v = m.registry.get_sample_value(name, labels)
    return 0.0 if v is None else v


# -- events -> metrics ---------------------------------------------------------------------------


def test_events_feed_rebalance_member_and_offset_metrics() -> None:
    m = metrics.Metrics(new_server())
    events = [
        GroupCreated("g"),
        MemberJoined("g", "m1", None, "c", "/h"),
        RebalanceStarted("g", RebalanceCause.MEMBER_JOINED, "m1", 1000),
        JoinPhaseCompleted("g", 1, "range", 1, 1000, 1400),
        RebalanceCompleted("g", 1, "range", "m1", 1, RebalanceCause.MEMBER_JOINED, 1000, 1400,
                           1500),
        # interrupted: started, its join phase done, then a new rebalance before Stable
        RebalanceStarted("g", RebalanceCause.METADATA_CHANGED, None, 2000),
        JoinPhaseCompleted("g", 2, "range", 1, 2000, 2100),
        RebalanceStarted("g", RebalanceCause.SYNC_EXPIRED, None, 5000),
        JoinPhaseCompleted("g", 3, None, 0, 5000, 5000),
        RebalanceCompleted("g", 3, None, None, 0, RebalanceCause.SYNC_EXPIRED, 5000, 5000, 5000),
        MemberLeft("g", "m1", None, LeaveReason.EXPIRED),
        MemberLeft("g", "m2", "i", LeaveReason.FENCED),
        MemberLeft("g", "m3", None, LeaveReason.LEFT),
        OffsetsCommitted("g", 5),
        OffsetsDeleted("g", 2),
        OffsetsExpired("g", 1),
    ]
    for e in events:
        m.on_event(e)
    assert sample(m, "groupcoord_rebalances_total", cause="member_joined") == 1
    assert sample(m, "groupcoord_rebalances_total", cause="metadata_changed") == 1
    assert sample(m, "groupcoord_rebalances_total", cause="sync_expired") == 1
    assert sample(m, "groupcoord_topic_hash_rebalances_total") == 1
    assert sample(m, "groupcoord_rebalances_completed_total", cause="member_joined") == 1
    assert sample(m, "groupcoord_rebalances_completed_total", cause="metadata_changed") == 0
    # Two rebalances completed: each observed once; the Empty one has no sync phase.
    assert sample(m, "groupcoord_rebalance_duration_seconds_count") == 2
    assert sample(m, "groupcoord_rebalance_duration_seconds_sum") == pytest.approx(0.5)
    assert sample(m, "groupcoord_rebalance_duration_seconds_bucket", le="0.5") == 2
    assert sample(m, "groupcoord_rebalance_duration_seconds_bucket", le="0.25") == 1
    assert sample(m, "groupcoord_rebalance_join_phase_seconds_count") == 3
    assert sample(m, "groupcoord_rebalance_join_phase_seconds_sum") == pytest.approx(0.5)
    assert sample(m, "groupcoord_rebalance_sync_phase_seconds_count") == 1
    assert sample(m, "groupcoord_rebalance_sync_phase_seconds_sum") == pytest.approx(0.1)
    assert sample(m, "groupcoord_member_joins_total") == 1
    assert sample(m, "groupcoord_session_expirations_total") == 1
    assert sample(m, "groupcoord_member_fencings_total") == 1
    assert sample(m, "groupcoord_member_leaves_total", reason="left") == 1
    assert sample(m, "groupcoord_offset_commits_total") == 5
    assert sample(m, "groupcoord_offset_deletions_total") == 2
    assert sample(m, "groupcoord_offset_expirations_total") == 1
    assert sample(m, "groupcoord_groups_created_total") == 1
    assert m.last_rebalance_s == {}  # per-group state only with per_group


class _Runtime:
    """Answers heartbeats with a scripted error (RequestStats.heartbeat calls `heartbeat`)."""

    def __init__(self) -> None:
        self.error = ErrorCode.none

    def heartbeat(self, command: Heartbeat) -> HeartbeatResult:
        return HeartbeatResult(self.error)


def test_heartbeats_are_counted_exactly_and_timed_one_in_sixteen() -> None:
    server = new_server()
    m = metrics.install(server)
    runtime = _Runtime()
    command = Heartbeat("g", 1, "m", None)
    for i in range(40):
        runtime.error = ErrorCode.rebalance_in_progress if i % 10 == 0 else ErrorCode.none
        m.stats.heartbeat(runtime, command, server.heartbeats)  # type: ignore[arg-type]
        server.heartbeats += 1
    assert sample(m, "groupcoord_heartbeats_total") == 40
    assert sample(m, "groupcoord_requests_total", api="Heartbeat", error="NONE") == 36
    assert sample(m, "groupcoord_requests_total", api="Heartbeat",
                  error="REBALANCE_IN_PROGRESS") == 4
    # seq 0, 16 and 32 were timed
    assert sample(m, "groupcoord_request_duration_seconds_count", api="Heartbeat") == 3


def test_request_stats_and_result_errors() -> None:
    server = new_server()
    m = metrics.install(server)
    t0 = m.stats.clock()
    m.stats.done(3, 0, t0)
    m.stats.done(3, 0, t0 - 2_000_000_000)  # 2 s ago
    m.stats.done(11, ErrorCode.member_id_required, t0)
    assert sample(m, "groupcoord_requests_total", api="Metadata", error="NONE") == 2
    assert sample(m, "groupcoord_requests_total", api="JoinGroup", error="MEMBER_ID_REQUIRED") == 1
    assert sample(m, "groupcoord_request_duration_seconds_bucket", api="Metadata", le="1.0") == 1
    assert sample(m, "groupcoord_request_duration_seconds_bucket", api="Metadata", le="+Inf") == 2
    assert sample(m, "groupcoord_request_duration_seconds_sum", api="Metadata") >= 2.0
    from coordinator.core.messages import OffsetCommitResult, PartitionError, TopicErrors

    ok = OffsetCommitResult((TopicErrors("t", (PartitionError(0, ErrorCode.none),)),))
    bad = OffsetCommitResult((TopicErrors("t", (PartitionError(0, ErrorCode.none),
                                                PartitionError(1, ErrorCode.illegal_generation))),))
    assert metrics.result_error(ok) == 0
    assert metrics.result_error(bad) == ErrorCode.illegal_generation
    assert metrics.result_error(HeartbeatResult(ErrorCode.unknown_member_id)) == 25
    assert metrics.api_name(47) == "OffsetDelete" and metrics.api_name(18) == "ApiVersions"
    assert metrics.protocol_type_label("x" * 300) == "other"


def test_topic_hash_cache_counters_are_read_at_scrape_time() -> None:
    ids = itertools.count()
    catalog = TopicCatalog((TopicInfo("orders", uuid.uuid4(), 4),))
    server = Server(ServerOptions(port=0), catalog, lambda p: f"{p}-{next(ids)}")
    m = metrics.install(server)
    cache = server.core.topic_hashes
    assert sample(m, "groupcoord_topic_hash_cache_misses_total") == 0
    cache.topic_hash("orders")
    cache.topic_hash("orders")
    assert sample(m, "groupcoord_topic_hash_cache_misses_total") == cache.misses > 0
    assert sample(m, "groupcoord_topic_hash_cache_hits_total") == cache.hits
    assert sample(m, "groupcoord_topic_hash_cache_entries") == cache.entries
    assert sample(m, "groupcoord_topic_hash_recomputations_total") == cache.recomputations


async def test_log_metrics_and_fsync_histogram(tmp_path: Path) -> None:
    disk = await DiskLog.open(tmp_path)
    try:
        server = new_server(DiskJournal(disk))
        m = metrics.install(server)
        await disk.append_durable([(b"k1", b"v1"), (b"k2", b"v2")])
        await disk.append_durable([(b"k1", None)])
        assert sample(m, "groupcoord_log_appends_total") == 2
        assert sample(m, "groupcoord_log_appended_records_total") == 3
        assert sample(m, "groupcoord_log_appended_bytes_total") == disk.size_bytes() > 0
        assert sample(m, "groupcoord_log_size_bytes") == disk.size_bytes()
        assert sample(m, "groupcoord_log_segments") == 1
        assert sample(m, "groupcoord_log_fsync_seconds_count") == disk.fsync_count >= 1
        assert sample(m, "groupcoord_log_fsyncs_total") == disk.fsync_count
        assert sample(m, "groupcoord_log_healthy") == 1
    finally:
        await disk.close()


# -- ConsumerProtocolAssignment --------------------------------------------------------------------


@given(st.dictionaries(st.text(min_size=1, max_size=20),
                       st.lists(st.integers(0, 2**31 - 1), max_size=20, unique=True),
                       max_size=5))
def test_decode_assignment_round_trips(assignment: dict[str, list[int]]) -> None:
    data = wire.i16(1) + wire.array(
        [wire.string(t) + wire.array([wire.i32(p) for p in ps]) for t, ps in assignment.items()]
    ) + wire.nbytes(b"user data")
    assert decode_assignment(data) == {t: sorted(ps) for t, ps in assignment.items()}


@given(st.binary(max_size=64))
def test_decode_assignment_never_raises(data: bytes) -> None:
    out = decode_assignment(data)
    assert out is None or isinstance(out, dict)


# -- HTTP ------------------------------------------------------------------------------------------


async def request(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def get(port: int, path: str) -> tuple[int, bytes]:
    response = await request(port, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                             .encode())
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


class SlowJournal(DiskJournal):
    """A log whose replay waits until the test lets it finish."""

    def __init__(self, disk: DiskLog) -> None:
        super().__init__(disk)
        self.release = asyncio.Event()

    async def load(self, core: Any, batch_entries: int = 10_000) -> int:
        await self.release.wait()
        return await super().load(core, batch_entries)


async def test_readyz_follows_the_load_and_the_stop(tmp_path: Path) -> None:
    disk = await DiskLog.open(tmp_path)
    journal = SlowJournal(disk)
    server = new_server(journal)
    obs = await http.start_http(server, "127.0.0.1", 0)
    assert obs.port
    try:
        assert await get(obs.port, "/healthz") == (200, b"ok\n")
        assert await get(obs.port, "/readyz") == (503, b"not started\n")
        starting = asyncio.create_task(server.start())
        await asyncio.wait_for(_until(lambda: server.listening), 10)
        assert await get(obs.port, "/readyz") == (503, b"loading the log\n")
        assert await get(obs.port, "/healthz") == (200, b"ok\n")
        journal.release.set()
        await asyncio.wait_for(starting, 10)
        assert await get(obs.port, "/readyz") == (200, b"ready\n")
        assert sample(obs.metrics, "groupcoord_log_load_seconds") > 0  # type: ignore[arg-type]
        await server.stop()
        assert await get(obs.port, "/readyz") == (503, b"not listening\n")
    finally:
        await obs.close()
        await disk.close()


async def _until(predicate: Any) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


async def test_http_methods_keep_alive_and_limits() -> None:
    server = new_server()
    obs = await http.start_http(server, "127.0.0.1", 0)
    assert obs.port
    try:
        head = await request(obs.port, b"HEAD /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: 3" in head
        assert head.endswith(b"\r\n\r\n")  # no body
        post = await request(obs.port, b"POST /groups HTTP/1.1\r\nContent-Length: 2\r\n"
                                       b"Connection: close\r\n\r\nhi")
        assert post.startswith(b"HTTP/1.1 405") and b"Allow: GET, HEAD" in post
        two = await request(obs.port, b"GET /healthz HTTP/1.1\r\n\r\n"
                                      b"GET /groups HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert two.count(b"HTTP/1.1 200 OK") == 2 and two.endswith(b"[]\n")
        huge = await request(obs.port, b"GET /" + b"x" * (http.MAX_HEAD_BYTES + 10) + b"\r\n\r\n")
        assert huge == b""  # closed without an answer
        assert (await request(obs.port, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400")
        assert (await get(obs.port, "/groups/nope"))[0] == 404
        assert (await get(obs.port, "/metrics"))[0] == 200
    finally:
        await obs.close()


async def test_status_page_escapes_what_clients_chose() -> None:
    server = new_server()
    obs = await http.start_http(server, "127.0.0.1", 0)
    assert obs.port and server.runtime is None
    await server.start()
    try:
        hostile = '<script>alert("x")</script>'
        join = JoinGroup(hostile, 30000, 30000, "", None, "consumer",
                         (Protocol("range", b""),), None, "<b>client</b>", "/h", 5)
        assert server.runtime is not None
        server.runtime.submit(server.runtime.new_reply_to(), join)
        status, page = await get(obs.port, "/")
        assert status == 200
        assert b"<script>alert" not in page and b"&lt;script&gt;alert" in page
        # The one script is the page's own group filter, allowed by its hash (issue 24).
        assert re.findall(rb"<script[^>]*>", page) == [b"<script>"]
        assert page.count(FILTER_SCRIPT.encode()) == 1
        response = await request(obs.port, b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert b"Content-Security-Policy: default-src 'none'" in response
        digest = base64.b64encode(hashlib.sha256(FILTER_SCRIPT.encode()).digest())
        assert b"script-src 'sha256-" + digest + b"';" in response
        status, body = await get(obs.port, "/groups")
        assert status == 200 and hostile.encode().replace(b'"', b'\\"') in body
    finally:
        await server.stop()
        await obs.close()
