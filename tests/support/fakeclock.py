"""A fake-clock harness around the pure GroupCoordinator.

`h.send(cmd)` runs a command at `h.now` and returns its reply_to; `h.reply(rt)` is the answer (or
None while parked). `h.advance(ms)` moves the clock, firing every due timer at its own deadline.
Every reply_to must be answered at most once; the harness asserts it on every Effects.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from coordinator.core.coordinator import CoordinatorConfig, Effects, GroupCoordinator
from coordinator.core.events import Event
from coordinator.core.messages import (
    CommitPartition,
    CommitTopic,
    DeleteGroups,
    DescribeGroups,
    FetchGroup,
    FetchTopic,
    Heartbeat,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeavingMember,
    ListGroups,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    Protocol,
    Result,
    SyncAssignment,
    SyncGroup,
    SyncGroupResult,
)
from coordinator.core.records import Record
from coordinator.core.topics import TopicCatalog, TopicInfo

EPOCH = 1_700_000_000_000
DEFAULT_TOPICS = (("orders", 4), ("payments", 2), ("audit", 1))


def subscription(*topics: str, version: int = 0, user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolSubscription bytes (v0 layout after the version)."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        b = t.encode()
        out += struct.pack(">h", len(b)) + b
    if user_data is None:
        out += struct.pack(">i", -1)
    else:
        out += struct.pack(">i", len(user_data)) + user_data
    return out


def catalog(topics: Iterable[tuple[str, int]] = DEFAULT_TOPICS) -> TopicCatalog:
    import uuid

    return TopicCatalog(
        tuple(TopicInfo(name, uuid.UUID(int=i + 1), n) for i, (name, n) in enumerate(topics))
    )


class Harness:
    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        topics: Iterable[tuple[str, int]] = DEFAULT_TOPICS,
        now: int = 1_000,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self.catalog = catalog(topics)
        self._ids = 0
        self.core = GroupCoordinator(self.config, self.catalog, self.new_id, EPOCH)
        self.now = now
        self.replies: dict[int, Result] = {}
        self.records: list[Record] = []
        self.events: list[Event] = []
        self._next = 0

    def new_id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids:04d}"

    # -- driving ---------------------------------------------------------------------------------

    def absorb(self, fx: Effects) -> Effects:
        for rt, result in fx.replies:
            assert rt not in self.replies, f"reply_to {rt} answered twice"
            assert 0 < rt <= self._next, f"reply_to {rt} never sent"
            self.replies[rt] = result
        self.records.extend(fx.records)
        self.events.extend(fx.events)
        return fx

    def send(self, command: Any) -> int:
        self._next += 1
        self.last_effects = self.absorb(self.core.handle(self._next, command, self.now))
        return self._next

    def call(self, command: Any) -> Any:
        rt = self.send(command)
        assert rt in self.replies, f"{type(command).__name__} was parked"
        return self.replies[rt]

    def reply(self, rt: int) -> Any:
        return self.replies.get(rt)

    def advance(self, ms: int) -> None:
        target = self.now + ms
        stuck = 0  # passes in a row at one instant: a deadline expire() never clears
        while True:
            deadline = self.core.next_deadline_ms()
            if deadline is None or deadline > target:
                break
            stuck = stuck + 1 if deadline <= self.now else 0
            if stuck > 10_000:
                raise AssertionError(f"deadline {deadline}: expire() never clears it")
            self.now = max(self.now, deadline)
            self.absorb(self.core.expire(self.now))
        self.now = target
        self.absorb(self.core.expire(self.now))

    def events_of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    # -- command builders ------------------------------------------------------------------------

    @staticmethod
    def join_cmd(
        group: str = "g",
        member_id: str = "",
        *,
        instance: str | None = None,
        protocols: tuple[tuple[str, bytes], ...] | None = None,
        protocol_type: str = "consumer",
        session: int = 10_000,
        rebalance: int = 30_000,
        version: int = 9,
        client_id: str = "client",
        host: str = "/127.0.0.1",
        reason: str | None = None,
    ) -> JoinGroup:
        if protocols is None:
            protocols = (("range", subscription("orders")),)
        return JoinGroup(
            group,
            session,
            rebalance,
            member_id,
            instance,
            protocol_type,
            tuple(Protocol(n, m) for n, m in protocols),
            reason,
            client_id,
            host,
            version,
        )

    def join(self, group: str = "g", member_id: str = "", **kw: Any) -> int:
        return self.send(self.join_cmd(group, member_id, **kw))

    def join_dynamic(self, group: str = "g", **kw: Any) -> tuple[int, str]:
        """JoinGroup v4+ round trip: MEMBER_ID_REQUIRED, then the parked join. -> (rt, id)."""
        first: JoinGroupResult = self.call(self.join_cmd(group, **kw))
        assert first.error.name == "member_id_required", first
        return self.join(group, first.member_id, **kw), first.member_id

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        version: int = 5,
    ) -> int:
        return self.send(
            SyncGroup(
                group,
                generation,
                member_id,
                instance,
                protocol_type,
                protocol_name,
                tuple(SyncAssignment(m, a) for m, a in (assignments or {}).items()),
                version,
            )
        )

    def heartbeat(
        self, group: str, member_id: str, generation: int, instance: str | None = None
    ) -> Any:
        return self.call(Heartbeat(group, generation, member_id, instance))

    def leave(self, group: str, *members: tuple[str, str | None], version: int = 5) -> Any:
        return self.call(LeaveGroup(group, tuple(LeavingMember(m, i) for m, i in members), version))

    def commit(
        self,
        group: str,
        offsets: dict[tuple[str, int], int],
        *,
        generation: int = -1,
        member_id: str = "",
        instance: str | None = None,
        metadata: str | None = None,
        retention: int = -1,
        version: int = 9,
        leader_epoch: int = -1,
    ) -> Any:
        by_topic: dict[str, list[CommitPartition]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                CommitPartition(partition, offset, leader_epoch, metadata)
            )
        topics = tuple(CommitTopic(t, tuple(ps)) for t, ps in by_topic.items())
        return self.call(
            OffsetCommit(group, generation, member_id, instance, retention, topics, version)
        )

    def fetch(
        self, group: str, topics: dict[str, tuple[int, ...]] | None = None, *, stable: bool = False
    ) -> Any:
        fetch_topics = (
            None if topics is None else tuple(FetchTopic(t, ps) for t, ps in topics.items())
        )
        result = self.call(OffsetFetch((FetchGroup(group, fetch_topics),), stable, 8))
        return result.groups[0]

    def offset_of(self, group: str, topic: str, partition: int) -> int:
        fetched = self.fetch(group, {topic: (partition,)})
        return int(fetched.topics[0].partitions[0].offset)

    def delete_offsets(self, group: str, topics: dict[str, tuple[int, ...]]) -> Any:
        return self.call(OffsetDelete(group, tuple(FetchTopic(t, ps) for t, ps in topics.items())))

    def describe(self, *groups: str, version: int = 5) -> Any:
        return self.call(DescribeGroups(groups, version)).groups

    def list_groups(self, states: tuple[str, ...] = (), types: tuple[str, ...] = ()) -> Any:
        return self.call(ListGroups(states, types))

    def delete_groups(self, *groups: str) -> Any:
        return self.call(DeleteGroups(groups)).results

    # -- whole flows -----------------------------------------------------------------------------

    def stable_group(self, group: str = "g", n: int = 2, **kw: Any) -> tuple[list[str], str, int]:
        """n dynamic members joined and synced. -> (ids in join order, leader, generation)."""
        rts: list[int] = []
        ids: list[str] = []
        for i in range(n):
            rt, mid = self.join_dynamic(group, client_id=f"c{i}", **kw)
            rts.append(rt)
            ids.append(mid)
        # the initial delay extends while members keep arriving (docs/protocol.md §5.5)
        for _ in range(20):
            if all(rt in self.replies for rt in rts):
                break
            self.advance(max(self.config.initial_rebalance_delay_ms, 1))
        results = [self.reply(rt) for rt in rts]
        assert all(r is not None and r.error.name == "none" for r in results), results
        leader = results[0].leader
        generation = results[0].generation_id
        assignments = {m: f"assign-{m}".encode() for m in ids}
        sync_rts = [
            self.sync(group, m, generation, assignments if m == leader else None)
            for m in ids
            if m != leader
        ]
        sync_rts.append(self.sync(group, leader, generation, assignments))
        for rt in sync_rts:
            r: SyncGroupResult = self.reply(rt)
            assert r is not None and r.error.name == "none", r
        return ids, leader, generation
