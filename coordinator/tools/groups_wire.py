"""The group calls of `groupcoord groups` that no maintained Python client makes as we need them,
on our own codec (`protocol/` + kio's generated wire types): ApiVersions, Metadata (the broker
list), FindCoordinator, ListGroups, ConsumerGroupDescribe, DescribeGroups, OffsetFetch,
DeleteGroups, OffsetDelete.

A group is described as Kafka 4's Admin describes it: ConsumerGroupDescribe (API 69, KIP-848)
first, where the coordinator has it; GROUP_ID_NOT_FOUND there (a classic group, or none) falls
back to DescribeGroups, whose "Dead" (v0-v5) or GROUP_ID_NOT_FOUND (v6+) is a group that does
not exist.

Why these and not aiokafka's admin client (0.14, a runtime dependency; the log offsets and the
commits of `reset-offsets` do go through aiokafka, see coordinator.tools.groups_log):
- ListGroups: aiokafka sends v0-v2, without the state and type columns (KIP-518, KIP-848).
- DescribeGroups: aiokafka returns the raw response (member metadata and assignment as bytes,
  left to the caller to decode) and loses the coordinator's address (it keeps only a node id).
- OffsetFetch: aiokafka's `list_consumer_group_offsets` ignores the response's top-level error
  (v2+), so a coordinator still loading (COORDINATOR_LOAD_IN_PROGRESS) reads as "no offsets"
  instead of being retried.
- ConsumerGroupDescribe, DeleteGroups and OffsetDelete: aiokafka has no call for them.

One request in flight per connection (`KafkaConnection`); each call negotiates the highest
version both sides know (ApiVersions v0, KIP-511) and builds the request with `make`, which drops
the fields a version does not have. Retriable coordinator errors (COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) raise `RetriableError`, which `with_retries` retries
until the deadline; every other Kafka error is a `GroupsError`, reported in one line.
"""

from __future__ import annotations

import asyncio
import io
import struct
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from coordinator.broker.answers import make
from coordinator.security.client import PLAINTEXT, ClientSecurity
from coordinator.sidecar.upstream_clients import UpstreamAuthError, authenticate
from protocol import apis
from protocol import consumer as consumer_protocol
from protocol.varint import skip_tagged_fields

