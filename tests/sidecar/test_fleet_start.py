"""A fleet member that is still starting answers what a loading Kafka broker answers.

Until a member owns its share of the state partitions, its groups answer
COORDINATOR_LOAD_IN_PROGRESS (every client retries it in place), never NOT_COORDINATOR, on which
librdkafka fails a synchronous commit instead of retrying. The test starts a sidecar and three
real consumers (librdkafka, Java, aiokafka) at the same moment, each committing synchronously as
soon as it has its first assignment: no error reaches the application.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support import realclients as rc
from tests.support.sidecar_util import Stack, create_topic, fetch, stack

pytestmark = pytest.mark.clients
__all__ = ["stack"]

LOAD_IN_PROGRESS = 14
KINDS = ("confluent", "java", "aiokafka")


async def test_clients_started_with_their_sidecar_see_no_error(
    request: pytest.FixtureRequest, stack: Stack
) -> None:
    rc.require_kind(request, "java")
    tansu = stack.tansu()
    topic = "born-together"
    await create_topic(tansu.bootstrap, topic, 2)
    sidecar = stack.sidecar(tansu.bootstrap, fleet=True)
    # The member listens before it has joined the fleet: its groups are loading, not elsewhere.
    assert await fetch(sidecar.port, "early", topic, 1) == LOAD_IN_PROGRESS
    # One group each: a rebalance between them would be another error than the one in question.
    members = await asyncio.gather(*(
        rc.start_member(stack.tmp, stack.peers, kind, f"born-{kind}", bootstrap=sidecar.bootstrap,
                        group=f"born-{kind}", topic=topic)
        for kind in KINDS))
    stack.members.extend(members)

    await asyncio.gather(*(commit_on_first_assignment(stack, m) for m in members))
    errors = [(m.name, e) for m in members for e in m.events
              if e["event"] in ("commit_failed", "error")]
    assert not errors, f"{errors}\n{stack.explain()}"


async def commit_on_first_assignment(stack: Stack, m: rc.Member, timeout: float = 90) -> None:
    """Once `m` has its first assignment, a synchronous commit from its poll loop, answered."""
    await rc.wait_until(lambda: m.owned, timeout, f"{m.name}'s first assignment",
                        interval=0.02, explain=stack.explain)
    assert m.proc.stdin is not None
    m.proc.stdin.write(b"commit 1\n")  # synchronous, from the poll loop, at once
    await m.proc.stdin.drain()
    await rc.wait_until(
        lambda: any(e["event"] in ("committed", "commit_failed") for e in m.events), 60,
        f"{m.name}'s commit", explain=stack.explain)


async def test_the_start_up_log_says_what_the_member_is_and_what_it_created(
    stack: Stack,
) -> None:
    tansu = stack.tansu()
    first = stack.sidecar(tansu.bootstrap, fleet=True)
    await rc.wait_until(lambda: "serving state partitions" in first.log(), 60,
                        "the first member to serve", explain=stack.explain)
    second = stack.sidecar(tansu.bootstrap, fleet=True)
    await rc.wait_until(lambda: "serving state partitions" in second.log(), 60,
                        "the second member to serve", explain=stack.explain)
    for s in (first, second):
        assert "(fleet group groupcoord-fleet, state topic __groupcoord_state)" in s.log()
    assert ("state topic __groupcoord_state: created with 50 partitions, replication factor 1"
            in first.log()), first.log()
    assert "state topic __groupcoord_state: found" in second.log(), second.log()
    # (The history topic is looked at on the first history write, and logged the same way then.)
