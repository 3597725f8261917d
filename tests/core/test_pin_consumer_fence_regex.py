"""Fencing several members at once (a classic LeaveGroup naming them) tombstones a regex they
were its only users of, pinned where `make mutation` found it loose: the group keeps no resolved
regex that no member subscribes to (Kafka's consumerGroupFenceMembers). Two classic members
share a regex here because each took over the instance id of a static consumer-protocol member
subscribed by that regex, and a classic JoinGroup sets the member's topic names but leaves the
regex it inherited (not checked against Kafka)."""

from __future__ import annotations

from coordinator.core.consumer import classic
from coordinator.core.messages import LeaveGroup, LeavingMember
from tests.core.test_consumer_support import Harness
from tests.core.test_pin_consumer_classic_member import classic_join


def test_fencing_every_user_of_a_regex_at_once_tombstones_it() -> None:
    h = Harness()
    h.client("n")
    for name in ("s1", "s2"):
        h.poll(h.client(name, topics=None, regex="pay.*", instance_id=f"i-{name}"))
    h.settle()
    h.round()
    assert "pay.*" in h.group.resolved_regexes
    # Both static members restart as classic consumers, taking over their instance ids.
    ids = []
    for name in ("s1", "s2"):
        h.leave(h.clients[name], static=True)
        ids.append(classic_join(h, instance_id=f"i-{name}").member_id)
    result = classic.leave(h.core, LeaveGroup("g", tuple(LeavingMember(i, None) for i in ids), 3),
                           h.clock.now)  # fmt: skip
    h.records.extend(result.records)
    assert set(h.group.members) == {"n"}
    assert not h.group.regex_counts
    assert "pay.*" not in h.group.resolved_regexes
