"""Group API routing in a sidecar fleet (coordinator.sidecar.forward).

Pure: which groups a request names, splitting batched requests by destination and merging the
parts' answers, for every version of DescribeGroups, DeleteGroups and OffsetFetch v8+.
Sockets: two in-process Server+Sidecar members, each with a fleet listener and a table Locator;
requests for a group owned by the other member are answered by that member's core. No upstream
is needed (group APIs never go there) and none is started.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import struct
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from coordinator.core import messages as m
from coordinator.core.effects import CoordinatorConfig
from coordinator.core.topics import TopicCatalog, TopicInfo
from coordinator.serve import adapters
from coordinator.serve.listener import Listening, start_listener
from coordinator.serve.server import Server, ServerOptions
from coordinator.sidecar.forward import group_ids, merge, merge_list_groups, split
from coordinator.sidecar.placement import LOADING, LOCAL, UNKNOWN, Placement, Where
from coordinator.sidecar.proxy import Sidecar, SidecarConnection, SidecarOptions
from protocol import apis, codec
from protocol.codec import RequestHeader
from tests.protocol.test_codec import request_frame
from tests.support.realclients import free_port, wait_until
from tests.support.sidecar_util import RawClient, Relay, decode, kio

MS = datetime.timedelta(milliseconds=1)
TOPIC = "orders"
NONE, NOT_COORDINATOR = ErrorCode.none, ErrorCode.not_coordinator
LOAD_IN_PROGRESS = ErrorCode.coordinator_load_in_progress
R1, R2 = Where(Placement.REMOTE, ("10.0.0.1", 9)), Where(Placement.REMOTE, ("10.0.0.2", 9))
WHERE = {"a": LOCAL, "b": R1, "c": LOADING, "d": R2, "e": LOCAL, "f": UNKNOWN}


def request(api_key: int, version: int, name: str, /, **fields: Any) -> Any:
    """A kio request (or nested) entity; fields the version lacks are dropped."""
    cls = getattr(apis.request_module(api_key, version), name)
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in known})


def versions(api_key: int, low: int | None = None) -> list[int]:
    spec = apis.APIS[api_key]
    return list(range(low if low is not None else spec.min_version, spec.max_version + 1))


def throttled(response: Any, ms: int) -> Any:
    if not hasattr(response, "throttle_time"):
        return response
    return dataclasses.replace(response, throttle_time=i32Timedelta.parse(ms * MS))


def split_and_check(header: RequestHeader, req: Any) -> list[Any]:
    parts = split(header, req, WHERE.__getitem__)
    assert [p.where for p in parts] == [LOCAL, R1, LOADING, R2, UNKNOWN]
    assert [group_ids(header, p.request) for p in parts] == [
        ["a", "e"],
        ["b", "b"],
        ["c"],
        ["d"],
        ["f"],
    ]
    for part in parts:  # each part is a request the owner can read: same header, same version
        frame = codec.encode_request(header, part.request)
        assert codec.decode_request(frame[4:]) == (header, part.request)
    return parts


def merged_round_trip(header: RequestHeader, req: Any, responses: list[Any]) -> Any:
    response = merge(header, req, responses)
    return codec.decode_response(header, codec.encode_response(header, response))


# ------------------------------------------------------------------------------ pure: group ids


def test_group_ids_of_every_group_api() -> None:
    def h(api_key: int, version: int) -> RequestHeader:
        return RequestHeader(api_key, version, 1, "c")

    hb = request(
        12,
        4,
        "HeartbeatRequest",
        group_id="g",
        generation_id=1,
        member_id="m",
        group_instance_id=None,
    )
    assert group_ids(h(12, 4), hb) == ["g"]
    fetch7 = request(9, 7, "OffsetFetchRequest", group_id="g7", topics=None, require_stable=False)
    assert group_ids(h(9, 7), fetch7) == ["g7"]
    group = request(9, 8, "OffsetFetchRequestGroup", group_id="g8", topics=None)
    fetch8 = request(9, 8, "OffsetFetchRequest", groups=(group, group), require_stable=False)
    assert group_ids(h(9, 8), fetch8) == ["g8", "g8"]
    assert group_ids(
        h(15, 5),
        request(
            15, 5, "DescribeGroupsRequest", groups=("x", "y"), include_authorized_operations=False
        ),
    ) == ["x", "y"]
    assert group_ids(h(42, 2), request(42, 2, "DeleteGroupsRequest", groups_names=("z",))) == ["z"]
    assert group_ids(h(16, 4), request(16, 4, "ListGroupsRequest", states_filter=())) == []


def test_a_request_in_one_place_is_one_part_holding_the_request_itself() -> None:
    header = RequestHeader(15, 5, 7, "c")
    req = request(
        15, 5, "DescribeGroupsRequest", groups=("b", "b"), include_authorized_operations=False
    )
    [part] = split(header, req, WHERE.__getitem__)
    assert part.where == R1 and part.request is req
    [part] = split(header, dataclasses.replace(req, groups=()), WHERE.__getitem__)
    assert part.where == LOCAL
    hb = request(
        12,
        4,
        "HeartbeatRequest",
        group_id="c",
        generation_id=1,
        member_id="m",
        group_instance_id=None,
    )
    [part] = split(RequestHeader(12, 4, 7, "c"), hb, WHERE.__getitem__)
    assert part.where == LOADING and part.request is hb


# ------------------------------------------------------------------ pure: split and merge, per API


@pytest.mark.parametrize("version", versions(apis.DESCRIBE_GROUPS))
def test_describe_groups_split_and_merge(version: int) -> None:
    header = RequestHeader(apis.DESCRIBE_GROUPS, version, 42, "client")
    req = request(
        15,
        version,
        "DescribeGroupsRequest",
        groups=("a", "b", "c", "d", "e", "f", "b"),
        include_authorized_operations=False,
    )
    local, remote1, loading, _, unknown = split_and_check(header, req)

    def described(part: Any, state: str) -> Any:
        groups = tuple(
            m.DescribedGroup(NONE, g, state, "consumer", "range", ()) for g in part.request.groups
        )
        return adapters.to_response(header, m.DescribeGroupsResult(groups))

    responses = [
        described(local, "Stable"),
        throttled(described(remote1, "Empty"), 7),
        adapters.error_response(header, loading.request, LOAD_IN_PROGRESS),
        # R2's part never answered (its member failed before the router made its error)
        adapters.error_response(header, unknown.request, NOT_COORDINATOR),
    ]
    response = merged_round_trip(header, req, responses)
    assert [(g.group_id, g.error_code, g.group_state) for g in response.groups] == [
        ("a", NONE, "Stable"),
        ("b", NONE, "Empty"),
        ("c", LOAD_IN_PROGRESS, ""),
        ("d", NOT_COORDINATOR, ""),
        ("e", NONE, "Stable"),
        ("f", NOT_COORDINATOR, ""),
        ("b", NONE, "Empty"),
    ]
    if version >= 1:
        assert response.throttle_time == 7 * MS


@pytest.mark.parametrize("version", versions(apis.DELETE_GROUPS))
def test_delete_groups_split_and_merge(version: int) -> None:
    header = RequestHeader(apis.DELETE_GROUPS, version, 42, "client")
    req = request(
        42, version, "DeleteGroupsRequest", groups_names=("a", "b", "c", "d", "e", "f", "b")
    )
    local, remote1, loading, remote2, unknown = split_and_check(header, req)

    def deleted(part: Any, error: ErrorCode) -> Any:
        results = tuple(m.DeletedGroup(g, error) for g in part.request.groups_names)
        return adapters.to_response(header, m.DeleteGroupsResult(results))

    responses = [
        adapters.error_response(header, unknown.request, NOT_COORDINATOR),  # any order
        deleted(remote2, ErrorCode.non_empty_group),
        deleted(local, NONE),
        throttled(deleted(remote1, ErrorCode.group_id_not_found), 3),
        adapters.error_response(header, loading.request, LOAD_IN_PROGRESS),
    ]
    response = merged_round_trip(header, req, responses)
    assert [(r.group_id, r.error_code) for r in response.results] == [
        ("a", NONE),
        ("b", ErrorCode.group_id_not_found),
        ("c", LOAD_IN_PROGRESS),
        ("d", ErrorCode.non_empty_group),
        ("e", NONE),
        ("f", NOT_COORDINATOR),
        ("b", ErrorCode.group_id_not_found),
    ]
    assert response.throttle_time == 3 * MS


@pytest.mark.parametrize("version", versions(apis.OFFSET_FETCH, low=8))
def test_offset_fetch_v8_split_and_merge(version: int) -> None:
    header = RequestHeader(apis.OFFSET_FETCH, version, 42, "client")
    topic = request(9, version, "OffsetFetchRequestTopics", name=TOPIC, partition_indexes=(0, 1))

    def group(g: str) -> Any:
        return request(9, version, "OffsetFetchRequestGroup", group_id=g, topics=(topic,))

    req = request(
        9,
        version,
        "OffsetFetchRequest",
        groups=tuple(group(g) for g in "abcdefb"),
        require_stable=True,
    )
    local, remote1, loading, remote2, unknown = split_and_check(header, req)
    assert all(p.request.require_stable for p in (local, remote1, remote2))

    def fetched(part: Any, offset: int) -> Any:
        groups = tuple(
            m.FetchedGroup(
                g.group_id,
                NONE,
                (m.FetchedTopic(TOPIC, (m.FetchedPartition(0, offset, -1, "", NONE),)),),
            )
            for g in part.request.groups
        )
        return adapters.to_response(header, m.OffsetFetchResult(groups))

    responses = [
        fetched(local, 10),
        fetched(remote1, 20),
        fetched(remote2, 30),
        adapters.error_response(header, loading.request, LOAD_IN_PROGRESS),
        adapters.error_response(header, unknown.request, NOT_COORDINATOR),
    ]
    response = merged_round_trip(header, req, responses)

    def offsets(g: Any) -> list[int]:
        return [p.committed_offset for t in g.topics for p in t.partitions]

    assert [(g.group_id, g.error_code, offsets(g)) for g in response.groups] == [
        ("a", NONE, [10]),
        ("b", NONE, [20]),
        ("c", LOAD_IN_PROGRESS, []),
        ("d", NONE, [30]),
        ("e", NONE, [10]),
        ("f", NOT_COORDINATOR, []),
        ("b", NONE, [20]),
    ]


def test_merge_refuses_an_api_that_is_not_batched() -> None:
    header = RequestHeader(apis.OFFSET_FETCH, 7, 1, "c")
    with pytest.raises(ValueError, match="not batched"):
        merge(header, request(9, 7, "OffsetFetchRequest", group_id="g", topics=None), [])


@pytest.mark.parametrize("version", versions(apis.LIST_GROUPS))
def test_list_groups_merge_is_the_union_in_member_order(version: int) -> None:
    header = RequestHeader(apis.LIST_GROUPS, version, 5, "c")

    def listed(error: ErrorCode, *ids: str) -> Any:
        groups = tuple(m.ListedGroup(g, "consumer", "Stable", "classic") for g in ids)
        return adapters.to_response(header, m.ListGroupsResult(error, groups))

    response = merge_list_groups(
        [
            listed(NONE, "a", "b"),
            throttled(listed(NONE, "c", "a"), 4),
            listed(LOAD_IN_PROGRESS, "d"),
        ]
    )
    response = codec.decode_response(header, codec.encode_response(header, response))
    assert [g.group_id for g in response.groups] == ["a", "b", "c", "d"]
    assert response.error_code == LOAD_IN_PROGRESS  # a member still loading: the client retries
    if version >= 1:
        assert response.throttle_time == 4 * MS


# ------------------------------------------------------------------------- sockets: a fleet of two


@dataclass
class Table:
    """A Locator from a table: unlisted groups are LOCAL."""

    where: dict[str, Where] = field(default_factory=dict)
    peer_list: list[tuple[str, int]] = field(default_factory=list)

    def locate(self, group_id: str) -> Where:
        return self.where.get(group_id, LOCAL)

    def peers(self) -> list[tuple[str, int]]:
        return list(self.peer_list)


@dataclass
class Member:
    server: Server
    sidecar: Sidecar
    fleet: Listening
    table: Table

    @property
    def port(self) -> int:
        return self.server.options.port

    @property
    def fleet_address(self) -> tuple[str, int]:
        host, port = self.fleet.sockets[0].getsockname()[:2]
        return host, port

    @property
    def owner(self) -> Where:
        """Where another member's locator sends the groups this member owns."""
        return Where(Placement.REMOTE, self.fleet_address)


