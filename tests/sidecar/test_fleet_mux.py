"""Forwarded group requests of many client connections over one shared link per fleet member
(coordinator.sidecar.fleet_mux), on real sockets: two in-process members (test_forward's `fleet`),
clients reaching member A for groups member B owns.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from coordinator.sidecar import fleet_mux
from coordinator.sidecar.fleet_mux import MuxLink
from coordinator.sidecar.placement import Placement, Where
from coordinator.sidecar.proxy import SidecarConnection
from coordinator.sidecar.upstream import Broker
from protocol import apis
from tests.sidecar import test_forward
from tests.sidecar.test_forward import (
    MS,
    NONE,
    NOT_COORDINATOR,
    committed,
    heartbeat,
    join,
    offset_fetch,
)
from tests.support.realclients import wait_until
from tests.support.sidecar_util import RawClient, decode, kio

REBALANCE_IN_PROGRESS = 27
UNKNOWN_TOPIC_OR_PARTITION = 3
fleet = test_forward.fleet  # the fixture: two in-process members


def from_peers(member: Any) -> list[SidecarConnection]:
    conns = member.server.connections
    return [c for c in conns if isinstance(c, SidecarConnection) and c.from_peer]


def join_request(group: str, member: str = "") -> Any:
    protocol = kio(11, 3, "JoinGroupRequestProtocol", name="range", metadata=b"\x00\x00")
    return kio(
        11,
        3,
        "JoinGroupRequest",
        group_id=group,
        session_timeout=10_000 * MS,
        rebalance_timeout=10_000 * MS,
        member_id=member,
        protocol_type="consumer",
        protocols=(protocol,),
    )


def commit_request(group: str, offset: int, topic_name: str = "orders") -> Any:
    """A simple (generation -1) commit of partition 1 of a topic (the test topic by default)."""
    part = kio(8, 6, "OffsetCommitRequestPartition", partition_index=1, committed_offset=offset,
               committed_leader_epoch=-1, committed_metadata="")  # fmt: skip
    topic = kio(8, 6, "OffsetCommitRequestTopic", name=topic_name, partitions=(part,))
    return kio(8, 6, "OffsetCommitRequest", group_id=group, generation_id_or_member_epoch=-1,
               member_id="", topics=(topic,))  # fmt: skip


async def answers(client: RawClient, ids: list[int], sent: list[Any]) -> list[Any]:
    """The answers to `sent` (sent with `ids`), each checked to carry its request's id."""
    out = []
    for correlation_id, request in zip(ids, sent, strict=True):
        frame = await client.receive()
        assert int.from_bytes(frame[4:8], "big") == correlation_id
        cls = type(request)
        out.append(decode(cls.__api_key__, cls.__version__, frame))
    return out


async def test_client_connections_share_one_link_and_one_closing_leaves_it(fleet: Any) -> None:
    a, b = await fleet(), await fleet()
    a.table.where["x"] = b.owner
    clients = [await RawClient.connect(a.port) for _ in range(3)]
    try:
        for client in clients:
            assert (await client.call(heartbeat("x"))).error_code != NOT_COORDINATOR
        [link] = from_peers(b)  # one link for all three
        assert link.multiplexed  # it said hello: answers leave when ready
        clients[0].close()
        for client in clients[1:]:
            assert (await client.call(heartbeat("x"))).error_code != NOT_COORDINATOR
        assert from_peers(b) == [link]
    finally:
        for client in clients:
            client.close()


async def test_interleaved_clients_with_the_same_ids_keep_their_own_order(fleet: Any) -> None:
    """Two client connections whose correlation ids are the same (both count from 1), each with
    a pipeline of commits and fetches of its own group, interleaved on one link: each gets its own
    answers, with its own ids, in its order, and each fetch sees the commit just before it."""
    a, b = await fleet(), await fleet()
    a.table.where["g1"] = a.table.where["g2"] = b.owner
    one, two = await RawClient.connect(a.port), await RawClient.connect(a.port)
    try:
        plans = {
            client: [
                r
                for k in range(40)
                for r in (commit_request(group, 1000 * n + k), offset_fetch(group))
            ]
            for n, (client, group) in enumerate(((one, "g1"), (two, "g2")), 1)
        }
        sent = {client: await client.send(*plan) for client, plan in plans.items()}
        assert sent[one] == sent[two]  # the same correlation ids on both
        for n, client in enumerate((one, two), 1):
            got = await answers(client, sent[client], plans[client])
            for k in range(40):
                done, fetched = got[2 * k], got[2 * k + 1]
                assert done.topics[0].partitions[0].error_code == NONE
                assert committed(fetched) == 1000 * n + k
        assert len(from_peers(b)) == 1
    finally:
        one.close()
        two.close()


