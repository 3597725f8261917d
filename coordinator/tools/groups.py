"""`groupcoord groups list|describe|fleet`: a view of consumer groups over the Kafka protocol, like
kafka-consumer-groups.sh, for users without the Java tools. `list` and `describe` work against
groupcoord and against any Kafka broker; `fleet` reads a groupcoord sidecar fleet's /fleet
document over HTTP (the operator endpoint, --metrics-listen): which member owns which state
partition, and each partition's load time.

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
timeout. `fleet` asks each `--url` once (several members' documents are merged: a partition's row
comes from its owner's document, which alone knows its load time). Exit codes: 0 ok, 1 the group
does not exist or the cluster answered an error or could not be reached (for `fleet`: an
endpoint could not be reached, answered an error, or is not in a fleet), 2 a bad argument.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import struct
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from coordinator.broker.answers import make
from coordinator.serve.addresses import parse_host_port
from coordinator.serve.status import FLEET_STATUSES
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


# -- the fleet (HTTP: /fleet) ---------------------------------------------------------------------

DEFAULT_URL = "http://127.0.0.1:9108"


def fetch_fleet(url: str, timeout_s: float) -> dict[str, Any]:
    """One member's /fleet document; `url` is its operator endpoint (with or without /fleet)."""
    base = url.rstrip("/")
    target = base if base.endswith("/fleet") else base + "/fleet"
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as response:
            document: Any = json.load(response)
    except urllib.error.HTTPError as exc:
        detail = exc.read(200).decode("utf-8", "replace").strip()
        if exc.code == 404:
            raise GroupsError(f"{target}: {detail or 'not in a sidecar fleet'}") from None
        raise GroupsError(f"{target}: HTTP {exc.code} {detail}".rstrip()) from None
    except (OSError, TimeoutError) as exc:  # URLError is an OSError
        reason = getattr(exc, "reason", None) or exc or "timed out"
        raise GroupsError(f"cannot reach {target}: {reason}") from None
    except ValueError as exc:
        raise GroupsError(f"{target}: not a fleet document ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise GroupsError(f"{target}: not a fleet document")
    return document


def merge_fleet(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """One view from several members' documents: the newest generation's fleet facts, and for
    each partition the row of the member that owns it (it alone knows the load time and the
    groups), else the row of the first document."""
    assert documents
    first = max(documents, key=lambda d: d.get("generation", -1))
    by_address = {d.get("address"): d for d in documents}
    rows: dict[int, dict[str, Any]] = {}
    for document in reversed(documents):  # the first document's rows win where no owner answered
        for row in document["partitions"]:
            rows[row["partition"]] = row
    for p, row in list(rows.items()):
        owner_doc = by_address.get(row.get("owner"))
        if owner_doc is not None:
            own = next((r for r in owner_doc["partitions"] if r["partition"] == p), None)
            if own is not None:
                rows[p] = own
    return {
        "state_topic": first.get("state_topic"),
        "fleet_group": first.get("fleet_group"),
        "generation": first.get("generation"),
        "members": first.get("members", []),
        "asked": [d.get("address") for d in documents],
        "ready": {d.get("address"): d.get("ready") for d in documents},
        "errors": {d.get("address"): d["error"] for d in documents if d.get("error")},
        "partitions": [rows[p] for p in sorted(rows)],
    }


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    out: list[tuple[int, int]] = []
    for n in sorted(numbers):
        if out and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out) or "-"


def render_fleet(view: dict[str, Any]) -> str:
    parts = view["partitions"]
    counts = dict.fromkeys(FLEET_STATUSES, 0)
    for row in parts:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    head = table(
        ["FLEET-GROUP", "STATE-TOPIC", "GENERATION", "#MEMBERS", "#PARTITIONS", "STATUS"],
        [[str(view["fleet_group"]), str(view["state_topic"]), str(view["generation"]),
          str(len(view["members"])), str(len(parts)),
          " ".join(f"{s}={n}" for s, n in counts.items() if n) or "-"]],
    )  # fmt: skip
    owned: dict[str, list[int]] = {m: [] for m in view["members"]}
    for row in parts:
        if row.get("owner"):
            owned.setdefault(row["owner"], []).append(row["partition"])
    members = table(  # READY is known for the members asked (--url) only
        ["MEMBER", "READY", "#PARTITIONS", "PARTITIONS"],
        [[m, {True: "yes", False: "no"}.get(view["ready"].get(m), "-"), str(len(ps)),
          _ranges(ps)] for m, ps in sorted(owned.items())],
    )  # fmt: skip
    rows = table(
        ["PARTITION", "STATUS", "OWNER", "EPOCH", "GROUPS", "LOAD-SECONDS", "LOADED-AT"],
        [[str(r["partition"]), r["status"], r.get("owner") or "-",
          "-" if r.get("epoch") is None else str(r["epoch"]),
          *_load_columns(r)] for r in parts],
    )  # fmt: skip
    errors = "\n".join(f"error at {a}: {e}" for a, e in sorted(view["errors"].items()))
    return f"{head}\n\n{members}\n\n{rows}" + (f"\n\n{errors}" if errors else "")


def _load_columns(row: dict[str, Any]) -> list[str]:
    """GROUPS, LOAD-SECONDS, LOADED-AT: known only from the member serving the partition."""
    if row["status"] != "serving":
        return ["-", "-", "-"]
    seconds = row.get("load_seconds")
    at = row.get("loaded_at")
    return [
        str(row.get("groups", "-")),
        "-" if seconds is None else f"{seconds:.3f}",
        "-" if at is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)),
    ]


def _fleet_main(args: argparse.Namespace) -> int:
    urls = args.url or [DEFAULT_URL]
    for url in urls:
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            print(f"groupcoord: --url: expected http://HOST:PORT, got {url!r}", file=sys.stderr)
            return 2
    try:
        documents = [fetch_fleet(url, args.timeout_ms / 1000) for url in urls]
    except GroupsError as exc:
        print(f"groupcoord: {exc}", file=sys.stderr)
        return 1
    view = merge_fleet(documents)
    print(json.dumps(view, indent=2) if args.json else render_fleet(view))
    return 0


# -- the command ----------------------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    groups = sub.add_parser(
        "groups", help="list or describe consumer groups (over Kafka), or show a sidecar fleet"
    )
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
    fleet = groups_sub.add_parser(
        "fleet",
        help="a sidecar fleet: which member owns which state partition, and load times "
        "(reads /fleet from the HTTP endpoint)",
    )
    fleet.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help=f"a member's HTTP endpoint (--metrics-listen); repeat for several members, whose "
        f"documents are merged (default: {DEFAULT_URL})",
    )
    fleet.add_argument(
        "--timeout-ms", type=int, default=10_000, help="give up after (default: %(default)s)"
    )
    fleet.add_argument("--json", action="store_true", help="print JSON instead of tables")


def main(args: argparse.Namespace) -> int:
    if args.groups_command == "fleet":
        return _fleet_main(args)
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
