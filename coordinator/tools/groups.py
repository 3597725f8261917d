"""`groupcoord groups list|describe`: a view of consumer groups over the Kafka protocol, like
kafka-consumer-groups.sh, for users without the Java tools. It works against groupcoord and
against any Kafka broker.

Why a small raw client on `protocol/` rather than aiokafka's admin client: aiokafka is not a
runtime dependency (only a test one), its admin client speaks old versions (ListGroups without the
state and type columns of KIP-518/KIP-848) and hands back member metadata and assignments as
bytes anyway. The kio wire types behind our own codec cover every version groupcoord serves, so
the client negotiates the highest version both sides know (ApiVersions, KIP-511) and builds each
request with `broker.make`, which drops the fields a version does not have.

Flow, as kafka-consumer-groups.sh: `list` asks Metadata for every broker and sends ListGroups to
each (a group lives on its coordinator only); `describe` asks FindCoordinator, then sends
DescribeGroups and OffsetFetch (all topics, v2+) to the coordinator. Retriable coordinator errors
(COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) are retried until the
timeout. Exit codes: 0 ok, 1 the group does not exist or the cluster answered an error or could not
be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from coordinator.broker.answers import make
from coordinator.serve.addresses import parse_host_port
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
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (OSError, TimeoutError) as exc:
            raise GroupsError(f"cannot connect to {host}:{port}: {exc or 'timed out'}") from None
        conn = cls(reader, writer)
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
            raise GroupsError(f"the broker does not support {spec.name} in a version we know")
        return version

    async def call(self, api_key: int, timeout_s: float, **fields: Any) -> Any:
        return await self._call(api_key, self.version(api_key), fields, timeout_s)

    async def _call(
        self, api_key: int, version: int, fields: dict[str, Any], timeout_s: float
    ) -> Any:
        self._correlation_id += 1
        request = make(apis.request_class(api_key, version), **fields)
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


# -- what the commands gather --------------------------------------------------------------------


@dataclass
class MemberView:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: dict[str, list[int]]


@dataclass
class GroupView:
    group_id: str
    coordinator: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberView] = field(default_factory=list)
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)  # topic -> partition -> off


async def _with_retries(timeout_s: float, attempt: Any) -> Any:
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


async def list_groups(host: str, port: int, timeout_s: float) -> list[dict[str, str]]:
    bootstrap = await KafkaConnection.open(host, port, timeout_s)
    try:
        metadata = await bootstrap.call(
            apis.METADATA, timeout_s, topics=(), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
            include_cluster_authorized_operations=False,
        )  # fmt: skip
    finally:
        bootstrap.close()
    groups: dict[str, dict[str, str]] = {}
    for node in metadata.brokers:

        async def attempt(node: Any = node) -> Any:
            conn = await KafkaConnection.open(node.host, int(node.port), timeout_s)
            try:
                response = await conn.call(apis.LIST_GROUPS, timeout_s)
            finally:
                conn.close()
            if response.error_code in RETRIABLE:
                raise RetriableError(f"ListGroups: {response.error_code.name}")
            if response.error_code != ErrorCode.none:
                raise GroupsError(f"ListGroups: {response.error_code.name}")
            return response

        response = await _with_retries(timeout_s, attempt)
        for g in response.groups:
            groups[g.group_id] = {
                "group_id": g.group_id,
                "type": getattr(g, "group_type", "") or "-",
                "state": getattr(g, "group_state", "") or "-",
                "protocol_type": g.protocol_type or "-",
            }
    return [groups[name] for name in sorted(groups)]


async def describe_group(host: str, port: int, group: str, timeout_s: float) -> GroupView:
    async def attempt() -> GroupView:
        coordinator = await _find_coordinator(host, port, group, timeout_s)
        conn = await KafkaConnection.open(coordinator[0], coordinator[1], timeout_s)
        try:
            return await _describe_on(conn, f"{coordinator[0]}:{coordinator[1]}", group, timeout_s)
        finally:
            conn.close()

    result: GroupView = await _with_retries(timeout_s, attempt)
    return result


async def _find_coordinator(host: str, port: int, group: str, timeout_s: float) -> tuple[str, int]:
    conn = await KafkaConnection.open(host, port, timeout_s)
    try:
        response = await conn.call(
            apis.FIND_COORDINATOR, timeout_s, key=group, key_type=0, coordinator_keys=(group,)
        )
    finally:
        conn.close()
    found = response.coordinators[0] if hasattr(response, "coordinators") else response
    if found.error_code in RETRIABLE:
        raise RetriableError(f"FindCoordinator: {found.error_code.name}")
    if found.error_code != ErrorCode.none:
        raise GroupsError(f"FindCoordinator: {found.error_code.name}")
    return found.host, int(found.port)


async def _describe_on(
    conn: KafkaConnection, where: str, group: str, timeout_s: float
) -> GroupView:
    described = await conn.call(
        apis.DESCRIBE_GROUPS, timeout_s, groups=(group,), include_authorized_operations=False
    )
    g = described.groups[0]
    if g.error_code in RETRIABLE:
        raise RetriableError(f"DescribeGroups: {g.error_code.name}")
    if g.error_code != ErrorCode.none:
        raise GroupsError(f"DescribeGroups: {g.error_code.name}")
    consumer = g.protocol_type in ("consumer", "")
    view = GroupView(group, where, g.group_state, g.protocol_type, g.protocol_data)
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
    view.offsets = await _committed(conn, group, view, timeout_s)
    return view


async def _committed(
    conn: KafkaConnection, group: str, view: GroupView, timeout_s: float
) -> dict[str, dict[int, int]]:
    version = conn.version(apis.OFFSET_FETCH)
    if version >= 8:  # KIP-709: batched by group
        response = await conn.call(
            apis.OFFSET_FETCH,
            timeout_s,
            groups=(make(_nested_request(apis.OFFSET_FETCH, version, "Group"), group_id=group,
                         topics=None),),
        )  # fmt: skip
        result = response.groups[0]
    else:
        topics: Any = None  # v2+: null = every topic with a committed offset
        if version < 2:
            cls = _nested_request(apis.OFFSET_FETCH, version, "Topic")
            topics = tuple(
                make(cls, name=t, partition_indexes=tuple(ps)) for t, ps in _assigned(view).items()
            )
        result = response = await conn.call(
            apis.OFFSET_FETCH, timeout_s, group_id=group, topics=topics
        )
    error = getattr(result, "error_code", ErrorCode.none)
    if error in RETRIABLE:
        raise RetriableError(f"OffsetFetch: {error.name}")
    if error != ErrorCode.none:
        raise GroupsError(f"OffsetFetch: {error.name}")
    offsets: dict[str, dict[int, int]] = {}
    for topic in result.topics:
        for p in topic.partitions:
            if p.error_code == ErrorCode.none and int(p.committed_offset) >= 0:
                offsets.setdefault(topic.name, {})[int(p.partition_index)] = int(p.committed_offset)
    return offsets


def _nested_request(api_key: int, version: int, suffix: str) -> type:
    module = apis.request_module(api_key, version)
    for name, value in vars(module).items():
        if name.startswith("OffsetFetchRequest") and name.rstrip("s").endswith(suffix):
            return value  # type: ignore[no-any-return]
    raise LookupError(f"no {suffix} class in {module.__name__}")


def _assigned(view: GroupView) -> dict[str, list[int]]:
    out: dict[str, set[int]] = {}
    for m in view.members:
        for topic, partitions in m.assignment.items():
            out.setdefault(topic, set()).update(partitions)
    return {t: sorted(ps) for t, ps in sorted(out.items())}


# -- output ---------------------------------------------------------------------------------------


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    )


def _assignment_text(assignment: dict[str, list[int]]) -> str:
    if not assignment:
        return "-"
    return " ".join(
        f"{t}({','.join(map(str, sorted(ps)))})" for t, ps in sorted(assignment.items())
    )


def render_describe(view: GroupView) -> str:
    state = table(
        ["GROUP", "COORDINATOR", "STATE", "PROTOCOL-TYPE", "ASSIGNMENT-STRATEGY", "#MEMBERS"],
        [[view.group_id, view.coordinator, view.state, view.protocol_type or "-",
          view.protocol or "-", str(len(view.members))]],
    )  # fmt: skip
    members = table(
        ["MEMBER-ID", "GROUP-INSTANCE-ID", "CLIENT-ID", "HOST", "#PARTITIONS", "ASSIGNMENT"],
        [[m.member_id, m.group_instance_id or "-", m.client_id, m.host,
          str(sum(len(p) for p in m.assignment.values())), _assignment_text(m.assignment)]
         for m in sorted(view.members, key=lambda m: m.member_id)],
    )  # fmt: skip
    owner = {(t, p): m for m in view.members for t, ps in m.assignment.items() for p in ps}
    keys = sorted({(t, p) for t, ps in view.offsets.items() for p in ps} | set(owner))
    offsets = table(
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "MEMBER-ID", "HOST", "CLIENT-ID"],
        [[t, str(p), str(view.offsets.get(t, {}).get(p, "-")),
          owner[t, p].member_id if (t, p) in owner else "-",
          owner[t, p].host if (t, p) in owner else "-",
          owner[t, p].client_id if (t, p) in owner else "-"] for t, p in keys],
    )  # fmt: skip
    return f"{state}\n\n{members}\n\n{offsets}"


def view_json(view: GroupView) -> dict[str, Any]:
    return {
        "group_id": view.group_id,
        "coordinator": view.coordinator,
        "state": view.state,
        "protocol_type": view.protocol_type,
        "protocol": view.protocol,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": m.assignment,
            }
            for m in view.members
        ],
        "offsets": {
            t: {str(p): o for p, o in sorted(ps.items())} for t, ps in view.offsets.items()
        },
    }


# -- the command ----------------------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    groups = sub.add_parser("groups", help="list or describe consumer groups (over Kafka)")
    groups_sub = groups.add_subparsers(dest="groups_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        default="127.0.0.1:9092",
        metavar="HOST:PORT",
        help="a groupcoord or Kafka broker (default: %(default)s)",
    )
    common.add_argument(
        "--timeout-ms", type=int, default=10_000, help="give up after (default: %(default)s)"
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    groups_sub.add_parser("list", parents=[common], help="every group with its state and type")
    describe = groups_sub.add_parser(
        "describe",
        parents=[common],
        help="a group's state, members, assignments and committed offsets",
    )
    describe.add_argument("group", metavar="GROUP")


def main(args: argparse.Namespace) -> int:
    try:
        host, port = parse_host_port(args.bootstrap_server)
    except ValueError as exc:
        print(f"groupcoord: --bootstrap-server: {exc}", file=sys.stderr)
        return 2
    timeout_s = args.timeout_ms / 1000
    try:
        if args.groups_command == "list":
            rows = asyncio.run(list_groups(host, port, timeout_s))
            if args.json:
                print(json.dumps(rows, indent=2))
            else:
                header = ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"]
                keys = ("group_id", "type", "state", "protocol_type")
                print(table(header, [[r[k] for k in keys] for r in rows]))
            return 0
        view = asyncio.run(describe_group(host, port, args.group, timeout_s))
    except GroupsError as exc:
        print(f"groupcoord: {exc}", file=sys.stderr)
        return 1
    if view.state == "Dead":  # what DescribeGroups says of a group that does not exist
        print(f"groupcoord: consumer group {args.group!r} does not exist", file=sys.stderr)
        return 1
    print(json.dumps(view_json(view), indent=2) if args.json else render_describe(view))
    return 0
