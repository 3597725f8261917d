"""Loading pinned where mutation testing found it loose (issue 28, `make mutation`).

Replaying the records a live coordinator wrote rebuilds each group exactly: the group record the
reloaded coordinator would write equals the last one the live coordinator wrote (state timestamp,
protocol, leader, and every member's ids, client, timeouts, subscription and assignment).
ClassicGroup.fromRecord's own rules (docs/protocol.md §12.3) on records built here: a rebalance
timeout of -1 (v0) takes the session timeout, the record's leader is taken only if it is a member
(else the first member), a state timestamp of 0 is a timestamp; a loaded group over
`group.max.size` rebalances, one at it does not.
The timer heap's top for the runtime's cheap re-arm check.
"""

from __future__ import annotations

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.events import RebalanceCause, RebalanceCompleted
from coordinator.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    Record,
)
from tests.support.fakeclock import EPOCH, Harness, subscription


def reloaded(h: Harness, records: list[Record] | None = None) -> GroupCoordinator:
    core = GroupCoordinator(h.config, h.catalog, h.new_id, EPOCH)
    for record in h.records if records is None else records:
        core.replay(record)
    core.finish_loading(h.now)
    return core


def last_group_values(records: list[Record]) -> dict[str, GroupMetadataValue | None]:
    out: dict[str, GroupMetadataValue | None] = {}
    for r in records:
        if isinstance(r.key, GroupMetadataKey):
            assert r.value is None or isinstance(r.value, GroupMetadataValue)
            out[r.key.group_id] = r.value
    return out


def test_replay_rebuilds_every_group_as_its_last_record_says() -> None:
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    # static members with their own clients, hosts, timeouts and subscriptions
    rt1 = h.join("s", instance="i1", client_id="c1", host="/10.0.0.1", session=20_000,
                 rebalance=40_000, protocols=(("range", subscription("orders")),))  # fmt: skip
    both = subscription("orders", "audit")
    rt2 = h.join("s", instance="i2", client_id="c2", host="/10.0.0.2", session=25_000,
                 rebalance=45_000, protocols=(("range", both),))  # fmt: skip
    h.advance(1)
    r1, r2 = h.reply(rt1), h.reply(rt2)
    h.sync("s", r2.member_id, r2.generation_id, instance="i2")
    h.sync("s", r1.member_id, r1.generation_id, {r1.member_id: b"A1", r2.member_id: b"A2"},
           instance="i1")  # fmt: skip
    h.stable_group("d", 2, protocols=(("roundrobin", subscription("payments")),))
    ids, _, _ = h.stable_group("e", 1)
    h.commit("e", {("orders", 0): 5})
    h.leave("e", (ids[0], None))  # Empty, with its state timestamp
    live = last_group_values(h.records)
    assert set(live) == {"s", "d", "e"} and all(v is not None for v in live.values())
    core = reloaded(h)
    for gid, value in live.items():
        group = core.state.groups[gid]
        assert core.group_record(group, h.now).value == value, gid
        assert core.group(gid) == h.core.group(gid), gid


def member(mid: str, rebalance: int, session: int = 10_000) -> MemberMetadata:
    return MemberMetadata(mid, None, "client", "/127.0.0.1", rebalance, session,
                          subscription("orders"), b"assignment")  # fmt: skip


def value(
    *members: MemberMetadata, leader: str | None = None, ts: int = 1_000
) -> GroupMetadataValue:
    return GroupMetadataValue("consumer", 3, "range", leader, ts, members)


def load(h: Harness, v: GroupMetadataValue) -> GroupCoordinator:
    return reloaded(h, [Record(GroupMetadataKey("g"), v)])


def test_a_v0_member_without_a_rebalance_timeout_takes_its_session_timeout() -> None:
    h = Harness()
    core = load(h, value(member("m1", -1, 12_000), member("m2", 30_000), leader="m1"))
    snapshot = core.group("g")
    assert snapshot is not None
    assert [(m.session_timeout_ms, m.rebalance_timeout_ms) for m in snapshot.members] == [
        (12_000, 12_000),
        (10_000, 30_000),
    ]
    assert snapshot.leader_id == "m1" and snapshot.state == "Stable"


def test_the_records_leader_is_taken_only_if_it_is_a_member() -> None:
    """Otherwise the leader is the first member loaded, as when members are added."""
    h = Harness()
    two = (member("m1", 30_000), member("m2", 30_000))
    assert load(h, value(*two, leader="m2")).group("g").leader_id == "m2"  # type: ignore[union-attr]
    assert load(h, value(*two, leader="ghost")).group("g").leader_id == "m1"  # type: ignore[union-attr]
    assert load(h, value(*two, leader=None)).group("g").leader_id == "m1"  # type: ignore[union-attr]


def test_a_state_timestamp_of_zero_is_kept() -> None:
    h = Harness()
    for ts in (0, 1, 1_234):
        core = load(h, value(ts=ts))  # Empty
        record = core.group_record(core.state.groups["g"], h.now)
        assert record.value.current_state_timestamp_ms == ts  # type: ignore[union-attr]
    core = load(h, value(ts=-1))
    assert core.state.groups["g"].state_timestamp_ms is None


def test_a_loaded_group_over_the_max_size_rebalances_and_one_at_it_does_not() -> None:
    h = Harness(CoordinatorConfig(max_group_size=2))
    at_max = load(h, value(member("m1", 30_000), member("m2", 30_000), leader="m1"))
    assert at_max.group("g").state == "Stable"  # type: ignore[union-attr]
    over = load(h, value(*(member(f"m{i}", 30_000) for i in range(3)), leader="m0"))
    assert over.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
    assert over.loading is False and at_max.loading is False


def test_earliest_timer_is_the_top_of_the_heap() -> None:
    h = Harness(CoordinatorConfig(offsets_retention_check_interval_ms=600_000))
    assert h.core.earliest_timer_ms() is None
    h.list_groups()  # arms the retention check
    assert h.core.earliest_timer_ms() == h.now + 600_000
    h.join("g", version=3, session=10_000)  # the initial delay: 3 s
    assert h.core.earliest_timer_ms() == h.now + h.config.initial_rebalance_delay_ms


def test_the_rebalance_of_an_oversized_loaded_group_is_reported_with_its_cause() -> None:
    h = Harness(CoordinatorConfig(max_group_size=2))
    h.core = load(h, value(*(member(f"m{i}", 30_000) for i in range(3)), leader="m0"))
    h.advance(31_000)  # nobody rejoins: the loaded members expire, the join completes empty
    completed = h.events_of(RebalanceCompleted)
    assert [(e.group_id, e.cause, e.members) for e in completed] == [
        ("g", RebalanceCause.GROUP_MAX_SIZE, 0)
    ]
