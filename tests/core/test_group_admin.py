"""DescribeGroups / ListGroups / DeleteGroups (docs/protocol.md §11), loading and replay
(§12.3)."""

from __future__ import annotations

import pytest

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.messages import ErrorCode as E
from coordinator.core.records import GroupMetadataKey, OffsetCommitKey
from tests.support.fakeclock import EPOCH, Harness, subscription


@pytest.fixture
def h() -> Harness:
    return Harness()


# -- DescribeGroups ---------------------------------------------------------------------------


def test_describe_stable_group_has_protocol_and_metadata(h: Harness) -> None:
    ids, _leader, _gen = h.stable_group("g", 2)
    (g,) = h.describe("g")
    assert (g.error, g.state, g.protocol_type, g.protocol_data) == (
        E.none,
        "Stable",
        "consumer",
        "range",
    )
    assert [
        (m.member_id, m.client_id, m.client_host, m.metadata, m.assignment) for m in g.members
    ] == [
        (ids[0], "c0", "/127.0.0.1", subscription("orders"), f"assign-{ids[0]}".encode()),
        (ids[1], "c1", "/127.0.0.1", subscription("orders"), f"assign-{ids[1]}".encode()),
    ]


def test_describe_non_stable_group_hides_protocol_and_metadata(h: Harness) -> None:
    _ids, leader, _gen = h.stable_group("g", 2)
    h.join("g", leader)
    (g,) = h.describe("g")
    assert g.state == "PreparingRebalance" and g.protocol_data == ""
    assert all(m.metadata == b"" for m in g.members)
    assert all(m.assignment == f"assign-{m.member_id}".encode() for m in g.members)


def test_describe_unknown_group_v5_is_dead_without_error(h: Harness) -> None:
    (g,) = h.describe("nope", version=5)
    assert (g.error, g.state, g.members) == (E.none, "Dead", ())


def test_describe_unknown_group_v6_is_group_id_not_found(h: Harness) -> None:
    (g,) = h.describe("nope", version=6)
    assert (g.error, g.state) == (E.group_id_not_found, "Dead") and g.error_message


def test_describe_simple_group_has_empty_protocol_type(h: Harness) -> None:
    h.commit("g", {("orders", 0): 1})
    (g,) = h.describe("g")
    assert (g.state, g.protocol_type, g.members) == ("Empty", "", ())


def test_describe_static_member_instance_id(h: Harness) -> None:
    h.join("g", instance="i1")
    (g,) = h.describe("g")
    assert g.members[0].group_instance_id == "i1"


def test_describe_while_loading(h: Harness) -> None:
    h.core.loading = True
    (g,) = h.describe("g")
    assert g.error is E.coordinator_load_in_progress


# -- ListGroups -------------------------------------------------------------------------------


def test_list_groups_all(h: Harness) -> None:
    h.stable_group("a", 1)
    h.commit("b", {("orders", 0): 1})
    r = h.list_groups()
    assert r.error is E.none
    assert {(g.group_id, g.protocol_type, g.state, g.group_type) for g in r.groups} == {
        ("a", "consumer", "Stable", "classic"),
        ("b", "", "Empty", "classic"),
    }


def test_list_groups_states_filter_case_insensitive_trimmed(h: Harness) -> None:
    h.stable_group("a", 1)
    h.commit("b", {("orders", 0): 1})
    assert [g.group_id for g in h.list_groups(states=(" stable ",)).groups] == ["a"]
    assert [g.group_id for g in h.list_groups(states=("EMPTY",)).groups] == ["b"]


def test_list_groups_types_filter(h: Harness) -> None:
    h.commit("b", {("orders", 0): 1})
    assert len(h.list_groups(types=("Classic",)).groups) == 1
    assert h.list_groups(types=("consumer",)).groups == ()


def test_list_groups_while_loading(h: Harness) -> None:
    h.core.loading = True
    assert h.list_groups().error is E.coordinator_load_in_progress


