"""The replies by group state, over the whole state x API product (issue 20).

`core.group.STATE_REPLIES` is the table the handlers read; this drives every API, through
`GroupCoordinator.handle`, at a group in each of the five states, with a member that is valid for
its generation wherever the state has members, and checks Kafka's answer, written out here
independently of the table (docs/protocol.md §5-§11, Kafka's ClassicGroup validate* methods).
A Dead group is never live in this coordinator (it never unloads one); its row is Kafka's all the
same, so the test puts a Stable group into Dead by hand.
"""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.core.group import STATE_REPLIES, Check, GroupState
from coordinator.core.messages import (
    DeleteGroups,
    DescribeGroups,
    ErrorCode,
    FetchGroup,
    FetchTopic,
    Heartbeat,
    LeaveGroup,
    LeavingMember,
    ListGroups,
    OffsetDelete,
    OffsetFetch,
    SyncGroup,
)
from tests.support.fakeclock import Harness

E = ErrorCode
S = GroupState
PARKED = "parked"


def group_in(state: GroupState, protocol_type: str) -> tuple[Harness, str, int]:
    """A group "g" in `state` with two dynamic members of `protocol_type` (none when Empty)
    -> (harness, a member id valid for the generation (a departed one when Empty), generation).
    The member is the follower, so a SyncGroup in CompletingRebalance is parked, not the leader's
    assignment."""
    h = Harness()
    ids, leader, generation = h.stable_group("g", 2, protocol_type=protocol_type)
    follower = next(m for m in ids if m != leader)
    if state is S.STABLE:
        return h, follower, generation
    if state is S.DEAD:
        h.core.state.groups["g"].state = S.DEAD
        return h, follower, generation
    if state is S.EMPTY:
        h.leave("g", (leader, None), (follower, None))
        assert h.core.group("g").state == "Empty"  # type: ignore[union-attr]
        return h, follower, h.core.group("g").generation_id  # type: ignore[union-attr]
    h.join_dynamic("g", client_id="newcomer", protocol_type=protocol_type)  # a rebalance starts
    if state is S.PREPARING_REBALANCE:
        assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
        return h, follower, generation
    for member in ids:  # everyone rejoins: the join phase completes
        h.join("g", member, protocol_type=protocol_type)
    group = h.core.group("g")
    assert group is not None and group.state == "CompletingRebalance", group
    return h, follower, group.generation_id


def join_new(h: Harness, member: str, generation: int) -> Any:
    return h.call(h.join_cmd("g", protocol_type=h.core.state.groups["g"].protocol_type or "x"))


def sync(h: Harness, member: str, generation: int) -> Any:
    rt = h.send(SyncGroup("g", generation, member, None, None, None, (), 5))
    return h.reply(rt) or PARKED


def heartbeat(h: Harness, member: str, generation: int) -> Any:
    return h.call(Heartbeat("g", generation, member, None))


def leave(h: Harness, member: str, generation: int) -> Any:
    return h.call(LeaveGroup("g", (LeavingMember(member, None),), 5))


def commit(h: Harness, member: str, generation: int) -> Any:
    return h.commit("g", {("orders", 0): 5}, generation=generation, member_id=member)


def commit_simple(h: Harness, member: str, generation: int) -> Any:
    return h.commit("g", {("orders", 0): 5})


def offset_delete(h: Harness, member: str, generation: int) -> Any:
    return h.call(OffsetDelete("g", (FetchTopic("payments", (0,)),)))


def delete(h: Harness, member: str, generation: int) -> Any:
    return h.call(DeleteGroups(("g",))).results[0]


def describe(h: Harness, member: str, generation: int) -> Any:
    return h.call(DescribeGroups(("g",), 5)).groups[0]


def list_groups(h: Harness, member: str, generation: int) -> Any:
    return h.call(ListGroups((), ()))


def fetch(h: Harness, member: str, generation: int) -> Any:
    return h.call(OffsetFetch((FetchGroup("g", None),), False, 8)).groups[0]