@pytest.fixture
async def fleet() -> AsyncIterator[Callable[[], Awaitable[Member]]]:
    members: list[Member] = []

    async def start() -> Member:
        config = CoordinatorConfig(initial_rebalance_delay_ms=0, session_timeout_min_ms=1000)
        catalog = TopicCatalog((TopicInfo(TOPIC, uuid.uuid4(), 3),))
        server = Server(
            ServerOptions(host="127.0.0.1", port=0, coordinator=config),
            catalog,
            lambda prefix: f"{prefix}-{uuid.uuid4()}",
        )
        # Never started: group APIs do not go upstream, so the upstream may as well be absent.
        sidecar = Sidecar(server, SidecarOptions(upstream=[("127.0.0.1", free_port())]))
        table = Table()
        sidecar.locator = table
        await server.start()
        listener = await start_listener(
            lambda: SidecarConnection(sidecar, None, peer=True), "127.0.0.1", 0
        )
        member = Member(server, sidecar, listener, table)
        members.append(member)
        return member

    try:
        yield start
    finally:
        for member in members:
            member.fleet.close()
            await member.sidecar.stop()
            await member.server.stop()
            await member.fleet.wait_closed()


def heartbeat(group: str, generation: int = 1, member: str = "nobody") -> Any:
    return kio(
        12, 2, "HeartbeatRequest", group_id=group, generation_id=generation, member_id=member
    )


