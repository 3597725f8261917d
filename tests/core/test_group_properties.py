"""A rule-based state machine over the whole core, with invariants checked after every step.

Invariants:
- each group has at most one leader, it is a member, and there is a leader iff there are members;
- a group's generation never decreases (while the group exists);
- every reply_to is answered at most once (the harness asserts it on every Effects), and once the
  clock has run past every timer nothing is left parked except requests that legitimately wait;
- replaying every emitted record into a fresh GroupCoordinator gives the same durable state: the
  generation, protocol type/name, leader and assignments of every Stable or Empty group, and all
  committed offsets.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.group import GroupSnapshot
from tests.support.fakeclock import EPOCH, Harness, subscription

GROUPS = ("g1", "g2")
PROTOCOLS = (
    (("range", subscription("orders")),),
    (("roundrobin", subscription("orders", "payments")), ("range", subscription("orders"))),
    (("range", subscription("payments")), ("roundrobin", subscription("payments"))),
    (("sticky", subscription("audit")),),
)
INSTANCES = (None, None, "i1", "i2")


def durable_view(core: GroupCoordinator) -> tuple[dict[str, Any], set[str], dict[str, Any]]:
    """(views of Stable/Empty groups, ids of groups mid-rebalance, all offsets)."""
    groups: dict[str, Any] = {}
    in_flight: set[str] = set()
    for g in core.groups():
        offsets = core.committed_offsets(g.group_id)
        if g.state not in ("Stable", "Empty"):
            in_flight.add(g.group_id)  # a crash reverts it to its last snapshot
            continue
        if g.state == "Empty" and g.generation_id == 0 and not g.protocol_type and not offsets:
            continue  # never durable in Kafka either: a group with nothing written for it
        groups[g.group_id] = _group_view(g)
    offsets_all = {gid: core.committed_offsets(gid) for gid in core.offset_group_ids()}
    return groups, in_flight, offsets_all


def _group_view(g: GroupSnapshot) -> Any:
    return (
        g.state,
        g.generation_id,
        g.protocol_type,
        g.protocol_name if g.state == "Stable" else None,
        g.leader_id,
        tuple(sorted((m.member_id, m.group_instance_id, m.assignment) for m in g.members)),
    )


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(
            CoordinatorConfig(
                initial_rebalance_delay_ms=1_000,
                offsets_retention_ms=120_000,
                offsets_retention_check_interval_ms=30_000,
                max_group_size=4,
            )
        )
        self.known: list[tuple[str, str, str | None]] = []  # (group, member id, instance)
        self.generations: dict[str, int] = {}
        self.last_join: dict[tuple[str, str], int] = {}

    # -- rules -----------------------------------------------------------------------------------

    @rule(
        group=st.sampled_from(GROUPS),
        instance=st.sampled_from(INSTANCES),
        protocols=st.sampled_from(PROTOCOLS),
        version=st.sampled_from((3, 5, 9)),
        session=st.sampled_from((6_000, 10_000)),
    )
    def join_new(
        self, group: str, instance: str | None, protocols: Any, version: int, session: int
    ) -> None:
        if instance is not None and version < 5:
            version = 5
        rt = self.h.join(
            group,
            instance=instance,
            protocols=protocols,
            version=version,
            session=session,
            rebalance=session + 2_000,
        )
        r = self.h.reply(rt)
        if r is not None and r.member_id:
            self.known.append((group, r.member_id, instance))
        self._note_join(group, rt)

    @precondition(lambda self: self.known)
    @rule(data=st.data(), protocols=st.sampled_from(PROTOCOLS))
    def rejoin(self, data: st.DataObject, protocols: Any) -> None:
        group, member, instance = data.draw(st.sampled_from(self.known))
        rt = self.h.join(group, member, instance=instance, protocols=protocols)
        self._note_join(group, rt)

    def _note_join(self, group: str, rt: int) -> None:
        r = self.h.reply(rt)
        if r is not None and r.member_id and (group, r.member_id, None) not in self.known:
            self.known.append((group, r.member_id, None))

    @precondition(lambda self: self.known)
    @rule(data=st.data(), assign=st.booleans())
    def sync(self, data: st.DataObject, assign: bool) -> None:
        group, member, instance = data.draw(st.sampled_from(self.known))
        snap = self.h.core.group(group)
        if snap is None:
            return
        assignments = (
            {m.member_id: f"{m.member_id}@{snap.generation_id}".encode() for m in snap.members}
            if assign
            else None
        )
        self.h.sync(
            group,
            member,
            snap.generation_id,
            assignments,
            instance=instance,
            protocol_name=snap.protocol_name,
        )

    @precondition(lambda self: self.known)
    @rule(data=st.data(), stale=st.booleans())
    def heartbeat(self, data: st.DataObject, stale: bool) -> None:
        group, member, instance = data.draw(st.sampled_from(self.known))
        snap = self.h.core.group(group)
        generation = -1 if snap is None or stale else snap.generation_id
        self.h.heartbeat(group, member, generation, instance)

    @precondition(lambda self: self.known)
    @rule(data=st.data(), by_instance=st.booleans())
    def leave(self, data: st.DataObject, by_instance: bool) -> None:
        group, member, instance = data.draw(st.sampled_from(self.known))
        if by_instance and instance is not None:
            self.h.leave(group, ("", instance))
        else:
            self.h.leave(group, (member, instance))

    @rule(
        group=st.sampled_from(GROUPS),
        data=st.data(),
        partitions=st.lists(
            st.tuples(st.sampled_from(("orders", "payments", "audit", "nope")), st.integers(0, 4)),
            min_size=1,
            max_size=3,
        ),
        offset=st.integers(0, 1_000),
        as_member=st.booleans(),
    )
    def commit(
        self,
        group: str,
        data: st.DataObject,
        partitions: list[tuple[str, int]],
        offset: int,
        as_member: bool,
    ) -> None:
        members = [k for k in self.known if k[0] == group]
        snap = self.h.core.group(group)
        if as_member and members and snap is not None:
            _, member, instance = data.draw(st.sampled_from(members))
            self.h.commit(
                group,
                dict.fromkeys(partitions, offset),
                generation=snap.generation_id,
                member_id=member,
                instance=instance,
            )
        else:
            self.h.commit(group, dict.fromkeys(partitions, offset))

    @rule(group=st.sampled_from(GROUPS), topic=st.sampled_from(("orders", "payments", "audit")))
    def delete_offsets(self, group: str, topic: str) -> None:
        self.h.delete_offsets(group, {topic: (0, 1)})

    @rule(group=st.sampled_from(GROUPS))
    def delete_group(self, group: str) -> None:
        self.h.delete_groups(group)

    @rule(ms=st.sampled_from((0, 1, 500, 1_000, 3_000, 7_000, 12_000, 40_000)))
    def advance(self, ms: int) -> None:
        self.h.advance(ms)

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def one_leader_who_is_a_member(self) -> None:
        for g in self.h.core.groups():
            ids = [m.member_id for m in g.members]
            assert len(ids) == len(set(ids))
            if ids:
                assert g.leader_id in ids, g
            else:
                assert g.leader_id is None, g

    @invariant()
    def generation_never_decreases(self) -> None:
        seen = {}
        for g in self.h.core.groups():
            before = self.generations.get(g.group_id, -1)
            assert g.generation_id >= before, (g.group_id, before, g.generation_id)
            seen[g.group_id] = g.generation_id
        self.generations = seen  # a deleted group may come back at generation 0

    @invariant()
    def replay_gives_the_same_durable_state(self) -> None:
        fresh = GroupCoordinator(self.h.config, self.h.catalog, self.h.new_id, EPOCH)
        for record in self.h.records:
            fresh.replay(record)
        fresh.finish_loading(self.h.now)
        live, in_flight, live_offsets = durable_view(self.h.core)
        replayed, _, replayed_offsets = durable_view(fresh)
        assert replayed_offsets == live_offsets
        assert {k: v for k, v in replayed.items() if k not in in_flight} == live

    def teardown(self) -> None:
        # Drain: after enough time every parked request has been answered.
        for _ in range(8):
            self.h.advance(400_000)
        sent = set(range(1, self.h._next + 1))
        missing = sent - set(self.h.replies)
        assert not missing, f"never answered: {sorted(missing)}"


TestCoordinatorMachine = CoordinatorMachine.TestCase
TestCoordinatorMachine.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
