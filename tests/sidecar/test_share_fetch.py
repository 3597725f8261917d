"""KIP-932 through the sidecar at the wire: ShareFetch and ShareAcknowledge (kio-encoded) against a
real sidecar in front of tansu and Apache Kafka 4.4: share sessions, acquire / accept / release /
reject, lock expiry, and durability across a kill -9 of the sidecar."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.support import realclients as rc
from tests.support.share_wire import (
    ACCEPT,
    REJECT,
    RELEASE,
    ack_errors,
    deliveries,
    share_ack,
    share_fetch,
    topic_id,
)
from tests.support.sidecar_util import (
    RawClient,
    Stack,
    Upstream,
    create_topic,
    kio,
    produce,
    produce_request,
    stack,
    upstream,
)

pytestmark = pytest.mark.clients
__all__ = ["stack", "upstream"]

NONE = int(ErrorCode.none)


async def _ready(stack: Stack, upstream: Upstream, *extra: str) -> tuple[RawClient, str, object]:
    topic, group = upstream.name("shares"), upstream.name("sg")
    sidecar = stack.sidecar(upstream.bootstrap, *extra)
    await create_topic(sidecar.bootstrap, topic, 1)
    client = await RawClient.connect(sidecar.port)
    tid = await rc.wait_until(lambda: _known(client, topic), 20, "the topic id")
    return client, topic, (group, tid)


async def _known(client: RawClient, topic: str) -> object:
    try:
        return await topic_id(client, topic)
    except AssertionError:
        return None


async def _fetch_until(client: RawClient, request_for: object, want: int, what: str) -> list:
    """ShareFetch again (incrementing epochs through `request_for(epoch)`) until `want` offsets
    were acquired in all; the deliveries' acquired ranges."""
    got: list = []
    epoch = [1]

    async def more() -> bool:
        response = await client.call(request_for(epoch[0]))  # type: ignore[operator]
        assert response.error_code == NONE, response
        epoch[0] += 1
        for d in deliveries(response).values():
            assert d.error == NONE, d
            got.extend(d.acquired)
        return sum(last - first + 1 for first, last, _ in got) >= want

    await rc.wait_until(more, 20, what)
    return got


@pytest.mark.parametrize("version", [1, 2])
async def test_acquire_accept_release_reject(stack: Stack, upstream: Upstream,
                                             version: int) -> None:
    client, topic, (group, tid) = await _ready(stack, upstream)
    try:
        # Epoch 0 opens the session; the share partition starts at the end (latest).
        opened = await client.call(share_fetch(group, "m1", 0, tid, version=version))
        assert opened.error_code == NONE
        assert opened.acquisition_lock_timeout.total_seconds() == 30
        await produce(upstream.bootstrap, topic, [f"k{i}" for i in range(5)])
        got = await _fetch_until(
            client, lambda e: share_fetch(group, "m1", e, tid, max_wait_ms=500,
                                          version=version), 5, "5 records acquired")
        assert [o for f, last, _ in got for o in range(f, last + 1)] == [0, 1, 2, 3, 4]
        assert {c for *_, c in got} == {1}
        # Another member sees nothing while m1 holds them.
        other = await client.call(share_fetch(group, "m2", 0, tid, max_wait_ms=200))
        assert deliveries(other)[0].acquired == []
        # m1: accept 0-1, release 2-3, reject 4.
        acked = await client.call(share_ack(group, "m1", 2 + len(got) - 1, tid, {0: [
            (0, 1, ACCEPT), (2, 3, RELEASE), (4, 4, REJECT)]}, version=version))
        assert acked.error_code == NONE, acked
        assert ack_errors(acked) == {0: NONE}
        # m2 now gets 2-3, delivered a second time; 4 was archived.
        again = await client.call(share_fetch(group, "m2", 1, tid, max_wait_ms=2000))
        assert deliveries(again)[0].acquired == [(2, 3, 2)]
        # Acknowledging what another member holds is refused.
        stolen = await client.call(share_ack(group, "m1", 3 + len(got) - 1, tid,
                                             {0: [(2, 3, ACCEPT)]}))
        assert ack_errors(stolen) == {0: int(ErrorCode.invalid_record_state)}
    finally:
        client.close()