async def test_a_parked_join_of_one_client_does_not_hold_up_another(fleet: Any) -> None:
    """The owner answers a shared link's requests as they are ready: client B's JoinGroup waits
    for the rebalance, and client A's requests behind it on the link are answered meanwhile; B's
    own requests behind its join still come after its join's answer."""
    a, b = await fleet(), await fleet()
    a.table.where["x"] = a.table.where["y"] = b.owner
    first, second = await RawClient.connect(a.port), await RawClient.connect(a.port)
    try:
        generation, member = await join(first, "x")
        parked = [join_request("x"), offset_fetch("y")]
        ids = await second.send(*parked)  # the join waits for `member` to join again

        async def rebalancing() -> bool:  # answered while the join is parked
            beat = await first.call(heartbeat("x", generation, member), timeout=5)
            return bool(beat.error_code == REBALANCE_IN_PROGRESS)

        await wait_until(rebalancing, 10, "A's heartbeat to see the rebalance")
        assert (await first.call(commit_request("y", 5))).topics[0].partitions[0].error_code == 0
        rejoined = await first.call(join_request("x", member))  # completes the rebalance
        assert rejoined.error_code == NONE
        joined, fetched = await answers(second, ids, parked)  # in B's order, with B's ids
        assert joined.error_code == NONE and joined.generation_id == generation + 1
        assert committed(fetched) == -1  # read when it arrived, before A's commit
    finally:
        first.close()
        second.close()


async def test_a_link_that_dies_fails_every_client_on_it(fleet: Any) -> None:
    """An owner that takes requests and dies before answering: each client connection's request
    in flight on the shared link is answered NOT_COORDINATOR, and the clients stay connected."""
    a = await fleet()
    accepted: list[asyncio.StreamWriter] = []
    arrived = asyncio.Event()
    seen = bytearray()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        while data := await reader.read(65536):
            seen.extend(data)
            if seen.count(b"hb-group") >= 2:
                arrived.set()

    owner = await asyncio.start_server(silent, "127.0.0.1", 0)
    a.table.where["hb-group"] = Where(Placement.REMOTE, owner.sockets[0].getsockname()[:2])
    clients = [await RawClient.connect(a.port) for _ in range(2)]
    try:
        ids = [await client.send(heartbeat("hb-group")) for client in clients]
        await asyncio.wait_for(arrived.wait(), 10)
        assert len(accepted) == 1  # both requests on one link
        assert fleet_mux.is_hello(bytes(seen))  # which said hello first
        accepted[0].transport.abort()
        for client, [correlation_id] in zip(clients, ids, strict=True):
            frame = await client.receive()
            assert int.from_bytes(frame[4:8], "big") == correlation_id
            assert decode(12, 2, frame).error_code == NOT_COORDINATOR
        for client in clients:  # still open: a fresh link for the next request
            assert (await client.call(heartbeat("mine"))).error_code != NOT_COORDINATOR
    finally:
        for client in clients:
            client.close()
        owner.close()


async def test_an_unreadable_request_is_refused_alone_on_the_shared_link(fleet: Any) -> None:
    """The owner refuses a request it cannot read (a bare header), instead of closing the link
    that other clients share: the sender's connection is closed, the other client is served."""
    a, b = await fleet(), await fleet()
    a.table.where["x"] = b.owner
    bad, good = await RawClient.connect(a.port), await RawClient.connect(a.port)
    try:
        assert (await good.call(heartbeat("x"))).error_code != NOT_COORDINATOR
        [link] = from_peers(b)
        body = struct.pack(">h", 1) + b"x" + b"\x00"  # Heartbeat v0 cut short
        frame = struct.pack(">hhih", apis.HEARTBEAT, 0, 1, 3) + b"raw" + body
        bad.writer.write(struct.pack(">i", len(frame)) + frame)
        try:
            await bad.receive()
            raise AssertionError("the malformed request was answered")
        except ConnectionError:
            pass
        assert (await good.call(heartbeat("x"))).error_code != NOT_COORDINATOR
        assert from_peers(b) == [link]
    finally:
        bad.close()
        good.close()


def test_link_ids_carry_the_tag_and_skip_those_still_waiting() -> None:
    """A link's correlation ids carry the client connection's tag in their top bits, wrap around
    below it, and never reuse one whose request is still unanswered (a JoinGroup can be parked
    for minutes)."""
    link = MuxLink(Broker("127.0.0.1", 9))
    tag = fleet_mux.TAGS - 1
    high = tag << 16
    link._pending = {high | 0xFFFF: (1, print), high | 0: (2, print), high | 2: (3, print)}
    link._next_id = 0xFFFD
    taken = []
    for _ in range(3):
        taken.append(link._take_id(tag))
        link._pending[taken[-1]] = (0, print)
    assert taken == [high | 0xFFFE, high | 1, high | 3]
    assert {fleet_mux.tag_of(i) for i in taken} == {tag}
    assert max(taken) <= 0x7FFFFFFF  # a valid (non-negative) int32
    # every id of a tag waiting: the next tag's (never a loop without end)
    link._pending = {(5 << 16) | seq: (0, print) for seq in range(1 << 16)}
    assert fleet_mux.tag_of(link._take_id(5)) == 6


