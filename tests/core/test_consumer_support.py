"""A fake-clock harness and simulated clients for the KIP-848 consumer-group core.

No tests here: the other tests/core/test_consumer_*.py import it. `Clients` drives the pure
`ConsumerGroupCoordinator` with clients that behave like the Java consumer: a client owns what the
last assignment gave it (revoking at once what it lost) and reports it in its next heartbeat.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from coordinator.core.consumer import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    ConsumerGroupHeartbeat,
    ConsumerGroupRecord,
    ConsumerResult,
    HeartbeatResponse,
    TopicPartitions,
    replay,
)
from coordinator.core.consumer.messages import ConsumerEvent
from coordinator.core.consumer.model import ConsumerGroup, ConsumerGroupState
from coordinator.core.topics import TopicCatalog, TopicInfo

TOPICS = (("orders", 6), ("payments", 3), ("audit", 1))


def topic_id(i: int) -> uuid.UUID:
    return uuid.UUID(int=(i + 1) << 64 | (i + 1))


class FakeClock:
    def __init__(self, now: int = 1_000) -> None:
        self.now = now


@dataclass
class Client:
    member_id: str
    instance_id: str | None = None
    topics: tuple[str, ...] | None = ("orders",)
    regex: str | None = None
    assignor: str | None = None
    rebalance_timeout_ms: int = 30_000
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    joined: bool = False
    last: HeartbeatResponse | None = None

    def owned_tps(self) -> tuple[TopicPartitions, ...]:
        return tuple(
            TopicPartitions(t, tuple(sorted(ps)))
            for t, ps in sorted(self.owned.items(), key=lambda kv: kv[0].int)
            if ps
        )

    def owned_set(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


class Harness:
    def __init__(
        self,
        topics: Iterable[tuple[str, int]] = TOPICS,
        config: ConsumerGroupConfig | None = None,
        group_id: str = "g",
    ) -> None:
        self.catalog = TopicCatalog(
            TopicInfo(name, topic_id(i), n) for i, (name, n) in enumerate(topics)
        )
        self.clock = FakeClock()
        self._ids = 0
        self.config = config or ConsumerGroupConfig()
        self.core = ConsumerGroupCoordinator(self.config, self.catalog, self._new_id, 0)
        self.group_id = group_id
        self.records: list[ConsumerGroupRecord] = []
        self.events: list[ConsumerEvent] = []
        self.clients: dict[str, Client] = {}

    def _new_id(self) -> str:
        self._ids += 1
        return f"generated-{self._ids}"

    # -- raw requests --------------------------------------------------------------------------

    def send(self, **kw: Any) -> HeartbeatResponse:
        kw.setdefault("group_id", self.group_id)
        kw.setdefault("client_id", "client")
        kw.setdefault("client_host", "/127.0.0.1")
        result = self.core.heartbeat(ConsumerGroupHeartbeat(**kw), self.clock.now)
        if result.response is not None and result.response.error.name != "none":
            assert not result.records, "a refused request must not write"
        self.records.extend(result.records)
        self.events.extend(result.events)
        assert result.response is not None
        return result.response

    def advance(self, ms: int) -> None:
        """Move the clock, firing every due timer at its own deadline."""
        target = self.clock.now + ms
        while True:
            deadline = self.core.next_deadline_ms()
            if deadline is None or deadline > target:
                break
            self.clock.now = max(self.clock.now, deadline)
            self._absorb(self.core.expire(self.clock.now))
        self.clock.now = target
        self._absorb(self.core.expire(self.clock.now))

    def _absorb(self, result: ConsumerResult) -> None:
        self.records.extend(result.records)
        self.events.extend(result.events)

    # -- simulated clients ---------------------------------------------------------------------

    def client(self, name: str, **kw: Any) -> Client:
        c = Client(member_id=name, **kw)
        self.clients[name] = c
        return c

    def poll(self, c: Client, *, full: bool = False) -> HeartbeatResponse:
        """One heartbeat as the Java consumer sends it: everything on the first (epoch 0) or a
        full request, then only the epoch and owned partitions."""
        first = not c.joined or full
        names = c.topics if c.regex is None else None
        response = self.send(
            member_id=c.member_id,
            member_epoch=c.epoch,
            instance_id=c.instance_id,
            rebalance_timeout_ms=c.rebalance_timeout_ms if first else -1,
            subscribed_topic_names=(names or ()) if first and c.regex is None else None,
            subscribed_topic_regex=c.regex if first else None,
            server_assignor=c.assignor if first else None,
            topic_partitions=c.owned_tps() if (c.joined or not first) else (),
        )
        c.last = response
        if response.error.name == "none":
            c.joined = True
            c.epoch = response.member_epoch
            if response.assignment is not None:
                # The Java consumer revokes what it lost and takes what it got, then reports.
                c.owned = {tp.topic_id: frozenset(tp.partitions) for tp in response.assignment}
        elif response.error.name in ("fenced_member_epoch", "unknown_member_id"):
            # The Java consumer drops its partitions and rejoins with epoch 0, same member id.
            c.owned, c.epoch, c.joined = {}, 0, False
        return response

    def leave(self, c: Client, *, static: bool = False) -> HeartbeatResponse:
        response = self.send(
            member_id=c.member_id,
            member_epoch=-2 if static else -1,
            instance_id=c.instance_id,
        )
        c.owned = {}
        c.epoch = 0
        c.joined = False
        self.clients.pop(c.member_id, None)
        return response

    def round(self, ms: int = 1_000) -> None:
        for c in list(self.clients.values()):
            self.poll(c)
        self.advance(ms)

    def settle(self, rounds: int = 10) -> None:
        for _ in range(rounds):
            self.round()
            if self.group_id not in self.core.groups:
                return
            if self.group.state is ConsumerGroupState.STABLE and all(
                c.epoch == self.group.assignment_epoch for c in self.clients.values()
            ):
                return

    # -- views and checks ------------------------------------------------------------------------

    @property
    def group(self) -> ConsumerGroup:
        return self.core.groups[self.group_id]

    def partitions_of(self, *names: str) -> set[tuple[uuid.UUID, int]]:
        out: set[tuple[uuid.UUID, int]] = set()
        for name in names:
            info = self.catalog.get(name)
            assert info is not None
            out |= {(info.topic_id, p) for p in range(info.partitions)}
        return out

    def check_invariants(self) -> None:
        for group in self.core.groups.values():
            check_group(group)
        # Only members count: a client the coordinator expired has lost its partitions, whether
        # it knows it yet or not (the real consumer gives them up when its heartbeats fail).
        live = self.core.groups.get(self.group_id)
        members = live.members if live is not None else {}
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for c in self.clients.values():
            if c.member_id not in members:
                continue
            for tp in c.owned_set():
                assert tp not in seen, f"{tp} owned by {seen[tp]} and {c.member_id}"
                seen[tp] = c.member_id

    def replayed(self) -> dict[str, ConsumerGroup]:
        groups: dict[str, ConsumerGroup] = {}
        for record in self.records:
            replay(groups, record)
        return groups


def check_group(group: ConsumerGroup) -> None:
    """The model's invariants, recomputed from scratch."""
    holders: dict[tuple[uuid.UUID, int], str] = {}
    epochs: dict[uuid.UUID, dict[int, int]] = {}
    for m in group.members.values():
        for partitions in (m.assigned_partitions, m.partitions_pending_revocation):
            for t, ps in partitions.items():
                assert ps, "canonical maps have no empty sets"
                for p in ps:
                    assert (t, p) not in holders, f"{t}-{p} held by {holders[(t, p)]} and {m}"
                    holders[(t, p)] = m.member_id
                    epochs.setdefault(t, {})[p] = m.member_epoch
    assert epochs == group.partition_epochs
    targets: dict[tuple[uuid.UUID, int], str] = {}
    for mid, target in group.target_assignment.items():
        for t, ps in target.items():
            for p in ps:
                assert (t, p) not in targets, f"{t}-{p} in two targets"
                targets[(t, p)] = mid
    inverted = {
        (t, p): mid for t, owners in group.inverted_target.items() for p, mid in owners.items()
    }
    assert inverted == targets
    statics = {m.instance_id: mid for mid, m in group.members.items() if m.instance_id is not None}
    assert statics == group.static_members
    # `state` reads a reconciled-member count the mutations keep: it must match a recount.
    epoch = group.assignment_epoch
    assert group.state is (
        ConsumerGroupState.EMPTY
        if not group.members
        else ConsumerGroupState.ASSIGNING
        if group.group_epoch > epoch
        else ConsumerGroupState.STABLE
        if all(m.is_reconciled_to(epoch) for m in group.members.values())
        else ConsumerGroupState.RECONCILING
    )


def snapshot(group: ConsumerGroup) -> tuple[Any, ...]:
    """The hard state, comparable between a live group and a replayed one."""
    return (
        group.group_id,
        group.group_epoch,
        group.metadata_hash,
        group.assignment_epoch,
        dict(group.members),
        dict(group.static_members),
        {m: dict(a) for m, a in group.target_assignment.items()},
        {t: dict(o) for t, o in group.inverted_target.items()},
        {t: dict(e) for t, e in group.partition_epochs.items()},
        dict(group.resolved_regexes),
        dict(group.topic_name_counts),
        dict(group.regex_counts),
        dict(group.server_assignor_counts),
        group.has_subscription_metadata_record,
        group.state,
    )