CLIENT_ID = "groupcoord-groups"
RETRIABLE = frozenset(
    {
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)
T = TypeVar("T")
# The cluster's security (--command-config: coordinator.tools.command_config), for every
# connection of the command: set once by `groupcoord groups` before its event loop starts.
SECURITY: ContextVar[ClientSecurity] = ContextVar("groups_security", default=PLAINTEXT)


class GroupsError(Exception):
    """Something to report in one line (exit code 1)."""


class RetriableError(GroupsError):
    pass


# -- a one-request-at-a-time Kafka connection ---------------------------------------------------


class KafkaConnection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._correlation_id = 0
        self.versions: dict[int, tuple[int, int]] = {}

    @classmethod
    async def open(cls, host: str, port: int, timeout_s: float) -> KafkaConnection:
        """Connected, over TLS and authenticated as SECURITY says, with the versions known."""
        security = SECURITY.get()
        context = security.ssl_context if security.tls else None
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host, port, ssl=context, server_hostname=host if context else None
                ),
                timeout_s,
            )
        except (OSError, TimeoutError) as exc:
            raise GroupsError(f"cannot connect to {host}:{port}: {exc or 'timed out'}") from None
        conn = cls(reader, writer)
        if security.sasl:
            try:
                await authenticate(lambda request: conn._send(request, timeout_s), security)
            except UpstreamAuthError as exc:
                conn.close()
                raise GroupsError(f"{host}:{port}: {exc}") from None
        # ApiVersions v0: every broker answers it, whatever it supports (KIP-511).
        response = await conn._call(apis.API_VERSIONS, 0, {}, timeout_s)
        if response.error_code != ErrorCode.none:
            raise GroupsError(f"ApiVersions failed: {response.error_code.name}")
        conn.versions = {
            int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
        }
        return conn

    def version(self, api_key: int) -> int:
        """The highest version both the broker and our API table know."""
        spec = apis.APIS[api_key]
        low, high = self.versions.get(api_key, (0, -1))
        version = min(high, spec.max_version)
        if version < max(low, spec.min_version):
            name = "".join(word.title() for word in spec.name.split("_"))  # Kafka's API name
            raise GroupsError(f"the broker does not support {name} in a version we know")
        return version

    async def call(self, api_key: int, timeout_s: float, **fields: Any) -> Any:
        return await self._call(api_key, self.version(api_key), fields, timeout_s)

    async def _call(
        self, api_key: int, version: int, fields: dict[str, Any], timeout_s: float
    ) -> Any:
        return await self._send(make(apis.request_class(api_key, version), **fields), timeout_s)

    async def _send(self, request: Any, timeout_s: float) -> Any:
        api_key, version = request.__api_key__, request.__version__
        self._correlation_id += 1
        buffer = io.BytesIO()
        flexible = apis.is_flexible(api_key, version)
        client_id = CLIENT_ID.encode()
        buffer.write(struct.pack(">hhih", api_key, version, self._correlation_id, len(client_id)))
        buffer.write(client_id)
        if flexible:
            buffer.write(b"\x00")  # request header v2: no tagged fields
        entity_writer(type(request))(buffer, request)
        body = buffer.getvalue()
        self._writer.write(struct.pack(">i", len(body)) + body)
        try:
            await self._writer.drain()
            head = await asyncio.wait_for(self._reader.readexactly(4), timeout_s)
            frame = await asyncio.wait_for(
                self._reader.readexactly(struct.unpack(">i", head)[0]), timeout_s
            )
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            raise GroupsError(f"no answer to {apis.APIS[api_key].name}: {exc!r}") from None
        (correlation_id,) = struct.unpack_from(">i", frame)
        if correlation_id != self._correlation_id:
            raise GroupsError(f"correlation id {correlation_id} != {self._correlation_id}")
        offset = 4
        if flexible and api_key != apis.API_VERSIONS:  # response header v1 (KIP-511 exception)
            offset = skip_tagged_fields(frame, offset)
        response: Any
        response, _ = entity_reader(apis.response_class(api_key, version))(frame, offset)
        return response

    def close(self) -> None:
        self._writer.close()


async def one_call(host: str, port: int, api_key: int, timeout_s: float, **fields: Any) -> Any:
    """Open a connection, make one call, close it."""
    conn = await KafkaConnection.open(host, port, timeout_s)
    try:
        return await conn.call(api_key, timeout_s, **fields)
    finally:
        conn.close()


def check(error: ErrorCode, api: str) -> None:
    if error in RETRIABLE:
        raise RetriableError(f"{api}: {error.name}")
    if error != ErrorCode.none:
        raise GroupsError(f"{api}: {error.name}")


async def with_retries(timeout_s: float, attempt: Callable[[], Awaitable[T]]) -> T:
    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        try:
            return await attempt()
        except RetriableError:
            if time.monotonic() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


def nested(api_key: int, version: int, name: str) -> type:
    """A nested request class by its kio name (OffsetFetchRequestGroup, ...)."""
    value = vars(apis.request_module(api_key, version)).get(name)
    if not isinstance(value, type):
        raise LookupError(f"no {name} in {apis.APIS[api_key].name} v{version}")
    return value


# -- what the commands gather --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Coordinator:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def label(self) -> str:
        """kafka-consumer-groups.sh's COORDINATOR (ID) cell: `host:port (id)`."""
        return f"{self.address} ({self.node_id})"


@dataclass
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]]  # a KIP-848 member's current assignment
    # KIP-848 members only (None for a classic group's)
    member_epoch: int | None = None
    target_assignment: dict[str, list[int]] | None = None


