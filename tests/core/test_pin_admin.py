"""The admin APIs and the read-only views of the core, pinned whole: DescribeGroups, ListGroups,
DeleteGroups and OffsetDelete answers compared as values (every group of a request, not only the
first), the heartbeat fast path the server uses, and the per-group counts metrics read.

Written for mutation testing (issue 28, `make mutation`): each test fails on a change that the
rest of the suite let through.
"""

from __future__ import annotations

from coordinator.core.events import OffsetsDeleted
from coordinator.core.messages import (
    DeletedGroup,
    DescribedGroup,
    DescribedMember,
    DescribeGroups,
    Heartbeat,
    ListGroupsResult,
    OffsetDeleteResult,
    PartitionError,
    TopicErrors,
)
from coordinator.core.messages import ErrorCode as E
from tests.support.fakeclock import Harness, subscription


def test_describe_while_loading_answers_every_group() -> None:
    h = Harness()
    h.core.loading = True
    assert h.describe("a", "b") == (
        DescribedGroup(E.coordinator_load_in_progress, "a", "", "", "", ()),
        DescribedGroup(E.coordinator_load_in_progress, "b", "", "", "", ()),
    )


def test_describe_unknown_groups_before_and_after_kip_1043() -> None:
    h = Harness()
    assert h.describe("a", "b", version=5) == (
        DescribedGroup(E.none, "a", "Dead", "", "", ()),
        DescribedGroup(E.none, "b", "Dead", "", "", ()),
    )
    assert h.describe("a", "b", version=6) == (
        DescribedGroup(E.group_id_not_found, "a", "Dead", "", "", (), "Group a not found."),
        DescribedGroup(E.group_id_not_found, "b", "Dead", "", "", (), "Group b not found."),
    )


def test_describe_shows_protocol_and_metadata_only_when_stable() -> None:
    h = Harness()
    meta = subscription("orders")
    rt = h.join("g", instance="i1", client_id="c1", host="/10.0.0.1")
    h.advance(h.config.initial_rebalance_delay_ms)
    r = h.reply(rt)
    completing = DescribedMember(r.member_id, "i1", "c1", "/10.0.0.1", b"", b"")
    assert h.describe("g") == (
        DescribedGroup(E.none, "g", "CompletingRebalance", "consumer", "", (completing,)),
    )
    h.sync("g", r.member_id, r.generation_id, {r.member_id: b"A"})
    stable = DescribedMember(r.member_id, "i1", "c1", "/10.0.0.1", meta, b"A")
    assert h.describe("g", "other", version=5) == (
        DescribedGroup(E.none, "g", "Stable", "consumer", "range", (stable,)),
        DescribedGroup(E.none, "other", "Dead", "", "", ()),
    )


def test_list_while_loading_and_with_a_type_filter_that_excludes_classic() -> None:
    h = Harness()
    h.commit("b", {("orders", 0): 1})
    assert h.list_groups(types=("consumer",)) == ListGroupsResult(E.none, ())
    h.core.loading = True
    assert h.list_groups() == ListGroupsResult(E.coordinator_load_in_progress, ())


def test_delete_groups_while_loading_answers_every_group() -> None:
    h = Harness()
    h.commit("a", {("orders", 0): 1})
    h.core.loading = True
    assert h.delete_groups("a", "b") == (
        DeletedGroup("a", E.coordinator_load_in_progress),
        DeletedGroup("b", E.coordinator_load_in_progress),
    )


def test_offset_delete_counts_what_it_deleted() -> None:
    h = Harness()
    h.commit("g", {("orders", 0): 5, ("orders", 1): 6, ("payments", 0): 7})
    n = len(h.events_of(OffsetsDeleted))
    r = h.delete_offsets("g", {"orders": (0, 1, 2), "payments": (0,)})
    assert r == OffsetDeleteResult(
        E.none,
        (
            TopicErrors("orders", (PartitionError(0, E.none), PartitionError(1, E.none),
                                   PartitionError(2, E.none))),
            TopicErrors("payments", (PartitionError(0, E.none),)),
        ),
    )  # fmt: skip
    assert h.events_of(OffsetsDeleted)[n:] == [OffsetsDeleted("g", 3)]
    # nothing left to delete: no event
    h.delete_offsets("g", {"orders": (0,)})
    assert len(h.events_of(OffsetsDeleted)) == n + 1


def test_offset_delete_while_loading() -> None:
    h = Harness()
    h.commit("g", {("orders", 0): 5})
    h.core.loading = True
    assert h.delete_offsets("g", {"orders": (0,)}) == OffsetDeleteResult(
        E.coordinator_load_in_progress
    )


def test_the_heartbeat_fast_path_answers_like_handle() -> None:
    h = Harness()
    ids, _leader, gen = h.stable_group("g", n=2)
    for cmd in (
        Heartbeat("g", gen, ids[0], None),
        Heartbeat("g", gen + 1, ids[0], None),
        Heartbeat("g", gen, "nobody", None),
        Heartbeat("", gen, ids[0], None),
    ):
        assert h.core.heartbeat(cmd, h.now) == h.call(cmd)
    assert h.core.heartbeat(Heartbeat("g", gen, ids[1], None), h.now).error is E.none


def test_group_counts() -> None:
    h = Harness()
    h.stable_group("a", n=2)
    h.join("s", instance="i1")
    h.call(h.join_cmd("p"))  # MEMBER_ID_REQUIRED: a pending member only
    h.commit("e", {("orders", 0): 1})
    counts = {row[0]: row for row in h.core.group_counts()}
    assert counts == {
        "a": ("a", "Stable", "consumer", 1, 2, 0, 0),
        "s": ("s", "PreparingRebalance", "consumer", 0, 1, 1, 0),
        "p": ("p", "Empty", "", 0, 0, 0, 1),
        "e": ("e", "Empty", "", 0, 0, 0, 0),
    }


def test_describe_answers_in_request_order() -> None:
    h = Harness()
    h.commit("b", {("orders", 0): 1})
    groups = h.call(DescribeGroups(("zz", "b"), 5)).groups
    assert [g.group_id for g in groups] == ["zz", "b"]
