"""Issue 3 scope 6, end to end: offsets of Empty groups expire (docs/protocol.md §10.4), the expiry
is written as tombstones on disk, and a restart does not bring the offsets back.

A server over a real DiskLog with a tiny retention (1.5 s, checked every 100 ms; the CLI's
`--offsets-retention-minutes` cannot go below a minute, so this server runs in process with the
same Server and DiskJournal the CLI builds):
- `ret-gone`: an aiokafka consumer joins, commits, and leaves: the group goes Empty;
- `ret-simple`: raw simple commits (generation -1), no group metadata at all;
- `ret-live`: an aiokafka consumer that stays (Stable, subscribed to the topic): never expires.
Once the first two are gone, `groupcoord log dump` (the CLI, as a user runs it) shows their
OffsetCommit and GroupMetadata tombstones; then `groupcoord serve` (a real process, default 7-day
retention) restarts on the same directory and OffsetFetch finds nothing for them, while
`ret-live` keeps its offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from coordinator.cli import new_member_id
from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.topics import TopicCatalog, TopicInfo
from coordinator.serve.journal import DiskJournal
from coordinator.serve.server import Server, ServerOptions
from storage.disk import DiskLog
from tests.support import durability_util as du
from tests.support.realclients import REPO, free_port, wait_until

pytestmark = pytest.mark.clients

TOPIC = "ret"
PARTITIONS = 2
RETENTION_MS = 1_500


async def start_consumer(port: int, group: str) -> object:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        TOPIC, bootstrap_servers=f"127.0.0.1:{port}", group_id=group, client_id=group,
        enable_auto_commit=False, session_timeout_ms=6_000, heartbeat_interval_ms=300,
        auto_offset_reset="earliest", retry_backoff_ms=50, metadata_max_age_ms=5_000,
    )  # fmt: skip
    await consumer.start()

    async def assigned() -> bool:
        await consumer.getmany(timeout_ms=50)
        return len(consumer.assignment()) == PARTITIONS

    await wait_until(assigned, 20, f"{group} to be assigned both partitions")
    return consumer


async def commit(consumer: object, offsets: dict[int, int]) -> None:
    from aiokafka import TopicPartition

    await consumer.commit({TopicPartition(TOPIC, p): o for p, o in offsets.items()})  # type: ignore[attr-defined]


async def test_empty_group_offsets_expire_as_tombstones_and_stay_gone(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    config = CoordinatorConfig(
        initial_rebalance_delay_ms=0,
        offsets_retention_ms=RETENTION_MS,
        offsets_retention_check_interval_ms=100,
    )
    catalog = TopicCatalog((TopicInfo(TOPIC, uuid.uuid5(uuid.NAMESPACE_DNS, TOPIC), PARTITIONS),))
    log = await DiskLog.open(data_dir)
    server = Server(
        ServerOptions(host="127.0.0.1", port=port, coordinator=config), catalog, new_member_id,
        journal=DiskJournal(log),
    )  # fmt: skip
    await server.start()
    consumers: list[object] = []
    parts = list(range(PARTITIONS))
    try:
        live = await start_consumer(port, "ret-live")
        consumers.append(live)
        await commit(live, {0: 11, 1: 12})
        gone = await start_consumer(port, "ret-gone")
        consumers.append(gone)
        await commit(gone, {0: 21, 1: 22})
        conn = await du.RawConn.open("127.0.0.1", port)
        try:
            assert await conn.commit("ret-simple", TOPIC, {0: 31, 1: 32}) == {0: 0, 1: 0}
        finally:
            conn.close()
        await gone.stop()  # type: ignore[attr-defined]  # LeaveGroup: ret-gone is Empty now
        consumers.remove(gone)

        async def expired() -> bool:
            for group in ("ret-gone", "ret-simple"):
                got = await du.fetch_committed("127.0.0.1", port, group, TOPIC, parts)
                if got != {0: -1, 1: -1}:
                    return False
            return server.core.group("ret-gone") is None and server.core.group("ret-simple") is None

        await wait_until(expired, 20, "the Empty and the simple group's offsets to expire")
        # The Stable group's offsets on its subscribed topic outlive many retention periods.
        await asyncio.sleep(2 * RETENTION_MS / 1000)
        assert await du.fetch_committed("127.0.0.1", port, "ret-live", TOPIC, parts) == {
            0: 11, 1: 12,
        }  # fmt: skip
    finally:
        for consumer in consumers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.stop(), 10)  # type: ignore[attr-defined]
        # At once: `ret-live` is Empty now, and its offsets expire in RETENTION_MS.
        await server.stop()
        await log.close()

    dump = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "log", "dump", str(data_dir)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    lines = dump.splitlines()
    for group in ("ret-gone", "ret-simple"):
        for p in parts:
            key = f"{{group_id={group!r} topic={TOPIC!r} partition={p}}}"
            assert f"offset_commit key: {key} payload: <DELETED>" in dump, (group, p, dump)
        assert f"group_metadata key: {{group_id={group!r}}} payload: <DELETED>" in dump, dump
    # ret-gone was written Empty (no members) before it was deleted.
    snapshots = [line for line in lines if "group_metadata key: {group_id='ret-gone'}" in line]
    assert "members=[]" in snapshots[-2] and snapshots[-1].endswith("<DELETED>"), snapshots
    assert not any("<DELETED>" in line and "ret-live" in line for line in lines)

    # A real restart on the same directory, with the default (7-day) retention.
    srv = du.ServerProc(tmp_path, free_port(), data_dir, {TOPIC: PARTITIONS})
    try:
        srv.start()
        await srv.wait_loaded(TOPIC)
        for group in ("ret-gone", "ret-simple"):
            got = await du.fetch_committed(srv.host, srv.port, group, TOPIC, parts)
            assert got == {0: -1, 1: -1}, (group, got, srv.log_tail())
        got = await du.fetch_committed(srv.host, srv.port, "ret-live", TOPIC, parts)
        assert got == {0: 11, 1: 12}, srv.log_tail()
    finally:
        srv.stop()
