"""Random ShareGroupHeartbeat sequences (joins, heartbeats with current, previous and stale
epochs, subscription changes, leaves, session expiry, partitions added): after every step the
records written so far replay to exactly the live groups, epochs never go back, a member's epoch
never passes the group's, and every partition of a subscribed topic is assigned to
ceil(members / partitions) members."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from coordinator.core.messages import ErrorCode
from coordinator.core.share.coordinator import ShareGroupCoordinator
from coordinator.core.share.messages import ShareGroupConfig, ShareGroupHeartbeat, ShareRecord
from coordinator.core.topics import TopicCatalog, TopicInfo

MEMBERS = ("a", "b", "c", "d")
TOPICS = ("t1", "t2")
IDS = {"t1": uuid.UUID(int=1), "t2": uuid.UUID(int=2)}
SESSION_MS = 1000


class ShareGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.catalog = TopicCatalog([TopicInfo(t, IDS[t], 2) for t in TOPICS])
        self.c = ShareGroupCoordinator(
            ShareGroupConfig(session_timeout_ms=SESSION_MS), self.catalog
        )
        self.log: list[ShareRecord] = []
        self.now = 0
        self.epochs = (0, 0)
        self.fresh = True  # no topic grew since the last heartbeat that went through

    def _send(self, req: ShareGroupHeartbeat) -> ErrorCode:
        result = self.c.heartbeat(req, self.now)
        if result.response.error != ErrorCode.none:
            assert result.records == ()
        self.log += result.records
        if result.response.error == ErrorCode.none and req.member_epoch != -1:
            self.fresh = True  # it saw the grown topics
        return result.response.error

    def _epoch(self, member: str) -> int:
        group = self.c.groups.get("g")
        m = group.members.get(member) if group else None
        return m.member_epoch if m else 0

    @rule(member=st.sampled_from(MEMBERS), topics=st.sets(st.sampled_from(TOPICS), min_size=1))
    def join(self, member: str, topics: set[str]) -> None:
        error = self._send(ShareGroupHeartbeat("g", member, 0, None, tuple(sorted(topics))))
        assert error == ErrorCode.none

    @rule(member=st.sampled_from(MEMBERS), lag=st.integers(0, 2))
    def beat(self, member: str, lag: int) -> None:
        group = self.c.groups.get("g")
        m = group.members.get(member) if group else None
        if m is None:
            assert self._send(ShareGroupHeartbeat("g", member, 3)) in (
                ErrorCode.unknown_member_id,
                ErrorCode.group_id_not_found,
            )
            return
        epoch = (m.member_epoch, m.previous_member_epoch, m.member_epoch + 1)[lag]
        error = self._send(ShareGroupHeartbeat("g", member, epoch))
        if lag == 2:
            assert error == ErrorCode.fenced_member_epoch  # ahead of the coordinator
        elif epoch == 0:
            assert error == ErrorCode.invalid_request  # a join must name its topics
        else:
            assert error == ErrorCode.none  # the current or the previous epoch

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member: str) -> None:
        self._send(ShareGroupHeartbeat("g", member, -1))

    @rule(ms=st.integers(1, 800))
    def tick(self, ms: int) -> None:
        self.now += ms
        for result in self.c.expire(self.now):
            self.log += result.records

    @rule(topic=st.sampled_from(TOPICS))
    def grow(self, topic: str) -> None:
        info = self.catalog.get(topic)
        assert info is not None
        self.catalog.put(info.with_partitions(info.partitions + 1))
        self.c.topic_changed(topic)
        self.fresh = False

    @invariant()
    def replay_is_the_live_state(self) -> None:
        rebuilt = ShareGroupCoordinator(ShareGroupConfig(), self.catalog)
        for record in self.log:
            rebuilt.replay(record)
        assert set(rebuilt.groups) == set(self.c.groups)
        for gid, g in self.c.groups.items():
            r = rebuilt.groups[gid]
            assert (r.group_epoch, r.assignment_epoch, r.metadata_hash, r.members) == (
                g.group_epoch,
                g.assignment_epoch,
                g.metadata_hash,
                g.members,
            )
            assert {m: dict(p) for m, p in r.targets.items()} == {
                m: dict(p) for m, p in g.targets.items()
            }

    @invariant()
    def epochs_never_go_back(self) -> None:
        g = self.c.groups.get("g")
        if g is None:
            return
        now = (g.group_epoch, g.assignment_epoch)
        assert now >= self.epochs and g.assignment_epoch <= g.group_epoch
        self.epochs = now
        for m in g.members.values():
            assert m.member_epoch <= g.assignment_epoch

    @invariant()
    def targets_share_every_partition_evenly(self) -> None:
        g = self.c.groups.get("g")
        if g is None or not g.members or g.assignment_epoch != g.group_epoch or not self.fresh:
            return
        subscriptions = {m.subscribed_topic_names for m in g.members.values()}
        if len(subscriptions) != 1:
            return  # the heterogeneous case: per topic, checked by the examples
        (topics,) = subscriptions
        parts = [(IDS[t], p) for t in topics for p in range(self.catalog.get(t).partitions)]  # type: ignore[union-attr]
        sharing = -(-len(g.members) // len(parts))
        for tid, p in parts:
            holders = [m for m, t in g.targets.items() if p in t.get(tid, ())]
            assert len(holders) == sharing, (tid, p, holders)


TestShareGroupMachine = ShareGroupMachine.TestCase
TestShareGroupMachine.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
