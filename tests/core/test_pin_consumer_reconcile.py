"""A KIP-848 member's reconciliation (Kafka's CurrentAssignmentBuilder) when the target moves
while the member is still revoking or still waiting, pinned where `make mutation` found it
loose, through heartbeats of simulated Java consumers:
- a member that revoked what it was asked to, and must now revoke more (the target moved on),
  stays UNREVOKED_PARTITIONS at its epoch + 1, with its previous epoch recorded;
- a member that reports it owns nothing has nothing to revoke: it moves to the target epoch;
- a partition a member itself holds pending revocation, given back to it by a newer target, is
  not "held by another member": it is assigned at once, the member STABLE;
- a member in a state only a newer version writes (UNKNOWN) that reports it owns nothing is
  reconciled from scratch: what it had and its target no longer gives is dropped, what its
  target gives and nobody holds is assigned."""

from __future__ import annotations

from coordinator.core.consumer.model import MemberState, replace_member
from coordinator.core.consumer.record_helpers import current_assignment_record
from tests.core.test_consumer_support import Harness, topic_id

ORDERS = topic_id(0)


def test_a_member_asked_to_revoke_more_while_revoking_moves_to_epoch_plus_one() -> None:
    h = Harness()
    a = h.client("a")
    h.settle()
    start = h.group.members["a"].member_epoch
    h.poll(h.client("b"))
    h.poll(a)  # asked to give b half: revoking, at its epoch
    member = h.group.members["a"]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    assert (member.member_epoch, member.previous_member_epoch) == (start, start)
    h.poll(h.client("c"))  # the target moves on: a must give up one more
    response = h.poll(a)  # a reports it revoked the first batch, still owning that one
    member = h.group.members["a"]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    assert (member.member_epoch, member.previous_member_epoch) == (start + 1, start)
    assert response.member_epoch == start + 1
    h.settle()
    h.check_invariants()


def test_a_revoking_member_that_reports_owning_nothing_moves_to_the_target_epoch() -> None:
    h = Harness()
    a = h.client("a")
    h.settle()
    h.poll(h.client("b"))
    h.poll(a)
    assert h.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    h.poll(h.client("c"))
    a.owned = {}  # it dropped everything (as after losing its partitions)
    h.poll(a)
    member = h.group.members["a"]
    assert member.state is not MemberState.UNREVOKED_PARTITIONS
    assert member.member_epoch == h.group.assignment_epoch
    assert not member.partitions_pending_revocation


def waiting_c() -> Harness:
    """a and b share orders; c joined and holds a's share, waiting for b's (UNRELEASED)."""
    h = Harness()
    a = h.client("a")
    h.client("b")
    h.settle()
    h.poll(h.client("c"))  # c's target takes a partition from a and one from b
    h.poll(a)
    h.poll(a)  # a released its share; b has not yet
    h.poll(h.clients["c"])
    member = h.group.members["c"]
    assert member.state is MemberState.UNRELEASED_PARTITIONS and member.assigned_partitions
    return h


def test_a_waiting_member_whose_new_target_drops_what_it_holds_revokes_it_first() -> None:
    h = waiting_c()
    epoch = h.group.members["c"].member_epoch
    c = h.clients["c"]
    c.topics = ("payments",)  # its new subscription: nothing of orders in its next target
    h.poll(c, full=True)
    member = h.group.members["c"]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    assert (member.member_epoch, member.previous_member_epoch) == (epoch, epoch)
    assert member.partitions_pending_revocation[ORDERS]


def test_a_waiting_member_that_reports_owning_nothing_is_not_asked_to_revoke() -> None:
    h = waiting_c()
    c = h.clients["c"]
    c.topics = ("payments",)
    c.owned = {}
    h.poll(c, full=True)
    member = h.group.members["c"]
    assert member.state is MemberState.STABLE
    assert member.member_epoch == h.group.assignment_epoch
    assert ORDERS not in member.assigned_partitions and not member.partitions_pending_revocation
    h.settle()
    h.check_invariants()


def test_a_partition_given_back_while_being_revoked_is_assigned_at_once() -> None:
    h = Harness()
    a = h.client("a")
    h.settle()
    b = h.poll(h.client("b"))
    assert b.error.name == "none"
    h.poll(a)  # revoking half for b
    assert h.group.members["a"].partitions_pending_revocation
    h.leave(h.clients["b"])  # b goes before taking them: the next target gives a everything
    h.poll(a)  # a reports it revoked them
    member = h.group.members["a"]
    assert member.state is MemberState.STABLE
    assert member.assigned_partitions[ORDERS] == frozenset(range(6))
    assert member.member_epoch == h.group.assignment_epoch


def test_an_unknown_state_member_owning_nothing_is_reconciled_from_scratch() -> None:
    h = Harness()
    a, b = h.client("a"), h.client("b")
    h.settle()
    member = h.group.members["a"]
    kept = member.assigned_partitions[ORDERS]
    # A newer coordinator wrote a state this one does not know, with a partition of b's target
    # assigned and one of a's own target missing.
    stolen = min(h.group.target_assignment["b"][ORDERS])
    given = min(kept)
    b.owned = {}
    h.poll(b)  # b owns nothing: its partitions are free
    h.settle()
    assert h.group.members["b"].assigned_partitions == h.group.target_assignment["b"]
    h.core.replay(
        current_assignment_record(
            "g",
            replace_member(
                h.group.members["b"], assigned_partitions={}, partitions_pending_revocation={}
            ),
        )
    )
    h.core.replay(current_assignment_record("g", replace_member(
        member, state=MemberState.UNKNOWN,
        assigned_partitions={ORDERS: kept - {given} | {stolen}})))  # fmt: skip
    a.owned = {}
    response = h.poll(a)
    assert response.error.name == "none"
    member = h.group.members["a"]
    assert member.state is MemberState.STABLE
    assert member.assigned_partitions[ORDERS] == kept
    assert member.member_epoch == h.group.assignment_epoch