async def test_share_session_epochs(stack: Stack, upstream: Upstream) -> None:
    client, _, (group, tid) = await _ready(stack, upstream)
    try:
        def code(response: object) -> int:
            return int(response.error_code)  # type: ignore[attr-defined]

        # No session yet: an incremental epoch, a final epoch, an acknowledgement.
        assert code(await client.call(share_fetch(group, "m", 1, tid))) == \
            ErrorCode.share_session_not_found
        assert code(await client.call(share_fetch(group, "m", -1, None, partitions=()))) == \
            ErrorCode.share_session_not_found
        assert code(await client.call(share_ack(group, "m", 1, tid, {0: [(0, 0, ACCEPT)]}))) == \
            ErrorCode.share_session_not_found
        # Epoch 0 with acknowledgements: INVALID_REQUEST (Kafka's newContext).
        assert code(await client.call(share_fetch(group, "m", 0, tid,
                                                  acks={0: [(0, 0, ACCEPT)]}))) == \
            ErrorCode.invalid_request
        assert code(await client.call(share_fetch(group, "m", 0, tid))) == NONE
        # The epoch must be the session's: 1 next, not 2; a ShareAcknowledge at 0 is refused.
        assert code(await client.call(share_fetch(group, "m", 2, tid))) == \
            ErrorCode.invalid_share_session_epoch
        assert code(await client.call(share_ack(group, "m", 0, tid, {0: [(0, 0, ACCEPT)]}))) == \
            ErrorCode.invalid_share_session_epoch
        assert code(await client.call(share_fetch(group, "m", 1, tid))) == NONE
        assert code(await client.call(share_fetch(group, "m", 2, tid))) == NONE
        # The final epoch may not fetch; without partitions it closes the session.
        assert code(await client.call(share_fetch(group, "m", -1, tid))) == \
            ErrorCode.invalid_request
        assert code(await client.call(share_fetch(group, "m", -1, None, partitions=()))) == NONE
        assert code(await client.call(share_fetch(group, "m", 3, tid))) == \
            ErrorCode.share_session_not_found
    finally:
        client.close()


async def test_lock_expiry_and_delivery_limit(stack: Stack, upstream: Upstream) -> None:
    """Records whose acquisition lock ran out go to the next member with their delivery count
    up; at the delivery limit they are archived instead."""
    client, topic, (group, tid) = await _ready(
        stack, upstream, "--share-record-lock-duration-ms", "1000",
        "--share-delivery-count-limit", "2")
    try:
        await client.call(share_fetch(group, "m1", 0, tid))
        await produce(upstream.bootstrap, topic, ["a", "b", "c"])
        got = await _fetch_until(client, lambda e: share_fetch(group, "m1", e, tid,
                                                               max_wait_ms=500), 3, "3 acquired")
        assert {c for *_, c in got} == {1}
        # m2 waits for them: the lock expires after a second and the waiting fetch wakes.
        started = asyncio.get_running_loop().time()
        second = await client.call(share_fetch(group, "m2", 0, tid, max_wait_ms=5000))
        assert deliveries(second)[0].acquired == [(0, 2, 2)]
        assert asyncio.get_running_loop().time() - started < 4.5
        # Delivered twice (the limit): after this lock expires they are archived, not offered.
        third = await client.call(share_fetch(group, "m3", 0, tid, max_wait_ms=2500))
        assert deliveries(third)[0].acquired == []
        await produce(upstream.bootstrap, topic, ["d"])
        fourth = await client.call(share_fetch(group, "m3", 1, tid, max_wait_ms=3000))
        assert deliveries(fourth)[0].acquired == [(3, 3, 1)]
    finally:
        client.close()


