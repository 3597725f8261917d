"""Differential conformance: the same raw-protocol steps to Apache Kafka 4.4 and to groupcoord.

A `Sequence` holds, for each server (a `Side`), one connection per logical member ("A", "B", ...)
and the names it uses on that server. A step sends one request per member, every request written
before any response is awaited (so a JoinGroup that waits for the others is answered when they
arrive, on both servers alike), then reads each response with a deadline, decodes it with kio and
turns it into a plain tree. The two trees are normalised and compared field by field:

- member ids become m1, m2... in the order they first appear in the sequence's responses (step
  order, then request order inside a step), on each server separately; KIP-848 member ids are
  chosen by the client and sent identically to both;
- group ids and topic names (unique per sequence on the shared Kafka) become their logical names,
  topic ids become the topic's logical name;
- throttle times, and the node id/host/port of FindCoordinator, become fixed tokens;
- lists whose order the protocol leaves open (members, groups, topics, partitions) are sorted;
- ListGroups answers keep only this sequence's groups (the Kafka cluster is shared).

Every remaining difference fails the step unless one entry of intended_differences.toml matches
it (api, version range, field path, optional values and named condition); the failure shows both
trees and each unlisted difference.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import re
import struct
import tomllib
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from pprint import pformat
from typing import Any

from tests.support.kafka import unique
from tests.support.sidecar_util import RawClient, decode, kio

Tree = Any
Builder = Callable[["Side"], Any]
DIFFERENCES_FILE = Path(__file__).with_name("intended_differences.toml")
THROTTLE = "<throttle>"
# OffsetCommit, OffsetFetch, FindCoordinator, JoinGroup, Heartbeat, LeaveGroup, SyncGroup,
# DescribeGroups, ListGroups, DeleteGroups, OffsetDelete, ConsumerGroupHeartbeat/Describe.
GROUP_APIS = {8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47, 68, 69}
NODE = "<node>"

# Lists whose order Kafka leaves open (HashMap iteration): sorted by these keys before comparing.
_SORT_KEYS = ("member_id", "group_id", "name", "topic_id", "key", "topic_name", "partition_index",
              "api_key")


# ------------------------------------------------------------------------------- intended list

@dataclass(frozen=True)
class Intended:
    id: str
    api: int
    versions: tuple[int, int]
    path: re.Pattern[str]
    reason: str
    kafka: Any = None
    groupcoord: Any = None
    when: str | None = None
    where: tuple[tuple[str, Any], ...] = ()  # sibling fields of the differing one, in Kafka's tree
    has_kafka: bool = False
    has_groupcoord: bool = False

    def matches(self, api: int, version: int, path: str, k: Any, g: Any,
                ctx: StepContext) -> bool:
        if api != self.api or not self.versions[0] <= version <= self.versions[1]:
            return False
        if not self.path.fullmatch(path):
            return False
        if self.has_kafka and k != self.kafka:
            return False
        if self.has_groupcoord and g != self.groupcoord:
            return False
        if self.where:
            parent = _at(ctx.kafka, path.rsplit(".", 1)[0] if "." in path else "")
            if not isinstance(parent, dict) or any(parent.get(k) != v for k, v in self.where):
                return False
        return self.when is None or CONDITIONS[self.when](ctx, path, k, g)


def _at(tree: Tree, path: str) -> Tree:
    """The node at a concrete path ("groups[0].members[1]")."""
    for part in filter(None, re.split(r"\.|(?=\[)", path)):
        if part.startswith("["):
            tree = tree[int(part[1:-1])]
        else:
            tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def _path_pattern(path: str) -> re.Pattern[str]:
    return re.compile(re.escape(path).replace(r"\[\*\]", r"\[\d+\]").replace(r"\*\*", ".*"))


def load_intended(path: Path = DIFFERENCES_FILE) -> list[Intended]:
    entries = tomllib.loads(path.read_text())["difference"]
    out = []
    for e in entries:
        versions = e.get("versions", [0, 99])
        when = e.get("when")
        if when is not None and when not in CONDITIONS:
            raise AssertionError(f"{path}: {e['id']}: unknown condition {when!r}")
        if not e.get("reason"):
            raise AssertionError(f"{path}: {e['id']}: an intended difference needs its reason")
        out.append(Intended(e["id"], e["api"], (versions[0], versions[1]), _path_pattern(e["path"]),
                            e["reason"], e.get("kafka"), e.get("groupcoord"), when,
                            tuple(e.get("where", {}).items()), "kafka" in e, "groupcoord" in e))
    return out


@dataclass
class StepContext:
    """What a condition may look at: both normalised responses and the sequence's notes."""

    kafka: Tree
    groupcoord: Tree
    notes: dict[str, Any]