def describe(*groups: str) -> Any:
    return kio(15, 5, "DescribeGroupsRequest", groups=groups, include_authorized_operations=False)


def offset_fetch(group: str) -> Any:
    topic = kio(9, 7, "OffsetFetchRequestTopic", name=TOPIC, partition_indexes=(0, 1))
    return kio(9, 7, "OffsetFetchRequest", group_id=group, topics=(topic,), require_stable=False)


def list_groups() -> Any:
    return kio(16, 4, "ListGroupsRequest", states_filter=())


async def join(client: RawClient, group: str) -> tuple[int, str]:
    """A one-member classic group, joined and synced: (generation_id, member_id)."""
    protocol = kio(11, 3, "JoinGroupRequestProtocol", name="range", metadata=b"\x00\x00")
    joined = await client.call(
        kio(
            11,
            3,
            "JoinGroupRequest",
            group_id=group,
            session_timeout=10_000 * MS,
            rebalance_timeout=10_000 * MS,
            member_id="",
            protocol_type="consumer",
            protocols=(protocol,),
        )
    )
    assert joined.error_code == NONE, joined
    assignment = kio(
        14, 2, "SyncGroupRequestAssignment", member_id=joined.member_id, assignment=b"\x00\x01"
    )
    synced = await client.call(
        kio(
            14,
            2,
            "SyncGroupRequest",
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            assignments=(assignment,),
        )
    )
    assert (synced.error_code, synced.assignment) == (NONE, b"\x00\x01"), synced
    return joined.generation_id, joined.member_id