async def test_acknowledged_stay_acknowledged_across_kill_9(stack: Stack,
                                                            upstream: Upstream) -> None:
    """kill -9 of the sidecar: what was acknowledged is never delivered again, what was acquired
    and not acknowledged is; the share partition's start offset survives too (a restart does
    not jump to the latest offset past records produced meanwhile)."""
    client, topic, (group, tid) = await _ready(stack, upstream)
    sidecar = stack.sidecars[-1]
    try:
        await client.call(share_fetch(group, "m1", 0, tid))  # starts at the end: offset 0
        await produce(upstream.bootstrap, topic, [f"k{i}" for i in range(6)])
        got = await _fetch_until(client, lambda e: share_fetch(group, "m1", e, tid,
                                                               max_wait_ms=500), 6, "6 acquired")
        epoch = 1 + len(got)
        acked = await client.call(share_ack(group, "m1", epoch, tid, {0: [(0, 2, ACCEPT)]}))
        assert ack_errors(acked) == {0: NONE}
    finally:
        client.close()
    sidecar.kill()
    await produce(upstream.bootstrap, topic, ["k6"])  # while it is down
    restarted = stack.sidecar(upstream.bootstrap, data_dir=sidecar.data_dir)
    client = await RawClient.connect(restarted.port)
    try:
        await rc.wait_until(lambda: _known(client, topic), 20, "the topic id again")
        got = await _fetch_until(client, lambda e: share_fetch(group, "m2", e - 1, tid,
                                                               max_wait_ms=500), 4, "4 redelivered")
        offsets = sorted(o for f, last, _ in got for o in range(f, last + 1))
        assert offsets == [3, 4, 5, 6], got
    finally:
        client.close()


async def test_a_closed_connection_gives_its_records_back(stack: Stack,
                                                          upstream: Upstream) -> None:
    """Kafka 4.1+ (KAFKA-19015): a share consumer's connection dropping ends its share session,
    and what it had acquired goes to the others at once, not at the lock's expiry (30 s)."""
    client, topic, (group, tid) = await _ready(stack, upstream)
    other = await RawClient.connect(stack.sidecars[-1].port)
    try:
        await client.call(share_fetch(group, "m1", 0, tid))
        await produce(upstream.bootstrap, topic, ["a", "b"])
        await _fetch_until(client, lambda e: share_fetch(group, "m1", e, tid, max_wait_ms=500),
                           2, "2 acquired")
        client.close()
        response = await other.call(share_fetch(group, "m2", 0, tid, max_wait_ms=5000))
        assert deliveries(response)[0].acquired == [(0, 1, 2)]
    finally:
        other.close()
        client.close()


async def test_standalone_refuses_share_fetch_with_an_error_code(server: Any) -> None:
    """Without --upstream there are no records to share: ShareFetch and ShareAcknowledge get
    UNSUPPORTED_VERSION with a message (Kafka's answer with share groups off), on an open
    connection; ApiVersions does not offer them."""
    if os.environ.get("GROUPCOORD_TEST_BROKER") == "tansu":
        pytest.skip("groupcoord's own standalone mode")
    broker = server()
    client = await RawClient.connect(broker.port)
    try:
        versions = await client.call(kio(18, 3, "ApiVersionsRequest",
                                         client_software_name="t", client_software_version="1"))
        assert not {78, 79} & {k.api_key for k in versions.api_keys}
        tid = uuid.uuid4()
        for version in (1, 2):
            fetched = await client.call(share_fetch("g", "m", 0, tid, version=version))
            assert fetched.error_code == ErrorCode.unsupported_version
            assert "sidecar" in (fetched.error_message or "")
            acked = await client.call(share_ack("g", "m", 1, tid, {0: [(0, 0, ACCEPT)]},
                                                version=version))
            assert acked.error_code == ErrorCode.unsupported_version
    finally:
        client.close()


@pytest.mark.parametrize(("isolation", "delivered"), [
    ("read_committed", [0, 5]), (None, [0, 2, 3, 5])], ids=["read_committed", "default"])