@dataclass
class GroupView:
    group_id: str
    coordinator: Coordinator
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberView] = field(default_factory=list)
    # topic -> partition -> committed offset; None until asked (OffsetFetch)
    offsets: dict[str, dict[int, int]] | None = None
    group_type: str = "classic"  # "consumer" (KIP-848), "share" (KIP-932: ShareGroupDescribe)
    group_epoch: int | None = None  # KIP-848 groups only
    assignment_epoch: int | None = None

    def assigned(self) -> dict[tuple[str, int], MemberView]:
        return {(t, p): m for m in self.members for t, ps in m.assignment.items() for p in ps}


async def list_groups(host: str, port: int, timeout_s: float) -> list[dict[str, str]]:
    """Every group of the cluster: ListGroups to every broker in Metadata (a group is listed by
    its coordinator only), as kafka-consumer-groups.sh --list."""
    metadata = await one_call(
        host, port, apis.METADATA, timeout_s, topics=(), allow_auto_topic_creation=False,
        include_topic_authorized_operations=False, include_cluster_authorized_operations=False,
    )  # fmt: skip
    groups: dict[str, dict[str, str]] = {}
    for node in metadata.brokers:

        async def attempt(node: Any = node) -> Any:
            response = await one_call(node.host, int(node.port), apis.LIST_GROUPS, timeout_s)
            check(response.error_code, "ListGroups")
            return response

        response = await with_retries(timeout_s, attempt)
        for g in response.groups:
            groups[g.group_id] = {
                "group_id": g.group_id,
                "type": getattr(g, "group_type", "") or "-",
                "state": getattr(g, "group_state", "") or "-",
                "protocol_type": g.protocol_type or "-",
            }
    return [groups[name] for name in sorted(groups)]


async def find_coordinator(host: str, port: int, group: str, timeout_s: float) -> Coordinator:
    response = await one_call(
        host, port, apis.FIND_COORDINATOR, timeout_s, key=group, key_type=0,
        coordinator_keys=(group,),
    )  # fmt: skip
    found = response.coordinators[0] if hasattr(response, "coordinators") else response
    check(found.error_code, "FindCoordinator")
    return Coordinator(int(found.node_id), found.host, int(found.port))


async def describe_on(
    conn: KafkaConnection, coordinator: Coordinator, group: str, timeout_s: float
) -> GroupView:
    if apis.CONSUMER_GROUP_DESCRIBE in conn.versions:
        view = await _describe_consumer(conn, coordinator, group, timeout_s)
        if view is not None:
            return view
    described = await conn.call(
        apis.DESCRIBE_GROUPS, timeout_s, groups=(group,), include_authorized_operations=False
    )
    g = described.groups[0]
    if g.error_code == ErrorCode.group_id_not_found:  # v6+ (KIP-1043): v0-v5 answer "Dead"
        return GroupView(group, coordinator, "Dead", "", "")
    check(g.error_code, "DescribeGroups")
    consumer = g.protocol_type in ("consumer", "")
    view = GroupView(group, coordinator, g.group_state, g.protocol_type, g.protocol_data)
    for m in g.members:
        assignment = (
            (consumer_protocol.assignment_partitions(m.member_assignment) or {}) if consumer else {}
        )
        view.members.append(
            MemberView(
                m.member_id,
                getattr(m, "group_instance_id", None),
                m.client_id,
                m.client_host,
                assignment,
            )
        )
    return view


async def _describe_consumer(
    conn: KafkaConnection, coordinator: Coordinator, group: str, timeout_s: float
) -> GroupView | None:
    """A KIP-848 group by ConsumerGroupDescribe; None when the coordinator has no consumer
    group of that id (GROUP_ID_NOT_FOUND: a classic group, or none), as Kafka's Admin falls back
    to DescribeGroups."""
    described = await conn.call(
        apis.CONSUMER_GROUP_DESCRIBE, timeout_s, group_ids=(group,),
        include_authorized_operations=False,
    )  # fmt: skip
    g = described.groups[0]
    if g.error_code == ErrorCode.group_id_not_found:
        return None
    check(g.error_code, "ConsumerGroupDescribe")
    view = GroupView(group, coordinator, g.group_state, "consumer", g.assignor_name or "",
                     group_type="consumer", group_epoch=int(g.group_epoch),
                     assignment_epoch=int(g.assignment_epoch))  # fmt: skip
    for m in g.members:
        view.members.append(
            MemberView(
                m.member_id, m.instance_id, m.client_id, m.client_host,
                _partitions_of(m.assignment), int(m.member_epoch),
                _partitions_of(m.target_assignment),
            )
        )  # fmt: skip
    return view