async def commit(client: RawClient, group: str, generation: int, member: str, offset: int) -> Any:
    part = kio(
        8,
        6,
        "OffsetCommitRequestPartition",
        partition_index=1,
        committed_offset=offset,
        committed_leader_epoch=-1,
        committed_metadata="",
    )
    topic = kio(8, 6, "OffsetCommitRequestTopic", name=TOPIC, partitions=(part,))
    return await client.call(
        kio(
            8,
            6,
            "OffsetCommitRequest",
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member,
            topics=(topic,),
        )
    )


def committed(response: Any) -> int:
    return int(response.topics[0].partitions[1].committed_offset)


async def test_a_remote_groups_requests_are_answered_by_its_owner(fleet: Any) -> None:
    a, b = await fleet(), await fleet()
    a.table.where["x"] = b.owner
    client = await RawClient.connect(a.port)
    try:
        generation, member = await join(client, "x")
        assert (await client.call(heartbeat("x", generation, member))).error_code == NONE
        response = await commit(client, "x", generation, member, 17)
        assert response.topics[0].partitions[0].error_code == NONE
        assert committed(await client.call(offset_fetch("x"))) == 17
        # OffsetFetch v8+ over a group here and the one there: split, then merged in order.
        topic = kio(9, 8, "OffsetFetchRequestTopics", name=TOPIC, partition_indexes=(1,))
        groups = tuple(
            kio(9, 8, "OffsetFetchRequestGroup", group_id=g, topics=(topic,))
            for g in ("here", "x", "here")
        )
        fetched = await client.call(
            kio(9, 8, "OffsetFetchRequest", groups=groups, require_stable=False)
        )
        assert [
            (g.group_id, g.error_code, g.topics[0].partitions[0].committed_offset)
            for g in fetched.groups
        ] == [("here", NONE, -1), ("x", NONE, 17), ("here", NONE, -1)]
    finally:
        client.close()
    snapshot = b.server.core.group("x")
    assert snapshot is not None and a.server.core.group("x") is None
    direct = await RawClient.connect(b.port)  # B's own clients see the same group
    try:
        assert committed(await direct.call(offset_fetch("x"))) == 17
    finally:
        direct.close()


