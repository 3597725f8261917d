"""Sidecar mode at the protocol level, against a real tansu and against Apache Kafka 4.4: rewritten
answers, pipelining in request order across forwarded and local APIs, and what an upstream failure
looks like (tansu only: the test kills the upstream, which the shared Kafka must survive)."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.support import realclients as rc
from tests.support.sidecar_util import (
    RawClient,
    Stack,
    Upstream,
    create_partitions,
    create_topic,
    decode,
    delete_topic,
    kio,
    metadata,
    produce_request,
    stack,
    upstream,
)

pytestmark = pytest.mark.clients
__all__ = ["stack", "upstream"]

MS = datetime.timedelta(milliseconds=1)
TOPIC = "pipe"


def heartbeat(group: str, generation: int, member: str) -> object:
    return kio(12, 2, "HeartbeatRequest", group_id=group, generation_id=generation,
               member_id=member)


def offset_fetch(group: str, partitions: int = 3, name: str = TOPIC) -> object:
    topic = kio(9, 7, "OffsetFetchRequestTopic", name=name,
                partition_indexes=tuple(range(partitions)))
    return kio(9, 7, "OffsetFetchRequest", group_id=group, topics=(topic,), require_stable=False)


def list_offsets(partitions: int = 3, name: str = TOPIC) -> object:
    parts = tuple(kio(2, 5, "ListOffsetsPartition", partition_index=p, timestamp=-1)
                  for p in range(partitions))
    topic = kio(2, 5, "ListOffsetsTopic", name=name, partitions=parts)
    return kio(2, 5, "ListOffsetsRequest", replica_id=-1, isolation_level=0, topics=(topic,))


def fetch(max_wait_ms: int, offset: int = 1 << 40, min_bytes: int = 1 << 20,
          name: str = TOPIC) -> object:
    part = kio(1, 11, "FetchPartition", partition=0, fetch_offset=offset,
               partition_max_bytes=1 << 20)
    topic = kio(1, 11, "FetchTopic", topic=name, partitions=(part,))
    return kio(1, 11, "FetchRequest", max_wait=max_wait_ms * MS, min_bytes=min_bytes,
               topics=(topic,), forgotten_topics_data=())


async def started(stack: Stack, up: Upstream | None = None,
                  **configs: str) -> tuple[int, int, int, str]:
    """The upstream (a fresh tansu unless given) + a sidecar + the topic (`configs` its topic
    configs); returns (upstream port, bootstrap port, broker listener port, topic name)."""
    if up is None:
        t = stack.tansu()
        up = Upstream("tansu", t.bootstrap, tansu=t)
    sidecar = stack.sidecar(up.bootstrap)
    name = up.name(TOPIC)
    await create_topic(sidecar.bootstrap, name, 3, configs=configs)
    client = await RawClient.connect(sidecar.port)
    try:
        response = await client.call(metadata([name]))

        async def led() -> bool:  # Kafka answers NOT_LEADER_OR_FOLLOWER for a moment
            listed = await client.call(list_offsets(name=name))
            return all(p.error_code == ErrorCode.none for p in listed.topics[0].partitions)

        await rc.wait_until(led, 15, f"every partition of {name} to have its leader")
    finally:
        client.close()
    [broker] = response.brokers
    upstream_port = int(up.bootstrap.split(",")[0].rsplit(":", 1)[1])
    assert broker.port not in (upstream_port, sidecar.port)
    return upstream_port, sidecar.port, broker.port, name


async def join(client: RawClient, group: str) -> tuple[int, str]:
    """A one-member classic group, joined and synced: (generation_id, member_id)."""
    protocol = kio(11, 3, "JoinGroupRequestProtocol", name="range", metadata=b"\x00\x00")
    joined = await client.call(kio(11, 3, "JoinGroupRequest", group_id=group,
                                   session_timeout=10_000 * MS, rebalance_timeout=10_000 * MS,
                                   member_id="", protocol_type="consumer",
                                   protocols=(protocol,)))
    assert joined.error_code == ErrorCode.none, joined
    assignment = kio(14, 2, "SyncGroupRequestAssignment", member_id=joined.member_id,
                     assignment=b"")
    synced = await client.call(kio(14, 2, "SyncGroupRequest", group_id=group,
                                   generation_id=joined.generation_id,
                                   member_id=joined.member_id, assignments=(assignment,)))
    assert synced.error_code == ErrorCode.none, synced
    return joined.generation_id, joined.member_id


async def test_answers_name_groupcoord_and_api_versions_are_the_intersection(
    stack: Stack, upstream: Upstream
):
    upstream_port, bootstrap, broker_port, name = await started(stack, upstream)
    client = await RawClient.connect(bootstrap)
    try:
        meta = await client.call(metadata())
        assert [(b.host, b.port) for b in meta.brokers] == [("127.0.0.1", broker_port)]
        [topic] = [t for t in meta.topics if t.name == name]
        assert len(topic.partitions) == 3

        found = await client.call(kio(10, 3, "FindCoordinatorRequest", key="g", key_type=0))
        assert (found.error_code, found.port) == (ErrorCode.none, broker_port)

        cluster = await client.call(kio(60, 1, "DescribeClusterRequest",
                                        include_cluster_authorized_operations=False,
                                        endpoint_type=1))
        assert [(b.host, b.port) for b in cluster.brokers] == [("127.0.0.1", broker_port)]

        versions = await client.call(kio(18, 3, "ApiVersionsRequest",
                                          client_software_name="raw", client_software_version="1"))
        ranges = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert ranges[0][1] == 9 and ranges[1][1] == 12  # Produce/Fetch below KIP-951
        assert ranges[28] == (0, 4)  # TxnOffsetCommit: answered here (issue 29)
        assert ranges[68] == ranges[69] == (0, 1)  # KIP-848: answered here (issue 23)
        assert ranges[47] == (0, 0)  # OffsetDelete: groupcoord's, though tansu lacks it
        assert 19 in ranges and 20 in ranges  # CreateTopics/DeleteTopics: the upstream's
        if upstream.kind == "kafka":  # what Kafka has and tansu 0.6 lacks, forwarded
            assert 37 in ranges  # CreatePartitions
    finally:
        client.close()
    assert upstream_port not in {b.port for b in meta.brokers}


async def test_pipelined_requests_are_answered_in_order(stack: Stack, upstream: Upstream):
    _, _, broker_port, name = await started(stack, upstream)
    client = await RawClient.connect(broker_port)
    try:
        # A Fetch that the upstream holds for 300 ms goes first: every local answer behind it
        # must wait for it.
        requests: list[object] = [fetch(300, name=name)]
        expect_reply: list[bool] = [True]
        for i in range(40):
            batch = [produce_request(name, i % 3, [f"k{i}-{j}" for j in range(5)]),
                     heartbeat("pipe-group", 1, "nobody"), offset_fetch("pipe-group", name=name),
                     metadata([name]), list_offsets(name=name),
                     kio(10, 3, "FindCoordinatorRequest", key="pipe-group", key_type=0),
                     kio(18, 3, "ApiVersionsRequest", client_software_name="raw",
                         client_software_version="1")]
            requests += batch
            expect_reply += [True] * len(batch)
            if i % 10 == 9:  # acks=0: no response comes, and none must be waited for
                requests.append(produce_request(name, 0, [f"zero{i}"], acks=0))
                expect_reply.append(False)
        started_at = time.monotonic()
        ids = await client.send(*requests)
        expected = [i for i, reply in zip(ids, expect_reply, strict=True) if reply]
        got = []
        kinds: dict[int, object] = dict(zip(ids, requests, strict=True))
        for _ in expected:
            frame = await client.receive(timeout=20)
            got.append(int.from_bytes(frame[4:8], "big", signed=True))
            request = kinds[got[-1]]
            if type(request).__name__ == "ProduceRequest":
                response = decode(0, 7, frame)
                assert response.responses[0].partition_responses[0].error_code == 0
        assert got == expected
        if upstream.kind == "tansu":  # the Fetch was really waited for (Kafka 4.4 once answered
            # this one after 0.16 s, within its max wait: the order above is what matters)
            assert time.monotonic() - started_at >= 0.25
        # Every produced record landed, the acks=0 ones included (same upstream link, in order):
        # the next record's offset says so, and on Kafka ListOffsets "latest" too (tansu 0.6.0
        # answers it with the last batch's base offset + 1).
        counts = {0: 14 * 5 + 4, 1: 13 * 5, 2: 13 * 5}
        if upstream.kind == "kafka":
            listed = await client.call(list_offsets(name=name))
            assert {p.partition_index: p.offset for p in listed.topics[0].partitions} == counts
        for partition, count in counts.items():
            response = await client.call(produce_request(name, partition, ["last"]))
            assert response.responses[0].partition_responses[0].base_offset == count
    finally:
        client.close()


async def closed_by_the_sidecar(client: RawClient, request: object, what: str) -> None:
    """The sidecar closes `client`'s connection (after sending `request`, if any) within a
    generous deadline, which is what a client needs to fail over. An answer, or an open but
    silent connection at the deadline, fails the test."""
    deadline_s = 15
    try:
        if request is None:
            frame = await client.receive(timeout=deadline_s)
        else:
            frame = await client.call(request, timeout=deadline_s)
    except ConnectionError:
        return
    except TimeoutError:
        pytest.fail(f"{what}: connection still open and silent after {deadline_s}s")
    pytest.fail(f"{what}: answered ({frame!r:.200}) instead of closed")


async def test_upstream_killed_looks_like_a_broker_failure_and_groups_keep_working(stack: Stack):
    """tansu only: the upstream is killed (a relay would not do: the sidecar reaches the brokers
    that Metadata names, not the bootstrap address)."""
    _, bootstrap, broker_port, _ = await started(stack)
    group = "survivor"
    coordinator = await RawClient.connect(broker_port)
    generation, member = await join(coordinator, group)
    part = kio(8, 6, "OffsetCommitRequestPartition", partition_index=1, committed_offset=17,
               committed_leader_epoch=-1, committed_metadata="")
    topic = kio(8, 6, "OffsetCommitRequestTopic", name=TOPIC, partitions=(part,))
    committed = await coordinator.call(kio(8, 6, "OffsetCommitRequest", group_id=group,
                                           generation_id_or_member_epoch=generation,
                                           member_id=member, topics=(topic,)))
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none

    waiting = await RawClient.connect(broker_port)
    await waiting.send(fetch(60_000))  # held upstream for a minute...
    await asyncio.sleep(0.2)
    [tansu] = stack.tansus
    tansu.kill()  # ...until the broker dies: the client's connection is closed, not left hanging
    await closed_by_the_sidecar(waiting, None, "a Fetch parked upstream when the broker died")

    # Refused upstream: answered as a broker whose partition lost its leader (sidecar.dark),
    # retriable, the connection kept open; neither closed nor hung.
    client = await RawClient.connect(broker_port)
    produced: Any = await client.call(produce_request(TOPIC, 0, ["lost"]), timeout=15)
    assert produced.responses[0].partition_responses[0].error_code == (
        ErrorCode.not_leader_or_follower)
    client.close()
    client = await RawClient.connect(bootstrap)
    described: Any = await client.call(metadata([TOPIC]), timeout=15)
    assert [b.port for b in described.brokers] == [broker_port]  # the broker last seen
    assert {(p.error_code, p.leader_id) for p in described.topics[0].partitions} == {
        (ErrorCode.leader_not_available, -1)}
    client.close()

    # Group operations never needed the upstream.
    beat = await coordinator.call(heartbeat(group, generation, member))
    assert beat.error_code == ErrorCode.none
    fetched = await coordinator.call(offset_fetch(group))
    offsets = {p.partition_index: p.committed_offset for p in fetched.topics[0].partitions}
    assert offsets == {0: -1, 1: 17, 2: -1}
    described = await coordinator.call(kio(15, 4, "DescribeGroupsRequest", groups=(group,),
                                           include_authorized_operations=False))
    assert described.groups[0].group_state == "Stable"
    assert [m.member_id for m in described.groups[0].members] == [member]
    fresh = await RawClient.connect(bootstrap)
    found = await fresh.call(kio(10, 3, "FindCoordinatorRequest", key=group, key_type=0))
    assert (found.error_code, found.port) == (ErrorCode.none, broker_port)
    fresh.close()

    # The broker comes back at the same address: forwarding resumes (after the backoff).
    tansu.start()

    async def metadata_works() -> bool:
        client = await RawClient.connect(bootstrap)
        try:
            response = await client.call(metadata(), timeout=5)
            return bool(response.brokers)
        finally:
            client.close()

    await rc.wait_until(metadata_works, 20, "forwarding to resume", interval=0.2)
    beat = await coordinator.call(heartbeat(group, generation, member))
    assert beat.error_code == ErrorCode.none
    coordinator.close()


async def test_large_requests_and_responses_stream_through_in_order(
    stack: Stack, upstream: Upstream
):
    """A 2 MB Produce sent in small pieces and a 2 MB Fetch answer pass through without being held
    whole, while local answers on the same connection keep their place in line."""
    # A 2 MB batch: above Kafka's default max.message.bytes (1 MiB), so the topic allows it.
    _, _, broker_port, name = await started(stack, upstream, **{"max.message.bytes": str(8 << 20)})
    client = await RawClient.connect(broker_port)
    try:
        await client.call(metadata([name]))  # connected upstream: what follows can stream
        keys = [f"big-{i:05d}-" + "x" * 2000 for i in range(1000)]
        big = produce_request(name, 1, keys)
        requests = [offset_fetch("stream-group"), big, heartbeat("stream-group", 1, "nobody"),
                    big, offset_fetch("stream-group")]
        frames = [client.frame(r) for r in requests]
        data = b"".join(frame for _, frame in frames)
        assert len(data) > 4_000_000
        for start in range(0, len(data), 50_000):  # the requests arrive in many pieces
            client.writer.write(data[start:start + 50_000])
            await client.writer.drain()
            await asyncio.sleep(0.001)
        got = []
        for (correlation_id, _), request in zip(frames, requests, strict=True):
            frame = await client.receive(timeout=20)
            got.append(int.from_bytes(frame[4:8], "big", signed=True))
            assert got[-1] == correlation_id
            cls = type(request)
            response = decode(cls.__api_key__, cls.__version__, frame)
            if cls.__api_key__ == 0:
                assert response.responses[0].partition_responses[0].error_code == 0

        # Now the other way: a Fetch answer of ~4 MB, between two local answers.
        part = kio(1, 11, "FetchPartition", partition=1, fetch_offset=0,
                   partition_max_bytes=8 << 20)
        topic = kio(1, 11, "FetchTopic", topic=name, partitions=(part,))
        big_fetch = kio(1, 11, "FetchRequest", max_wait=100 * MS, min_bytes=1,
                        max_bytes=8 << 20, topics=(topic,), forgotten_topics_data=())
        ids = await client.send(offset_fetch("stream-group"), big_fetch,
                                heartbeat("stream-group", 1, "nobody"))
        frames_in = [await client.receive(timeout=20) for _ in ids]
        assert [int.from_bytes(f[4:8], "big", signed=True) for f in frames_in] == ids
        fetched = decode(1, 11, frames_in[1])
        records = fetched.responses[0].partitions[0].records
        assert records is not None and len(records) > 2_000_000
        assert len(frames_in[1]) > 2_000_000
    finally:
        client.close()


async def test_a_changed_topic_is_signalled_to_clients_that_have_not_reread_it(
    stack: Stack, upstream: Upstream
):
    """After partitions are added upstream, a client's Fetch/ListOffsets of the topic answer
    NOT_LEADER_OR_FOLLOWER until it re-reads the topic's metadata (as in standalone mode), so the
    group leader assigns from fresh metadata."""
    _, _, broker_port, name = await started(stack, upstream)
    [sidecar] = stack.sidecars
    client = await RawClient.connect(broker_port)
    try:
        await client.call(produce_request(name, 0, ["before"]))
        plain = await client.call(fetch(1000, offset=0, min_bytes=1, name=name))
        assert plain.responses[0].partitions[0].error_code == ErrorCode.none

        if upstream.kind == "kafka":  # CreatePartitions straight to Kafka
            await create_partitions(upstream.bootstrap, name, 5)
        else:  # tansu 0.6.0 has no CreatePartitions: re-create
            await delete_topic(upstream.bootstrap, name)
            await create_topic(upstream.bootstrap, name, 5)
        await rc.wait_until(lambda: f"{name} has 5 partitions" in sidecar.log(), 10,
                            "the sidecar to see the change")
        signalled = await client.call(fetch(1000, offset=0, min_bytes=1, name=name))
        assert signalled.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
        listed = await client.call(list_offsets(name=name))
        assert {p.error_code for p in listed.topics[0].partitions} == {
            ErrorCode.not_leader_or_follower}
        session = kio(1, 11, "FetchRequest", max_wait=0 * MS, min_bytes=0, session_id=7,
                      session_epoch=3, topics=(), forgotten_topics_data=())
        reset = await client.call(session)  # an incremental fetch may hide the topic: reset it
        assert reset.error_code == ErrorCode.fetch_session_id_not_found

        meta = await client.call(metadata([name]))  # re-read: the signal stops for this client
        assert len(meta.topics[0].partitions) == 5
        await client.call(produce_request(name, 0, ["after"]))
        forwarded = await client.call(fetch(1000, offset=0, min_bytes=1, name=name))
        assert forwarded.responses[0].partitions[0].error_code == ErrorCode.none
        # from the upstream, not the local view
        assert forwarded.responses[0].partitions[0].records
    finally:
        client.close()