async def test_one_clients_topic_look_up_holds_only_its_own_requests(fleet: Any) -> None:
    """On the owner, a commit naming a topic it does not know waits for a look-up upstream, and
    so do the requests its client connection sent after it (in order), but not another client
    connection's requests on the same shared link."""
    a, b = await fleet(), await fleet()
    a.table.where["x"] = b.owner
    asked: list[Any] = []
    answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def look_up(names: Any) -> asyncio.Future[None]:
        asked.append(sorted(names))
        return answered

    b.sidecar.topic_lookup.look_up = look_up  # type: ignore[method-assign]
    one, two = await RawClient.connect(a.port), await RawClient.connect(a.port)
    try:
        held = [commit_request("x", 5, "fresh"), commit_request("x", 7)]
        ids = await one.send(*held)
        await wait_until(lambda: asked == [["fresh"]], 10, "the owner to look up 'fresh'")
        fetched = await two.call(offset_fetch("x"), timeout=5)  # not held by one's look-up
        assert committed(fetched) == -1  # one's second commit waits behind its first
        answered.set_result(None)
        first, second = await answers(one, ids, held)
        assert first.topics[0].partitions[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert second.topics[0].partitions[0].error_code == NONE
        assert committed(await two.call(offset_fetch("x"))) == 7
    finally:
        one.close()
        two.close()


def test_the_hello_is_recognised_only_as_such() -> None:
    hello = fleet_mux.hello_frame(7)
    assert fleet_mux.is_hello(hello)
    assert struct.unpack_from(">ihhi", hello)[1:] == (18, 0, 7)
    other = hello[:-1] + b"y"
    assert not fleet_mux.is_hello(other)
    assert not fleet_mux.is_hello(hello[:10])


async def test_an_owner_answering_in_order_is_matched_as_well(fleet: Any) -> None:
    """A member that does not know the hello answers its link in request order (an older
    member): the shared link matches answers by id either way."""
    a, b = await fleet(), await fleet()
    a.table.where["x"] = b.owner
    original = SidecarConnection._multiplex
    SidecarConnection._multiplex = lambda self: None  # type: ignore[method-assign]
    try:
        one, two = await RawClient.connect(a.port), await RawClient.connect(a.port)
        plans = [[commit_request("x", k), offset_fetch("x")] * 5 for k in (1, 2)]
        ids = [await c.send(*p) for c, p in zip((one, two), plans, strict=True)]
        for client, sent, plan in zip((one, two), ids, plans, strict=True):
            got = await answers(client, sent, plan)
            assert all(r.topics[0].partitions[0].error_code == NONE for r in got[::2])
        [link] = from_peers(b)
        assert not link.multiplexed
        one.close()
        two.close()
    finally:
        SidecarConnection._multiplex = original  # type: ignore[method-assign]


async def test_a_client_moves_to_its_own_link_only_once_the_shared_one_is_drained(
    fleet: Any,
) -> None:
    """ShareFetch keeps a link of its client connection's own; pipelined with heartbeats of the
    same client to the same owner, each request reaches the owner only after the answers of
    those before it on the other link: the owner sees the client's requests in its order."""
    a = await fleet()
    arrivals: list[tuple[int, int]] = []  # (api key, correlation id as the client sent it)
    answered: list[int] = []

    async def owner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                size = await reader.readexactly(4)
                frame = size + await reader.readexactly(int.from_bytes(size, "big"))
            except asyncio.IncompleteReadError:
                return
            api_key = int.from_bytes(frame[4:6], "big")
            if api_key == 18:
                continue  # the shared link's hello: left unanswered
            arrivals.append((api_key, len(arrivals)))
            await asyncio.sleep(0.05)  # slow: a request sent too early would arrive meanwhile
            answered.append(len(arrivals))
            writer.write(struct.pack(">i", 6) + frame[8:12] + b"\x00\x00")

    server = await asyncio.start_server(owner, "127.0.0.1", 0)
    a.table.where["g"] = Where(Placement.REMOTE, server.sockets[0].getsockname()[:2])
    fetch = kio(78, 1, "ShareFetchRequest", group_id="g", member_id="m", share_session_epoch=0,
                max_wait=0 * MS, min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10,
                topics=(), forgotten_topics_data=())  # fmt: skip
    client = await RawClient.connect(a.port)
    try:
        requests = [heartbeat("g"), heartbeat("g"), fetch, heartbeat("g")]
        ids = await client.send(*requests)
        for correlation_id in ids:  # every one answered, in order, with its own id
            frame = await client.receive()
            assert int.from_bytes(frame[4:8], "big") == correlation_id
        assert [api for api, _ in arrivals] == [12, 12, 78, 12]
        # the ShareFetch arrived once both heartbeats were answered, the last heartbeat once
        # the ShareFetch was: each arrival saw every answer before it
        assert answered == [1, 2, 3, 4]
    finally:
        client.close()
        server.close()