async def test_batched_requests_over_both_members_are_answered_in_order(fleet: Any) -> None:
    a, b = await fleet(), await fleet()
    for group in ("x", "y"):
        a.table.where[group] = b.owner
    a.table.where["loading"], a.table.where["lost"] = LOADING, UNKNOWN
    client = await RawClient.connect(a.port)
    try:
        await join(client, "x")
        await join(client, "mine")
        response = await client.call(describe("x", "mine", "y", "loading", "lost", "x"))
        assert [(g.group_id, g.error_code, g.group_state) for g in response.groups] == [
            ("x", NONE, "Stable"),
            ("mine", NONE, "Stable"),
            ("y", NONE, "Dead"),
            ("loading", LOAD_IN_PROGRESS, ""),
            ("lost", NOT_COORDINATOR, ""),
            ("x", NONE, "Stable"),
        ]
        assert [len(g.members) for g in response.groups] == [1, 1, 0, 0, 0, 1]
        deleted = await client.call(
            kio(42, 2, "DeleteGroupsRequest", groups_names=("y", "mine", "loading"))
        )
        assert [(r.group_id, r.error_code) for r in deleted.results] == [
            ("y", ErrorCode.group_id_not_found),
            ("mine", ErrorCode.non_empty_group),
            ("loading", LOAD_IN_PROGRESS),
        ]
    finally:
        client.close()


async def test_loading_and_unknown_groups_get_retriable_errors(fleet: Any) -> None:
    a = await fleet()
    a.table.where["loading"], a.table.where["lost"] = LOADING, UNKNOWN
    client = await RawClient.connect(a.port)
    try:
        # A Heartbeat to a loading group is answered NONE, as Kafka's GroupCoordinatorService
        # does ("blindly respond"): aiokafka takes LOAD_IN_PROGRESS on a Heartbeat as fatal.
        for group, error, beat in (
            ("loading", LOAD_IN_PROGRESS, NONE),
            ("lost", NOT_COORDINATOR, NOT_COORDINATOR),
        ):
            assert (await client.call(heartbeat(group))).error_code == beat
            assert (await client.call(offset_fetch(group))).error_code == error
            response = await commit(client, group, 1, "m", 5)
            assert response.topics[0].partitions[0].error_code == error
    finally:
        client.close()