async def test_aborted_transactions_are_delivered_only_under_read_uncommitted(
        stack: Stack, upstream: Upstream, isolation: str | None, delivered: list[int]) -> None:
    """share.isolation.level read_committed: records of an aborted transaction are never
    acquired; Kafka's default, read_uncommitted, delivers them. Transaction markers never."""
    from aiokafka import AIOKafkaProducer

    from tests.support.share_util import set_group_configs

    if upstream.kind == "tansu":  # its transaction is refused (UnknownError) at the first send
        pytest.skip("aiokafka's transactional producer fails against tansu 0.6.0")
    client, topic, (group, tid) = await _ready(stack, upstream)
    if isolation is not None:
        set_group_configs(stack.sidecars[-1].bootstrap, group,
                          {"share.isolation.level": isolation})
    producer = AIOKafkaProducer(bootstrap_servers=upstream.bootstrap,
                                transactional_id=upstream.name("txn"), request_timeout_ms=10000)
    try:
        await client.call(share_fetch(group, "m1", 0, tid))
        await producer.start()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"committed-before", partition=0)
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"aborted-1", partition=0)
        await producer.send_and_wait(topic, b"aborted-2", partition=0)
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"committed-after", partition=0)
        # Offsets: 0 committed-before, 1 its marker, 2-3 aborted, 4 the abort marker,
        # 5 committed-after, 6 its marker.
        got = await _fetch_until(client, lambda e: share_fetch(group, "m1", e, tid,
                                                               max_wait_ms=500),
                                 len(delivered), f"{len(delivered)} acquired")
        assert sorted(o for f, last, _ in got for o in range(f, last + 1)) == delivered, got
    finally:
        await producer.stop()
        client.close()


async def test_records_produced_right_after_the_assignment_are_delivered(
        stack: Stack, upstream: Upstream) -> None:
    """A share partition starts when the heartbeat's assignment names it (Kafka initializes it
    before assigning it): records produced after the member got its assignment, and before its
    first ShareFetch, are delivered under share.auto.offset.reset latest."""
    from tests.serve.test_share_group_wire import heartbeat

    client, topic, (group, tid) = await _ready(stack, upstream)
    try:
        joined = await client.call(heartbeat(group, "m1", 0, (topic,)))
        assert joined.error_code == NONE, joined

        async def assigned() -> bool:
            response = await client.call(heartbeat(group, "m1", 1, None))
            return response.error_code == NONE and response.assignment is not None

        if joined.assignment is None:
            await rc.wait_until(assigned, 20, "the assignment")

        async def started() -> bool:  # (the test cannot see the start; a short wait for it)
            return bool(stack.sidecars[-1].log().count("starts at offset"))

        await rc.wait_until(started, 20, "the share partition to start")
        await produce(upstream.bootstrap, topic, ["a", "b", "c"])
        got = await _fetch_until(
            client, lambda e: share_fetch(group, "m1", e - 1, tid, max_wait_ms=500), 3,
            "the 3 records")
        assert sorted(o for f, last, _ in got for o in range(f, last + 1)) == [0, 1, 2]
    finally:
        client.close()


async def test_a_caught_up_partition_does_not_hold_up_the_others(stack: Stack,
                                                                 upstream: Upstream) -> None:
    """A ShareFetch of two partitions, records in only one: they come at once, not after the
    empty partition's upstream long poll (MaxWaitMs) ran out."""
    topic, group = upstream.name("shares2"), upstream.name("sg2")
    sidecar = stack.sidecar(upstream.bootstrap)
    await create_topic(sidecar.bootstrap, topic, 2)
    client = await RawClient.connect(sidecar.port)
    producer = await RawClient.connect(int(upstream.bootstrap.rsplit(":", 1)[1]))
    try:
        tid = await rc.wait_until(lambda: _known(client, topic), 20, "the topic id")
        opened = await client.call(share_fetch(group, "m1", 0, tid, (0, 1)))
        assert opened.error_code == NONE, opened
        produced = await producer.call(produce_request(topic, 1, ["a", "b", "c"]))
        assert produced.responses[0].partition_responses[0].error_code == NONE, produced
        loop = asyncio.get_running_loop()
        started = loop.time()
        got = await client.call(share_fetch(group, "m1", 1, tid, (0, 1), max_wait_ms=8000),
                                timeout=20)
        took = loop.time() - started
        assert deliveries(got)[1].offsets == [0, 1, 2], got
        assert took < 4, f"{took:.1f} s: held up by partition 0's long poll"
    finally:
        client.close()
        producer.close()