# -- DeleteGroups -----------------------------------------------------------------------------


def test_delete_unknown_group_is_group_id_not_found(h: Harness) -> None:
    assert h.delete_groups("nope")[0].error is E.group_id_not_found


def test_delete_non_empty_group_is_non_empty_group(h: Harness) -> None:
    h.stable_group("g", 1)
    assert h.delete_groups("g")[0].error is E.non_empty_group


def test_delete_empty_group_writes_offset_tombstones_then_group_tombstone(h: Harness) -> None:
    h.commit("g", {("orders", 0): 1, ("orders", 1): 1})
    (r,) = h.delete_groups("g")
    assert r.error is E.none
    assert [(rec.key, rec.value) for rec in h.last_effects.records] == [
        (OffsetCommitKey("g", "orders", 0), None),
        (OffsetCommitKey("g", "orders", 1), None),
        (GroupMetadataKey("g"), None),
    ]
    assert h.core.group("g") is None and h.offset_of("g", "orders", 0) == -1


def test_delete_twice_in_one_request(h: Harness) -> None:
    h.commit("g", {("orders", 0): 1})
    assert [r.error for r in h.delete_groups("g", "g")] == [E.none, E.group_id_not_found]


# -- loading and replay -----------------------------------------------------------------------


def replayed(h: Harness, now: int | None = None) -> GroupCoordinator:
    core = GroupCoordinator(h.config, h.catalog, h.new_id, EPOCH)
    for r in h.records:
        core.replay(r)
    assert core.loading
    core.finish_loading(h.now if now is None else now)
    assert not core.loading
    return core


def test_replay_restores_stable_group_and_offsets(h: Harness) -> None:
    ids, leader, gen = h.stable_group("g", 2)
    h.commit("g", {("orders", 0): 5}, generation=gen, member_id=leader)
    core = replayed(h)
    snap = core.group("g")
    assert snap is not None and snap.state == "Stable" and snap.generation_id == gen
    assert snap.leader_id == leader and [m.member_id for m in snap.members] == ids
    assert core.committed_offsets("g")[("orders", 0)].offset == 5


def test_replay_of_in_flight_rebalance_reverts_to_last_snapshot(h: Harness) -> None:
    _ids, leader, gen = h.stable_group("g", 2)
    h.join("g", leader)
    snap = replayed(h).group("g")
    assert snap is not None and snap.state == "Stable" and snap.generation_id == gen


def test_loaded_members_get_a_full_session_from_load_time(h: Harness) -> None:
    _ids, _leader, _gen = h.stable_group("g", 1)
    core = replayed(h, now=h.now + 100_000)
    assert core.next_deadline_ms() == h.now + 100_000 + 10_000


def test_loaded_group_then_works(h: Harness) -> None:
    ids, _leader, gen = h.stable_group("g", 1)
    h2 = Harness()
    h2.core = replayed(h)
    h2.now = h.now
    assert h2.heartbeat("g", ids[0], gen).error is E.none
    r = h2.call(h2.join_cmd("g", ids[0]))  # the leader rejoins -> rebalance -> completes at once
    assert r.generation_id == gen + 1


def test_replay_offset_for_unknown_group_creates_simple_group(h: Harness) -> None:
    h.commit("g", {("orders", 0): 5})
    snap = replayed(h).group("g")
    assert snap is not None and snap.state == "Empty" and snap.protocol_type == ""


def test_replay_group_tombstone_removes_group(h: Harness) -> None:
    h.commit("g", {("orders", 0): 5})
    h.delete_groups("g")
    core = replayed(h)
    assert core.group("g") is None and core.committed_offsets("g") == {}


def test_oversized_group_after_load_rebalances() -> None:
    h = Harness()
    h.stable_group("g", 3)
    small = Harness(CoordinatorConfig(max_group_size=2))
    core = GroupCoordinator(small.config, h.catalog, h.new_id, EPOCH)
    for r in h.records:
        core.replay(r)
    core.finish_loading(h.now)
    assert core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