async def test_an_unreachable_or_failing_owner_is_not_coordinator_and_the_client_stays(
    fleet: Any,
) -> None:
    a = await fleet()

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(4)  # a request arrived: the member fails before answering
        writer.transport.abort()

    failing = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    a.table.where["gone"] = Where(Placement.REMOTE, ("127.0.0.1", free_port()))
    a.table.where["fails"] = Where(Placement.REMOTE, failing.sockets[0].getsockname()[:2])
    client = await RawClient.connect(a.port)
    try:
        generation, member = await join(client, "mine")
        for group in ("gone", "fails", "gone"):
            assert (await client.call(heartbeat(group))).error_code == NOT_COORDINATOR
            response = await client.call(describe(group, "mine"))
            assert [(g.group_id, g.error_code) for g in response.groups] == [
                (group, NOT_COORDINATOR),
                ("mine", NONE),
            ]
        # Still open, and still serving the groups that live here.
        assert (await client.call(heartbeat("mine", generation, member))).error_code == NONE
    finally:
        client.close()
        failing.close()


async def test_a_malformed_request_for_a_remote_group_closes_the_clients_connection(
    fleet: Any,
) -> None:
    """Routed by its header and group id alone (forward._fast), a request whose body cannot
    be read still closes the client's connection, as a Kafka broker does, once the owner has
    refused it; it is never answered."""
    a, b = await fleet(), await fleet()
    a.table.where["x"] = b.owner
    client = await RawClient.connect(a.port)
    try:
        # Heartbeat v0: the group id, then a generation id cut short.
        body = struct.pack(">h", 1) + b"x" + b"\x00"
        frame = request_frame(apis.HEARTBEAT, 0, body)
        client.writer.write(struct.pack(">i", len(frame)) + frame)
        with pytest.raises(ConnectionError):
            await client.receive()
    finally:
        client.close()


async def test_requests_from_peers_are_never_forwarded(fleet: Any) -> None:
    a, b = await fleet(), await fleet()
    a.table.where["x"], a.table.where["loading"] = b.owner, LOADING
    a.table.peer_list = [b.fleet_address]
    client = await RawClient.connect(a.port)
    try:
        await join(client, "mine")
    finally:
        client.close()
    accepted = b.server.connections_accepted
    peer = await RawClient.connect(a.fleet_address[1])  # as another member connects
    try:
        assert (await peer.call(heartbeat("x"))).error_code == NOT_COORDINATOR
        assert (await peer.call(heartbeat("loading"))).error_code == NONE  # (Kafka: blindly)
        response = await peer.call(describe("x", "mine", "loading"))
        assert [(g.group_id, g.error_code) for g in response.groups] == [
            ("x", NOT_COORDINATOR),
            ("mine", NONE),
            ("loading", LOAD_IN_PROGRESS),
        ]
        listed = await peer.call(list_groups())
        assert [g.group_id for g in listed.groups] == ["mine"]  # its own only
    finally:
        peer.close()
    assert b.server.connections_accepted == accepted  # nothing went on to B


