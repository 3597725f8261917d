"""The server side of topic changes (coordinator.serve.topic_service) over real sockets, in process:
admin replies wait for durability, topics persist in the group log, `Server.topic_changed` is the
interface the sidecar uses, and a topic change answers parked fetches with NOT_LEADER_OR_FOLLOWER
until the client re-reads metadata."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from coordinator.broker.answers import make
from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.record_codec import encode_record
from coordinator.core.records import Record, TopicKey
from coordinator.core.topics import TopicCatalog, TopicInfo, declared_topic
from coordinator.serve.journal import DiskJournal
from coordinator.serve.server import Server, ServerOptions
from protocol import apis
from storage.disk import DiskLog
from tests.protocol.test_codec import write
from tests.support.durability_util import RawConn
from tests.support.realclients import wait_until

E = ErrorCode


class GatedJournal:
    """A journal whose appends become durable only when the test says so."""

    def __init__(self) -> None:
        self.appended: list[Record] = []
        self._seq = 0
        self._durable = 0
        self._changed = asyncio.Event()

    def append(self, records: list[Record]) -> int:
        for r in records:
            encode_record(r)  # must be encodable
        self.appended.extend(records)
        self._seq += 1
        return self._seq

    def durable_seq(self) -> int:
        return self._durable

    def last_seq(self) -> int:
        return self._seq

    async def wait_durable(self, seq: int) -> None:
        while self._durable < seq:
            self._changed.clear()
            await self._changed.wait()

    def on_durable(self, listener: Any) -> None:
        pass  # `wait_durable` only: the runtime's releaser task must work without it

    def lost(self, seq: int) -> bool:
        return False

    def release(self) -> None:
        self._durable = self._seq
        self._changed.set()


def options() -> ServerOptions:
    return ServerOptions(host="127.0.0.1", port=0, coordinator=CoordinatorConfig())


async def started(journal: Any = None, topics: tuple[TopicInfo, ...] = ()) -> Server:
    server = Server(options(), TopicCatalog(topics), lambda p: f"{p}-{uuid.uuid4()}", journal)
    await server.start()
    return server


def body(api_key: int, version: int, **fields: Any) -> bytes:
    return write(make(apis.request_class(api_key, version), **fields))


def parse(api_key: int, version: int, data: bytes) -> Any:
    entity, _ = entity_reader(apis.response_class(api_key, version))(data, 0)
    return entity


async def create_partitions(conn: RawConn, name: str, count: int, timeout: float = 10) -> Any:
    mod = apis.request_module(apis.CREATE_PARTITIONS, 1)
    req = body(
        apis.CREATE_PARTITIONS,
        1,
        topics=(make(mod.CreatePartitionsTopic, name=name, count=count, assignments=None),),
        timeout=datetime.timedelta(seconds=5),
        validate_only=False,
    )
    data = await conn.request(apis.CREATE_PARTITIONS, 1, req, timeout)
    return parse(apis.CREATE_PARTITIONS, 1, data)


async def test_admin_reply_waits_until_the_topic_is_durable() -> None:
    journal = GatedJournal()
    journal.release()
    server = await started(journal, (declared_topic("orders", 4),))
    conn = await RawConn.open("127.0.0.1", server.options.port)
    try:
        pending = asyncio.ensure_future(create_partitions(conn, "orders", 6))
        await wait_until(lambda: server.catalog.partition_count("orders") == 6, 5, "the change")
        await asyncio.sleep(0.05)
        assert not pending.done()  # applied in memory, not yet durable: no answer
        assert journal.appended[-1].key == TopicKey("orders")
        journal.release()
        response = await asyncio.wait_for(pending, 5)
        assert response.results[0].error_code == E.none
    finally:
        conn.close()
        journal.release()
        await server.stop()


async def test_topics_persist_and_the_log_wins_over_declarations(tmp_path: Path) -> None:
    data = tmp_path / "data"
    disk = await DiskLog.open(data, policy="always")
    server = await started(DiskJournal(disk), (declared_topic("orders", 4),))
    conn = await RawConn.open("127.0.0.1", server.options.port)
    try:
        assert (await create_partitions(conn, "orders", 8)).results[0].error_code == E.none
        server.topic_changed(
            "racked", TopicInfo("racked", uuid.UUID(int=3), 2, (("a",), ("b", "a")))
        )
        server.topic_changed("gone", TopicInfo("gone", uuid.UUID(int=4), 1))
        server.topic_changed("gone", None)
        await server.runtime.drain()  # type: ignore[union-attr]
    finally:
        conn.close()
        await server.stop()
        await disk.close()
    disk = await DiskLog.open(data, policy="always")
    server = await started(DiskJournal(disk), (declared_topic("orders", 4),))
    try:
        assert server.catalog.partition_count("orders") == 8
        assert server.catalog.get("racked") == TopicInfo(
            "racked", uuid.UUID(int=3), 2, (("a",), ("b", "a"))
        )
        assert "gone" not in server.catalog
    finally:
        await server.stop()
        await disk.close()


def fetch_body(topic: str, partitions: list[int]) -> bytes:
    mod = apis.request_module(apis.FETCH, 4)
    return body(
        apis.FETCH,
        4,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=5000),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=(
            make(
                mod.FetchTopic,
                topic=topic,
                partitions=tuple(
                    make(mod.FetchPartition, partition=p, fetch_offset=0, partition_max_bytes=1024)
                    for p in partitions
                ),
            ),
        ),
    )


def fetch_errors(data: bytes) -> list[int]:
    response = parse(apis.FETCH, 4, data)
    return [p.error_code for t in response.responses for p in t.partitions]


async def test_a_topic_change_answers_parked_fetches_until_metadata_is_read() -> None:
    server = await started(None, (declared_topic("orders", 4), declared_topic("other", 1)))
    conn = await RawConn.open("127.0.0.1", server.options.port)
    bystander = await RawConn.open("127.0.0.1", server.options.port)
    try:
        parked = asyncio.ensure_future(conn.request(apis.FETCH, 4, fetch_body("orders", [0, 1])))
        other = asyncio.ensure_future(bystander.request(apis.FETCH, 4, fetch_body("other", [0])))
        await asyncio.sleep(0.1)
        assert not parked.done()  # waiting for max_wait (5 s): there is never data
        server.topic_changed("orders", declared_topic("orders", 8))
        assert fetch_errors(await asyncio.wait_for(parked, 1)) == [E.not_leader_or_follower] * 2
        assert not other.done()  # another topic's fetch keeps waiting
        # Still stale on this connection until it reads the topic's metadata...
        data = await conn.request(apis.FETCH, 4, fetch_body("orders", [5]))
        assert fetch_errors(data) == [E.not_leader_or_follower]
        mod = apis.request_module(apis.METADATA, 4)
        md = body(
            apis.METADATA,
            4,
            topics=(make(mod.MetadataRequestTopic, name="orders"),),
            allow_auto_topic_creation=False,
        )
        metadata = parse(apis.METADATA, 4, await conn.request(apis.METADATA, 4, md))
        assert len(metadata.topics[0].partitions) == 8
        # ... after which its fetches wait for data again.
        again = asyncio.ensure_future(conn.request(apis.FETCH, 4, fetch_body("orders", [7])))
        await asyncio.sleep(0.2)
        assert not again.done()
        again.cancel()
        other.cancel()
    finally:
        conn.close()
        bystander.close()
        await server.stop()


async def parked_until(server: Server, conns: int) -> None:
    """Until `conns` Fetches are parked (their answers wait for max_wait)."""
    await wait_until(lambda: sum(c.fetch_timer is not None for c in server.connections) >= conns,
                     5, f"{conns} parked fetches")


async def test_a_deletion_answers_parked_fetches_unknown_topic_at_once(caplog: Any) -> None:
    server = await started(None, (declared_topic("orders", 4), declared_topic("other", 1)))
    conn = await RawConn.open("127.0.0.1", server.options.port)
    bystander = await RawConn.open("127.0.0.1", server.options.port)
    try:
        parked = asyncio.ensure_future(conn.request(apis.FETCH, 4, fetch_body("orders", [0, 1])))
        other = asyncio.ensure_future(bystander.request(apis.FETCH, 4, fetch_body("other", [0])))
        await parked_until(server, 2)
        with caplog.at_level("DEBUG", logger="groupcoord.topics"):
            server.topic_changed("orders", None)
            # Kafka completes a delayed fetch whose partition went away: the client learns of the
            # deletion now, re-reads metadata and rejoins its group (issue 27).
            errors = fetch_errors(await asyncio.wait_for(parked, 1))
        assert errors == [E.unknown_topic_or_partition] * 2
        assert not other.done()  # another topic's fetch keeps waiting
        assert server.topic_service.signal.answered == {"stale_metadata": 0, "topic_gone": 1}
        assert [m for m in caplog.messages if m.startswith("answered")] == [
            "answered Fetch for client durability at /127.0.0.1: topic orders, deleted"
        ]
        other.cancel()
    finally:
        conn.close()
        bystander.close()
        await server.stop()


async def test_a_topics_first_appearance_arms_no_signal() -> None:
    server = await started(None, (declared_topic("orders", 4),))
    conn = await RawConn.open("127.0.0.1", server.options.port)
    try:
        server.topic_changed("fresh", declared_topic("fresh", 2))
        assert not server.topic_service.signal
        # A client that read the new topic fetches it at once: no NOT_LEADER_OR_FOLLOWER.
        fetch = asyncio.ensure_future(conn.request(apis.FETCH, 4, fetch_body("fresh", [0, 1])))
        await parked_until(server, 1)  # parked like any fetch with no data: no error
        assert server.topic_service.signal.answered == {"stale_metadata": 0, "topic_gone": 0}
        fetch.cancel()
    finally:
        conn.close()
        await server.stop()


async def test_a_topic_recreated_under_its_name_is_signalled() -> None:
    server = await started(None, (declared_topic("orders", 4),))
    conn = await RawConn.open("127.0.0.1", server.options.port)
    try:
        server.topic_changed("orders", None)
        server.topic_changed("orders", TopicInfo("orders", uuid.UUID(int=5), 4))
        data = await conn.request(apis.FETCH, 4, fetch_body("orders", [0]))
        assert fetch_errors(data) == [E.not_leader_or_follower]  # its old metadata is stale
        assert server.topic_service.signal.answered["stale_metadata"] == 1
    finally:
        conn.close()
        await server.stop()


def test_log_line_names_the_topic(caplog: Any) -> None:
    from coordinator.core.events import GroupMetadataHashChanged
    from coordinator.core.events import RebalanceCause as RC
    from coordinator.serve.topic_service import log_hash_change

    with caplog.at_level("INFO", logger="groupcoord.topics"):
        log_hash_change(GroupMetadataHashChanged("g", ("orders",), 1, RC.PARTITIONS_ADDED))
        log_hash_change(GroupMetadataHashChanged("g", ("orders",), 2, RC.TOPIC_DELETED))
    assert caplog.messages == [
        "group g: metadata hash changed (topic orders: partitions_added); rebalancing",
        "group g: metadata hash changed (topic orders: topic_deleted); its members rejoin as they"
        " notice",
    ]


async def test_changes_before_start_are_applied_after_loading() -> None:
    journal = GatedJournal()
    journal.release()
    server = Server(options(), TopicCatalog([declared_topic("orders", 4)]), lambda p: p, journal)
    server.topic_changed("early", TopicInfo("early", uuid.UUID(int=8), 3))
    server.topic_changed("orders", declared_topic("orders", 6))
    await server.start()
    try:
        assert server.catalog.partition_count("early") == 3
        assert server.catalog.partition_count("orders") == 6
        assert {r.key for r in journal.appended} >= {TopicKey("early"), TopicKey("orders")}
    finally:
        journal.release()
        await server.stop()