def _leader_after_leader_left(ctx: StepContext, path: str, k: Any, g: Any) -> bool:
    """Kafka re-elects a leader in HashMap order once the leader leaves or misses a join phase;
    any member of the new generation may lead. Holds when a previous leader of this group left
    (or was removed) and both servers name a member of the generation."""
    if not ctx.notes.get("leader_left"):
        return False
    gen = set(ctx.notes.get("generation_members", ()))
    if path == "leader":
        return k in gen and g in gen
    return True  # the members list follows from who leads: given to the leader only


def _regex_pending(ctx: StepContext, path: str, k: Any, g: Any) -> bool:
    """While a sequence waits for Kafka to resolve a new regex subscription (a background task in
    Kafka; groupcoord resolves it inside the heartbeat), Kafka's epochs and assignment lag."""
    return bool(ctx.notes.get("regex_pending"))


def _released_partitions_one_heartbeat_apart(ctx: StepContext, path: str, k: Any, g: Any
                                             ) -> bool:
    """One server hands a member the partitions another member just released in this heartbeat,
    the other in the next: one answer carries the assignment, the other none, at one epoch."""
    same_epoch = ctx.kafka.get("member_epoch") == ctx.groupcoord.get("member_epoch")
    return same_epoch and (k is None) != (g is None)


CONDITIONS: dict[str, Callable[[StepContext, str, Any, Any], bool]] = {
    "released_partitions_one_heartbeat_apart": _released_partitions_one_heartbeat_apart,
    "leader_after_leader_left": _leader_after_leader_left,
    "regex_pending": _regex_pending,
}
USED: dict[str, int] = {}  # intended difference id -> times met in this run
COMPARED: dict[str, int] = {}  # request name and version -> answers compared in this run


# ------------------------------------------------------------------------------- trees and diffs

def to_tree(value: Any) -> Tree:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_tree(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_tree(v) for v in value]
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, bytes):
        return value
    if isinstance(value, uuid.UUID):
        return value
    return value