async def test_list_groups_is_the_union_of_the_fleet(fleet: Any, caplog: Any) -> None:
    a, b = await fleet(), await fleet()
    a.table.where["x"] = b.owner
    a.table.peer_list, b.table.peer_list = [b.fleet_address], [a.fleet_address]
    client = await RawClient.connect(a.port)
    try:
        await join(client, "x")
        await join(client, "mine")
        listed = await client.call(list_groups())
        assert sorted(g.group_id for g in listed.groups) == ["mine", "x"]
        direct = await RawClient.connect(b.port)
        try:
            listed = await direct.call(list_groups())
            assert sorted(g.group_id for g in listed.groups) == ["mine", "x"]
        finally:
            direct.close()

        silent_peers: list[asyncio.StreamWriter] = []

        async def never_answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            silent_peers.append(writer)

        silent = await asyncio.start_server(never_answer, "127.0.0.1", 0)
        a.table.peer_list += [("127.0.0.1", free_port()), silent.sockets[0].getsockname()[:2]]
        a.sidecar.peer_links.list_groups_timeout_s = 0.3
        caplog.set_level(logging.WARNING, "groupcoord.sidecar.forward")
        for _ in range(2):
            listed = await client.call(list_groups())
            assert (listed.error_code, sorted(g.group_id for g in listed.groups)) == (
                NONE,
                ["mine", "x"],
            )
        left_out = [r for r in caplog.records if "leaves out" in r.getMessage()]
        assert len(left_out) == 2, left_out  # once per member, not per request
        silent.close()
        for writer in silent_peers:
            writer.transport.abort()
    finally:
        client.close()


async def test_pipelined_requests_keep_their_order_across_members(fleet: Any) -> None:
    a, b = await fleet(), await fleet()
    a.table.where["x"] = b.owner
    a.table.where["lost"] = UNKNOWN
    client = await RawClient.connect(a.port)
    try:
        generation, member = await join(client, "x")
        requests = []
        for i in range(30):
            requests += [
                heartbeat("x", generation, member),
                offset_fetch("mine"),
                describe("x", "mine", "lost"),
                heartbeat("lost"),
                kio(15, 0, "DescribeGroupsRequest", groups=("mine", "x")),
            ]
            if i % 10 == 0:
                requests.append(list_groups())
        ids = await client.send(*requests)
        for correlation_id, sent in zip(ids, requests, strict=True):
            frame = await client.receive()
            assert int.from_bytes(frame[4:8], "big") == correlation_id
            api = type(sent)
            response = decode(api.__api_key__, api.__version__, frame)
            if api.__api_key__ == apis.HEARTBEAT:
                expected = NONE if sent.group_id == "x" else NOT_COORDINATOR
                assert response.error_code == expected
    finally:
        client.close()


def test_an_unreadable_response_is_a_malformed_response() -> None:
    header = RequestHeader(apis.DESCRIBE_GROUPS, 5, 9, "c")
    frame = codec.encode_response(header, adapters.error_response(header, describe("g"), NONE))
    assert codec.decode_response(header, frame).groups[0].group_id == "g"
    for broken in (frame[:6], frame[:-3], frame[:9] + b"\xff\xff\xff\xff\x0f" + frame[14:]):
        with pytest.raises(codec.MalformedResponse):
            codec.decode_response(header, broken)


async def test_an_owner_back_after_a_failure_is_reached_again(fleet: Any) -> None:
    a, b = await fleet(), await fleet()
    relay = Relay(free_port(), b.fleet_address[1])  # B's fleet listener, as A reaches it
    await relay.start()
    a.table.where["x"] = Where(Placement.REMOTE, ("127.0.0.1", relay.port))
    client = await RawClient.connect(a.port)
    try:
        generation, member = await join(client, "x")
        await relay.stop()  # the link from A breaks, and B cannot be reached
        assert (await client.call(heartbeat("x", generation, member))).error_code == NOT_COORDINATOR
        await relay.start()

        async def answered_by_b() -> bool:
            response = await client.call(heartbeat("x", generation, member))
            return bool(response.error_code == NONE)

        # On the same client connection: a new link once the member's reconnect backoff passed.
        await wait_until(answered_by_b, 10, "B to answer through a new link")
    finally:
        client.close()
        await relay.stop()