def error_of(reply: Any) -> Any:
    """The answer's error: the top-level one, or the one partition's / member's."""
    if reply == PARKED:
        return PARKED
    if hasattr(reply, "topics") and reply.topics and hasattr(reply.topics[0], "partitions"):
        partition = reply.topics[0].partitions[0]
        if hasattr(partition, "error"):
            return partition.error
    if hasattr(reply, "members") and reply.members and hasattr(reply.members[0], "error"):
        if reply.error is not E.none:
            return reply.error
        return reply.members[0].error
    return reply.error


# Kafka's answers: API -> (Empty, PreparingRebalance, CompletingRebalance, Stable, Dead), for a
# group of protocol type "consumer" (and OffsetDelete again for another type).
_STATES = (S.EMPTY, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.STABLE, S.DEAD)
CNA = E.coordinator_not_available
UNKNOWN = E.unknown_member_id
REBALANCING = E.rebalance_in_progress
EXPECTED: dict[str, tuple[Any, Any, Any, Any, Any]] = {
    # A new member (v9, no id): MEMBER_ID_REQUIRED with its id, wherever it may join.
    "join_new": (E.member_id_required,) * 4 + (CNA,),
    "sync": (UNKNOWN, REBALANCING, PARKED, E.none, CNA),
    "heartbeat": (UNKNOWN, REBALANCING, E.none, E.none, CNA),
    # The follower leaves; in Empty it has already left.
    "leave": (UNKNOWN, E.none, E.none, E.none, CNA),
    # A member's commit: its generation's (the old one while preparing).
    "commit": (UNKNOWN, E.none, REBALANCING, E.none, CNA),
    # Generation -1 without a member: only an Empty group takes it (a simple or admin commit).
    "commit_simple": (E.none, UNKNOWN, UNKNOWN, UNKNOWN, CNA),
    # A consumer group is refused per partition for the topics it reads, not as a whole.
    "offset_delete": (E.none, E.none, E.none, E.none, E.group_id_not_found),
    "delete": (E.none,) + (E.non_empty_group,) * 3 + (E.group_id_not_found,),
    "describe": (E.none,) * 5,
    "list_groups": (E.none,) * 5,
    "fetch": (E.none,) * 5,
}
OTHER_TYPE_OFFSET_DELETE = (E.none,) + (E.non_empty_group,) * 3 + (E.group_id_not_found,)
CALLS = {
    "join_new": join_new,
    "sync": sync,
    "heartbeat": heartbeat,
    "leave": leave,
    "commit": commit,
    "commit_simple": commit_simple,
    "offset_delete": offset_delete,
    "delete": delete,
    "describe": describe,
    "list_groups": list_groups,
    "fetch": fetch,
}


@pytest.mark.parametrize("state", _STATES, ids=lambda s: s.value)
@pytest.mark.parametrize("api", sorted(CALLS))
def test_each_api_answers_each_state_as_kafka_does(api: str, state: GroupState) -> None:
    h, member, generation = group_in(state, "consumer")
    reply = CALLS[api](h, member, generation)
    assert error_of(reply) == EXPECTED[api][_STATES.index(state)], reply


@pytest.mark.parametrize("state", _STATES, ids=lambda s: s.value)
def test_offset_delete_of_another_protocol_type_needs_an_empty_group(state: GroupState) -> None:
    h, member, generation = group_in(state, "connect")
    reply = offset_delete(h, member, generation)
    assert reply.error == OTHER_TYPE_OFFSET_DELETE[_STATES.index(state)], reply


def test_the_table_has_an_answer_for_every_state_and_check() -> None:
    assert set(STATE_REPLIES) == set(GroupState)
    for state, row in STATE_REPLIES.items():
        assert set(row) == set(Check), state


def test_every_command_type_has_exactly_one_handler() -> None:
    """Routing as data (issue 20): HANDLERS covers the core's commands (the classic Command
    union and the KIP-848 ones, effects.AnyCommand), nothing more."""
    import typing

    from coordinator.core.coordinator import HANDLERS
    from coordinator.core.effects import AnyCommand

    flat: set[object] = set()
    for arg in typing.get_args(AnyCommand):
        flat |= set(typing.get_args(arg)) or {arg}
    assert set(HANDLERS) == flat