def _partitions_of(assignment: Any) -> dict[str, list[int]]:
    return {
        tp.topic_name: sorted(int(p) for p in tp.partitions)
        for tp in assignment.topic_partitions
        if tp.partitions
    }


async def committed(
    conn: KafkaConnection, group: str, view: GroupView, timeout_s: float
) -> dict[str, dict[int, int]]:
    version = conn.version(apis.OFFSET_FETCH)
    if version >= 8:  # KIP-709: batched by group
        group_cls = nested(apis.OFFSET_FETCH, version, "OffsetFetchRequestGroup")
        response = await conn.call(
            apis.OFFSET_FETCH, timeout_s, groups=(make(group_cls, group_id=group, topics=None),)
        )
        result = response.groups[0]
    else:
        topics: Any = None  # v2+: null = every topic with a committed offset
        if version < 2:
            cls = nested(apis.OFFSET_FETCH, version, "OffsetFetchRequestTopic")
            assigned: dict[str, list[int]] = {}
            for t, p in sorted(view.assigned()):
                assigned.setdefault(t, []).append(p)
            topics = tuple(
                make(cls, name=t, partition_indexes=tuple(ps)) for t, ps in assigned.items()
            )
        result = await conn.call(apis.OFFSET_FETCH, timeout_s, group_id=group, topics=topics)
    check(getattr(result, "error_code", ErrorCode.none), "OffsetFetch")
    offsets: dict[str, dict[int, int]] = {}
    for topic in result.topics:
        for p in topic.partitions:
            if p.error_code == ErrorCode.none and int(p.committed_offset) >= 0:
                offsets.setdefault(topic.name, {})[int(p.partition_index)] = int(p.committed_offset)
    return offsets


async def delete_groups(
    host: str, port: int, groups: list[str], timeout_s: float
) -> dict[str, ErrorCode]:
    """DeleteGroups, each group sent to its coordinator; the error of each (none = deleted)."""
    results: dict[str, ErrorCode] = {}
    for group in groups:

        async def attempt(group: str = group) -> ErrorCode:
            coordinator = await find_coordinator(host, port, group, timeout_s)
            response = await one_call(
                coordinator.host, coordinator.port, apis.DELETE_GROUPS, timeout_s,
                groups_names=(group,),
            )  # fmt: skip
            error: ErrorCode = response.results[0].error_code
            check(error if error in RETRIABLE else ErrorCode.none, "DeleteGroups")
            return error

        results[group] = await with_retries(timeout_s, attempt)
    return results


async def delete_offsets(
    host: str, port: int, group: str, partitions: dict[str, list[int]], timeout_s: float
) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
    """OffsetDelete (KIP-496) to the group's coordinator: the top-level error and each
    partition's."""

    async def attempt() -> Any:
        coordinator = await find_coordinator(host, port, group, timeout_s)
        topic_cls = nested(apis.OFFSET_DELETE, 0, "OffsetDeleteRequestTopic")
        partition_cls = nested(apis.OFFSET_DELETE, 0, "OffsetDeleteRequestPartition")
        topics = tuple(
            make(topic_cls, name=t,
                 partitions=tuple(make(partition_cls, partition_index=p) for p in ps))
            for t, ps in sorted(partitions.items())
        )  # fmt: skip
        response = await one_call(
            coordinator.host, coordinator.port, apis.OFFSET_DELETE, timeout_s,
            group_id=group, topics=topics,
        )  # fmt: skip
        check(response.error_code if response.error_code in RETRIABLE else ErrorCode.none,
              "OffsetDelete")  # fmt: skip
        return response

    response = await with_retries(timeout_s, attempt)
    per_partition = {
        (t.name, int(p.partition_index)): p.error_code
        for t in response.topics
        for p in t.partitions
    }
    return response.error_code, per_partition