async def test_share_group_requests_are_answered_by_the_groups_owner(fleet: Any) -> None:
    """KIP-932: ShareGroupHeartbeat is routed by group id like the other group APIs, and a
    ShareGroupDescribe over groups here and there is split and merged in order."""
    a, b = await fleet(), await fleet()
    a.table.where["there"] = b.owner
    client = await RawClient.connect(a.port)
    try:
        for group in ("there", "here"):
            joined = await client.call(
                kio(76, 1, "ShareGroupHeartbeatRequest", group_id=group, member_id="m1",
                    member_epoch=0, rack_id=None, subscribed_topic_names=(TOPIC,))
            )  # fmt: skip
            assert (joined.error_code, joined.member_epoch) == (NONE, 1), joined
        described = await client.call(
            kio(77, 1, "ShareGroupDescribeRequest", group_ids=("there", "here", "there"),
                include_authorized_operations=False)
        )  # fmt: skip
        assert [(g.group_id, g.error_code, g.group_state) for g in described.groups] == [
            ("there", NONE, "Stable"),
            ("here", NONE, "Stable"),
            ("there", NONE, "Stable"),
        ]
    finally:
        client.close()
    assert set(b.server.core.share.groups) == {"there"}
    assert set(a.server.core.share.groups) == {"here"}


def with_header_tag(frame: bytes) -> bytes:
    """A flexible request `frame` (size included) with one tagged field in its header: the
    general path skips it; no fast path reads such a frame (protocol.fastpath)."""
    client_id_len = struct.unpack_from(">h", frame, 12)[0]
    at = 14 + max(client_id_len, 0)
    assert frame[at] == 0  # no tagged fields yet
    tagged = frame[4:at] + b"\x01\x00\x01x" + frame[at + 1 :]  # one: tag 0, one byte
    return struct.pack(">i", len(tagged)) + tagged


async def test_the_fast_paths_answer_as_the_general_path(fleet: Any) -> None:
    """A Heartbeat, OffsetCommit and ConsumerGroupHeartbeat routed by their group id alone
    (forward._fast: forwarded by `a` undecoded; a Heartbeat, forwarded or sent to `b` itself,
    answered by the owner server's fast path) get, byte for byte, the answers the same requests
    get on the general path (kio's decode on both members, chosen here by a tagged field in the
    request header)."""
    a, b = await fleet(), await fleet()
    a.table.where["x"] = a.table.where["y"] = b.owner
    b.table.where["x"] = b.table.where["y"] = LOCAL
    via_a, at_b = await RawClient.connect(a.port), await RawClient.connect(b.port)
    try:
        generation, member = await join(via_a, "x")

        def beat(generation_id: int, member_id: str) -> Any:
            return kio(12, 4, "HeartbeatRequest", group_id="x", generation_id=generation_id,
                       member_id=member_id, group_instance_id=None)  # fmt: skip

        part = kio(
            8, 9, "OffsetCommitRequestPartition",
            partition_index=2, committed_offset=5, committed_leader_epoch=-1,
            committed_metadata="m",
        )  # fmt: skip
        topic = kio(8, 9, "OffsetCommitRequestTopic", name=TOPIC, partitions=(part,))

        def commit9(generation_id: int, member_id: str) -> Any:
            return kio(8, 9, "OffsetCommitRequest", group_id="x",
                       generation_id_or_member_epoch=generation_id, member_id=member_id,
                       group_instance_id=None, topics=(topic,))  # fmt: skip

        unknown_848 = kio(
            68, 0, "ConsumerGroupHeartbeatRequest",
            group_id="y", member_id="nobody", member_epoch=3, instance_id=None, rack_id=None,
            rebalance_timeout=-1 * MS, subscribed_topic_names=None, server_assignor=None,
            topic_partitions=None,
        )  # fmt: skip
        requests = [
            beat(generation, member),
            beat(generation + 1, member),  # ILLEGAL_GENERATION
            beat(generation, "nobody"),  # UNKNOWN_MEMBER_ID
            commit9(generation, member),
            commit9(-1, ""),  # a simple commit
            unknown_848,  # UNKNOWN_MEMBER_ID
        ]
        for client in (via_a, at_b):
            for entity in requests:
                _, frame = client.frame(entity)
                client.writer.write(frame + with_header_tag(frame))
                fast, general = await client.receive(), await client.receive()
                assert fast == general, entity
                assert fast[4:8] == frame[8:12]  # the client's correlation id
    finally:
        via_a.close()
        at_b.close()