def diff(k: Tree, g: Tree, path: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(k, dict) and isinstance(g, dict):
        out = []
        for key in k.keys() | g.keys():
            sub = f"{path}.{key}" if path else key
            out += diff(k.get(key), g.get(key), sub)
        return sorted(out, key=lambda d: d[0])
    if isinstance(k, list) and isinstance(g, list) and len(k) == len(g):
        out = []
        for i, (a, b) in enumerate(zip(k, g, strict=True)):
            out += diff(a, b, f"{path}[{i}]")
        return out
    return [] if k == g else [(path, k, g)]


# ------------------------------------------------------------------------------- the two servers

@dataclass
class Side:
    """One server as one sequence sees it."""

    name: str
    port: int
    env: Env
    groups: dict[str, str]
    clients: dict[str, RawClient] = field(default_factory=dict)
    member_ids: dict[str, str] = field(default_factory=dict)  # logical member -> current id
    tokens: dict[str, str] = field(default_factory=dict)  # actual member id -> m1, m2...
    last_join: dict[str, Tree] = field(default_factory=dict)  # member -> its last JoinGroup answer
    # KIP-848: member -> (epoch, owned partitions) as its client would hold them after the answers
    cg: dict[str, tuple[int, dict[str, list[int]]]] = field(default_factory=dict)

    def mid(self, who: str) -> str:
        """The member id `who` holds on this server ("" before its first join)."""
        return self.member_ids.get(who, "")

    def group(self, logical: str) -> str:
        """The actual id of a logical group; any other string is sent as it is."""
        return self.groups.get(logical, logical)

    def topic(self, logical: str) -> str:
        return self.env.topics[logical]

    def topic_id(self, logical: str) -> uuid.UUID:
        return self.env.topic_ids[self.name][logical]

    def bind(self, who: str, member_id: str) -> None:
        if member_id:
            self.member_ids[who] = member_id
            self.token(member_id)

    def follow_heartbeat(self, who: str, request: Any, answer: Tree) -> None:
        """A consumer's view after a ConsumerGroupHeartbeat answer: its epoch, and the
        partitions it owns (an answer's assignment, when present, replaces them)."""
        if answer.get("error_code") or request.member_epoch < 0:
            self.cg.pop(who, None)
            return
        _, owned = self.cg.get(who, (0, {}))
        if answer.get("assignment") is not None:
            owned = assignment_of(answer)
        self.cg[who] = (int(answer["member_epoch"]), owned)

    def who(self, token: str) -> str:
        """The logical member whose current id has normalised name `token`."""
        return next(w for w, m in self.member_ids.items() if self.tokens.get(m) == token)

    def token(self, member_id: str) -> str:
        if member_id not in self.tokens:
            self.tokens[member_id] = f"m{len(self.tokens) + 1}"
        return self.tokens[member_id]

    async def client(self, who: str) -> RawClient:
        if who not in self.clients:
            self.clients[who] = await RawClient.connect(self.port)
        return self.clients[who]

    def close(self) -> None:
        for c in self.clients.values():
            c.close()
        self.clients.clear()

    def normalise(self, tree: Tree, api: int) -> Tree:
        names = {v: k for k, v in self.groups.items()}
        names.update({v: k for k, v in self.env.topics.items()})
        ids = {v: k for k, v in self.env.topic_ids[self.name].items()}

        def walk(node: Tree, key: str = "") -> Tree:
            if isinstance(node, dict):
                out = {k: walk(v, k) for k, v in node.items()}
                if api == 10 and ("node_id" in out or "host" in out):
                    out.update({k: NODE for k in ("node_id", "host", "port") if k in out})
                return out
            if isinstance(node, list):
                items = [walk(v, key) for v in node]
                if api == 16 and key == "groups":  # the shared Kafka lists others' groups too
                    items = [i for i in items if i.get("group_id") in self.groups]
                if api == 18 and key == "api_keys":  # the group coordinator's APIs only
                    items = [i for i in items if i.get("api_key") in GROUP_APIS]
                if key == "subscribed_topic_names":  # a set: Kafka lists it in hash order
                    return sorted(items)
                return _sorted(items)
            if key in ("throttle_time", "throttle_time_ms"):
                return THROTTLE
            if isinstance(node, uuid.UUID):
                return ids.get(node, node)
            if isinstance(node, str):
                if node in self.tokens:
                    return self.tokens[node]
                return names.get(node, node.replace(self.env.prefix, "{prefix}"))
            return node

        return walk(tree)


def _sorted(items: list[Any]) -> list[Any]:
    if items and all(isinstance(i, dict) for i in items):
        for key in _SORT_KEYS:
            if all(key in i for i in items):
                return sorted(items, key=lambda i: repr(i[key]))
        return items
    if items and all(isinstance(i, int) for i in items):
        return sorted(items)
    return items


@dataclass
class Env:
    """The servers of one test module: Kafka's port, groupcoord's port, the declared topics."""

    kafka_port: int
    groupcoord_port: int
    topics: dict[str, str]  # logical -> actual name, the same on both servers
    partitions: dict[str, int]
    prefix: str  # every actual topic name is prefix + logical name
    topic_ids: dict[str, dict[str, uuid.UUID]] = field(default_factory=dict)
    intended: list[Intended] = field(default_factory=load_intended)

    def sequence(self, groups: Iterable[str] = ("g",)) -> Sequence:
        return Sequence(self, {g: unique(f"conf-{g}") for g in groups})


class Mismatch(AssertionError):
    pass


@dataclass
class Pending:
    """Requests written and not yet answered: side name -> (member, request, connection)."""

    sent: dict[str, list[tuple[str, Any, RawClient]]]


class Sequence:
    """One scripted (or generated) sequence of steps against both servers."""

    def __init__(self, env: Env, groups: dict[str, str]) -> None:
        self.env = env
        self.kafka = Side("kafka", env.kafka_port, env, groups)
        self.groupcoord = Side("groupcoord", env.groupcoord_port, env, groups)
        self.notes: dict[str, Any] = {}
        self.log: list[str] = []

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.kafka, self.groupcoord

    def close(self) -> None:
        for s in self.sides:
            s.close()

    async def __aenter__(self) -> Sequence:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def send(self, *calls: tuple[str, Builder]) -> Pending:
        """Write `calls` to both servers (each on its member's connection), awaiting nothing."""
        sent: dict[str, list[tuple[str, Any, RawClient]]] = {}
        for side in self.sides:
            sent[side.name] = []
            for who, build in calls:
                entity = build(side)
                client = await side.client(who)
                await client.send(entity)
                sent[side.name].append((who, entity, client))
        return Pending(sent)

    async def receive(self, *pending: Pending, timeout: float = 20) -> list[Tree]:
        """Read the answers to `pending` (in the order sent) from both servers and compare them;
        returns the normalised Kafka trees (equal to groupcoord's but for listed differences)."""
        async def read(side: Side) -> list[Any]:
            out = []
            for p in pending:
                for who, entity, client in p.sent[side.name]:
                    try:
                        frame = await client.receive(timeout)
                    except (ConnectionError, TimeoutError) as exc:
                        out.append({"<no response>": type(exc).__name__})
                        side.clients.pop(who, None)
                        client.close()
                        continue
                    cls = type(entity)
                    out.append(decode(cls.__api_key__, cls.__version__, frame))
            return out

        k_raw, g_raw = await asyncio.gather(read(self.kafka), read(self.groupcoord))
        k_sent = [c for p in pending for c in p.sent["kafka"]]
        for side, raws in ((self.kafka, k_raw), (self.groupcoord, g_raw)):
            for (who, _, _), raw in zip(k_sent, raws, strict=True):
                member_id = getattr(raw, "member_id", None)
                if isinstance(member_id, str):
                    side.bind(who, member_id)
        results = []
        for (who, entity, _), kr, gr in zip(k_sent, k_raw, g_raw, strict=True):
            api, version = type(entity).__api_key__, type(entity).__version__
            kt = self.kafka.normalise(to_tree(kr), api)
            gt = self.groupcoord.normalise(to_tree(gr), api)
            if api == 11:
                self.kafka.last_join[who], self.groupcoord.last_join[who] = kt, gt
            if api == 68:
                for side, tree in ((self.kafka, kt), (self.groupcoord, gt)):
                    side.follow_heartbeat(who, entity, tree)
            self._compare(who, type(entity).__name__, api, version, kt, gt)
            results.append(kt)
        return results

    async def step(self, *calls: tuple[str, Builder], timeout: float = 20) -> list[Tree]:
        """Send `calls` (member, request builder) to both servers, then compare the answers."""
        return await self.receive(await self.send(*calls), timeout=timeout)

    async def state(self, group: str = "g") -> str:
        """The group's state as Kafka describes it (a probe, not compared)."""
        client = await self.kafka.client("<probe>")
        answer = await client.call(describe(5, group)(self.kafka), timeout=20)
        return str(answer.groups[0].group_state)

    async def wait_state(self, state: str, group: str = "g", timeout: float = 20,
                         members: int | None = None) -> None:
        """Until both servers describe `group` in `state` (with at least `members` members): a
        barrier, not compared, that orders a request on one connection after one on another."""
        async def wait(side: Side) -> None:
            client = await side.client("<probe>")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            seen = None
            while loop.time() < deadline:
                answer = await client.call(describe(5, group)(side), timeout=timeout)
                g = answer.groups[0]
                seen = (g.group_state, len(g.members))
                if g.group_state == state and len(g.members) >= (members or 0):
                    return
                await asyncio.sleep(0.01)  # a polling interval inside a deadline-bounded wait
            raise AssertionError(f"{side.name}: group {group} never {state} with {members} "
                                 f"members (last {seen})")

        await asyncio.gather(wait(self.kafka), wait(self.groupcoord))

    async def members(self, group: str = "g") -> set[str]:
        """The logical members Kafka describes in `group` (a probe, not compared)."""
        client = await self.kafka.client("<probe>")
        answer = await client.call(describe(5, group)(self.kafka), timeout=20)
        ids = {m.member_id for m in answer.groups[0].members}
        return {w for w, m in self.kafka.member_ids.items() if m in ids}

    async def one(self, who: str, build: Builder, timeout: float = 20) -> Tree:
        return (await self.step((who, build), timeout=timeout))[0]

    def _compare(self, who: str, name: str, api: int, version: int, kt: Tree, gt: Tree) -> None:
        ctx = StepContext(kt, gt, self.notes)
        unlisted = []
        for path, k, g in diff(kt, gt):
            hit = next((i for i in self.env.intended if i.matches(api, version, path, k, g, ctx)),
                       None)
            if hit is None:
                unlisted.append((path, k, g))
            else:
                USED[hit.id] = USED.get(hit.id, 0) + 1
        self.log.append(f"{who}: {name} v{version}")
        COMPARED[f"{name} v{version}"] = COMPARED.get(f"{name} v{version}", 0) + 1
        if os.environ.get("CONFORMANCE_TRACE"):  # every compared answer, for a reader
            print(f"{who}: {name} v{version}\n{pformat(kt, width=100)}")
        if unlisted:
            lines = "\n".join(f"  {p or '<response>'}: kafka={k!r} groupcoord={g!r}"
                              for p, k, g in unlisted)
            raise Mismatch(
                f"{name} v{version} from {who}: responses differ (not in "
                f"{DIFFERENCES_FILE.name}):\n{lines}\n--- kafka ---\n{pformat(kt, width=100)}\n"
                f"--- groupcoord ---\n{pformat(gt, width=100)}\n--- steps so far ---\n"
                + "\n".join(self.log))


# ------------------------------------------------------------------------------- request builders

def subscription(*topics: str, user_data: bytes = b"") -> bytes:
    """A ConsumerProtocolSubscription v0 (topics, user data): Kafka parses it for the group's
    subscribed topics, so the metadata is a well-formed one."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", len(user_data)) + user_data


def protocols(*names: str, metadata: bytes = b"") -> tuple[tuple[str, bytes], ...]:
    return tuple((n, metadata or subscription("t1", user_data=n.encode())) for n in names)


def join(version: int = 9, group: str = "g", who: str = "", *, member_id: str | None = None,
         instance: str | None = None, session_ms: int = 30000, rebalance_ms: int = 30000,
         protocol_type: str = "consumer", protos: tuple[tuple[str, bytes], ...] | None = None,
         reason: str | None = None) -> Builder:
    protos = protos if protos is not None else protocols("range")

    def build(side: Side) -> Any:
        fields: dict[str, Any] = {
            "group_id": side.group(group),
            "session_timeout": datetime.timedelta(milliseconds=session_ms),
            "member_id": side.mid(who) if member_id is None else member_id,
            "protocol_type": protocol_type,
            "protocols": tuple(kio(11, version, "JoinGroupRequestProtocol", name=n, metadata=m)
                               for n, m in protos),
        }
        if version >= 1:
            fields["rebalance_timeout"] = datetime.timedelta(milliseconds=rebalance_ms)
        if version >= 5:
            fields["group_instance_id"] = instance
        if version >= 8:
            fields["reason"] = reason
        return kio(11, version, "JoinGroupRequest", **fields)

    return build


def sync(version: int = 5, group: str = "g", who: str = "", *, generation: int,
         instance: str | None = None, assignments: dict[str, bytes] | None = None,
         member_id: str | None = None, protocol_type: str | None = "consumer",
         protocol_name: str | None = "range") -> Builder:
    """SyncGroup; `assignments` is keyed by logical member, or by "=<actual member id>"."""
    def build(side: Side) -> Any:
        fields: dict[str, Any] = {
            "group_id": side.group(group), "generation_id": generation,
            "member_id": side.mid(who) if member_id is None else member_id,
            "assignments": tuple(kio(14, version, "SyncGroupRequestAssignment",
                                     member_id=m[1:] if m.startswith("=") else side.mid(m),
                                     assignment=a)
                                 for m, a in (assignments or {}).items()),
        }
        if version >= 3:
            fields["group_instance_id"] = instance
        if version >= 5:
            fields["protocol_type"] = protocol_type
            fields["protocol_name"] = protocol_name
        return kio(14, version, "SyncGroupRequest", **fields)

    return build


def heartbeat(version: int = 4, group: str = "g", who: str = "", *, generation: int,
              instance: str | None = None, member_id: str | None = None) -> Builder:
    def build(side: Side) -> Any:
        fields: dict[str, Any] = {"group_id": side.group(group), "generation_id": generation,
                                  "member_id": side.mid(who) if member_id is None else member_id}
        if version >= 3:
            fields["group_instance_id"] = instance
        return kio(12, version, "HeartbeatRequest", **fields)

    return build


def leave(version: int = 5, group: str = "g", *members: tuple[str, str | None]) -> Builder:
    """LeaveGroup of (logical member, instance id) pairs; v0-v2 take the first member only.
    A logical member "" stands for an empty member id; "=xyz" for the literal id xyz."""
    def mid(side: Side, who: str) -> str:
        return who[1:] if who.startswith("=") else side.mid(who)

    def build(side: Side) -> Any:
        if version < 3:
            return kio(13, version, "LeaveGroupRequest", group_id=side.group(group),
                       member_id=mid(side, members[0][0]))
        idents = []
        for who, instance in members:
            f: dict[str, Any] = {"member_id": mid(side, who), "group_instance_id": instance}
            if version >= 5:
                f["reason"] = None
            idents.append(kio(13, version, "MemberIdentity", **f))
        return kio(13, version, "LeaveGroupRequest", group_id=side.group(group),
                   members=tuple(idents))

    return build


def describe(version: int = 5, *groups: str) -> Builder:
    def build(side: Side) -> Any:
        f: dict[str, Any] = {"groups": tuple(_group_or_literal(side, g) for g in groups or ("g",))}
        if version >= 3:
            f["include_authorized_operations"] = False
        return kio(15, version, "DescribeGroupsRequest", **f)

    return build


def _group_or_literal(side: Side, g: str) -> str:
    return side.groups.get(g, g)


def list_groups(version: int = 5, states: tuple[str, ...] = (), types: tuple[str, ...] = ()
                ) -> Builder:
    def build(side: Side) -> Any:
        f: dict[str, Any] = {}
        if version >= 4:
            f["states_filter"] = states
        if version >= 5:
            f["types_filter"] = types
        return kio(16, version, "ListGroupsRequest", **f)

    return build


def delete_groups(version: int = 2, *groups: str) -> Builder:
    def build(side: Side) -> Any:
        return kio(42, version, "DeleteGroupsRequest",
                   groups_names=tuple(_group_or_literal(side, g) for g in groups or ("g",)))

    return build


def find_coordinator(version: int = 4, group: str = "g") -> Builder:
    def build(side: Side) -> Any:
        key = side.groups.get(group, group)
        if version >= 4:
            return kio(10, version, "FindCoordinatorRequest", key_type=0, coordinator_keys=(key,))
        f: dict[str, Any] = {"key": key}
        if version >= 1:
            f["key_type"] = 0
        return kio(10, version, "FindCoordinatorRequest", **f)

    return build


def commit(version: int = 9, group: str = "g", who: str = "", *, generation: int = -1,
           offsets: dict[str, dict[int, int]], instance: str | None = None,
           member_id: str | None = None, metadata: str | None = "") -> Builder:
    def build(side: Side) -> Any:
        topics = []
        for t, parts in offsets.items():
            ps = []
            for p, o in parts.items():
                f: dict[str, Any] = {"partition_index": p, "committed_offset": o,
                                     "committed_metadata": metadata}
                if version >= 6:
                    f["committed_leader_epoch"] = -1
                ps.append(kio(8, version, "OffsetCommitRequestPartition", **f))
            topics.append(kio(8, version, "OffsetCommitRequestTopic", name=side.topic(t),
                              partitions=tuple(ps)))
        f2: dict[str, Any] = {"group_id": side.group(group), "topics": tuple(topics),
                              "member_id": side.mid(who) if member_id is None else member_id}
        f2["generation_id_or_member_epoch"] = generation
        if 2 <= version <= 4:
            f2["retention_time"] = datetime.timedelta(milliseconds=-1)
        if version >= 7:
            f2["group_instance_id"] = instance
        return kio(8, version, "OffsetCommitRequest", **f2)

    return build


def offset_fetch(version: int = 9, group: str = "g", *, topics: dict[str, list[int]] | None,
                 who: str = "", member_epoch: int = -1, require_stable: bool = False) -> Builder:
    def build(side: Side) -> Any:
        if version >= 8:
            ts = None if topics is None else tuple(
                kio(9, version, "OffsetFetchRequestTopics", name=side.topic(t),
                    partition_indexes=tuple(ps)) for t, ps in topics.items())
            g: dict[str, Any] = {"group_id": side.group(group), "topics": ts}
            if version >= 9:
                g["member_id"] = side.mid(who) or None
                g["member_epoch"] = member_epoch
            return kio(9, version, "OffsetFetchRequest", require_stable=require_stable,
                       groups=(kio(9, version, "OffsetFetchRequestGroup", **g),))
        ts = None if topics is None else tuple(
            kio(9, version, "OffsetFetchRequestTopic", name=side.topic(t),
                partition_indexes=tuple(ps)) for t, ps in topics.items())
        f: dict[str, Any] = {"group_id": side.group(group), "topics": ts}
        if version >= 7:
            f["require_stable"] = require_stable
        return kio(9, version, "OffsetFetchRequest", **f)

    return build


def offset_delete(group: str = "g", *, topics: dict[str, list[int]]) -> Builder:
    def build(side: Side) -> Any:
        return kio(47, 0, "OffsetDeleteRequest", group_id=side.group(group), topics=tuple(
            kio(47, 0, "OffsetDeleteRequestTopic", name=side.topic(t), partitions=tuple(
                kio(47, 0, "OffsetDeleteRequestPartition", partition_index=p) for p in ps))
            for t, ps in topics.items()))

    return build


def cg_heartbeat(version: int = 1, group: str = "g", who: str = "", *, epoch: int,
                 member_id: str | None = None, instance: str | None = None,
                 rack: str | None = None, rebalance_ms: int = 30000,
                 topics: tuple[str, ...] | None = None, regex: str | None = None,
                 assignor: str | None = None,
                 owned: dict[str, list[int]] | None = None) -> Builder:
    """ConsumerGroupHeartbeat (68). The member id is the client's own (KIP-1082): the same on
    both servers, derived from the sequence's group id and `who`."""
    def build(side: Side) -> Any:
        mid = member_id if member_id is not None else side.mid(who)
        if not mid and member_id is None:
            mid = f"{who}-{uuid.uuid5(uuid.NAMESPACE_OID, side.group(group)).hex[:16]}"
            side.bind(who, mid)
        real_regex = regex
        if regex is not None:
            real_regex = regex.replace("{prefix}", side.env.prefix)
        mine = owned if owned is not None or epoch != 0 else {}  # a join owns nothing
        f: dict[str, Any] = {
            "group_id": side.group(group), "member_id": mid, "member_epoch": epoch,
            "instance_id": instance, "rack_id": rack,
            "rebalance_timeout": datetime.timedelta(milliseconds=rebalance_ms),
            "subscribed_topic_names": None if topics is None else tuple(
                side.topic(t) for t in topics),
            "server_assignor": assignor,
            "topic_partitions": None if mine is None else tuple(
                kio(68, version, "TopicPartitions", topic_id=side.topic_id(t),
                    partitions=tuple(ps)) for t, ps in mine.items())}
        if version >= 1:
            f["subscribed_topic_regex"] = real_regex
        return kio(68, version, "ConsumerGroupHeartbeatRequest", **f)

    return build


def cg_describe(version: int = 1, *groups: str) -> Builder:
    def build(side: Side) -> Any:
        return kio(69, version, "ConsumerGroupDescribeRequest",
                   group_ids=tuple(_group_or_literal(side, g) for g in groups or ("g",)),
                   include_authorized_operations=False)

    return build


def assignment_of(tree: Tree) -> dict[str, list[int]]:
    """A normalised ConsumerGroupHeartbeat response's assignment: {topic: partitions}."""
    a = tree.get("assignment")
    if not a:
        return {}
    return {tp["topic_id"]: sorted(tp["partitions"]) for tp in a["topic_partitions"]}


def cg_follow(version: int = 1, group: str = "g", who: str = "", **kw: Any) -> Builder:
    """The heartbeat `who`'s client sends next on each server: its own epoch there and what it
    owns there (so a server that is a step behind is not told the other's epoch)."""
    def build(side: Side) -> Any:
        epoch, owned = side.cg.get(who, (0, {}))
        return cg_heartbeat(version, group, who, epoch=epoch, owned=owned, **kw)(side)

    return build
